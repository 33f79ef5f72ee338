"""Where a variable can come from besides perfbisect's delivery, read from the host's files:
shell start-up files (and the non-interactive guard in them), tmux's global environment,
``/etc/environment``, NCCL configuration files, and ssh's ``SendEnv``/``AcceptEnv``.

Pure parsing functions plus one gatherer that reads the files through a host.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from perfbisect.hosts.base import Host

STARTUP_FILES = (
    "~/.bashrc",
    "~/.profile",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.zshenv",
    "~/.zshrc",
    "/etc/bash.bashrc",
    "/etc/profile",
)

# Lines that make a shell start-up file stop when the shell is not interactive.
_GUARDS = (
    re.compile(r"^\s*case\s+\$-\s+in"),  # Debian: case $- in *i*) ;; *) return;; esac
    re.compile(r"^\s*\[\s+-z\s+\"?\$PS1\"?\s+\]\s*&&\s*return"),  # [ -z "$PS1" ] && return
    re.compile(r"^\s*\[\[\s+\$-\s+!=\s+\*i\*\s+\]\]\s*&&\s*return"),  # [[ $- != *i* ]] && return
    re.compile(r"^\s*\[\[?\s+!?\s*-[ot]\s+.*\]\]?\s*&&\s*return"),
    re.compile(r"^\s*if\s+\[\[?\s+\"?\$-\"?\s+!=\s+\*i\*"),
)


@dataclass(frozen=True)
class Assignment:
    file: str
    line: int
    name: str
    value: str
    after_guard: int | None  # line of the non-interactive guard it follows, if any


def _assignment(line: str) -> tuple[str, str] | None:
    match = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
    if not match:
        return None
    value = match.group(2).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return match.group(1), value


def startup_assignments(file: str, text: str, names: Iterable[str]) -> list[Assignment]:
    """Assignments of ``names`` in a shell start-up file, each with the guard line before it."""
    wanted = set(names)
    guard: int | None = None
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if guard is None and any(g.search(line) for g in _GUARDS):
            guard = number
            continue
        pair = _assignment(line)
        if pair and pair[0] in wanted:
            found.append(Assignment(file, number, pair[0], pair[1], guard))
    return found


def key_value_lines(file: str, text: str, names: Iterable[str]) -> list[Assignment]:
    """``NAME=VALUE`` files (/etc/environment, nccl.conf)."""
    wanted = set(names)
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        pair = _assignment(line)
        if pair and pair[0] in wanted:
            found.append(Assignment(file, number, pair[0], pair[1], None))
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


def ssh_patterns(text: str, keyword: str) -> list[str]:
    """Patterns of every ``SendEnv``/``AcceptEnv`` line of an ssh(d) config (all blocks)."""
    patterns = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].lower() == keyword.lower():
            patterns.extend(parts[1:])
    return patterns


def matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass
class HostSources:
    """What the host's own files say about the watched variables."""

    startup: list[Assignment]
    etc_environment: list[Assignment]
    nccl_conf: list[Assignment]
    tmux_running: bool
    tmux_started: str | None
    tmux_global: dict[str, str | None]
    accept_env: list[str]
    accept_env_known: bool


def gather(host: Host, names: Iterable[str], nccl_conf_file: str | None = None) -> HostSources:
    names = sorted(set(names))
    startup: list[Assignment] = []
    for path in STARTUP_FILES:
        text = host.read_text(path)
        if text is not None:
            startup.extend(startup_assignments(path, text, names))
    etc_env = key_value_lines("/etc/environment", host.read_text("/etc/environment") or "", names)
    nccl: list[Assignment] = []
    for path in [p for p in (nccl_conf_file, "~/.nccl.conf", "/etc/nccl.conf") if p]:
        nccl.extend(key_value_lines(path, host.read_text(path) or "", names))
    listed = host.run(["tmux", "show-environment", "-g"], timeout_s=20)
    running = listed.ok
    started = None
    if running:
        info = host.run(["tmux", "display-message", "-p", "#{start_time}"], timeout_s=20)
        started = info.output.strip() if info.ok and info.output.strip().isdigit() else None
    sshd = host.read_text("/etc/ssh/sshd_config")
    accept = ssh_patterns(sshd or "", "AcceptEnv")
    return HostSources(
        startup=startup,
        etc_environment=etc_env,
        nccl_conf=nccl,
        tmux_running=running,
        tmux_started=started,
        tmux_global=parse_tmux_environment(listed.output) if running else {},
        accept_env=accept,
        accept_env_known=sshd is not None,
    )


def send_env(ssh_config_text: str) -> list[str]:
    return ssh_patterns(ssh_config_text, "SendEnv")
