"""``tmux``: a fresh detached tmux session running the user's interactive login shell; the
``export`` lines and the command are typed into it, as a person would.

Facts this relies on (DESIGN.md section 6): the session's environment comes from the tmux
*server's* global environment, frozen when the server started, so a variable exported later in
some other shell does not reach it; the pane's login shell reads the profile files, so exports
after a non-interactive guard in ``~/.bashrc`` do apply here. Typed lines start with a space so
that shells with ``HISTCONTROL=ignorespace`` (Debian's default) keep secrets out of history.

Stop: C-c into the pane, wait for the command's processes to end, then kill the session and
whatever is left of the pane's process tree.
"""

from __future__ import annotations

import shlex
import time

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host, HostProcess, read_exit_status, stop_tree
from perfbisect.launch.base import LaunchSpec, Method

# Targets: "=name" matches a session name exactly (no prefix match); pane commands need the
# "=name:" form (that session's current window and pane).


def _tmux(host: Host, *args: str, timeout_s: float = 20.0) -> tuple[bool, str]:
    result = host.run(["tmux", *args], timeout_s=timeout_s)
    return result.ok, result.output.strip()


def tmux_available(host: Host) -> bool:
    return host.run(["sh", "-c", "command -v tmux"], timeout_s=20).ok


class TmuxProcess:
    def __init__(self, host: Host, session: str, pane_pid: int, log_path: str) -> None:
        self.host = host
        self.session = session
        self.pid = pane_pid  # the pane's login shell; the command is its child
        self.log_path = log_path
        self.exit_path = f"{log_path}.exit"
        self.notes: list[str] = [f"tmux session {session}"]
        self._stopped = False

    def session_exists(self) -> bool:
        ok, _ = _tmux(self.host, "has-session", "-t", f"={self.session}")
        return ok

    def poll(self) -> int | None:
        status = read_exit_status(self.host, self.exit_path)
        if status is not None:
            return status
        if self._stopped or not self.session_exists():
            return -1
        return None

    def pane_text(self) -> str:
        ok, text = _tmux(self.host, "capture-pane", "-p", "-t", f"={self.session}:")
        return text if ok else ""

    def log_tail(self, lines: int = 20) -> str:
        text = (self.host.read_text(self.log_path) or "").rstrip()
        if not text:  # the command never ran (cd failed, shell error): show the pane instead
            text = "(pane)\n" + self.pane_text()
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        tree = self.host.descendants(self.pid)
        if tree and self.session_exists():
            _tmux(self.host, "send-keys", "-t", f"={self.session}:", "C-c")
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and self.host.alive(tree):
                time.sleep(0.1)
        tree = [*tree, *self.host.descendants(self.pid)]
        _tmux(self.host, "kill-session", "-t", f"={self.session}")
        if self.host.alive([self.pid, *tree]):
            stop_tree(self.host, self.pid, grace_s=2.0)
            self.host.signal(tree, "KILL")

    def tree_alive(self) -> list[int]:
        alive = self.host.alive([self.pid, *self.host.descendants(self.pid)])
        if self.session_exists():
            alive.append(-1)  # the session itself is a leftover
        return alive


class TmuxLauncher:
    method = Method.TMUX

    def start(self, host: Host, spec: LaunchSpec) -> HostProcess:
        if not tmux_available(host):
            raise StepFailed(
                "launch",
                f"tmux is not installed on {host.address} (Debian/Ubuntu: apt-get install tmux)",
            )
        session = f"perfbisect-{spec.tag}"
        ok, out = _tmux(host, "new-session", "-d", "-s", session, "-x", "200", "-y", "50")
        if not ok:
            raise StepFailed("launch", f"tmux new-session failed on {host.address}: {out}")
        ok, out = _tmux(host, "display-message", "-p", "-t", f"={session}:", "#{pane_pid}")
        if not ok or not out.isdigit():
            _tmux(host, "kill-session", "-t", f"={session}")
            raise StepFailed("launch", f"tmux pane of {session} has no pid: {out}")
        process = TmuxProcess(host, session, int(out), spec.log_path)
        try:
            host.run(["mkdir", "-p", spec.log_path.rsplit("/", 1)[0]])
            host.run(["rm", "-f", process.exit_path])
            lines = [
                f" export {name}={shlex.quote(value)}"
                for name, value in {**spec.plain_env, **spec.tuning_env}.items()
            ]
            lines.append(
                # A subshell, so that an `exit` in the command ends it, not the pane's shell.
                f" ( cd {shlex.quote(spec.cwd)} && {spec.command} ) > "
                f"{shlex.quote(spec.log_path)} 2>&1; echo $? > {shlex.quote(process.exit_path)}"
            )
            for line in lines:
                _tmux(host, "send-keys", "-t", f"={session}:", "-l", line)
                _tmux(host, "send-keys", "-t", f"={session}:", "Enter")
        except BaseException:
            process.stop(grace_s=1.0)
            raise
        return process
