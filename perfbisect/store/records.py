"""Writes: sessions (with ownership for the one-running-session rule), launches, verdicts."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from perfbisect.errors import SessionBusy, SessionNotFound, StoreError
from perfbisect.store.database import Store
from perfbisect.store.models import (
    Build,
    ConfigurationRow,
    EnvSnapshot,
    Host,
    Launch,
    ProbeRun,
    Sample,
    SessionRow,
    Step,
    utcnow,
)

RUNNING = "running"
INTERRUPTED = "interrupted"
FINISHED = "finished"
FAILED = "failed"
RESET = "reset"
STALE_AFTER = timedelta(minutes=10)


@dataclass(frozen=True)
class LaunchRecord:
    """Everything one launch produced, written in one transaction."""

    session_id: int | None
    seq: int
    fingerprint: str
    axes: Mapping[str, str]
    context: str
    position: int
    purpose: str
    metric: str
    samples: Sequence[float]
    value: float | None
    stage: str | None = None
    reason: str | None = None
    flags: Sequence[str] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    started_at: datetime | None = None
    log_path: str | None = None
    host_name: str = "local"
    host_address: str = "local"
    snapshot: Mapping[str, Any] | None = None
    build_status: str | None = None
    build_cached: bool = False
    build_s: float = 0.0
    build_log_tail: str = ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _insert_unless_there(db: Session, row: Any) -> None:
    """Insert ``row`` whose unique key another process may be inserting at this moment (two
    watchers of one database measuring the same commit): on PostgreSQL the loser's insert
    fails on the key and is rolled back to a savepoint, its transaction going on; SQLite
    serialises writers, so no two can race there."""
    if db.get_bind().dialect.name == "sqlite":
        db.add(row)
        db.flush()
        return
    try:
        with db.begin_nested():
            db.add(row)
            db.flush()
    except IntegrityError:
        pass  # the other process's row is the same


def ensure_configuration(
    db: Session, fingerprint: str, axes: Mapping[str, str], context: str
) -> None:
    if db.get(ConfigurationRow, fingerprint) is None:
        _insert_unless_there(
            db, ConfigurationRow(fingerprint=fingerprint, axes=dict(axes), context=context)
        )


def _host(db: Session, name: str, address: str) -> Host:
    host = db.scalars(select(Host).where(Host.name == name)).first()
    if host is None:
        _insert_unless_there(db, Host(name=name, address=address))
        host = db.scalars(select(Host).where(Host.name == name)).one()
    return host


def _snapshot(db: Session, host: Host, data: Mapping[str, Any]) -> EnvSnapshot:
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    existing = db.scalars(
        select(EnvSnapshot)
        .where(EnvSnapshot.digest == digest, EnvSnapshot.host_id == host.id)
        .limit(1)
    ).first()
    if existing is not None:
        return existing
    snap = EnvSnapshot(host_id=host.id, digest=digest, data=dict(data))
    db.add(snap)
    db.flush()
    return snap


def record_launch(store: Store, rec: LaunchRecord) -> int:
    with store.transaction() as db:
        ensure_configuration(db, rec.fingerprint, rec.axes, rec.context)
        snapshot_id = None
        if rec.snapshot is not None:
            snapshot_id = _snapshot(db, _host(db, rec.host_name, rec.host_address), rec.snapshot).id
        if rec.build_status is not None:
            db.add(
                Build(
                    session_id=rec.session_id,
                    fingerprint=rec.fingerprint,
                    status=rec.build_status,
                    cached=rec.build_cached,
                    duration_s=rec.build_s,
                    log_tail=rec.build_log_tail,
                )
            )
        launch = Launch(
            session_id=rec.session_id,
            seq=rec.seq,
            fingerprint=rec.fingerprint,
            position=rec.position,
            purpose=rec.purpose,
            metric=rec.metric,
            status="ok" if rec.value is not None else "failed",
            stage=rec.stage,
            reason=rec.reason,
            value=rec.value,
            n_samples=len(rec.samples),
            flags=list(rec.flags),
            timings=dict(rec.timings),
            started_at=rec.started_at or utcnow(),
            finished_at=utcnow(),
            log_path=rec.log_path,
            snapshot_id=snapshot_id,
        )
        db.add(launch)
        db.flush()
        db.add_all(Sample(launch_id=launch.id, idx=i, value=v) for i, v in enumerate(rec.samples))
        if rec.session_id is not None:
            row = db.get(SessionRow, rec.session_id)
            if row is not None:
                row.heartbeat_at = row.updated_at = utcnow()
        return launch.id


def record_step(
    store: Store,
    session_id: int,
    fingerprint: str,
    position: int,
    verdict: str,
    median: float | None,
    ci: tuple[float, float] | None,
    n_launches: int,
    reason: str | None,
) -> None:
    with store.transaction() as db:
        db.add(
            Step(
                session_id=session_id,
                fingerprint=fingerprint,
                position=position,
                verdict=verdict,
                median=median,
                ci_lo=ci[0] if ci else None,
                ci_hi=ci[1] if ci else None,
                n_launches=n_launches,
                reason=reason,
            )
        )


@dataclass(frozen=True)
class HostWait:
    """How a session that needs a busy host behaves: wait (saying for whom) or refuse."""

    wait: bool = True
    timeout_s: float = 6 * 3600.0
    poll_s: float = 2.0
    on_wait: Callable[[str], None] | None = None  # told once per blocking session


def session_hosts(row: SessionRow) -> list[str]:
    """The measurement hosts a session holds (sessions from before host locks: its owner's
    machine, where their launches ran by default)."""
    hosts = (row.params or {}).get("hosts")
    return [str(h) for h in hosts] if hosts else [f"local:{row.owner_host}"]


def claim_new_session(
    store: Store,
    *,
    name: str | None,
    good: Mapping[str, str],
    bad: Mapping[str, str],
    params: Mapping[str, Any],
    path: list[Any],
    experiment_path: str,
    experiment_text: str,
    hosts: Sequence[str] = (),
    wait: HostWait | None = None,
) -> int:
    """Create a running session once none of its measurement hosts is in use by another live
    session: sessions on other hosts run at once on one database; one that needs a busy host
    waits for it (or is refused with ``wait.wait = False``)."""
    params = {
        **params,
        "hosts": list(hosts) or [f"local:{socket.gethostname()}"],
        "user": getpass.getuser(),  # whose session it is, for `bisect status` on a team database
    }
    with store.transaction() as db:
        if (
            name is not None
            and db.scalars(select(SessionRow).where(SessionRow.name == name)).first()
        ):
            raise StoreError(f"a session named {name!r} already exists; choose another --name")

    def insert() -> int:
        with store.transaction() as db:
            row = SessionRow(
                name=name,
                status=RUNNING,
                good=dict(good),
                bad=dict(bad),
                params=dict(params),
                path=path,
                experiment_path=experiment_path,
                experiment_text=experiment_text,
                owner_host=socket.gethostname(),
                owner_pid=os.getpid(),
            )
            db.add(row)
            db.flush()
            return row.id

    def withdraw(session_id: int) -> None:
        with store.transaction() as db:
            row = db.get(SessionRow, session_id)
            if row is not None:
                db.delete(row)

    return _claim(store, params["hosts"], wait or HostWait(), insert, withdraw)


def claim_existing_session(store: Store, session_id: int, wait: HostWait | None = None) -> None:
    """Take over an interrupted session for resume (its hosts locked as a new session's)."""
    with store.transaction() as db:
        row = db.get(SessionRow, session_id)
        if row is None:
            raise SessionNotFound(f"session {session_id} does not exist")
        if row.status == FINISHED:
            raise StoreError(
                f"session {session_id} is finished; see `perfbisect bisect report {session_id}`"
            )
        if row.status == RUNNING and _alive(row):
            raise SessionBusy(
                f"session {_label(row)} is running (pid {row.owner_pid} on {row.owner_host}); "
                "wait for it, or stop it first"
            )
        hosts = session_hosts(row)
        previous = row.status

    def take() -> int:
        with store.transaction() as db:
            row = db.get(SessionRow, session_id)
            assert row is not None
            row.status = RUNNING
            row.owner_host = socket.gethostname()
            row.owner_pid = os.getpid()
            row.heartbeat_at = row.updated_at = utcnow()
        return session_id

    def release(_: int) -> None:
        set_session_status(store, session_id, previous)

    _claim(store, hosts, wait or HostWait(), take, release, exclude=session_id)


def _claim(
    store: Store,
    hosts: Sequence[str],
    wait: HostWait,
    take: Callable[[], int],
    release: Callable[[int], None],
    exclude: int | None = None,
) -> int:
    """Optimistic host locking that needs nothing but the sessions table (SQLite and
    PostgreSQL alike): take the hosts when no live session holds one, then look again; of two
    sessions that took a host at the same moment, the one with the higher id gives it back and
    waits. Returns the session id."""
    deadline = time.monotonic() + wait.timeout_s
    told: set[int] = set()
    while True:
        blocker = _blocking(store, hosts, exclude)
        if blocker is None:
            session_id = take()
            blocker = _blocking(store, hosts, session_id, below=session_id)
            if blocker is None:
                return session_id
            release(session_id)
        blocking_id, message = blocker
        if not wait.wait:
            raise SessionBusy(f"{message}; --no-wait refuses instead of waiting")
        if time.monotonic() > deadline:
            raise SessionBusy(f"{message}; gave up waiting after {wait.timeout_s:.0f}s")
        if blocking_id not in told and wait.on_wait is not None:
            told.add(blocking_id)
            wait.on_wait(f"waiting: {message}")
        time.sleep(wait.poll_s)


def _blocking(
    store: Store, hosts: Sequence[str], exclude: int | None, below: int | None = None
) -> tuple[int, str] | None:
    """A live running session (other than ``exclude``; with ``below``, only an older one)
    that holds one of ``hosts``: its id and a sentence naming it; sessions whose owner died
    are marked interrupted on the way (resumable)."""
    wanted = set(hosts)
    with store.transaction() as db:
        for row in db.scalars(select(SessionRow).where(SessionRow.status == RUNNING)):
            if row.id == exclude or (below is not None and row.id > below):
                continue
            shared = sorted(wanted & set(session_hosts(row)))
            if not shared:
                continue
            if not _alive(row):
                row.status = INTERRUPTED  # kill -9, power loss: resumable
                continue
            return row.id, (
                f"host {shared[0]} is in use by session {_label(row)} (pid {row.owner_pid} on "
                f"{row.owner_host}); this database's other hosts are free"
            )
    return None


def _alive(row: SessionRow) -> bool:
    if row.owner_host == socket.gethostname():
        return row.owner_pid != os.getpid() and _pid_alive(row.owner_pid)
    return utcnow() - row.heartbeat_at < STALE_AFTER


def _label(row: SessionRow) -> str:
    return f"{row.id}" + (f" ({row.name})" if row.name else "")


def heartbeat(store: Store, session_id: int) -> None:
    """The session's owner is alive (long launches would otherwise look stale elsewhere)."""
    with store.transaction() as db:
        row = db.get(SessionRow, session_id)
        if row is not None:
            row.heartbeat_at = utcnow()


def set_session_status(
    store: Store,
    session_id: int,
    status: str,
    result: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
) -> None:
    with store.transaction() as db:
        row = db.get(SessionRow, session_id)
        if row is None:
            raise SessionNotFound(f"session {session_id} does not exist")
        row.status = status
        row.updated_at = utcnow()
        if params is not None:  # merged: what the session started with is never lost
            row.params = {**(row.params or {}), **params}
        if result is not None:
            row.result = dict(result)
            row.outcome = str(result.get("status"))
        if status == FINISHED:
            row.finished_at = utcnow()


def reset_session(store: Store, session_id: int) -> None:
    """End a session for good (like ``git bisect reset``); its measurements stay in history."""
    with store.transaction() as db:
        row = db.get(SessionRow, session_id)
        if row is None:
            raise SessionNotFound(f"session {session_id} does not exist")
        if row.status == RUNNING and row.owner_pid != os.getpid() and _pid_alive(row.owner_pid):
            raise SessionBusy(
                f"session {session_id} is running (pid {row.owner_pid}); stop it first"
            )
        row.status = RESET
        row.updated_at = utcnow()


def record_probe(
    store: Store,
    kind: str,
    host_name: str,
    host_address: str,
    snapshot: Mapping[str, Any] | None,
    result: Mapping[str, Any],
) -> int:
    """Store one probe run (the caller has redacted secrets) in one transaction."""
    with store.transaction() as db:
        host = _host(db, host_name, host_address)
        snap = _snapshot(db, host, snapshot) if snapshot is not None else None
        row = ProbeRun(
            kind=kind, host_id=host.id, snapshot_id=snap.id if snap else None, result=dict(result)
        )
        db.add(row)
        db.flush()
        return row.id
