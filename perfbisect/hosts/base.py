"""What every host offers: commands to completion, long-running processes, files, ports.

A host is *where* things run (the controller itself, or a GPU node over ssh); how a server is
started there (direct, tmux, ssh, sitecustomize) is a launcher's business (``perfbisect.launch``).
Every method takes argument lists; a host that must go through a shell quotes them with
``shlex``, so no value is ever pasted into shell syntax.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    output: str
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def interrupted(self) -> bool:
        """Ended by a signal or the time limit rather than by its own exit: a verdict on
        the moment (a scancel, Ctrl-C, an OOM kill, a busy machine), not on what it ran.
        A shell reports a child's signal as 128+N; ssh reports a lost session as 255."""
        return (
            self.timed_out
            or self.returncode < 0
            or self.returncode in {128 + 1, 128 + 2, 128 + 9, 128 + 15, 255}
        )

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


class HostProcess(Protocol):
    """A long-running process tree on a host (the served model), with its output in a log."""

    pid: int
    log_path: str
    notes: list[str]  # what the launcher wants recorded with the measurement

    def poll(self) -> int | None: ...

    def log_tail(self, lines: int = 20) -> str: ...

    def stop(self, grace_s: float = 5.0) -> None: ...

    def tree_alive(self) -> list[int]: ...


class Host(Protocol):
    address: str
    is_local: bool

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        log_path: Path | None = None,
    ) -> CommandResult:
        """Run to completion with ``env`` added to the host's environment; stdout and stderr
        merged; on timeout the command's process tree is killed. ``log_path`` is local."""
        ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        log_path: str,
    ) -> HostProcess:
        """Start in its own process group (session); output to ``log_path`` on the host."""
        ...

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""
        ...

    def home(self) -> str: ...

    def cache_dir(self) -> str:
        """perfbisect's working directory on the host (worktrees, logs, probe files)."""
        ...

    def free_port(self) -> int: ...

    def port_in_use(self, port: int) -> bool: ...

    def descendants(self, pid: int) -> list[int]: ...

    def alive(self, pids: Sequence[int]) -> list[int]: ...

    def signal(self, pids: Sequence[int], signame: str, group: bool = False) -> None:
        """Send ``SIGTERM``/``SIGKILL``/... to pids (to their process groups with ``group``)."""
        ...

    def close(self) -> None: ...


def default_python(host: Host) -> str:
    """The Python to run on a host when the experiment names none: on this machine the one
    running perfbisect (its venv, activated or not, is where torch and SGLang were installed
    with it), elsewhere ``python3`` on the host's PATH."""
    import sys

    return sys.executable if host.is_local else "python3"


def shell_line(argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None) -> str:
    """``cd CWD && exec env K=V ... ARGV`` with every part quoted (for hosts reached by ssh)."""
    parts = []
    if cwd:
        parts.append(f"cd {shlex.quote(cwd)} &&")
    parts.append("exec")
    if env:
        parts.append("env")
        parts.extend(shlex.quote(f"{k}={v}") for k, v in env.items())
    parts.append(shlex.join(argv))
    return " ".join(parts)


def read_exit_status(host: Host, path: str) -> int | None:
    """The exit status a wrapper wrote to ``path`` (-1 if unreadable), None if not yet."""
    text = host.read_text(path)
    if text is None or not text.strip():
        return None
    try:
        return int(text.strip())
    except ValueError:
        return -1


def tree_of(pid: int, parents: Mapping[int, int]) -> list[int]:
    """Descendants of ``pid`` given a pid -> parent pid table (from /proc or ``ps``)."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def stop_tree(host: Host, pid: int, grace_s: float) -> None:
    """SIGTERM the process group ``pid`` leads and every descendant (also those that left the
    group with setsid), wait up to ``grace_s``, then SIGKILL whatever is left."""
    tree = host.descendants(pid)
    host.signal([pid], "TERM", group=True)
    host.signal(tree, "TERM")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not host.alive([pid, *tree]):
            break
        time.sleep(0.1)
    rest = [*tree, *host.descendants(pid)]
    host.signal([pid], "KILL", group=True)
    host.signal(rest, "KILL")
