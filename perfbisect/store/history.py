"""Reads: sessions, launches and their samples, history of a configuration, snapshot diffs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from perfbisect.errors import SessionNotFound, StoreError
from perfbisect.invocation import command_line
from perfbisect.store.database import Store
from perfbisect.store.models import (
    ConfigurationRow,
    EnvSnapshot,
    Host,
    Launch,
    Sample,
    SessionRow,
    Step,
)

_JOB = re.compile(r"^slurm job (\S+) on ")


@dataclass(frozen=True)
class LaunchView:
    id: int
    session_id: int | None
    seq: int
    fingerprint: str
    axes: dict[str, Any]
    position: int
    purpose: str
    metric: str
    status: str
    stage: str | None
    reason: str | None
    value: float | None
    n_samples: int
    flags: list[Any]
    timings: dict[str, Any]
    started_at: datetime
    log_path: str | None
    snapshot_id: int | None
    host: str | None = None  # the address it was measured on (from its snapshot)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session": self.session_id,
            "config": self.axes,
            "fingerprint": self.fingerprint,
            "purpose": self.purpose,
            "metric": self.metric,
            "status": self.status,
            "stage": self.stage,
            "reason": self.reason,
            "value": self.value,
            "samples": self.n_samples,
            "flags": self.flags,
            "timings": self.timings,
            "started_at": self.started_at.isoformat() + "Z",
            "log": self.log_path,
            "snapshot": self.snapshot_id,
            "host": self.host,
            "job_id": self.job_id,
        }

    @property
    def job_id(self) -> str | None:
        """The Slurm job that ran it (its flag ``slurm job N on NODE``), if one did."""
        for flag in self.flags:
            match = _JOB.match(str(flag))
            if match:
                return match.group(1)
        return None


def _views(db: Session, launches: Sequence[Launch]) -> list[LaunchView]:
    """Views with each launch's host, looked up in chunks (no snapshot data loaded)."""
    ids = sorted({la.snapshot_id for la in launches if la.snapshot_id is not None})
    hosts: dict[int, str] = {}
    for start in range(0, len(ids), 900):  # within every SQLite's bound-variable limit
        chunk = ids[start : start + 900]
        # The address the launch used (a snapshot records it), else its machine's first one:
        # two addresses of one machine are one host row.
        address = EnvSnapshot.data["address"].as_string()
        rows = db.execute(
            select(EnvSnapshot.id, address, Host.address)
            .join(Host, EnvSnapshot.host_id == Host.id)
            .where(EnvSnapshot.id.in_(chunk))
        )
        hosts.update({int(i): str(a or h) for i, a, h in rows})
    return [_view(la, hosts.get(la.snapshot_id) if la.snapshot_id else None) for la in launches]


def _view(launch: Launch, host: str | None = None) -> LaunchView:
    return LaunchView(
        launch.id,
        launch.session_id,
        launch.seq,
        launch.fingerprint,
        dict(launch.configuration.axes),
        launch.position,
        launch.purpose,
        launch.metric,
        launch.status,
        launch.stage,
        launch.reason,
        launch.value,
        launch.n_samples,
        list(launch.flags or []),
        dict(launch.timings or {}),
        launch.started_at,
        launch.log_path,
        launch.snapshot_id,
        host,
    )


def find_session(store: Store, ref: str | None) -> SessionRow:
    """A session by id or name; the newest one when ``ref`` is None."""
    with store.transaction() as db:
        if ref is None:
            row = db.scalars(select(SessionRow).order_by(SessionRow.id.desc()).limit(1)).first()
            if row is None:
                raise SessionNotFound("no bisect session in this database yet")
            return row
        row = db.get(SessionRow, int(ref)) if ref.isdigit() else None
        if row is None:
            row = db.scalars(select(SessionRow).where(SessionRow.name == ref)).first()
        if row is None:
            raise SessionNotFound(
                f"no session with id or name {ref!r} "
                f"(see `{command_line('query', 'sessions', db_url=store.url)}`)"
            )
        return row


def list_sessions(store: Store) -> list[SessionRow]:
    with store.transaction() as db:
        return list(db.scalars(select(SessionRow).order_by(SessionRow.id)))


def session_launches(store: Store, session_id: int) -> list[LaunchView]:
    with store.transaction() as db:
        query = (
            select(Launch)
            .where(Launch.session_id == session_id)
            .options(selectinload(Launch.configuration))
            .order_by(Launch.seq)
        )
        return _views(db, list(db.scalars(query)))


def session_steps(store: Store, session_id: int) -> list[Step]:
    with store.transaction() as db:
        return list(db.scalars(select(Step).where(Step.session_id == session_id).order_by(Step.id)))


def history(
    store: Store,
    *,
    axes: Mapping[str, str] | None = None,
    metric: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    fingerprint: str | None = None,
    exclude_session: int | None = None,
    limit: int | None = None,
) -> list[LaunchView]:
    """Launches, oldest first, filtered by configuration (axes subset), metric and date in the
    database, not after loading; with ``limit`` only the newest that many (still oldest first).
    Configurations are few next to launches: an axes filter becomes the set of fingerprints."""
    with store.transaction() as db:
        query = select(Launch).options(selectinload(Launch.configuration))
        if axes:
            fingerprints = [
                row.fingerprint
                for row in db.scalars(select(ConfigurationRow))
                if all(_axis_matches((row.axes or {}).get(k), v) for k, v in axes.items())
            ]
            query = query.where(Launch.fingerprint.in_(fingerprints))
        if metric:
            query = query.where(Launch.metric == metric)
        if since:
            query = query.where(Launch.started_at >= since)
        if until:
            query = query.where(Launch.started_at <= until)
        if fingerprint:
            query = query.where(Launch.fingerprint == fingerprint)
        if exclude_session is not None:
            query = query.where(
                (Launch.session_id != exclude_session) | Launch.session_id.is_(None)
            )
        if limit:
            query = query.order_by(Launch.id.desc()).limit(limit)
            return _views(db, list(reversed(list(db.scalars(query)))))
        return _views(db, list(db.scalars(query.order_by(Launch.id))))


def _axis_matches(stored: Any, wanted: str) -> bool:
    """Commits match by prefix so users can type short SHAs."""
    return stored is not None and (stored == wanted or str(stored).startswith(wanted))


def launch_with_samples(
    store: Store, launch_id: int
) -> tuple[LaunchView, list[float], dict[str, Any]]:
    with store.transaction() as db:
        launch = db.get(Launch, launch_id)
        if launch is None:
            raise StoreError(
                f"no launch with id {launch_id} "
                f"(see `{command_line('query', 'history', db_url=store.url)}`)"
            )
        view = _view(launch)
        samples = list(
            db.scalars(
                select(Sample.value).where(Sample.launch_id == launch_id).order_by(Sample.idx)
            )
        )
        snap = db.get(EnvSnapshot, launch.snapshot_id) if launch.snapshot_id else None
        return view, samples, dict(snap.data) if snap else {}


def session_snapshots(store: Store, session_id: int) -> dict[int, dict[str, Any]]:
    """Each launch's environment snapshot (launch id -> data), in one query."""
    with store.transaction() as db:
        rows = db.execute(
            select(Launch.id, EnvSnapshot.data)
            .join(EnvSnapshot, Launch.snapshot_id == EnvSnapshot.id)
            .where(Launch.session_id == session_id)
        )
        return {int(launch_id): dict(data) for launch_id, data in rows}


@dataclass(frozen=True)
class Reusable:
    launch_id: int
    session_id: int
    value: float
    samples: list[float]
    host: str
    started_at: datetime


def reusable_launches(
    store: Store,
    *,
    exclude_session: int,
    experiment_sha256: str,
    metric: str,
    since: datetime,
) -> dict[str, list[Reusable]]:
    """Successful launches of earlier sessions of the same experiment file (same commands,
    [env], metric and target options) since ``since``, by configuration fingerprint (which
    covers commit, patches, NCCL library, driver and launch method), oldest first, with the host
    they ran on. Whether the host matches is the caller's question."""
    with store.transaction() as db:
        sessions = {
            row.id
            for row in db.scalars(select(SessionRow).where(SessionRow.id != exclude_session))
            if (row.params or {}).get("experiment_sha256") == experiment_sha256
        }
        if not sessions:
            return {}
        rows = db.execute(
            select(Launch, EnvSnapshot.data)
            .join(EnvSnapshot, Launch.snapshot_id == EnvSnapshot.id)
            .where(
                Launch.session_id.in_(sessions),
                Launch.status == "ok",
                Launch.metric == metric,
                Launch.started_at >= since,
            )
            .order_by(Launch.id)
        ).all()
        return collect_reusable(db, rows)


def collect_reusable(
    db: Session, rows: Iterable[tuple[Launch, Mapping[str, Any] | None]]
) -> dict[str, list[Reusable]]:
    """Successful launches (with their snapshot's data) as reusable measurements, by
    configuration fingerprint, in the order given: sessions' launches and watched series'
    alike (a watcher's launch has no session: 0)."""
    out: dict[str, list[Reusable]] = {}
    for launch, data in rows:
        if any(str(f).startswith("reused from") for f in launch.flags or []):
            continue  # reuse the measurement itself, never a copy of it
        samples = list(
            db.scalars(
                select(Sample.value).where(Sample.launch_id == launch.id).order_by(Sample.idx)
            )
        )
        out.setdefault(launch.fingerprint, []).append(
            Reusable(
                launch.id,
                int(launch.session_id or 0),
                float(launch.value or 0.0),  # status "ok": it has a value
                samples,
                str((data or {}).get("host", "")),
                launch.started_at,
            )
        )
    return out


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for i, item in enumerate(value):
                out.update(flatten(item, f"{name}[{i}]."))
        else:
            out[name] = value
    return out


# Keys that differ between any two launches by construction (when, which worktree, the
# commands with that worktree in them): not environment differences.
SNAPSHOT_NOISE = ("taken_at", "launch.cwd", "launch.commands.")


def diff_snapshots(
    a: Mapping[str, Any], b: Mapping[str, Any], ignore: tuple[str, ...] = SNAPSHOT_NOISE
) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every leaf that differs; nested keys dotted."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted(set(fa) | set(fb))
    return [
        (k, fa.get(k), fb.get(k))
        for k in keys
        if fa.get(k) != fb.get(k) and not any(k.endswith(i) or k.startswith(i) for i in ignore)
    ]


def known_axes(store: Store) -> set[str]:
    """Every axis a stored configuration has: what a history filter can name."""
    with store.transaction() as db:
        return {k for axes in db.scalars(select(ConfigurationRow.axes)) for k in (axes or {})}
