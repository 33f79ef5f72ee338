"""What a target kind declares next to its code: the options of its ``[target]`` table, the
metric it reports when ``[metric]`` is left out, the checks beyond types, and the class that
launches it. ``targets/kinds.py`` lists the kinds; the experiment file and the target registry
read them from there. Light on purpose: the experiment loader imports every kind's
declaration, never its implementation."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

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


_TOML_TYPES: dict[Any, tuple[type, ...]] = {
    int: (int,),
    float: (int, float),
    str: (str,),
    bool: (bool,),
    tuple: (list,),
    list: (list,),
    dict: (dict,),
}
Options = TypeVar("Options")


def _toml_types(hint: Any) -> tuple[type, ...]:
    """The TOML value types a dataclass field's annotation accepts (``X | None``: X's)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return tuple(t for a in args for t in _toml_types(a))
    base = origin or hint
    if base is Mapping or (isinstance(base, type) and issubclass(base, Mapping)):
        return (dict,)
    if base not in _TOML_TYPES:
        raise TypeError(f"no TOML type for option annotation {hint!r}")
    return _TOML_TYPES[base]


def schema_of(options: type) -> Schema:
    """A ``[target]`` schema from a kind's options dataclass: every field a key, its types
    from the annotation, required when it has no default. ``kind`` itself is always there."""
    hints = typing.get_type_hints(options)
    schema: Schema = {"kind": ((str,), True)}
    for f in dataclasses.fields(options):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        schema[f.name] = (_toml_types(hints[f.name]), required)
    return schema


def parse_options(options: type[Options], table: Mapping[str, Any]) -> Options:
    """The typed options of a checked ``[target]`` table (lists become tuples)."""
    names = {f.name for f in dataclasses.fields(options)}  # type: ignore[arg-type]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items() if k in names}
    return options(**values)
