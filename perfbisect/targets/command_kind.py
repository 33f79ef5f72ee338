"""The ``command`` target kind's declaration: the user's own build, serve and measure commands
(the implementation is targets/command.py)."""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.targets.kind import TargetKind, schema_of


@dataclass(frozen=True)
class CommandOptions:
    """The ``[target]`` table of ``kind = "command"``: shell commands with ``{placeholders}``."""

    measure: str  # runs in the commit's worktree; prints the samples the metric pattern reads
    repo: str | None = None  # the git repository whose commits are the commit axis
    build: str | None = None  # runs in the commit's worktree; non-zero exit: the step is SKIP
    serve: str | None = None  # a server started by the launch method, torn down after
    ready: str | None = None  # a URL, a log line ("log:..."), or a command
    timeout_s: float | None = None  # seconds per stage: build, readiness, measure


COMMAND = TargetKind(
    name="command",
    schema=schema_of(CommandOptions),
    factory="perfbisect.targets.command:CommandTarget",
)
