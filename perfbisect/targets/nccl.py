"""The ``nccl`` axis: a version becomes a library file, delivered and then confirmed.

A version (``2.27.7``) is materialised once on the controller from the ``nvidia-nccl-cu<N>``
wheel (N = the host's CUDA major version, or ``[axes.nccl] cuda``): downloaded with pip,
``libnccl.so.2`` unpacked into ``$PERFBISECT_NCCL_CACHE`` (default ``<cache>/nccl``) and its own
``ncclGetVersion`` checked. A value that is a path names a library directly. The file is copied
to a remote host once. The launch gets ``LD_PRELOAD`` and ``SGLANG_NCCL_SO_PATH`` pointing at it,
and once the server is up every process of its tree is checked (``/proc/<pid>/maps``): a
process that mapped another libnccl, or none mapping ours, means the wrong cell would be
measured, which is an error, never a silent result.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from perfbisect.errors import StepFailed
from perfbisect.experiment import NCCL_VERSION
from perfbisect.hosts.base import Host, HostProcess
from perfbisect.paths import cache_dir

_GET_VERSION = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "code = ctypes.c_int()\n"
    "assert lib.ncclGetVersion(ctypes.byref(code)) == 0\n"
    "v = code.value\n"
    "print(f'{v // 10000}.{v // 100 % 100}.{v % 100}' if v >= 10000 else "
    "f'{v // 1000}.{v // 100 % 10}.{v % 100}')\n"
)


def nccl_cache() -> Path:
    configured = os.environ.get("PERFBISECT_NCCL_CACHE")
    return Path(configured) if configured else cache_dir() / "nccl"


def library_version(path: Path | str, python: str = sys.executable) -> str:
    """NCCL's own version report for a library file (loaded in a separate process)."""
    result = subprocess.run(
        [python, "-c", _GET_VERSION, str(path)], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise StepFailed("nccl", f"{path} is not a loadable NCCL library: {result.stderr[-300:]}")
    return result.stdout.strip()


def materialise(version: str, cuda_major: int) -> Path:
    """The local path of NCCL ``version`` for CUDA ``cuda_major`` (downloaded once)."""
    if not NCCL_VERSION.match(version):
        path = Path(version).expanduser()
        if path.is_file():
            return path
        raise StepFailed("nccl", f"NCCL {version!r} is neither a version like 2.27.7 nor a file")
    target = nccl_cache() / f"cu{cuda_major}" / version / "libnccl.so.2"
    if target.is_file():
        return target
    package = f"nvidia-nccl-cu{cuda_major}=={version}"
    with tempfile.TemporaryDirectory(prefix="perfbisect-nccl-") as tmp:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_17_x86_64",
                "--platform",
                "manylinux_2_18_x86_64",
                "-d",
                tmp,
                package,
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            tail = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise StepFailed("nccl", f"NCCL {version}: no {package} wheel ({tail})")
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next(
                (n for n in wheel.namelist() if n.endswith("nccl/lib/libnccl.so.2")), None
            )
            if member is None:
                raise StepFailed("nccl", f"{wheels[0].name} holds no libnccl.so.2")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            with wheel.open(member) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
    reported = library_version(partial)
    if reported != version.split(".post")[0]:
        partial.unlink(missing_ok=True)
        raise StepFailed("nccl", f"the {package} wheel's library reports NCCL {reported}")
    partial.replace(target)
    return target


def on_host(host: Host, local: Path, cuda_major: int) -> str:
    """The library's path on ``host`` (copied there once)."""
    if host.is_local:
        return str(local.resolve())
    remote = f"{host.cache_dir()}/nccl/cu{cuda_major}/{local.parent.name}/libnccl.so.2"
    size = host.run(["stat", "-c", "%s", remote], timeout_s=30)
    if not (size.ok and size.output.strip() == str(local.stat().st_size)):
        host.write_file(remote, local.read_bytes(), mode=0o755)
    return remote


def torch_shadow(host: Host, library: str) -> str:
    """A directory holding ``nvidia/nccl/lib/libnccl.so.2`` -> ``library``. torch loads the
    NCCL of its nvidia-nccl wheel by path (searching ``sys.path`` for that layout), so
    LD_PRELOAD alone leaves two libnccl copies mapped; first on PYTHONPATH, this one is found
    first. (Only the file search sees it: ``import nvidia`` still finds the real package.)"""
    import hashlib

    key = hashlib.sha256(library.encode()).hexdigest()[:12]
    root = f"{host.cache_dir()}/nccl-shadow/{key}"
    lib_dir = f"{root}/nvidia/nccl/lib"
    result = host.run(
        ["sh", "-c", 'mkdir -p "$1" && ln -sfn "$2" "$1/libnccl.so.2"', "shadow", lib_dir, library],
        timeout_s=30,
    )
    if not result.ok:
        raise StepFailed("nccl", f"cannot prepare {lib_dir} on {host.address}: {result.tail(3)}")
    return root


def delivery(path: str, shadow: str, pythonpath: str | None) -> dict[str, str]:
    """What every launch of this configuration gets on its command line."""
    return {
        "LD_PRELOAD": path,
        "SGLANG_NCCL_SO_PATH": path,
        "PYTHONPATH": f"{shadow}:{pythonpath}" if pythonpath else shadow,
    }


SHELLS = {"sh", "bash", "dash", "zsh", "fish", "ksh", "tmux", "env", "timeout", "setsid"}


def confirm_loaded(host: Host, process: HostProcess, wanted: str) -> str:
    """Every process of the server (shells aside: a tmux pane's shell got the export after it
    started, and shells run no NCCL) must have mapped ``wanted`` and no other libnccl; a
    process without it dropped LD_PRELOAD on the way. Returns a note for the launch."""
    pids = [process.pid, *host.descendants(process.pid)]
    script = (
        'for p in "$@"; do exe=$(readlink /proc/$p/exe 2>/dev/null) || continue; '
        'libs=$(grep -o "/[^ ]*libnccl[^ ]*" /proc/$p/maps 2>/dev/null | sort -u | tr "\\n" " "); '
        'echo "$p ${exe##*/} $libs"; done'
    )
    result = host.run(["sh", "-c", script, "maps", *map(str, pids)], timeout_s=60)
    real = host.run(["readlink", "-f", wanted], timeout_s=30).output.strip() or wanted
    checked = 0
    for line in result.output.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[1] in SHELLS:
            continue
        pid, exe, libs = fields[0], fields[1], set(fields[2:])
        other = libs - {wanted, real}
        if other:
            raise StepFailed(
                "nccl",
                f"process {pid} ({exe}) loaded {sorted(other)[0]}, not {wanted}: the measured "
                "processes would not run the intended NCCL",
            )
        if not libs:
            raise StepFailed(
                "nccl",
                f"no process of the server mapped {wanted}: process {pid} ({exe}) runs without "
                "it (was LD_PRELOAD dropped on the way?)",
            )
        checked += 1
    if not checked:
        raise StepFailed("nccl", f"no process of the server mapped {wanted} (none found)")
    return f"NCCL library confirmed in {checked} process(es): {shlex.quote(wanted)}"
