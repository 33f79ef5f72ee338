"""Several processes opening one new history at once: each must find it created and at head,
as when a team starts two bisections at the same moment on a fresh database."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text

from perfbisect.store.database import Store, _on_connect, run_migrations

# Each child waits for the go file, so all of them migrate the new database at the same moment.
_OPEN = """
import sys, time
from pathlib import Path
go = Path(sys.argv[2])
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
from perfbisect.store.database import Store
Store(sys.argv[1]).close()
"""


def open_at_once(url: str, go: Path, copies: int = 4) -> list[subprocess.CompletedProcess[str]]:
    """Start ``copies`` processes that open ``url`` together; their results once all ended."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN, url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(copies)
    ]
    time.sleep(1.5)  # every child past its imports and polling for the go file
    go.touch()
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def check_opened_once(url: str, go: Path) -> None:
    results = open_at_once(url, go)
    failed = [r.stderr.strip()[-600:] for r in results if r.returncode != 0]
    assert not failed, failed
    with create_engine(url).connect() as conn:
        assert len(conn.execute(text("SELECT version_num FROM alembic_version")).all()) == 1


def test_sessions_started_at_once_on_a_new_sqlite_file_all_open_it(tmp_path: Path) -> None:
    # Before the migration lock, 1 round in 5 failed: "table configurations already exists".
    for round_ in range(3):
        check_opened_once(f"sqlite:///{tmp_path / f'h{round_}.db'}", tmp_path / f"go{round_}")


def _connect_at_go(path: str, go: str, errors: Any) -> None:
    """A child: at the go file's appearance, connect as the store does, then read and write."""
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        conn = sqlite3.connect(path, timeout=0)
        _on_connect(conn, None)
        conn.execute("SELECT name FROM sqlite_master").fetchall()
        conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        conn.close()
    except sqlite3.Error as exc:
        errors.put(repr(exc))


def test_connections_made_at_once_on_a_new_sqlite_file_all_enter_wal(tmp_path: Path) -> None:
    # SQLite switches a file to WAL without calling the busy handler: before the store waited
    # for that switch itself, 1 round in 12 of these had a child fail "database is locked".
    context = multiprocessing.get_context("fork")  # the parent's imports, no start-up per child
    errors = context.Queue()
    for round_ in range(40):
        path, go = tmp_path / f"h{round_}.db", tmp_path / f"go{round_}"
        children = [
            context.Process(target=_connect_at_go, args=(str(path), str(go), errors))
            for _ in range(6)
        ]
        for child in children:
            child.start()
        time.sleep(0.05)
        go.touch()
        for child in children:
            child.join(timeout=60)
            assert child.exitcode == 0, child.exitcode
        assert errors.empty(), f"round {round_}: {errors.get()}"
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def schema_of(url: str) -> dict[str, Any]:
    """Every table's columns, keys, indexes and constraints, and the stamped revision."""
    engine = create_engine(url)
    found = inspect(engine)
    tables: dict[str, Any] = {}
    for table in sorted(found.get_table_names()):
        tables[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                for c in found.get_columns(table)
            ],
            "primary key": found.get_pk_constraint(table)["constrained_columns"],
            "foreign keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], str(f.get("options")))
                for f in found.get_foreign_keys(table)
            ),
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in found.get_indexes(table)
            ),
            "unique": sorted(tuple(u["column_names"]) for u in found.get_unique_constraints(table)),
        }
    with engine.connect() as conn:
        tables["stamped"] = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    engine.dispose()
    return tables


def check_new_equals_migrated(new_url: str, migrated_url: str) -> None:
    """A new database (the models' tables, stamped at head, no alembic) holds the schema that
    alembic's migrations from nothing give."""
    Store(new_url).close()
    engine = create_engine(migrated_url)
    with engine.begin() as conn:
        run_migrations(conn)
    engine.dispose()
    new, migrated = schema_of(new_url), schema_of(migrated_url)
    assert len(new) > 5 and new == migrated


def test_a_new_sqlite_history_has_the_migrations_schema(tmp_path: Path) -> None:
    check_new_equals_migrated(f"sqlite:///{tmp_path / 'new.db'}", f"sqlite:///{tmp_path / 'm.db'}")


def test_a_history_at_an_older_revision_is_migrated_to_head(tmp_path: Path) -> None:
    old, new = f"sqlite:///{tmp_path / 'old.db'}", f"sqlite:///{tmp_path / 'new.db'}"
    engine = create_engine(old)
    with engine.begin() as conn:
        run_migrations(conn, "0002")  # before the watch tables
    engine.dispose()
    assert "watch_series" not in schema_of(old)
    Store(old).close()
    Store(new).close()
    assert schema_of(old) == schema_of(new)
