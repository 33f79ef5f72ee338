"""What a target kind declares next to its code: the options of its ``[target]`` table, the
metric it reports when ``[metric]`` is left out, the checks beyond types, and the class that
launches it. ``targets/kinds.py`` lists the kinds; the experiment file and the target registry
read them from there. Light on purpose: the experiment loader imports every kind's
declaration, never its implementation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfbisect.checks import Checker, Schema


@dataclass(frozen=True)
class KindCheck:
    """What a kind's checks see: the checker (file, key and line in errors), the ``[target]``
    table, the resolved ``repo``, the custom axes' values, and the experiment file's path."""

    checker: Checker
    target: Mapping[str, Any]
    repo: Path | None
    axis_values: Mapping[str, tuple[str, ...]]
    path: Path


@dataclass(frozen=True)
class TargetKind:
    name: str
    schema: Schema
    factory: str  # "module:Class", imported only when a target of the kind is made
    default_metric: tuple[str, str] | None = None  # (name, pattern) when [metric] is omitted
    check: Callable[[KindCheck], None] | None = None
