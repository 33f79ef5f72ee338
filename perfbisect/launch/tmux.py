"""``tmux``: a fresh detached tmux session running the user's interactive login shell; the
environment and the command are given to that shell as a person would type them.

Facts this relies on (docs/design.md section 6): the session's environment comes from the tmux
*server's* global environment, frozen when the server started, so a variable exported later in
some other shell does not reach it; the pane's login shell reads the profile files, so exports
after a non-interactive guard in ``~/.bashrc`` do apply here.

Secrets: no value is ever typed. The exports go into a 0600 file that the typed line sources
and deletes (and stop() deletes it too, should the line never run); history is switched off in
the pane first, so even the typed paths stay out of ``~/.bash_history``.

Shells: the first typed line asks ``ps`` for the pane's shell, which is what the login shell
became after its start-up files (``exec fish`` at the end of ``~/.bashrc`` is common). bash, sh,
dash, ksh and zsh get POSIX syntax, fish its own; any other shell fails within seconds with
its name instead of hanging until the readiness timeout.

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
        self.cleanup: list[str] = []  # files to delete when the launch ends (the env file)
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
        if self.cleanup:
            self.host.run(["rm", "-rf", *self.cleanup], timeout_s=30)

    def tree_alive(self) -> list[int]:
        alive = self.host.alive([self.pid, *self.host.descendants(self.pid)])
        if self.session_exists():
            alive.append(-1)  # the session itself is a leftover
        return alive


POSIX_SHELLS = ("bash", "sh", "dash", "ksh", "mksh", "ash", "zsh", "busybox")
SHELL_TIMEOUT_S = 20.0  # for the pane's start-up files to finish and the first line to run


def fish_quote(value: str) -> str:
    """Single-quoted for fish, where backslash escapes backslash and quote inside quotes."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def env_file_text(shell: str, env: dict[str, str]) -> str:
    if shell == "fish":
        return "".join(f"set -gx {k} {fish_quote(v)}\n" for k, v in env.items())
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def command_line(shell: str, spec: LaunchSpec, env_file: str, exit_path: str) -> str:
    """The one line typed into the pane: history off, source + delete the env file, run."""
    q = fish_quote if shell == "fish" else shlex.quote
    log, env_q, exit_q, cwd = q(spec.log_path), q(env_file), q(exit_path), q(spec.cwd)
    if shell == "fish":
        return (
            f" set -g fish_history ''; source {env_q}; rm -f {env_q}; cd {cwd}; and "
            f"/bin/sh -c {q(spec.command)} > {log} 2>&1; echo $status > {exit_q}"
        )
    # bash runs the command itself, in a subshell so that an `exit` in it ends the subshell,
    # not the pane; other POSIX shells hand it to sh (zsh's globbing differs from sh's).
    run = spec.command if shell == "bash" else f"/bin/sh -c {q(spec.command)}"
    return (
        f" unset HISTFILE; . {env_q}; rm -f {env_q}; ( cd {cwd} && {run} ) > {log} 2>&1;"
        f" echo $? > {exit_q}"
    )


def _type(host: Host, session: str, line: str) -> None:
    _tmux(host, "send-keys", "-t", f"={session}:", "-l", line)
    _tmux(host, "send-keys", "-t", f"={session}:", "Enter")


def pane_shell(host: Host, process: TmuxProcess, folder: str) -> str:
    """The pane's shell once its start-up files have run (the first line it executes)."""
    path = f"{folder}/shell"
    _type(host, process.session, f" ps -o comm= -p {process.pid} > {shlex.quote(path)}")
    deadline = time.monotonic() + SHELL_TIMEOUT_S
    while time.monotonic() < deadline:
        text = (host.read_text(path) or "").strip()
        if text:
            return text.lstrip("-").rsplit("/", 1)[-1]
        if not process.session_exists():
            raise StepFailed("launch", f"the tmux session {process.session} ended at once")
        time.sleep(0.1)
    screen = " | ".join(ln for ln in process.pane_text().splitlines() if ln.strip())[-300:]
    raise StepFailed(
        "launch",
        f"the tmux pane's shell did not run a typed command within {SHELL_TIMEOUT_S:.0f}s "
        f"(pane: {screen or 'empty'})",
    )


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
        folder = f"{host.cache_dir()}/launch/{spec.tag}"
        env_file = f"{folder}/env"
        process.cleanup = [folder]
        try:
            host.run(["mkdir", "-p", spec.log_path.rsplit("/", 1)[0], folder])
            host.run(["chmod", "700", folder])
            host.run(["rm", "-f", process.exit_path])
            shell = pane_shell(host, process, folder)
            if shell not in (*POSIX_SHELLS, "fish"):
                raise StepFailed(
                    "launch",
                    f"the tmux pane runs {shell!r} (the login shell on {host.address}, or one "
                    "its start-up files exec); perfbisect drives bash, sh, zsh, ksh and fish "
                    "panes. Use the direct or ssh method, or make the login shell one of those",
                )
            env = {**spec.plain_env, **spec.tuning_env}
            host.write_file(env_file, env_file_text(shell, env).encode(), mode=0o600)
            _type(host, session, command_line(shell, spec, env_file, process.exit_path))
            process.notes.append(f"pane shell: {shell}")
        except BaseException:
            process.stop(grace_s=1.0)
            raise
        return process
