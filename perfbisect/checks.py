"""Checking a parsed TOML document against schemas, with the file, the key and its line in every
error: the experiment file's tables and each target kind's options use it alike."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfbisect.errors import ExperimentError

# Key -> (accepted python types, required). Numbers accept int and float.
Schema = dict[str, tuple[tuple[type, ...], bool]]
NUMBER = (int, float)


def find_line(text: str, table: tuple[str, ...], key: str | None = None) -> int | None:
    """Line number (1-based) of ``key`` inside ``[table]`` (or of the table header itself)."""
    current: tuple[str, ...] = ()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"^\[\s*([^\[\]]+?)\s*\]$", line)
        if header:
            current = tuple(p.strip().strip("\"'") for p in header.group(1).split("."))
            if key is None and current == table:
                return number
            continue
        if key is not None and current == table:
            match = re.match(r"^[\"']?([A-Za-z0-9_.\-]+)[\"']?\s*=", line)
            if match and match.group(1) == key:
                return number
    return None


class Checker:
    """Checks one parsed TOML document against schemas, with file/key/line in every error."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def fail(self, table: tuple[str, ...], key: str | None, problem: str) -> ExperimentError:
        line = (
            find_line(self.text, table, key)
            or (find_line(self.text, (*table, key)) if key else None)
            or find_line(self.text, table)
        )
        dotted = ".".join((*table, key) if key else table) or "<top level>"
        where = f"{self.path}:{line}" if line else str(self.path)
        return ExperimentError(f"{where}: key '{dotted}': {problem}")

    def table(
        self, doc: Mapping[str, Any], name: tuple[str, ...], required: bool
    ) -> dict[str, Any]:
        value = doc.get(name[-1])
        if value is None:
            if required:
                raise self.fail(name[:-1], name[-1], "missing required table")
            return {}
        if not isinstance(value, dict):
            raise self.fail(name[:-1], name[-1], f"must be a table, not {type(value).__name__}")
        return value

    def check(self, data: Mapping[str, Any], table: tuple[str, ...], schema: Schema) -> None:
        for key in data:
            if key not in schema:
                known = ", ".join(sorted(schema))
                raise self.fail(table, key, f"unknown key (known: {known})")
        for key, (types, required) in schema.items():
            if key not in data:
                if required:
                    raise self.fail(table, None, f"missing required key '{key}'")
                continue
            value = data[key]
            bad_bool = isinstance(value, bool) and bool not in types
            if not isinstance(value, types) or bad_bool:
                wanted = " or ".join(t.__name__ for t in types)
                raise self.fail(table, key, f"must be {wanted}, not {type(value).__name__}")
