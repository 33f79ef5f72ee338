"""Where bash's start-up files really set each variable: the files run once per world with
``xtrace``, every traced line stamped with its file-and-line call stack.

Reading the files (``startup_files``) cannot see what a program they run prints and the shell
evaluates (``eval "$(pyenv init -)"``, ``source <(conda shell.bash hook)``), files sourced through
computed paths (``for f in ~/.bashrc.d/*.sh; do . "$f"; done``) or variables a function exports
when a line calls it (nvm, ``PROMPT_COMMAND`` hooks such as direnv's). Running them does: the trace
names the start-up file line each assignment came from.

The two worlds are run the way bash runs them (docs/design.md section 6): ``login`` is an
interactive shell that reads ``/etc/profile`` then the first of ``~/.bash_profile``,
``~/.bash_login``, ``~/.profile`` (what a tmux pane runs), and then runs ``PROMPT_COMMAND`` once,
as a pane does before the typed command; ``ssh-cmd`` is a non-interactive shell that reads
``/etc/bash.bashrc`` and ``~/.bashrc``, whose guards return. bash is started with
``--noprofile --norc`` and the wrapper sources the files, because PS4 (the stamp) must be set
before the first of them runs and bash ignores a PS4 from the environment when run as root.

The trace holds values (secrets among them): it stays in the probe's 0700 directory on the host,
only names and ``file:line`` leave this module, and the directory is deleted with the probe's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from perfbisect.hosts.base import Host
from perfbisect.probes.startup_files import LOGIN, SSH_CMD

# PS4: depth pluses, then \x01 BASH_SOURCE (quoted) \x02 BASH_LINENO \x02 LINENO \x01.
# Single-quoted: expanded at each traced line, not when PS4 is assigned.
_PS4 = "+$'\\x01''${BASH_SOURCE[*]@Q}'$'\\x02''${BASH_LINENO[*]}'$'\\x02''${LINENO}'$'\\x01 '"
PROMPT_MARK = ": perfbisect-prompt"
_FILES = {
    LOGIN: (
        "[ -r /etc/profile ] && . /etc/profile; "
        "if [ -r ~/.bash_profile ]; then . ~/.bash_profile; "
        "elif [ -r ~/.bash_login ]; then . ~/.bash_login; "
        "elif [ -r ~/.profile ]; then . ~/.profile; fi; "
        f'{PROMPT_MARK}; for _pb_c in "${{PROMPT_COMMAND[@]}}"; do eval "$_pb_c"; done'
    ),
    SSH_CMD: "[ -r /etc/bash.bashrc ] && . /etc/bash.bashrc; [ -r ~/.bashrc ] && . ~/.bashrc",
}
_LINE = re.compile(r"^(\++)\x01(.*?)\x02([0-9 ]*)\x02([0-9]+)\x01 (.*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=")
_DECLARE = ("export", "declare", "typeset")
# Frames that are no file a person can open: process substitution and here-strings.
_PIPE = re.compile(r"^/(?:dev|proc/self)/fd/[0-9]+$")


@dataclass(frozen=True)
class Traced:
    """The start-up file line that last set a variable in one world's traced shell."""

    file: str  # the innermost real file ("~/..." under the home directory)
    line: int
    via: tuple[str, ...] = ()  # "file:line" of the outer frames, outermost first
    prompt: bool = False  # set by PROMPT_COMMAND (a hook run before each prompt)

    def frames(self) -> list[tuple[str, int]]:
        """(file, line) from the setting line outwards."""
        outer = [(path, int(number)) for path, _, number in (v.rpartition(":") for v in self.via)]
        return [(self.file, self.line), *reversed(outer)]

    def where(self) -> str:
        via = f" (via {' -> '.join(self.via)})" if self.via else ""
        return f"{self.file}:{self.line}{via}"


def wrapper(world: str, trace_path: str) -> str:
    """The ``sh`` command line that runs ``world``'s start-up files traced into ``trace_path``
    (nothing when the user's shell is not bash: its panes and ssh sessions read other files)."""
    interactive = "-i " if world == LOGIN else ""
    body = f"PS4={_PS4}; exec 9>{shlex.quote(trace_path)}; BASH_XTRACEFD=9; set -x; {_FILES[world]}"
    return (
        '[ "${SHELL##*/}" = bash ] || exit 0; '
        'exec env -i HOME="$HOME" USER="$USER" LOGNAME="$LOGNAME" SHELL="$SHELL" PATH="$PATH" '
        f'LANG="${{LANG:-C.UTF-8}}" TERM=dumb bash --noprofile --norc {interactive}'
        f"-c {shlex.quote(body)} < /dev/null > /dev/null 2>&1"
    )


def _names(command: str) -> list[tuple[str, bool]]:
    """The variables a traced simple command sets, each with whether the command gives it a
    value: ``NAME=value``, ``export``/``declare -x`` with names. xtrace prints the prefix of
    ``NAME=value cmd`` (set for that command only) as a line of its own: it counts too, a known
    over-reach that only matters when such a line comes after the real setter."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        words = command.split()
    if not words:
        return []
    if words[0] in _DECLARE:
        pairs = [(w.split("=", 1)[0], "=" in w) for w in words[1:]]
        return [(name, valued) for name, valued in pairs if _NAME.match(name)]
    if all(_ASSIGN.match(w) for w in words):
        return [(_ASSIGN.match(w).group(1), True) for w in words]  # type: ignore[union-attr]
    return []


def _frames(sources: str, linenos: str, lineno: str) -> list[tuple[str, int]]:
    """(file, line) innermost first, from one stamp."""
    try:
        files = shlex.split(sources)
    except ValueError:
        files = sources.split()
    calls = [int(n) for n in linenos.split()]
    lines = [int(lineno), *calls]
    return [(f, lines[i]) for i, f in enumerate(files) if f and i < len(lines)]


def parse(text: str, home: str) -> dict[str, Traced]:
    """The last setter of each variable in one traced shell."""
    found: dict[str, Traced] = {}
    evals: list[tuple[int, int, str]] = []  # (depth, stack height, its line) of open evals
    prompt = False
    prefix = home.rstrip("/") + "/"
    for raw in text.splitlines():
        match = _LINE.match(raw)
        if not match:
            continue  # a continuation of a multi-line command
        depth = len(match.group(1))
        frames = _frames(match.group(2), match.group(3), match.group(4))
        command = match.group(5)
        if command.startswith(PROMPT_MARK):
            prompt = True
            continue
        while evals and depth <= evals[-1][0]:
            evals.pop()
        # Inside an eval LINENO (and a call's BASH_LINENO) counts the evaluated text's lines: the
        # eval's own line is the one in the file. Frames deeper than the eval keep theirs.
        if evals and len(frames) >= evals[-1][1] > 0:
            at = len(frames) - evals[-1][1]
            frames[at] = (frames[at][0], int(evals[-1][2]))
        if command.startswith("eval ") and frames:
            evals.append((depth, len(frames), str(frames[0][1])))
            continue
        names = _names(command)
        if not names:
            continue
        real = [
            (f"~/{f[len(prefix) :]}" if f.startswith(prefix) else f, n)
            for f, n in frames
            if not _PIPE.match(f)
        ]
        if not real:
            continue
        (file, line), outer = real[0], real[1:]
        via = tuple(f"{f}:{n}" for f, n in reversed(outer))
        for name, valued in names:
            # `export NAME` after `NAME=...`: the value was set by the earlier line
            if valued or name not in found:
                found[name] = Traced(file, line, via, prompt)
    return found


def trace_startup(host: Host, folder: str) -> dict[str, dict[str, Traced]]:
    """Each world's traced setters on ``host`` (empty where bash is not the user's shell or a
    world's files could not run within the timeout)."""
    out: dict[str, dict[str, Traced]] = {}
    home = host.home()
    for world in (LOGIN, SSH_CMD):
        path = f"{folder}/trace-{world}"
        host.run(["sh", "-c", wrapper(world, path)], timeout_s=30)
        text = host.read_text(path)
        host.run(["rm", "-f", path], timeout_s=20)
        out[world] = parse(text, home) if text else {}
    return out
