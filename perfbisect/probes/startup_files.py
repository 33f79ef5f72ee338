"""Shell start-up files: which assignments each kind of shell reaches, and the guards that stop
it early.

Two worlds matter for a launch (docs/design.md section 6):

- ``login``: a login shell, which is what a tmux pane runs: ``/etc/profile`` (and the
  ``/etc/profile.d/*.sh`` it sources), then the *first* of ``~/.bash_profile``, ``~/.bash_login``,
  ``~/.profile``, and whatever those source (Debian's ``~/.profile`` sources ``~/.bashrc``).
  Interactive, so non-interactive guards do not stop it.
- ``ssh-cmd``: ``ssh host cmd``, a non-login, non-interactive bash that reads
  ``/etc/bash.bashrc`` and ``~/.bashrc`` (Debian's bash is built to) and stops at the first
  non-interactive guard of each file. A guard in a sourced file ends only that file.

Pure functions over file texts; the files are read through a callback so that the same code
serves the local host and an ssh host.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

LOGIN = "login"
SSH_CMD = "ssh-cmd"
WORLD_LABEL = {LOGIN: "login shells (tmux panes)", SSH_CMD: "`ssh host cmd`"}

# The interactivity tests people write, and which way they point: a "negative" test is true
# in a non-interactive shell (then `&& return` / `then return` stops it), a "positive" one is
# true in an interactive shell (then `|| return` stops a non-interactive one).
_DASH = r"(?:\$-|\"\$-\"|\$\{-\}|\"\$\{-\}\")"
_PS1 = r"(?:\$PS1|\"\$PS1\"|\$\{PS1(?:-|:-)?\}|\"\$\{PS1(?:-|:-)?\}\")"
_NEGATIVE_TESTS = (
    rf"\[\[\s*{_DASH}\s*!=\s*\*i\*\s*\]\]",
    rf"\[\s*{_DASH}\s*!=\s*\*i\*\s*\]",
    rf"\[\[?\s*-z\s+{_PS1}\s*\]\]?",
    rf"!\s*\[\[\s*{_DASH}\s*==?\s*\*i\*\s*\]\]",
    r"\[\[?\s*!\s+-t\s+[0-9]\s*\]\]?",
    r"\[\[?\s*!\s+-o\s+interactive\s*\]\]?",
)
_POSITIVE_TESTS = (
    rf"\[\[\s*{_DASH}\s*==?\s*\*i\*\s*\]\]",
    rf"\[\[?\s*-n\s+{_PS1}\s*\]\]?",
    r"\[\[?\s*-t\s+[0-9]\s*\]\]?",
    r"\[\[?\s*-o\s+interactive\s*\]\]?",
)
_NEG = "(?:" + "|".join(_NEGATIVE_TESTS) + ")"
_POS = "(?:" + "|".join(_POSITIVE_TESTS) + ")"
_RETURN = r"(?:return|exit)\b"
_ONE_LINE_GUARDS = (
    re.compile(rf"^\s*{_NEG}\s*&&\s*{_RETURN}"),
    re.compile(rf"^\s*{_POS}\s*\|\|\s*{_RETURN}"),
    re.compile(rf"^\s*if\s+{_NEG}\s*;\s*then\s+{_RETURN}"),
    re.compile(rf"^\s*if\s+!\s*{_POS}\s*;\s*then\s+{_RETURN}"),
)
_IF_OPEN = re.compile(rf"^\s*if\s+(?:{_NEG}|!\s*{_POS})\s*;?\s*(?:then)?\s*(?:#.*)?$")
_CASE_OPEN = re.compile(rf"^\s*case\s+{_DASH}\s+in\b")
_SOURCE = re.compile(r"^\s*(?:\[\[?.*\]\]?\s*&&\s*)?(?:\.|source)\s+(\S+)\s*(?:;.*)?$")
_ASSIGN = re.compile(
    r"^\s*(?:export\s+|declare\s+-x\s+|typeset\s+-x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$"
)
_FISH_SET = re.compile(r"^\s*set\s+(?:-[a-zA-Z]*x[a-zA-Z]*\s+)+([A-Za-z_][A-Za-z0-9_]*)\s+(.*)$")


@dataclass(frozen=True)
class Assignment:
    file: str
    line: int
    name: str
    value: str
    guard: str | None = None  # "file:line" of the non-interactive guard before it (ssh-cmd)
    via: tuple[str, ...] = ()  # "file:line" of each source line that led here
    worlds: tuple[str, ...] = ()  # which shells reach it (LOGIN, SSH_CMD)
    note: str = ""  # why no shell reaches it, or which shell family reads the file

    def where(self) -> str:
        parts = [f"{self.file}:{self.line}"]
        if self.via:
            parts.append(f"sourced via {' -> '.join(self.via)}")
        if self.guard:
            parts.append(f"after the non-interactive guard at {self.guard}")
        if self.worlds:
            parts.append("read by " + " and ".join(WORLD_LABEL[w] for w in self.worlds))
        elif self.note:
            parts.append(self.note)
        return "; ".join(parts)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def assignment(line: str) -> tuple[str, str] | None:
    match = _ASSIGN.match(line) or _FISH_SET.match(line)
    if not match:
        return None
    value = match.group(2).split(" #", 1)[0]
    return match.group(1), _unquote(value)


def guard_lines(text: str) -> list[int]:
    """Line numbers (1-based) of non-interactive guards: where a non-interactive shell stops."""
    lines = text.splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        if any(g.search(line) for g in _ONE_LINE_GUARDS):
            found.append(index + 1)
            continue
        if _CASE_OPEN.search(line):  # case $- in *i*) ;; *) return;; esac (one or more lines)
            block = []
            for body in lines[index : index + 10]:
                block.append(body)
                if re.search(r"\besac\b", body):
                    break
            if re.search(rf"(?:^|[\s;(])\*\)\s*{_RETURN}", "\n".join(block), re.MULTILINE):
                found.append(index + 1)
            continue
        if _IF_OPEN.search(line):  # if [[ $- != *i* ]]; then <newline> return <newline> fi
            for body in lines[index + 1 : index + 8]:
                if re.match(r"^\s*(?:fi|else|elif)\b", body):
                    break
                if re.match(rf"^\s*(?:then\s+)?{_RETURN}", body):
                    found.append(index + 1)
                    break
    return found


def _expand(path: str, home: str) -> str:
    path = _unquote(path)
    for prefix in ("$HOME/", "${HOME}/"):
        if path.startswith(prefix):
            return "~/" + path[len(prefix) :]
    if path.startswith(home.rstrip("/") + "/"):
        return "~/" + path[len(home.rstrip("/")) + 1 :]
    return path


Reader = Callable[[str], "str | None"]
Lister = Callable[[str], "list[str]"]  # a path with a glob in its last part -> matching files


@dataclass
class _Walk:
    read: Reader
    listing: Lister
    home: str
    world: str
    found: dict[tuple[str, int, str], Assignment] = field(default_factory=dict)
    visited: set[str] = field(default_factory=set)
    # path -> (the guard already passed when the file was entered, its own first guard line):
    # what stops this world before any line of the file (see StartupFiles.reach)
    entered: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)

    def file(self, path: str, guard: str | None, via: tuple[str, ...], stops: bool) -> None:
        if path in self.visited or len(via) > 6:
            return
        self.visited.add(path)
        text = self.read(path)
        if text is None:
            return
        guards = set(guard_lines(text)) if stops else set()
        self.entered[path] = (guard, min(guards) if guards else None)
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("#"):
                continue
            if number in guards and guard is None:
                guard = f"{path}:{number}"
                continue
            source = _SOURCE.match(line)
            if source:
                target = _expand(source.group(1), self.home)
                targets = self.listing(target) if "*" in target else [target]
                for one in targets:
                    self.file(one, guard, (*via, f"{path}:{number}"), stops)
                continue
            pair = assignment(line)
            if pair:
                key = (path, number, self.world)
                self.found[key] = Assignment(path, number, pair[0], pair[1], guard, via)


def _merge(walks: Iterable[_Walk]) -> dict[tuple[str, int], Assignment]:
    """One assignment per file line, with the worlds that reach it (past any guard)."""
    out: dict[tuple[str, int], Assignment] = {}
    for walk in walks:
        for (path, number, world), a in walk.found.items():
            reaches = not (world == SSH_CMD and a.guard)
            key = (path, number)
            old = out.get(key)
            worlds = tuple(sorted({*(old.worlds if old else ()), *([world] if reaches else [])}))
            guard = a.guard if world == SSH_CMD else (old.guard if old else None)
            # the ssh-cmd world's path is the one its guard hint must show
            via = a.via if world == SSH_CMD or old is None else old.via
            out[key] = Assignment(path, number, a.name, a.value, guard, via, worlds)
    return out


LOGIN_CANDIDATES = ("~/.bash_profile", "~/.bash_login", "~/.profile")
OTHER_FILES = {
    "~/.zshenv": "read by every zsh",
    "~/.zprofile": "read by zsh login shells",
    "~/.zshrc": "read by interactive zsh",
    "~/.config/fish/config.fish": "read by every fish",
}


@dataclass(frozen=True)
class LineReach:
    """Which shells run one line of a start-up file, and what stops the others."""

    worlds: tuple[str, ...]  # LOGIN, SSH_CMD: the shells that run the line
    guard: str | None  # "file:line" of the non-interactive guard that stops `ssh host cmd`
    read_by: tuple[str, ...]  # the shells that read the file at all (guard or not)


@dataclass(frozen=True)
class StartupFiles:
    """The start-up files as bash reads them: their assignments, and which shells reach any
    line (a line that runs a program, sources a computed path, calls a function)."""

    assignments: list[Assignment]
    login_file: str | None  # the first of LOGIN_CANDIDATES that exists: the one bash reads
    walks: tuple[_Walk, ...]

    def reach(self, path: str, line: int) -> LineReach | None:
        """None when no bash start-up file path leads to ``path``."""
        worlds: list[str] = []
        read_by: list[str] = []
        guard: str | None = None
        for walk in self.walks:
            if path not in walk.entered:
                continue
            read_by.append(walk.world)
            before, first = walk.entered[path]
            stop = before or (f"{path}:{first}" if first is not None and first < line else None)
            if walk.world == SSH_CMD and stop:
                guard = stop
                continue
            worlds.append(walk.world)
        if not read_by:
            return None
        return LineReach(tuple(sorted(worlds)), guard, tuple(sorted(read_by)))


def startup_assignments(read: Reader, listing: Lister, home: str) -> list[Assignment]:
    """Every variable assignment in the start-up files, each with the shells that reach it."""
    return read_startup(read, listing, home).assignments


def read_startup(read: Reader, listing: Lister, home: str) -> StartupFiles:
    """The start-up files of both worlds (login shells, `ssh host cmd`)."""
    login = _Walk(read, listing, home, LOGIN)
    login.file("/etc/profile", None, (), stops=False)
    for path in listing("/etc/profile.d/*.sh"):
        login.file(path, None, ("/etc/profile",), stops=False)
    first = next((p for p in LOGIN_CANDIDATES if read(p) is not None), None)
    if first:
        login.file(first, None, (), stops=False)
    ssh = _Walk(read, listing, home, SSH_CMD)
    ssh.file("/etc/bash.bashrc", None, (), stops=True)
    ssh.file("~/.bashrc", None, (), stops=True)
    merged = _merge([login, ssh])
    # Files that exist and set variables but that no bash reaches: say why.
    for path in (*LOGIN_CANDIDATES, "~/.bashrc", *OTHER_FILES):
        if path in login.visited or path in ssh.visited:
            continue
        text = read(path)
        if text is None:
            continue
        if path in LOGIN_CANDIDATES:
            note = f"not read by bash: {first} exists and is read instead"
        else:
            note = OTHER_FILES.get(path, "not sourced by any start-up file that bash reads")
        for number, line in enumerate(text.splitlines(), start=1):
            pair = assignment(line)
            if pair and not line.lstrip().startswith("#"):
                merged[(path, number)] = Assignment(path, number, pair[0], pair[1], note=note)
    found = sorted(merged.values(), key=lambda a: (a.file, a.line))
    return StartupFiles(found, first, (login, ssh))
