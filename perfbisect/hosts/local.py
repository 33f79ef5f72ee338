"""The local host: commands and long-running processes in their own process groups.

Every process is started with ``start_new_session=True`` so the whole tree (a server and the
workers it spawns) can be signalled at once, and every wait has a timeout. Descendants that
escaped the group (``setsid``) are found through /proc before the kill.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    output: str
    duration_s: float
    timed_out: bool = False

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (Linux /proc walk; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
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
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _signal_tree(pgid: int, pids: Sequence[int], sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the process group and its descendants, then SIGKILL what is left; reap."""
    if proc.poll() is not None and not descendants(proc.pid):
        return
    tree = descendants(proc.pid)
    _signal_tree(proc.pid, tree, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        alive = [p for p in tree if _alive(p)]
        if proc.poll() is not None and not alive:
            break
        time.sleep(0.05)
    _signal_tree(proc.pid, [*tree, *descendants(proc.pid)], signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a D-state process; nothing else to do
        pass


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


class LocalProcess:
    """A long-running process (e.g. the served model) with its output in a log file."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        kill_tree(self.proc, grace_s)

    def tree_alive(self) -> list[int]:
        pids = [self.proc.pid] if self.proc.poll() is None else []
        return pids + [p for p in descendants(self.proc.pid) if _alive(p)]


class LocalHost:
    name = "local"
    address = "local"

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        log_path: Path | None = None,
    ) -> CommandResult:
        """Run to completion; on timeout or Ctrl-C the whole process tree is killed."""
        start = time.monotonic()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=timeout_s)
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
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path
    ) -> LocalProcess:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return LocalProcess(proc, log_path)
