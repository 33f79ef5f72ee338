"""The change itself: for a commit range the files and functions it touched (from git), for
patches the same from the patch text, for any other axis the value that changed; each file or
function flagged when it lies on the speculative/verify, CUDA-graph or distributed paths."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from perfbisect.code_areas import flags_of

_FILE = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")
_HUNK = re.compile(
    r"^@@ -(?P<old>\d+)(?:,(?P<oldn>\d+))? \+(?P<new>\d+)(?:,(?P<newn>\d+))? @@ ?(?P<ctx>.*)$"
)


@dataclass(frozen=True)
class TouchedFile:
    path: str
    added: int
    removed: int
    functions: tuple[str, ...]
    flags: tuple[str, ...]  # the code areas (code_areas.py) the file or a function lies on


@dataclass(frozen=True)
class Change:
    axis: str
    good: str
    bad: str
    files: tuple[TouchedFile, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f for t in self.files for f in t.flags))


def _enclosing(source: str) -> Callable[[int], str | None] | None:
    """Line number -> qualified name of the innermost function (or class) around it; None
    when the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")

    def find(line: int) -> str | None:
        inside = [s for s in spans if s[0] <= line <= s[1]]
        return min(inside, key=lambda s: s[1] - s[0])[2] if inside else None

    return find


def parse_diff(text: str, new_source: Callable[[str], str | None]) -> tuple[TouchedFile, ...]:
    """Files and functions a unified diff touches; ``new_source(path)`` gives the file after
    the change (Python files' functions are found with ``ast``; others use the hunk header)."""
    files: dict[str, _Touched] = {}
    current: _Touched | None = None
    finder: Callable[[int], str | None] | None = None
    new_line = 0
    for line in text.splitlines():
        if (head := _FILE.match(line)) is not None:
            path = head.group("b")
            current = files.setdefault(path, _Touched())
            source = new_source(path) if path.endswith(".py") else None
            finder = _enclosing(source) if source else None
            continue
        if current is None:
            continue
        if (hunk := _HUNK.match(line)) is not None:
            new_line = int(hunk.group("new"))
            context = hunk.group("ctx").strip()
            if context and finder is None:
                current.add(_name_from_context(context))
            continue
        if line.startswith("+") and not line.startswith("+++"):
            current.added += 1
            current.add(finder(new_line) if finder else None)
            new_line += 1
        elif line.startswith("-") and not line.startswith("---"):
            current.removed += 1
            # A removed line sits between new lines new_line - 1 and new_line.
            current.add(finder(max(new_line - 1, 1)) if finder else None)
    return tuple(
        TouchedFile(path, t.added, t.removed, tuple(t.functions), flags_of(path, *t.functions))
        for path, t in files.items()
    )


class _Touched:
    def __init__(self) -> None:
        self.added = 0
        self.removed = 0
        self.functions: list[str] = []

    def add(self, name: str | None) -> None:
        if name and name not in self.functions:
            self.functions.append(name)


def _name_from_context(context: str) -> str:
    match = re.search(r"(?:def|class|fn|func|void|int|auto)\s+([A-Za-z_][\w:]*)", context)
    return match.group(1) if match else context[:60]
