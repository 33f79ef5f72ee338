"""Where a variable can come from besides perfbisect's delivery, read from the host itself:
shell start-up files (with the guards and the files they source, ``startup_files``), tmux's
global environment, ``/etc/environment``, ``~/.ssh/environment``, NCCL configuration files,
the client's ``SendEnv`` (``ssh -G``) and sshd's effective ``AcceptEnv`` (``sshd_config``).

Files that a start-up file reads through a computed path (``. "$x"``) and variables set by
programs the shell runs (``eval "$(conda shell.bash hook)"``) are found by running bash's start-up
files traced (``startup_trace``). What it cannot know: an sshd configuration it may not read; the
hints say so instead of guessing.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from perfbisect.hosts.base import Host
from perfbisect.hosts.openssh import OpenSshClient
from perfbisect.probes import sshd_config
from perfbisect.probes.startup_files import Assignment, StartupFiles, assignment, read_startup
from perfbisect.probes.startup_trace import Traced, trace_startup

__all__ = ["Assignment", "HostSources", "gather", "key_value_lines", "matches"]


def key_value_lines(file: str, text: str) -> list[Assignment]:
    """``NAME=VALUE`` files (/etc/environment, ~/.ssh/environment, nccl.conf)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        pair = assignment(line)
        if pair:
            found.append(Assignment(file, number, pair[0], pair[1]))
    return found


def parse_tmux_environment(text: str) -> dict[str, str | None]:
    """``tmux show-environment -g`` output: NAME=VALUE, or -NAME for a removed variable."""
    env: dict[str, str | None] = {}
    for line in text.splitlines():
        if line.startswith("-"):
            env[line[1:]] = None
        elif "=" in line:
            name, value = line.split("=", 1)
            env[name] = value
    return env


def matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass
class SshWorld:
    """What decides which of the client's variables cross ``ssh host cmd``."""

    client: str  # the client command line
    send_env: list[str]
    sshd: sshd_config.EffectiveSshd | None
    sshd_error: str | None = None


@dataclass
class HostSources:
    """What the host's own files say about the variables."""

    startup: list[Assignment]
    etc_environment: list[Assignment]
    nccl_conf: list[Assignment]
    ssh_environment: list[Assignment]
    tmux_running: bool
    tmux_started: str | None
    tmux_global: dict[str, str | None]
    ssh: SshWorld | None = None
    unreadable: list[str] = field(default_factory=list)
    startup_files: StartupFiles | None = None
    traced: dict[str, dict[str, Traced]] = field(default_factory=dict)  # world -> name -> line
    read: Callable[[str], str | None] = lambda _path: None  # the host's files, read once each


def lister(host: Host) -> sshd_config.Lister:
    """Files matching a glob in the last part of a path, on the host (no shell involved)."""

    def listing(pattern: str) -> list[str]:
        if pattern.startswith("~/"):
            pattern = f"{host.home()}/{pattern[2:]}"
        folder, _, name = pattern.rpartition("/")
        result = host.run(
            ["find", folder or "/", "-maxdepth", "1", "-name", name, "-type", "f"], timeout_s=20
        )
        return sorted(line for line in result.output.splitlines() if line.startswith("/"))

    return listing


_DISCOVER = (
    'echo "CONN $SSH_CONNECTION"; p=$$; n=0; while [ "${p:-0}" -gt 1 ] && [ $n -lt 12 ]; do '
    'echo "PROC $(ps -o args= -p "$p")"; p=$(ps -o ppid= -p "$p" | tr -d " "); n=$((n+1)); done'
)


def ssh_world(client: OpenSshClient, files: Host | None) -> SshWorld:
    """The client's SendEnv and the effective sshd configuration of the session it opens.

    The sshd serving the session is found from inside it (its listener's command line names
    its config file); ``files`` is the host whose files that sshd reads (None: not readable
    from here)."""
    world = SshWorld(client.describe(), client.send_env(), None)
    result = client.run("", timeout_s=30, script=_DISCOVER)
    if not result.ok:
        world.sshd_error = f"could not open a session: {result.tail(1)}"
        return world
    procs = [ln[5:] for ln in result.output.splitlines() if ln.startswith("PROC ")]
    conn_line = next((ln[5:] for ln in result.output.splitlines() if ln.startswith("CONN ")), "")
    parts = conn_line.split()
    users = client.effective().get("user") or []
    user = users[0] if users else None
    conn = sshd_config.Connection(
        user=user,
        address=parts[0] if len(parts) == 4 else None,
        local_address=parts[2] if len(parts) == 4 else None,
        local_port=int(parts[3]) if len(parts) == 4 and parts[3].isdigit() else None,
    )
    binary, config = sshd_config.config_from_ancestry(procs)
    if files is None:
        world.sshd_error = f"sshd's files ({config}) are on a host perfbisect does not read"
        return world
    criteria = ",".join(
        f"{k}={v}"
        for k, v in (
            ("user", conn.user),
            ("addr", conn.address),
            ("host", conn.address),
            ("laddr", conn.local_address),
            ("lport", conn.local_port),
        )
        if v
    )
    tested = files.run([binary, "-T", "-f", config, "-C", criteria], timeout_s=20)
    if tested.ok and "\nport " in f"\n{tested.output.lower()}":  # root only: it reads host keys
        world.sshd = sshd_config.from_sshd_t(tested.output, config)
        return world
    if files.read_text(config) is None:
        world.sshd_error = f"{config} is not readable on {files.address}"
        return world
    world.sshd = sshd_config.parse(config, files.read_text, lister(files), conn)
    return world


def gather(
    host: Host,
    nccl_conf_file: str | None = None,
    ssh_client: OpenSshClient | None = None,
    ssh_files: Host | None = None,
    folder: str | None = None,
) -> HostSources:
    """``folder``: a private directory on the host for the start-up trace (no trace without)."""
    listing = lister(host)
    cache: dict[str, str | None] = {}

    def read(path: str) -> str | None:
        if path not in cache:
            cache[path] = host.read_text(path)
        return cache[path]

    files = read_startup(read, listing, host.home())
    startup = files.assignments
    etc_env = key_value_lines("/etc/environment", host.read_text("/etc/environment") or "")
    ssh_env = key_value_lines("~/.ssh/environment", host.read_text("~/.ssh/environment") or "")
    nccl: list[Assignment] = []
    for path in [p for p in (nccl_conf_file, "~/.nccl.conf", "/etc/nccl.conf") if p]:
        nccl.extend(key_value_lines(path, host.read_text(path) or ""))
    listed = host.run(["tmux", "show-environment", "-g"], timeout_s=20)
    running = listed.ok
    started = None
    if running:
        info = host.run(["tmux", "display-message", "-p", "#{start_time}"], timeout_s=20)
        started = info.output.strip() if info.ok and info.output.strip().isdigit() else None
    return HostSources(
        startup=startup,
        etc_environment=etc_env,
        nccl_conf=nccl,
        ssh_environment=ssh_env,
        tmux_running=running,
        tmux_started=started,
        tmux_global=parse_tmux_environment(listed.output) if running else {},
        ssh=ssh_world(ssh_client, ssh_files) if ssh_client is not None else None,
        startup_files=files,
        traced=trace_startup(host, folder) if folder else {},
        read=read,
    )


_ENV0_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env0(text: str) -> dict[str, str]:
    env = {}
    for item in text.split("\0"):
        if "=" in item:
            name, value = item.split("=", 1)
            if _ENV0_NAME.match(name):
                env[name] = value
    return env


def login_environment(host: Host, folder: str) -> dict[str, str] | None:
    """The environment of the host user's interactive login shell (what "your environment"
    means on a remote host), or None when it cannot be read within seconds."""
    out = f"{folder}/login.env0"
    host.run(["mkdir", "-p", folder], timeout_s=20)
    script = f'exec "${{SHELL:-/bin/sh}}" -l -i -c {shlex.quote(f"env -0 > {out}")} < /dev/null'
    host.run(["sh", "-c", script], timeout_s=30)
    text = host.read_text(out)
    host.run(["rm", "-f", out], timeout_s=20)
    return parse_env0(text) if text else None
