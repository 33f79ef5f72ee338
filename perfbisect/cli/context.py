"""State shared by the commands of one invocation (the database URL; the store, opened lazily)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from perfbisect.store.database import Store


@dataclass
class Context:
    db_url: str | None
    _store: Store | None = field(default=None, repr=False)

    def store(self) -> Store:
        if self._store is None:
            from perfbisect.store.database import open_store

            self._store = open_store(self.db_url)
        return self._store


def ctx_store(ctx: typer.Context) -> Store:
    obj: Any = ctx.find_root().obj
    assert isinstance(obj, Context)
    return obj.store()


def emit_json(data: Any) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, default=str))
