"""Building an SGLang commit: one dependency environment per pinned-dependency set, the
checkout installed editable into it, the verify timer installed next to it.

Pure-Python changes between commits need no reinstall of dependencies: when the pin hash is
known, only the editable install is pointed at the new worktree (``--no-deps``). Kernel
packages are never built from source here: a pin set that cannot be installed is a failed
build (SKIP) with pip's log tail.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host
from perfbisect.targets.pyenv import layered_venv_shell
from perfbisect.targets.sglang.deps import install_plan
from perfbisect.targets.sglang.timer import install_timer

PRETEND_VERSION = "0.0.0+perfbisect"  # a tagless worktree has no version for setuptools-scm


@dataclass(frozen=True)
class BuiltEnv:
    python: str
    digest: str
    reused: bool
    log: str


def build(
    host: Host,
    worktree: str,
    base_python: str,
    envs_root: str,
    timeout_s: float,
    pip_args: tuple[str, ...] = (),
) -> BuiltEnv:
    text = host.read_text(f"{worktree}/python/pyproject.toml")
    if text is None:
        raise StepFailed(
            "build", f"{worktree} is not an SGLang checkout (no python/pyproject.toml)"
        )
    plan = install_plan(text)
    env_dir = f"{envs_root}/{plan.digest}"
    python = f"{env_dir}/bin/python"
    reused = host.read_text(f"{env_dir}/.perfbisect-deps-ok") is not None
    env = {"SETUPTOOLS_SCM_PRETEND_VERSION": PRETEND_VERSION} if plan.version_from_git else {}
    target = shlex.quote(f"{worktree}/{plan.target}")
    steps = []
    if not reused:
        # Without pip: the parent environment's pip and setuptools serve it (an ensurepip'd
        # old setuptools would shadow them and could not build editable wheels). Layered, so
        # a venv's or conda env's torch and CUDA packages stay visible (targets/pyenv.py).
        steps.append(f"rm -rf {shlex.quote(env_dir)} && {layered_venv_shell(base_python, env_dir)}")
        extra = " ".join(shlex.quote(a) for a in pip_args)
        steps.append(f"{shlex.quote(python)} -m pip install -q {extra} -e {target}")
        steps.append(f"touch {shlex.quote(env_dir)}/.perfbisect-deps-ok")
    else:  # same pins: only point the editable install at this worktree
        extra = " ".join(shlex.quote(a) for a in pip_args)
        steps.append(f"{shlex.quote(python)} -m pip install -q --no-deps {extra} -e {target}")
    script = " && ".join(steps)
    result = host.run(["sh", "-c", script], cwd=worktree, env=env, timeout_s=timeout_s)
    if not result.ok:
        if not reused:
            host.run(["rm", "-rf", env_dir], timeout_s=120)
        why = "timed out" if result.timed_out else f"exit {result.returncode}"
        raise StepFailed("build", f"pip install {plan.target} {why}: {result.tail(15)}")
    site = host.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout_s=60
    )
    if not site.ok:
        raise StepFailed("build", f"{python} does not run: {site.tail(5)}")
    install_timer(host, site.output.strip().splitlines()[-1])
    return BuiltEnv(python, plan.digest, reused, result.tail(15))


def envs_root(host: Host) -> str:
    return f"{host.cache_dir()}/sglang-envs"
