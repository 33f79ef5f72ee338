"""Issue 17 part 1, prepared on the CPU machine: SGLang 0.5.12's released source as a git
repository, and a stack of six patches written against it (four benign, two that hurt verify).

    python prepare.py SGLANG_WHEEL OUT

SGLANG_WHEEL: ``pip download sglang==0.5.12 --no-deps`` (0.5.12 has no sdist on PyPI; its wheel
holds the same ``sglang/`` sources, pure Python). OUT gets:

* ``sglang-src/``: a git repository laid out as SGLang's (``python/sglang/...``), with
  ``python/pyproject.toml`` written from the wheel's METADATA (name, version, Python, the
  unconditional requirements; setuptools backend, package discovery under ``python/``), one
  commit tagged ``v0.5.12``. perfbisect's ``build = "editable"`` installs it with
  ``pip install -e python`` into an environment keyed by those requirements.
* ``patches/0N-*.patch``: each made by editing the checkout (every edit asserts that the text
  it changes is there, so a patch never silently misses) and ``git diff``; each is checked to
  apply alone and all six in order with ``git apply --check``.

The two harmful ones are the mechanisms the team suspected: ``04`` keeps target-verify out of
CUDA graphs (``CudaGraphRunner.can_run`` says no for TARGET_VERIFY: every verify runs eagerly)
and ``05`` adds a GPU-to-CPU synchronisation in the verify path (``CudaGraphRunner.replay``
reads the batch's longest sequence on the host, ``.item()``, before each verify replay; inside
the forward that the verify timer times). The run on the H200 had 05 in ``replay_prepare``,
which the spec-v2 verify skips (see REPLAY_START below).
"""

from __future__ import annotations

import email.parser
import json
import subprocess
import sys
import zipfile
from pathlib import Path

# Where the sync patches go: the start of CudaGraphRunner.replay. The spec-v2 EAGLE worker calls
# the target verify with skip_attn_backend_init=True, so replay_prepare (where the first run put
# them: out_real_source/patches_as_run/) never runs for a verify and the patches cost nothing.
REPLAY_START = "        self.deepep_adapter.replay()\n\n        if not skip_attn_backend_init:\n"

PATCHES: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "01-log-wording.patch",
        "python/sglang/srt/speculative/eagle_worker_v2.py",
        [(
            '"Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified token map."',
            '"EAGLE3 draft models carry their own token map: the specified one is ignored."',
        )],
    ),
    (
        "02-comment.patch",
        "python/sglang/srt/speculative/eagle_utils.py",
        [("def verify_tree_greedy_func(\n", "# Greedy tree verification: accept the longest draft prefix the target agrees with.\ndef verify_tree_greedy_func(\n")],
    ),
    (
        "03-decode-log-interval.patch",  # an unrelated default: how often decode stats are logged
        "python/sglang/srt/server_args.py",
        [("    decode_log_interval: int = 40\n", "    decode_log_interval: int = 50\n")],
    ),
    (
        "04-verify-out-of-graphs.patch",  # harmful: every target-verify runs eagerly
        "python/sglang/srt/model_executor/cuda_graph_runner.py",
        [(
            "    def can_run(self, forward_batch: ForwardBatch):\n",
            "    def can_run(self, forward_batch: ForwardBatch):\n"
            "        # Keep target-verify eager (debugging aid left in).\n"
            "        if forward_batch.forward_mode.is_target_verify():\n"
            "            return False\n",
        )],
    ),
    (
        "05-verify-host-sync.patch",  # harmful: a GPU-to-CPU sync before each verify replay
        "python/sglang/srt/model_executor/cuda_graph_runner.py",
        [(
            REPLAY_START,
            "        self.deepep_adapter.replay()\n"
            "        if forward_batch.forward_mode.is_target_verify():\n"
            "            # the longest sequence, read on the host: waits for the GPU\n"
            "            self.last_verify_max_seq_len = int(forward_batch.seq_lens.max().item())\n"
            "\n        if not skip_attn_backend_init:\n",
        )],
    ),
    (
        "06-docstring.patch",
        "python/sglang/srt/speculative/eagle_utils.py",
        [("class TreeMaskMode(IntEnum):\n", "class TreeMaskMode(IntEnum):\n    \"\"\"How the draft tree's attention mask is built.\"\"\"\n\n")],
    ),
]

# Written after the stack run, where 05 changed nothing (+1.4%): the same bug class, heavier - a
# check left in that walks a GPU tensor in Python, one GPU-to-CPU copy and wait per draft token
# (16 per verify at batch 4). Its run changed nothing either, for the reason above; with both in
# replay() neither has run yet.
EXTRA_PATCHES: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "05b-verify-host-loop.patch",
        "python/sglang/srt/model_executor/cuda_graph_runner.py",
        [(
            REPLAY_START,
            "        self.deepep_adapter.replay()\n"
            "        if forward_batch.forward_mode.is_target_verify():\n"
            "            # debugging the draft tree: no position may be negative\n"
            "            assert all(int(p) >= 0 for p in forward_batch.positions)\n"
            "\n        if not skip_attn_backend_init:\n",
        )],
    ),
]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def pyproject(metadata: str) -> str:
    meta = email.parser.Parser().parsestr(metadata)
    requires = [r for r in meta.get_all("Requires-Dist", []) if "extra ==" not in r]
    deps = "".join(f"    {json.dumps(r)},\n" for r in requires)  # TOML basic strings
    return (
        "# Written by docs/examples/sglang_gpu/real_source/prepare.py from the 0.5.12 wheel's\n"
        "# METADATA (SGLang's own python/pyproject.toml is not in the wheel).\n"
        "[build-system]\n"
        'requires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{meta["Name"]}"\n'
        f'version = "{meta["Version"]}"\n'
        f'requires-python = "{meta.get("Requires-Python", ">=3.10")}"\n'
        f"dependencies = [\n{deps}]\n\n"
        "[tool.setuptools.packages.find]\n"
        'include = ["sglang*"]\n\n'
        "[tool.setuptools.package-data]\n"
        '"*" = ["*.json", "*.jinja", "*.cu", "*.cuh", "*.h", "*.cpp", "*.txt", "*.yaml"]\n'
    )


def main(wheel: Path, out: Path) -> int:
    repo = out / "sglang-src"
    if repo.exists():
        raise SystemExit(f"{repo} exists; remove it first")
    (repo / "python").mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("sglang/")]
        zf.extractall(repo / "python", names)
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(meta_name).decode()
    (repo / "python" / "pyproject.toml").write_text(pyproject(metadata))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=perfbisect", "-c", "user.email=perfbisect@localhost",
        "commit", "-q", "-m", "SGLang 0.5.12 (released source, from the wheel)")
    git(repo, "tag", "v0.5.12")
    patches = out / "patches"
    patches.mkdir(exist_ok=True)
    for name, path, edits in PATCHES + EXTRA_PATCHES:
        file = repo / path
        text = file.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{name}: {path} has {text.count(old)} copies of the text it edits")
            text = text.replace(old, new)
        file.write_text(text)
        (patches / name).write_text(git(repo, "diff"))
        git(repo, "checkout", "-q", "--", ".")
    for name, _, _ in PATCHES + EXTRA_PATCHES:  # each alone on v0.5.12
        git(repo, "apply", "--check", str(patches / name))
    stack = [str(patches / name) for name, _, _ in PATCHES]
    git(repo, "apply", "--check", *stack)  # and all six in order
    print(f"{repo}: v0.5.12 at {git(repo, 'rev-parse', 'HEAD').strip()[:12]}")
    stacked = {name for name, _, _ in PATCHES}
    for name, _, _ in PATCHES + EXTRA_PATCHES:
        lines = (patches / name).read_text().splitlines()
        changed = sum(1 for x in lines if x[:1] in "+-" and x[:3] not in ("+++", "---"))
        where = "alone and in the stack" if name in stacked else "alone"
        print(f"{patches / name}: {changed} changed lines, applies {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
