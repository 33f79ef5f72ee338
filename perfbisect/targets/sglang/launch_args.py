"""The server command for one SGLang commit, with the flags its version understands."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.version import InvalidVersion, Version

from perfbisect.errors import StepFailed

FIRST_EAGLE3 = Version("0.4.4.post3")
# version.py up to 0.5.x; setuptools-scm's _version.py (`__version__ = version = '0.5.9'`) later
_VERSION_PY = re.compile(r"""__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""")


def checkout_version(pyproject_text: str, version_py: str | None) -> Version | None:
    """The version a checkout declares (``[project] version``, else ``sglang/version.py``)."""
    match = re.search(r'(?m)^version\s*=\s*"([^"]+)"', pyproject_text)
    found = match.group(1) if match else None
    if found is None and version_py:
        py = _VERSION_PY.search(version_py)
        found = py.group(1) if py else None
    if found is None:
        return None
    try:
        version = Version(found)
    except InvalidVersion:
        return None
    # A placeholder ("0.0.0.dev0" when setuptools-scm found no tag) says nothing.
    return None if version.release[:3] == (0, 0, 0) else version


def server_argv(
    python: str,
    version: Version | None,
    options: Mapping[str, Any],
    port: str,
    speculative_decoding: bool = True,
) -> list[str]:
    """``python -m sglang.launch_server`` with EAGLE-3 speculative decoding (unless a baseline
    launch) and TP."""
    if version is not None and version < FIRST_EAGLE3:
        raise StepFailed(
            "build",
            f"SGLang {version} has no EAGLE-3 (it arrived in {FIRST_EAGLE3}): pick a later commit",
        )
    speculative = [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(options["draft_model"]),
        "--speculative-num-steps",
        str(options.get("speculative_num_steps", 3)),
        "--speculative-eagle-topk",
        str(options.get("speculative_eagle_topk", 1)),
        "--speculative-num-draft-tokens",
        str(options.get("speculative_num_draft_tokens", 4)),
    ]
    argv = [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(options["model"]),
        *(speculative if speculative_decoding else []),
        "--tp-size",
        str(options.get("tp", 1)),  # never the prefix --tp
        "--host",
        "127.0.0.1",
        "--port",
        port,
    ]
    extra: Sequence[Any] = options.get("extra_args", [])
    return argv + [str(a) for a in extra]


def shell_command(argv: Sequence[str]) -> str:
    """Quoted, but placeholders like ``{port}`` left for substitution."""
    return " ".join(a if a.startswith("{") and a.endswith("}") else shlex.quote(a) for a in argv)


# ---- start-up: the CUDA-graph sizes the workload needs, SGLang's own warm-up ------------------

# The user's own say on graph capture: any of these in a launch's server args leaves it alone.
GRAPH_FLAGS = (
    "--cuda-graph-bs",
    "--cuda-graph-max-bs",
    "--disable-cuda-graph",
    "--cuda-graph-bs-decode",  # 0.5.2x: the decode graphs' sizes (EAGLE's verify among them)
    "--cuda-graph-max-bs-decode",
    "--disable-decode-cuda-graph",
    "--cuda-graph-backend-decode",
)
WARMUP_FLAG = "--skip-server-warmup"
# What a checkout's argument parser declares, by flag: a literal add_argument up to 0.5.1x, a
# dataclass field from which the flag is derived in 0.5.2x (sglang/srt/arg_groups).
_DECLARES = {
    "--cuda-graph-bs": ('"--cuda-graph-bs"',),
    "--cuda-graph-bs-decode": ("cuda_graph_bs_decode: A[",),
    WARMUP_FLAG: (f'"{WARMUP_FLAG}"', "skip_server_warmup: A["),
}


DECLARATION_MARKS = tuple(mark for marks in _DECLARES.values() for mark in marks)


def declared_flags(sources: str) -> set[str]:
    """The start-up flags a version's server args source (``srt/server_args.py`` and
    ``srt/arg_groups/``) declares."""
    return {flag for flag, marks in _DECLARES.items() if any(m in sources for m in marks)}


def graph_flag(declared: set[str]) -> str | None:
    """The flag that lists the decode graphs' batch sizes in this version (the target's verify
    graphs and, with EAGLE, the draft's and draft-extend's, which read the same list)."""
    for flag in ("--cuda-graph-bs", "--cuda-graph-bs-decode"):
        if flag in declared:
            return flag
    return None


def graph_sizes(concurrency: int) -> list[int]:
    """The batch sizes a workload of ``concurrency`` requests in flight runs at, on SGLang's
    own grid for speculative decoding (1-8, then steps of 2, 4, 8, 16: a batch between two
    captured sizes is padded to the next one), up to and including ``concurrency``."""
    grid = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
    top = max(1, concurrency)
    return sorted({*(bs for bs in grid if bs < top), top})


def user_flag(args: Sequence[str], flags: Sequence[str]) -> str | None:
    """The first of ``flags`` the user's server args set (``--flag value`` or ``--flag=v``)."""
    for arg in args:
        name = str(arg).split("=", 1)[0]
        if name in flags:
            return name
    return None
