"""The ``command`` target kind's declaration: the user's own build, serve and measure commands
(the implementation is targets/command.py)."""

from __future__ import annotations

from perfbisect.checks import NUMBER
from perfbisect.targets.kind import TargetKind

COMMAND = TargetKind(
    name="command",
    schema={
        "kind": ((str,), True),
        "repo": ((str,), False),
        "build": ((str,), False),
        "serve": ((str,), False),
        "ready": ((str,), False),
        "measure": ((str,), True),
        "timeout_s": (NUMBER, False),
    },
    factory="perfbisect.targets.command:CommandTarget",
)
