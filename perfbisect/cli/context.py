"""State shared by the commands of one invocation (the database URL; the store, opened lazily),
and the checks their options share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from perfbisect.store.database import Store


@dataclass
class Context:
    db_url: str | None
    _store: Store | None = field(default=None, repr=False)

    def store(self, create: bool = True) -> Store:
        """The history; ``create=False`` for the commands that only read it, so that a
        mistyped ``--db`` is refused instead of created empty."""
        if self._store is None:
            from perfbisect.store.database import open_store

            # The default history (no --db, no $PERFBISECT_DB) cannot be mistyped: a new user's
            # first `query sessions` reads an empty history instead of an error.
            self._store = open_store(self.db_url, create=create or self.db_url is None)
        return self._store


def ctx_store(ctx: typer.Context, create: bool = True) -> Store:
    """The invocation's store (``create=False``: a command that only reads it)."""
    obj: Any = ctx.find_root().obj
    assert isinstance(obj, Context)
    return obj.store(create=create)


def output_file(path: str | Path | None, option: str) -> Path | None:
    """A file a command is to write (``--html``, ``--plot``), checked before any work: its
    directory exists and is writable. Input to fix: a usage error naming the option."""
    if path is None:
        return None
    import os

    from perfbisect.errors import UsageError

    target = Path(path).expanduser()
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{option} {path}: directory {folder} is not writable")
    return target


def write_output(path: Path, text: str, option: str) -> None:
    """Write a checked output file; a failure (disk full, a directory removed since) is one
    line naming the option, not a traceback."""
    from perfbisect.errors import UsageError

    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write: {exc.strerror}") from None
    typer.echo(f"wrote {path}", err=True)


def emit_json(data: Any) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, default=str))
