"""Python environments layered on the interpreter they are made from.

``python -m venv --system-site-packages`` run by a virtualenv's interpreter makes an environment
on the *base* interpreter: the venv's own packages (torch, the CUDA wheels, SGLang's
dependencies) are not visible in it. Users install SGLang into a venv or a conda env, so every
environment perfbisect makes (per pinned-dependency set, or in the tests) is created by the
script below, which adds a ``.pth`` file that puts the parent environment's site-packages (with
their own ``.pth`` files: editable installs, namespace packages) right after the new
environment's own. A conda env is a base interpreter: ``--system-site-packages`` already covers it.

The script is standard library only and runs on the host with the parent interpreter.
"""

from __future__ import annotations

import shlex

PTH_NAME = "_perfbisect_parent_env.pth"

LAYERED_VENV = f"""\
import os, site, sys, sysconfig, venv
env_dir = os.path.abspath(sys.argv[1])
venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
parents = []
if sys.prefix != sys.base_prefix:  # made from a virtualenv: layer on its packages
    for folder in site.getsitepackages():
        if os.path.isdir(folder) and not folder.startswith(sys.base_prefix + os.sep):
            parents.append(folder)
scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
purelib = sysconfig.get_path("purelib", scheme, vars={{"base": env_dir, "platbase": env_dir}})
os.makedirs(purelib, exist_ok=True)
with open(os.path.join(purelib, {PTH_NAME!r}), "w") as fh:
    for folder in parents:
        fh.write("import site; site.addsitedir(%r)\\n" % folder)
print(os.path.join(env_dir, "bin", "python"))
"""


def layered_venv_argv(parent_python: str, env_dir: str) -> list[str]:
    """The command that makes ``env_dir`` on top of ``parent_python``'s environment."""
    return [parent_python, "-c", LAYERED_VENV, env_dir]


def layered_venv_shell(parent_python: str, env_dir: str) -> str:
    return shlex.join(layered_venv_argv(parent_python, env_dir))
