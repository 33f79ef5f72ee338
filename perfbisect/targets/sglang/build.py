"""Building an SGLang commit: one dependency environment per pin set, the checkout installed
editable into it (or run from its source folder), the verify timer installed next to it.

The pin set is what the commit's own ``python/pyproject.toml`` declares (deps.py). Its
environment is made once, with the requirements alone, from the experiment's package sources
(a wheelhouse on a host without internet: envs.py), and reused by every commit of the same set;
a requirement that cannot be found there is a failed build (SKIP) naming it, never a launch in
another set's environment. The checkout itself is then installed ``--no-deps -e``: pure-Python
changes between commits cost seconds. Upstream's package builds compiled parts (Rust, gRPC)
from 0.5.11; where that build fails on the host (no toolchain), the fallback runs the checkout's
``python/`` folder from source (``PYTHONPATH``), and the launch's notes say so. Kernel packages
are never built from source here.
"""

from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass, field

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host
from perfbisect.targets.pyenv import layered_venv_shell
from perfbisect.targets.sglang.deps import InstallPlan, install_plan
from perfbisect.targets.sglang.envs import (
    MAX_ENVS,
    OK_MARKER,
    Sources,
    evict_envs,
    missing_requirement,
)
from perfbisect.targets.sglang.timer import install_timer

PRETEND_VERSION = "0.0.0+perfbisect"  # a tagless worktree has no version for setuptools-scm
PINS_FILE = "perfbisect-pins.txt"  # the environment's requirements, as installed
MADE = "PERFBISECT-ENV-MADE"  # printed by the script that made an environment
# What a failed compiled-extension build says: the line worth showing in the launch's notes.
_TOOLCHAIN = re.compile(r"(?i)(rust|cargo|maturin|protoc|grpc|compiler)")
_BOILERPLATE = re.compile(r"subprocess-exited-with-error|^ERROR: Failed to build|^error: metadata")


@dataclass(frozen=True)
class BuildOptions:
    sources: Sources = field(default_factory=Sources)
    pins: tuple[str, ...] = ()  # package names that alone key the environment
    source_only: bool = False  # build = "source": never install the checkout
    fallback: bool = True  # a failed editable install falls back to the source folder
    max_envs: int = MAX_ENVS


@dataclass(frozen=True)
class BuiltEnv:
    python: str
    digest: str
    reused: bool
    log: str
    label: str = ""  # the pin set, as the report shows it
    source_path: str | None = None  # set: serve with PYTHONPATH=<it> (no editable install)
    notes: tuple[str, ...] = ()


def _failure_line(output: str) -> str:
    """The line that says why pip could not build the checkout (not pip's generic wrapper)."""
    missing = missing_requirement(output)
    if missing:
        return f"no distribution of {missing}"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [x for x in lines if "error" in x.lower() and not _BOILERPLATE.search(x)]
    toolchain = [x for x in errors if _TOOLCHAIN.search(x)]
    return (toolchain or errors or lines or ["no output"])[-1]


def _make_env(
    host: Host,
    plan: InstallPlan,
    env_dir: str,
    base_python: str,
    timeout_s: float,
    pip_args: tuple[str, ...],
    sources: Sources,
) -> tuple[bool, str]:
    """The pin set's environment, requirements only, unless another launch made it while this
    one waited for its lock: whether this call made it, and pip's log tail."""
    house = sources.wheelhouse
    if house and not host.run(["test", "-d", house], timeout_s=60).ok:
        raise StepFailed("build", f"wheelhouse {house} is not a folder on {host.address}")
    q = shlex.quote
    pins = f"{env_dir}.{uuid.uuid4().hex}.pins"  # this launch's own: the set's full list
    # Only the keyed requirements: an environment keyed by `pins` holds exactly those, the rest
    # come from the parent interpreter (an offline host whose python already has them); made
    # from the whole list, a second commit of the same key would run on the first's extras.
    host.write_file(pins, ("\n".join(plan.keyed_by) + "\n").encode())
    python = f"{env_dir}/bin/python"
    args = " ".join(q(a) for a in (*pip_args, *sources.pip_args()))
    install = f"{q(python)} -m pip install -q {args} -r {q(env_dir)}/{PINS_FILE}"
    # Without pip: the parent environment's pip and setuptools serve it (an ensurepip'd old
    # setuptools would shadow them and could not build editable wheels). Layered, so a venv's
    # or conda env's torch and CUDA packages stay visible (targets/pyenv.py). Nothing of a
    # failed attempt stays to be reused.
    script = (
        f"[ -e {q(env_dir)}/{OK_MARKER} ] && exit 0; "
        f"rm -rf {q(env_dir)} && {layered_venv_shell(base_python, env_dir)} >/dev/null && "
        f"mv {q(pins)} {q(env_dir)}/{PINS_FILE} && "
        f"{install if plan.keyed_by else 'true'} && touch {q(env_dir)}/{OK_MARKER} && "
        f"echo {MADE} || {{ rc=$?; rm -rf {q(env_dir)}; exit $rc; }}"
    )
    result = host.run([*_locked(env_dir), "sh", "-c", script], timeout_s=timeout_s)
    host.run(["rm", "-f", pins], timeout_s=60)
    if not result.ok:
        missing = missing_requirement(result.output)
        if missing:
            raise StepFailed(
                "build",
                f"pin set {plan.digest} needs {missing}, which {sources.describe()} does not "
                f"have (add its wheel, or narrow [target] pins)",
            )
        why = "timed out" if result.timed_out else f"exit {result.returncode}"
        raise StepFailed("build", f"pin set {plan.digest}: pip install {why}: {result.tail(15)}")
    return MADE in result.output, result.tail(15).replace(MADE, "").strip()


def _locked(env_dir: str) -> list[str]:
    """Launches at once on one host (several slots) take turns in one environment: pip is not
    safe against itself, and a half-made environment must not be seen as made."""
    return ["flock", f"{env_dir}.lock"]


def build(
    host: Host,
    worktree: str,
    base_python: str,
    envs_root: str,
    timeout_s: float,
    pip_args: tuple[str, ...] = (),
    options: BuildOptions = BuildOptions(),
) -> BuiltEnv:
    text = host.read_text(f"{worktree}/python/pyproject.toml")
    if text is None:
        raise StepFailed(
            "build", f"{worktree} is not an SGLang checkout (no python/pyproject.toml)"
        )
    plan = install_plan(text, pins=options.pins)
    env_dir = f"{envs_root}/{plan.digest}"
    python = f"{env_dir}/bin/python"
    reused = host.read_text(f"{env_dir}/{OK_MARKER}") is not None
    log = ""
    if not reused:
        made, log = _make_env(
            host, plan, env_dir, base_python, timeout_s, pip_args, options.sources
        )
        reused = not made
        if made:
            evict_envs(host, envs_root, options.max_envs, spare=env_dir)
    if reused:
        host.run(["touch", f"{env_dir}/{OK_MARKER}"], timeout_s=60)  # its last use, for the LRU
    how = "reused" if reused else f"made from {options.sources.describe()}"
    notes = [f"pin set {plan.digest} ({how}): {plan.label()}"]
    source = f"{worktree}/python"
    source_path: str | None = None
    if options.source_only:
        source_path = source
        notes.append(f"sglang runs from its source folder {source} (build = source)")
    else:
        env = {"SETUPTOOLS_SCM_PRETEND_VERSION": PRETEND_VERSION} if plan.version_from_git else {}
        argv = [*_locked(env_dir), python, "-m", "pip", "install", "-q", "--no-deps", *pip_args]
        argv += [*options.sources.pip_args(), "-e", f"{worktree}/{plan.target}"]
        result = host.run(argv, cwd=worktree, env=env, timeout_s=timeout_s)
        log = "\n".join(x for x in (log, result.tail(15)) if x)
        if not result.ok:
            why = "timed out" if result.timed_out else _failure_line(result.output)
            if not options.fallback:
                raise StepFailed("build", f"pip install -e {plan.target}: {why}")
            source_path = source
            notes.append(
                f"editable install failed ({why}); sglang runs from its source folder "
                f"{source} (PYTHONPATH), its compiled extensions absent"
            )
    site = host.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout_s=60
    )
    if not site.ok:
        raise StepFailed("build", f"{python} does not run: {site.tail(5)}")
    install_timer(host, site.output.strip().splitlines()[-1])
    return BuiltEnv(python, plan.digest, reused, log, plan.label(), source_path, tuple(notes))


def envs_root(host: Host) -> str:
    return f"{host.cache_dir()}/sglang-envs"
