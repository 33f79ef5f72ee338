"""A shared team history on a real PostgreSQL server: migrations, sessions written by one
process and queried by another, and the per-host session locks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pg_fixture
import pytest
from conftest import EXPERIMENT, Cli, value_repo
from test_host_locks import check_host_locks, hold
from test_store_open import check_new_equals_migrated, check_opened_once

from perfbisect.store.database import Store

# One worker runs this module under pytest-xdist: its fixture is set up once, not per worker.
pytestmark = pytest.mark.xdist_group("postgres")


@pytest.fixture(scope="module")
def pg() -> Iterator[pg_fixture.PgServer]:
    why = pg_fixture.available()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI must run the PostgreSQL tests: {why}")
    if why:
        pytest.skip(why)
    server = pg_fixture.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_bisect_on_postgresql_is_seen_from_another_process(
    cli: Cli, tmp_path: Path, pg: pg_fixture.PgServer
) -> None:
    url = pg.create_database("team")
    shas = value_repo(tmp_path / "repo", [10, 10, 10, 30, 30]).shas
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    report = cli.json(
        "--db", url, "bisect", "start", "--good", shas[0], "--bad", shas[-1], "--json"
    )
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["first_bad"]["commit"] == shas[3]
    # A second machine's `query` (here: another process with only PERFBISECT_DB) sees it.
    env = {**cli.env, "PERFBISECT_DB": url}
    out = subprocess.run(
        [sys.executable, "-m", "perfbisect", "query", "history", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    rows = rows if isinstance(rows, list) else rows["launches"]
    searched = [r for r in rows if r["purpose"] != "explain"]  # not bisect explain's launches
    assert len(searched) == report["launches"] and {r["session"] for r in rows} == {1}
    status = subprocess.run(
        [sys.executable, "-m", "perfbisect", "bisect", "status", "1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    data = json.loads(status.stdout)
    assert data["status"] == "finished" and data["owner"]["user"] and data["hosts"]
    assert Store(url).engine.dialect.name == "postgresql"


def test_host_locks_on_postgresql(pg: pg_fixture.PgServer) -> None:
    url = pg.create_database("locks")
    for holder_url, proc in hold(url, "ssh://gpu-a", 4.0):
        check_host_locks(holder_url, proc)


def test_sessions_started_at_once_on_a_new_postgresql_database_all_open_it(
    tmp_path: Path, pg: pg_fixture.PgServer
) -> None:
    for round_ in range(2):
        check_opened_once(pg.create_database(f"fresh{round_}"), tmp_path / f"go{round_}")


def test_a_new_postgresql_history_has_the_migrations_schema(pg: pg_fixture.PgServer) -> None:
    check_new_equals_migrated(pg.create_database("new_schema"), pg.create_database("migrated"))
