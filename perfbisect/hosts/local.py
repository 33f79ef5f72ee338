"""The local host: commands and long-running processes in their own process groups.

Every process is started with ``start_new_session=True`` so the whole tree (a server and the
workers it spawns) can be signalled at once, and every wait has a timeout. Descendants that
escaped the group (``setsid``) are found through /proc before the kill. Children get
``PR_SET_PDEATHSIG``, so even a ``kill -9`` of perfbisect does not orphan a server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from perfbisect.hosts.base import CommandResult, tree_of
from perfbisect.paths import cache_dir

__all__ = ["CommandResult", "LocalHost", "LocalProcess", "free_port", "port_in_use"]


def _parents() -> dict[int, int]:
    table: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return table
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            table[int(entry.name)] = int(fields[1])
    return table


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (Linux /proc walk; empty elsewhere)."""
    return tree_of(pid, _parents())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _send(pids: Sequence[int], sig: signal.Signals, group: bool = False) -> None:
    for pid in pids:
        try:
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the process group and its descendants, then SIGKILL what is left; reap."""
    if proc.poll() is not None and not descendants(proc.pid):
        return
    tree = descendants(proc.pid)
    _send([proc.pid], signal.SIGTERM, group=True)
    _send(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        alive = [p for p in tree if _alive(p)]
        if proc.poll() is not None and not alive:
            break
        time.sleep(0.05)
    _send([proc.pid], signal.SIGKILL, group=True)
    _send([*tree, *descendants(proc.pid)], signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a D-state process; nothing else to do
        pass


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when perfbisect dies, even by kill -9 (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def read_tail(path: str, lines: int) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class LocalProcess:
    """A long-running process (e.g. the served model) with its output in a log file."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: str) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.notes: list[str] = []

    def poll(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        return read_tail(self.log_path, lines)

    def stop(self, grace_s: float = 5.0) -> None:
        kill_tree(self.proc, grace_s)

    def tree_alive(self) -> list[int]:
        pids = [self.proc.pid] if self.proc.poll() is None else []
        return pids + [p for p in descendants(self.proc.pid) if _alive(p)]


class LocalHost:
    address = "local"
    is_local = True

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        log_path: Path | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        """Run to completion; on timeout or Ctrl-C the whole process tree is killed. ``input``
        is written to the command's standard input (else it reads /dev/null)."""
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:  # as a shell reports it: 127 = not found, 126 = not executable
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return CommandResult(code, f"{argv[0]}: {exc.strerror}", time.monotonic() - start)
        timed_out = False
        try:
            out, _ = proc.communicate(input=input, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc, grace_s=2)
            out, _ = proc.communicate()
        except BaseException:
            kill_tree(proc, grace_s=2)
            raise
        text = out.decode(errors="replace") if out else ""
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(text)
        code = proc.returncode if proc.returncode is not None else -9
        return CommandResult(code, text, time.monotonic() - start, timed_out)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str],
        log_path: str | Path,
    ) -> LocalProcess:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return LocalProcess(proc, str(log_path))

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.unlink(missing_ok=True)
        # Created with its final mode: a secret-holding file (0600) is never readable by others.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        tmp.chmod(mode)  # the umask may have taken bits away
        tmp.replace(target)

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).expanduser().read_text(errors="replace")
        except OSError:
            return None

    def home(self) -> str:
        return str(Path.home())

    def cache_dir(self) -> str:
        return str(cache_dir())

    def free_port(self) -> int:
        return free_port()

    def port_in_use(self, port: int) -> bool:
        return port_in_use(port)

    def descendants(self, pid: int) -> list[int]:
        return descendants(pid)

    def alive(self, pids: Sequence[int]) -> list[int]:
        return [p for p in pids if _alive(p)]

    def signal(self, pids: Sequence[int], signame: str, group: bool = False) -> None:
        _send(pids, signal.Signals[f"SIG{signame}"], group)

    def close(self) -> None:
        return None
