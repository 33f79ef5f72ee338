"""Sources and hints for variables that start-up code sets, by shell or by Python.

- A shell start-up line that sets a variable without a readable assignment: a program whose
  output is evaluated (``eval "$(pyenv init -)"``, ``source <(...)``), a file sourced through a
  computed path, a function or a ``PROMPT_COMMAND`` hook. ``startup_trace`` names the line; the
  start-up files' reading (``startup_files``) says which shells run it and what stops the others.
- An assignment in a file that only login shells read (``~/.bash_profile``, ``~/.bash_login``,
  ``~/.profile``, ``/etc/profile`` and ``/etc/profile.d``): tmux panes have it, ``ssh host cmd``
  (a non-login shell that reads ``~/.bashrc`` only) does not. And one in a login file that bash
  never reads because an earlier one of the three exists.
- Python start-up hooks: a ``sitecustomize.py``/``usercustomize.py``/``.pth`` file that sets
  ``os.environ`` in the interpreter one method runs (``remote/envchain_probe.py`` lists them),
  or a ``sitecustomize.py`` that never runs because another one comes first on ``sys.path``.

Only names, ``file:line`` and the start-up line's text (secret-looking parts redacted) are
reported; values go through the probe's redaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfbisect.probes.startup_files import (
    LOGIN,
    LOGIN_CANDIDATES,
    SSH_CMD,
    Assignment,
    LineReach,
    StartupFiles,
)
from perfbisect.probes.startup_trace import Traced
from perfbisect.redact import SECRET_NAME

Add = Callable[[str, str, str], None]  # variable, kind, message
LOGIN_FILES = "bash reads the first of ~/.bash_profile, ~/.bash_login, ~/.profile"


def shown_line(text: str | None) -> str:
    """A start-up line as shown in a hint, trimmed; nothing when it holds a secret-looking
    word (a value could follow it in any syntax: only ``file:line`` is shown then)."""
    line = (text or "").strip()
    if not line or SECRET_NAME.search(line):
        return ""
    return line if len(line) <= 100 else line[:97] + "..."


def _login_only_reason(path: str) -> str:
    if path.startswith("/etc/profile"):
        return "/etc/profile and /etc/profile.d/*.sh are read by login shells only"
    if path in LOGIN_CANDIDATES:
        return f"{path} is read by login shells only ({LOGIN_FILES})"
    return f"{path} is sourced only from a file that login shells read"


def ssh_reason(reach: LineReach, path: str) -> str | None:
    """Why `ssh host cmd` does not run a line that login shells run (None when it does)."""
    if SSH_CMD in reach.worlds or LOGIN not in reach.worlds:
        return None
    if reach.guard:
        return f"it stops at the non-interactive guard at {reach.guard}"
    return _login_only_reason(path)


@dataclass
class StartupHints:
    """What start-up code says about the probe's rows. ``has(method, name)``: whether the
    variable reached that method's shell or Python (None: method not run)."""

    startup: StartupFiles | None
    traced: Mapping[str, Mapping[str, Traced]]
    has: Callable[[str, str], bool | None]
    methods: Sequence[str]
    non_interactive: Sequence[str]
    read: Callable[[str], str | None]

    def _line(self, path: str, line: int) -> str:
        text = self.read(path)
        lines = text.splitlines() if text else []
        return shown_line(lines[line - 1]) if 0 < line <= len(lines) else ""

    def _missing(self, name: str, among: Sequence[str]) -> list[str]:
        return [m for m in among if self.has(m, name) is False]

    def _static(self, name: str, file: str) -> bool:
        """Whether reading the start-up files already found an assignment of ``name`` in
        ``file`` (its sources then say where)."""
        found = self.startup.assignments if self.startup else []
        return any(a.name == name and a.file == file for a in found)

    def _traced(self, name: str) -> list[Traced]:
        """The traced setters of ``name`` no readable assignment explains (one per line)."""
        out: dict[tuple[str, int, bool], Traced] = {}
        for world in (LOGIN, SSH_CMD):
            t = self.traced.get(world, {}).get(name)
            if t is not None and not self._static(name, t.file):
                out.setdefault((t.file, t.line, t.prompt), t)
        return list(out.values())

    def command(self, t: Traced) -> tuple[str, int, LineReach | None]:
        """The start-up line behind a traced setter: the innermost frame in a file that bash's
        start-up reading reaches (the ``eval`` line itself, or the line that sourced a file
        through a computed path), with which shells run it. Of a file's frames the outermost
        counts: that is where the file's own run had got to (an inner frame in the same file is
        a function, whose line is meaningless when an eval defined it, as conda's hook does)."""
        frames = t.frames()
        outermost: dict[str, int] = {}
        for path, line in frames:
            outermost[path] = line  # frames go outwards: the last one of a file stays
        for path, _ in frames:
            line = outermost[path]
            reach = self.startup.reach(path, line) if self.startup else None
            if reach is not None:
                return path, line, reach
        return frames[-1][0], frames[-1][1], None

    def describe(self, t: Traced) -> str:
        if t.prompt:
            return f"PROMPT_COMMAND (a hook in {t.file}, run before each prompt)"
        path, line, _ = self.command(t)
        text = self._line(path, line)
        command = f"`{text}` at {path}:{line}" if text else f"{path}:{line}"
        if path == t.file:
            return command
        return f"{t.file}:{t.line}, reached through {command}"

    def sources(self, name: str) -> list[str]:
        out = []
        for t in self._traced(name):
            _, _, reach = self.command(t)
            shells = " and ".join(
                {"login": "login shells (tmux panes)", "ssh-cmd": "`ssh host cmd`"}[w]
                for w in (reach.worlds if reach else ())
            )
            ran = "run before each prompt (tmux panes)" if t.prompt else f"run by {shells}"
            out.append(f"{self.describe(t)} (a command the start-up files run; {ran})")
        return out

    def hints(self, names: Sequence[str], add: Add) -> None:
        for name in names:
            self._command_hints(name, add)
        for a in self.startup.assignments if self.startup else []:
            if a.name in names:
                self._assignment_hints(a, add)

    def _command_hints(self, name: str, add: Add) -> None:
        for t in self._traced(name):
            missing = self._missing(name, self.non_interactive)
            if t.prompt:
                if missing:
                    add(
                        name,
                        "startup-command",
                        f"{name} is set by {self.describe(t)}: tmux panes run it before the "
                        f"typed command, `ssh host cmd` shows no prompt, so {', '.join(missing)} "
                        f"never see it. Export it from a start-up file, or deliver it with [env]",
                    )
                continue
            path, _, reach = self.command(t)
            why = ssh_reason(reach, path) if reach else None
            if why is None or not missing:
                continue
            add(
                name,
                "startup-command",
                f"{name} is set by {self.describe(t)}, a command the start-up files run (no "
                f"assignment to read there): login shells (tmux panes) run it; `ssh host cmd` "
                f"does not ({why}), so {', '.join(missing)} never see it. Run it in ~/.bashrc "
                "above its non-interactive guard, or deliver the variable with [env]",
            )

    def _assignment_hints(self, a: Assignment, add: Add) -> None:
        if a.worlds == (LOGIN,) and not a.guard:
            missing = self._missing(a.name, self.non_interactive)
            if missing:
                via = f" (sourced via {' -> '.join(a.via)})" if a.via else ""
                add(
                    a.name,
                    "login-only",
                    f"{a.file}:{a.line}{via} sets {a.name}: {_login_only_reason(a.file)}. tmux panes "
                    "run a login shell and have it; `ssh host cmd` runs a non-login shell that "
                    f"reads ~/.bashrc only, so {', '.join(missing)} never see it. Set it in "
                    "~/.bashrc above its non-interactive guard, or deliver it with [env]",
                )
        first = self.startup.login_file if self.startup else None
        if a.file in LOGIN_CANDIDATES and not a.worlds and first and a.file != first:
            lacking = self._missing(a.name, [m for m in self.methods if m == "tmux"])
            if lacking:
                add(
                    a.name,
                    "login-file-not-read",
                    f"{a.file}:{a.line} sets {a.name}, but bash never reads {a.file}: "
                    f"{LOGIN_FILES} that exists, here {first}. So tmux panes (login shells) "
                    f"lack {a.name}. Source it from {first} (`. {a.file}`), or move the export",
                )


def python_sources(
    name: str, raw: Mapping[str, Mapping[str, Any]], deliver: Mapping[str, str]
) -> list[tuple[str, str, list[str], str]]:
    """(file:line, role, methods, executable) of the Python start-up hooks that set ``name``
    where the Python stage differs from the shell's (perfbisect's own delivery excepted)."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for method, result in raw.items():
        stages = result["stages"]
        value = stages["python"].get(name)
        if value is None or value == stages["shell"].get(name):
            continue
        if method == "sitecustomize" and deliver.get(name) == value:
            continue  # perfbisect's generated sitecustomize set it: delivered, not found
        for hook in result.get("python_startup") or []:
            if hook["ran"] and name in hook["names"]:
                where = f"{hook['path']}:{hook['names'][name][0]}"
                role = ".pth file" if hook["role"] == "pth" else hook["role"]
                key = (where, role, str(result.get("executable") or "python"))
                found.setdefault(key, []).append(method)
    return [(where, role, methods, exe) for (where, role, exe), methods in found.items()]


def python_hints(
    names: Sequence[str],
    raw: Mapping[str, Mapping[str, Any]],
    deliver: Mapping[str, str],
    add: Add,
) -> None:
    executables = {m: str(r.get("executable") or "python") for m, r in raw.items()}
    for name in names:
        for where, role, methods, exe in python_sources(name, raw, deliver):
            others = sorted(
                {executables[m] for m in raw if m not in methods and executables[m] != exe}
            )
            without = [m for m in raw if m not in methods and executables[m] != exe]
            tail = (
                f"; {', '.join(without)} run {', '.join(others)}, which does not run it"
                if without
                else ""
            )
            add(
                name,
                "python-startup",
                f"{where} sets {name} when {exe} starts (its {role}): in {', '.join(methods)} "
                f"{name} is set from the Python stage on (spawned children and C getenv too), "
                f"not in the shell, nor in programs that are not this Python{tail}",
            )
    shadowed: set[tuple[str, str]] = set()
    for result in raw.values():
        hooks = result.get("python_startup") or []
        imported = result.get("sitecustomize") or "another sitecustomize"
        for hook in hooks:
            if hook["ran"] or hook["role"] != "sitecustomize":
                continue
            for name in sorted(set(hook["names"]) & set(names)):
                if (hook["path"], name) in shadowed:
                    continue
                shadowed.add((hook["path"], name))
                add(
                    name,
                    "sitecustomize-shadowed",
                    f"{hook['path']}:{hook['names'][name][0]} sets {name} but never runs: "
                    f"{result.get('executable')} imports {imported} first (Python imports "
                    "only the first sitecustomize on sys.path)",
                )
