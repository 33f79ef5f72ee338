"""sshd's effective configuration for one connection: what ``AcceptEnv`` and
``PermitUserEnvironment`` really are.

``sshd -T -C user=...,addr=...`` prints the effective result, but it must read the host keys, so
it runs only as root. Otherwise the configuration files are parsed the way sshd reads them:
``Include`` pulls files in where it stands (globs sorted, relative paths under ``/etc/ssh``);
the first value obtained for a keyword wins, except ``AcceptEnv``, which accumulates; a
``Match`` block applies when its criteria match the connection, and criteria that cannot be
evaluated from here (``Group``, ``Host`` names) make the rules inside it *conditional*, which
the hints then say instead of stating them as facts.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_CONFIG = "/etc/ssh/sshd_config"


@dataclass(frozen=True)
class Connection:
    """What a Match block can test, as seen from inside the session ($SSH_CONNECTION)."""

    user: str | None = None
    address: str | None = None  # client address
    local_address: str | None = None
    local_port: int | None = None


@dataclass(frozen=True)
class Rule:
    pattern: str
    where: str  # "file:line" or "sshd -T"
    conditional: bool = False  # inside a Match block that could not be evaluated


@dataclass
class EffectiveSshd:
    config: str
    method: str  # "sshd -T" or "parsed"
    accept_env: list[Rule] = field(default_factory=list)
    permit_user_environment: Rule | None = None
    use_pam: Rule | None = None
    files: list[str] = field(default_factory=list)

    def accepts(self, name: str) -> Rule | None:
        """The rule that accepts ``name`` (a conditional one only if no definite one does)."""
        matching = [r for r in self.accept_env if fnmatch.fnmatchcase(name, r.pattern)]
        definite = [r for r in matching if not r.conditional]
        chosen = definite or matching
        return chosen[0] if chosen else None

    def summary(self) -> str:
        if not self.accept_env:
            return f"no AcceptEnv ({self.method} of {self.config})"
        parts = [
            f"{r.pattern}{' (conditional)' if r.conditional else ''} [{r.where}]"
            for r in self.accept_env
        ]
        return "AcceptEnv " + ", ".join(parts) + f" ({self.method} of {self.config})"


def from_sshd_t(text: str, config: str) -> EffectiveSshd:
    """Parse ``sshd -T`` output (lower-case keywords, one setting per line)."""
    result = EffectiveSshd(config=config, method="sshd -T")
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        key = parts[0].lower()
        if key == "acceptenv":
            result.accept_env.extend(Rule(p, "sshd -T") for p in parts[1:])
        elif key == "permituserenvironment" and len(parts) > 1:
            result.permit_user_environment = Rule(parts[1], "sshd -T")
        elif key == "usepam" and len(parts) > 1:
            result.use_pam = Rule(parts[1], "sshd -T")
    return result


def _match(criteria: list[str], conn: Connection) -> bool | None:
    """True/False when decidable, None when a criterion cannot be evaluated here."""
    if not criteria:
        return True
    if criteria[0].lower() == "all":
        return True
    verdict: bool | None = True
    pairs = list(zip(criteria[0::2], criteria[1::2]))
    for key, value in pairs:
        key = key.lower()
        patterns = value.split(",")
        subject: str | None
        if key == "user":
            subject = conn.user
        elif key == "address":
            subject = conn.address
        elif key == "localaddress":
            subject = conn.local_address
        elif key == "localport":
            subject = str(conn.local_port) if conn.local_port else None
        else:  # Group, Host, RDomain: not decidable from here
            subject = None
        if subject is None:
            verdict = None
            continue
        if not _listed(subject, patterns, key in ("address", "localaddress")):
            return False
    return verdict


def _listed(subject: str, patterns: list[str], is_address: bool) -> bool:
    hit = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if is_address and "/" in pattern:
            try:
                ok = ipaddress.ip_address(subject) in ipaddress.ip_network(pattern, strict=False)
            except ValueError:
                ok = False
        else:
            ok = fnmatch.fnmatchcase(subject, pattern)
        if ok and negated:
            return False
        hit = hit or ok
    return hit


Reader = Callable[[str], "str | None"]
Lister = Callable[[str], "list[str]"]


def parse(config: str, read: Reader, listing: Lister, conn: Connection) -> EffectiveSshd:
    result = EffectiveSshd(config=config, method="parsed")
    seen: set[str] = set()

    def walk(path: str, state: bool | None, depth: int) -> bool | None:
        if path in seen or depth > 8:
            return state
        text = read(path)
        if text is None:
            return state
        seen.add(path)
        result.files.append(path)
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line.replace("=", " ", 1) if "=" in line.split()[0] else line)
            except ValueError:
                words = line.split()
            key, args = words[0].lower(), words[1:]
            where = f"{path}:{number}"
            if key == "match":
                state = _match(args, conn)
                continue
            if state is False:
                continue
            conditional = state is None
            if key == "include":
                for pattern in args:
                    full = pattern if pattern.startswith("/") else f"/etc/ssh/{pattern}"
                    for one in sorted(listing(full)) if any(c in full for c in "*?[") else [full]:
                        walk(one, state, depth + 1)
            elif key == "acceptenv":
                result.accept_env.extend(Rule(p, where, conditional) for p in args)
            elif key == "permituserenvironment" and result.permit_user_environment is None:
                result.permit_user_environment = Rule(args[0] if args else "", where, conditional)
            elif key == "usepam" and result.use_pam is None:
                result.use_pam = Rule(args[0] if args else "", where, conditional)
        return state

    walk(config, True, 0)
    return result


def config_from_ancestry(lines: list[str]) -> tuple[str, str]:
    """The sshd binary and config file of the listener among a session's ancestors' command
    lines (``sshd: /usr/sbin/sshd -f FILE [listener] ...``)."""
    for line in lines:
        text = line.strip()
        if "sshd" not in text.split(" ", 1)[0] and not text.startswith("sshd:"):
            continue
        body = text[len("sshd:") :].strip() if text.startswith("sshd:") else text
        body = body.split("[listener]", 1)[0]
        try:
            words = shlex.split(body)
        except ValueError:
            words = body.split()
        if not words or not words[0].endswith("sshd"):
            continue
        config = DEFAULT_CONFIG
        for i, word in enumerate(words):
            if word == "-f" and i + 1 < len(words):
                config = words[i + 1]
            elif word.startswith("-f") and len(word) > 2:
                config = word[2:]
        return words[0], config
    return "sshd", DEFAULT_CONFIG
