"""Opening the history database: URL resolution, SQLite pragmas, migrations, version checks."""

from __future__ import annotations

import atexit
import os
import re
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from perfbisect.errors import DatabaseMissing, StoreError

ENV_VAR = "PERFBISECT_DB"
MIGRATION_WAIT_S = 120.0
# pg_advisory_xact_lock's key for "perfbisect migrates this database" (any constant of our own).
_PG_LOCK_KEY = 0x70625F6D6967
MIGRATIONS = Path(__file__).with_name("migrations")


def default_url() -> str:
    """``$PERFBISECT_DB`` if set, else a SQLite file in the user's data directory."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return configured
    from platformdirs import user_data_dir

    return f"sqlite:///{Path(user_data_dir('perfbisect')) / 'history.db'}"


def normalise_url(url: str) -> str:
    """Accept a bare file path as well as an SQLAlchemy URL."""
    if "://" in url:
        return url
    return f"sqlite:///{Path(url).expanduser().resolve()}"


def _sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///") :])
    return None


BUSY_TIMEOUT_MS = 10000


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # busy_timeout waits for a writer instead of failing at once; WAL lets `query` commands
    # read while a bisect writes.
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    _enter_wal(cursor)
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _enter_wal(cursor: Any) -> None:
    """Switch the file to WAL, waiting for other connections as busy_timeout would. SQLite
    takes the exclusive lock this switch needs without calling the busy handler, so on a new
    file that several sessions open at once, one of them failed at once with "database is
    locked" (1 start in 12 on a 2-core machine, 6 processes). WAL persists in the file: once
    one connection has switched it, the others' pragma finds it switched."""
    import sqlite3
    import time

    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


class Store:
    """An open, migrated database. Use ``transaction()`` for every unit of work."""

    def __init__(self, url: str, create: bool = True) -> None:
        self.url = normalise_url(url)
        path = _sqlite_path(self.url)
        if path is not None and not create and not path.exists():
            raise DatabaseMissing(
                f"database {path} does not exist (check --db or ${ENV_VAR}; "
                "`perfbisect bisect start` creates it)"
            )
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot create database directory {path.parent}: {exc.strerror}"
                ) from None
            if path.exists() and not os.access(path, os.W_OK):
                raise StoreError(f"database {path} is not writable")
            if not os.access(path.parent, os.W_OK):
                raise StoreError(f"database directory {path.parent} is not writable")
        try:
            self.engine: Engine = create_engine(self.url)
        except ImportError as exc:
            raise StoreError(
                f"cannot open database {_shown(self.url)}: {_missing_driver(exc)}"
            ) from None
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open database {_shown(self.url)}: {exc}") from None
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _on_connect)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._migrate()
        if self.engine.dialect.name == "sqlite":
            atexit.register(_close_at_exit, weakref.ref(self))

    def close(self) -> None:
        """Write the WAL's pages into the database file and close the connections: the file
        alone then holds the whole history, as a copy carried to another machine between two
        device calls needs (a process that ends with its connections open, as a command
        stopped by Ctrl-C did, leaves the newest transactions in ``<db>-wal`` beside it).
        PASSIVE: a ``query`` while a bisect writes is never held up at its exit."""
        if self.engine.dialect.name == "sqlite":
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except SQLAlchemyError:
                pass  # PASSIVE never waits: what another process holds, its own exit writes
        self.engine.dispose()

    def _migrate(self) -> None:
        # The common case, a database already at this version's head, needs no alembic (whose
        # import alone costs a fifth of a second of every `query`).
        known, head = _revisions()
        try:
            with self.engine.begin() as conn:
                current = self._current_revision(conn)
        except OperationalError as exc:
            raise StoreError(f"cannot open database {_shown(self.url)}: {exc.orig}") from None
        if current is not None and current == head and current in known:
            return
        self._upgrade(known, head)

    def _upgrade(self, known: set[str], head: str | None) -> None:
        try:
            with self._migration_lock(), self.engine.begin() as conn:
                if self.engine.dialect.name == "postgresql":
                    # Held to the transaction's end: a second process creating the same new
                    # database waits here, then finds it at head.
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
                current = self._current_revision(conn)
                if current is not None and current not in known:
                    raise StoreError(
                        f"database {_shown(self.url)} was written by a newer perfbisect (schema "
                        f"revision {current}; this version knows up to {head}): upgrade perfbisect"
                    )
                if current == head:
                    return
                if current is None and head is not None and not inspect(conn).get_table_names():
                    create_at_head(conn, head)
                else:
                    run_migrations(conn)
        except OperationalError as exc:
            raise StoreError(f"cannot open database {_shown(self.url)}: {exc.orig}") from None

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        """One migrating process at a time per SQLite file. SQLite runs the schema's DDL outside
        a transaction, so two sessions started at once on a new file both created its tables
        and the second failed ("table configurations already exists")."""
        path = _sqlite_path(self.url)
        if path is None:
            yield
            return
        from perfbisect.errors import StepFailed
        from perfbisect.folder_lock import held

        try:
            with held(path.with_name(path.name + ".migrate-lock"), MIGRATION_WAIT_S, "migration"):
                yield
        except StepFailed as exc:
            raise StoreError(f"cannot open database {_shown(self.url)}: {exc}") from None

    @staticmethod
    def _current_revision(conn: Any) -> str | None:
        if not inspect(conn).has_table("alembic_version"):
            return None
        row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
        return None if row is None else str(row[0])

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One unit of work: committed as a whole, or rolled back as a whole."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()


_REVISION = re.compile(r"""^revision\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.M)
_DOWN = re.compile(r"""^down_revision\s*(?::[^=]*)?=\s*["']?([^"'\n]+?)["']?\s*$""", re.M)


def _revisions() -> tuple[set[str], str | None]:
    """The migrations' revision ids and the head, read from their files' text."""
    revisions: dict[str, str | None] = {}
    for path in (MIGRATIONS / "versions").glob("*.py"):
        text = path.read_text()
        rev, down = _REVISION.search(text), _DOWN.search(text)
        if rev:
            parent = down.group(1) if down else None
            revisions[rev.group(1)] = None if parent in (None, "None") else parent
    parents = {p for p in revisions.values() if p}
    heads = [r for r in revisions if r not in parents]
    return set(revisions), heads[0] if len(heads) == 1 else None


def create_at_head(conn: Any, head: str) -> None:
    """A new, empty database: the models' tables as the migrations would leave them, stamped
    at ``head``, without alembic (whose import and run cost 0.7 s of the first command on every
    new history; tests/test_store_open.py checks that both give one schema)."""
    from perfbisect.store.models import Base

    Base.metadata.create_all(conn)
    # Alembic's own version table, as its `stamp` creates it.
    conn.execute(
        text(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
            "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        )
    )
    conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:head)"), {"head": head})


def run_migrations(conn: Any, target: str = "head") -> None:
    """Alembic's upgrade to ``target`` on an open connection (a database at an older
    revision is brought to head)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    command.upgrade(config, target)


def _shown(url: str) -> str:
    """A URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except SQLAlchemyError:
        return url


# The database drivers an extra of perfbisect installs: which one to name when one is missing.
DRIVER_EXTRAS = {"psycopg": "postgres", "psycopg2": "postgres"}


def _missing_driver(exc: ImportError) -> str:
    module = (exc.name or "").split(".")[0]
    extra = DRIVER_EXTRAS.get(module)
    if extra is None:
        return f"{exc} (install the database driver this URL names)"
    return f"its driver {module} is not installed: pip install 'perfbisect[{extra}]'"


def _close_at_exit(ref: weakref.ref[Store]) -> None:
    store = ref()
    if store is not None:
        store.close()


def open_store(url: str | None = None, create: bool = True) -> Store:
    """The history at ``url`` (default: ``$PERFBISECT_DB`` or the user's data directory).
    ``create=False`` refuses an SQLite file that does not exist instead of creating it."""
    return Store(url or default_url(), create=create)
