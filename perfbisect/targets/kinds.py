"""The target kinds: one line per kind (its declaration lives next to its code)."""

from __future__ import annotations

from perfbisect.targets.command_kind import COMMAND
from perfbisect.targets.kind import TargetKind
from perfbisect.targets.reference.kind import REFERENCE
from perfbisect.targets.sglang.kind import SGLANG

KINDS: dict[str, TargetKind] = {kind.name: kind for kind in (COMMAND, REFERENCE, SGLANG)}
