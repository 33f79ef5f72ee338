"""The env-propagation probe's process chain, started exactly like a server would be.

shell (wrote shell.env0 before exec'ing us) -> this Python parent -> a child started with
multiprocessing ``spawn`` (as SGLang starts its scheduler and TP workers) -> C ``getenv`` in that
child through ctypes. With ``gpus`` > 0 in watch.json, one spawned rank per GPU also creates a
real NCCL communicator (torch.distributed) with ``NCCL_DEBUG=INFO`` written to a file, and the
parent extracts NCCL's own report of the ``NCCL_*`` values it took.

Standalone (standard library; torch only with gpus): perfbisect copies it to the host. Results
are JSON files in the output directory given as the only argument.
"""

from __future__ import annotations

import ctypes
import glob
import json
import multiprocessing
import os
import re
import socket
import sys
from typing import Any


def watched(environ: dict[str, str], spec: dict[str, Any]) -> dict[str, str]:
    if spec.get("all"):  # everything: the controller picks the rows (families, differences)
        return dict(environ)
    names = set(spec["names"])
    prefixes = tuple(spec["prefixes"])
    return {k: v for k, v in environ.items() if k in names or k.startswith(prefixes)}


def sitecustomize_file() -> str | None:
    module = sys.modules.get("sitecustomize")
    return getattr(module, "__file__", None) if module else None


# A line of a start-up hook that changes the environment, and the names quoted on it.
ENV_LINE = re.compile(r"environ|putenv")
QUOTED_NAME = re.compile(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']""")


def _env_names(path: str, only_imports: bool) -> dict[str, list[int]]:
    """NAME -> line numbers of ``path`` that set it (names only: values stay on the host).
    In a .pth file only lines starting with ``import`` run."""
    found: dict[str, list[int]] = {}
    try:
        with open(path, errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return found
    for number, line in enumerate(lines, start=1):
        if only_imports and not line.startswith(("import ", "import\t")):
            continue
        if line.lstrip().startswith("#") or not ENV_LINE.search(line):
            continue
        for name in QUOTED_NAME.findall(line):
            found.setdefault(name, []).append(number)
    return found


def python_startup() -> list[dict[str, Any]]:
    """The hooks this interpreter's start-up runs or skips (``site``): every
    ``sitecustomize.py``/``usercustomize.py`` on ``sys.path`` (only the first of each is
    imported; perfbisect's generated one loads the one it shadows) and the ``.pth`` files of
    the site directories, each with the variables it sets."""
    import site

    if sys.flags.no_site:
        return []
    ours = os.environ.get("PERFBISECT_SITECUSTOMIZE")
    ran = {
        os.path.realpath(f)
        for f in (sitecustomize_file(), os.environ.get("PERFBISECT_SITECUSTOMIZE_SHADOWED"))
        if f
    }
    user = sys.modules.get("usercustomize")
    if user is not None and getattr(user, "__file__", None):
        ran.add(os.path.realpath(user.__file__))
    hooks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for folder in sys.path:
        for role in ("sitecustomize", "usercustomize"):
            path = os.path.join(os.path.abspath(folder or "."), f"{role}.py")
            real = os.path.realpath(path)
            if (
                real in seen
                or not os.path.isfile(path)
                or (ours and real == os.path.realpath(ours))
            ):
                continue
            seen.add(real)
            hooks.append(
                {"path": path, "role": role, "ran": real in ran, "names": _env_names(path, False)}
            )
    folders = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "*.pth"))):
            names = _env_names(path, True)
            if names:
                hooks.append({"path": path, "role": "pth", "ran": True, "names": names})
    return hooks


def c_getenv(names: list[str]) -> dict[str, str | None]:
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    libc.getenv.argtypes = [ctypes.c_char_p]
    out = {}
    for name in names:
        value = libc.getenv(name.encode())
        out[name] = value.decode(errors="replace") if value is not None else None
    return out


def child(out_dir: str, spec: dict[str, Any]) -> None:
    env = watched(dict(os.environ), spec)
    names = sorted(set(spec["names"]) | set(env))
    record = {
        "pid": os.getpid(),
        "env": env,
        "getenv": c_getenv(names),
        "sitecustomize": sitecustomize_file(),
        "shadowed": os.environ.get("PERFBISECT_SITECUSTOMIZE_SHADOWED"),
    }
    with open(os.path.join(out_dir, "child.json"), "w") as fh:
        json.dump(record, fh)


def rank(out_dir: str, index: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    # Observation instruments, set in this process only, after the environment was recorded.
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ["NCCL_DEBUG_FILE"] = os.path.join(out_dir, f"nccl.{index}.%p.log")
    torch.cuda.set_device(index)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=world
    )
    tensor = torch.ones(1024, device="cuda")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    dist.destroy_process_group()


# "NCCL_PROTO set by environment to Simple." (the sentence's full stop is not the value)
SET_BY = re.compile(r"(NCCL_[A-Z0-9_]+) set by environment to (\S*?)\.?$", re.MULTILINE)
VERSION = re.compile(r"NCCL version ([0-9][^\s]*)")


def nccl_report(out_dir: str) -> dict[str, Any]:
    ranks: dict[str, dict[str, str]] = {}
    version = None
    for path in sorted(glob.glob(os.path.join(out_dir, "nccl.*.log"))):
        with open(path, errors="replace") as fh:
            text = fh.read()
        index = os.path.basename(path).split(".")[1]
        ranks[index] = dict(SET_BY.findall(text))
        found = VERSION.search(text)
        version = version or (found.group(1) if found else None)
    return {"version": version, "ranks": ranks}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    out_dir = sys.argv[1]
    with open(os.path.join(out_dir, "watch.json")) as fh:
        spec = json.load(fh)
    parent = {
        "pid": os.getpid(),
        "executable": sys.executable,
        "env": watched(dict(os.environ), spec),
        "sitecustomize": sitecustomize_file(),
        "shadowed": os.environ.get("PERFBISECT_SITECUSTOMIZE_SHADOWED"),
        "python_startup": python_startup(),
    }
    with open(os.path.join(out_dir, "parent.json"), "w") as fh:
        json.dump(parent, fh)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=child, args=(out_dir, spec))
    proc.start()
    proc.join(120)
    gpus = int(spec.get("gpus", 0))
    if gpus:
        port = free_port()
        ranks = [ctx.Process(target=rank, args=(out_dir, i, gpus, port)) for i in range(gpus)]
        for p in ranks:
            p.start()
        for p in ranks:
            p.join(300)
        report = nccl_report(out_dir)
        report["exit_codes"] = [p.exitcode for p in ranks]
        with open(os.path.join(out_dir, "nccl.json"), "w") as fh:
            json.dump(report, fh)
    return 0 if proc.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
