"""Continuous mode's records: watched series, their launches, their change points; and the
series' launches as stand-ins for a bisection's search launches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from perfbisect.errors import StoreError, UsageError
from perfbisect.store.database import Store
from perfbisect.store.history import Reusable, collect_reusable
from perfbisect.store.models import (
    ChangePointRow,
    EnvSnapshot,
    Launch,
    SessionRow,
    WatchLaunch,
    WatchSeries,
    utcnow,
)

FOUND = "found"
WITHDRAWN = "withdrawn"  # a later analysis no longer finds it


@dataclass(frozen=True)
class SeriesView:
    id: int
    branch: str
    host_class: str
    experiment_sha256: str
    experiment_path: str
    metric: str
    params: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.branch}@{self.host_class}"

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "branch": self.branch,
            "host_class": self.host_class,
            "experiment": self.experiment_path,
            "metric": self.metric,
            "params": self.params,
        }


def _series_view(row: WatchSeries) -> SeriesView:
    return SeriesView(
        row.id,
        row.branch,
        row.host_class,
        row.experiment_sha256,
        row.experiment_path,
        row.metric,
        dict(row.params or {}),
    )


def ensure_series(
    store: Store,
    *,
    branch: str,
    host_class: str,
    experiment_sha256: str,
    experiment_path: str,
    metric: str,
    params: Mapping[str, Any],
) -> SeriesView:
    """The series of this branch, host class and experiment file, made on first use (two
    watchers that make it at once on one database: the second reads the first's)."""
    where = (
        WatchSeries.branch == branch,
        WatchSeries.host_class == host_class,
        WatchSeries.experiment_sha256 == experiment_sha256,
    )
    for _ in range(2):
        with store.transaction() as db:
            row = db.scalars(select(WatchSeries).where(*where)).first()
            if row is not None:
                row.params = {**(row.params or {}), **params}
                return _series_view(row)
        try:
            with store.transaction() as db:
                row = WatchSeries(
                    branch=branch,
                    host_class=host_class,
                    experiment_sha256=experiment_sha256,
                    experiment_path=experiment_path,
                    metric=metric,
                    params=dict(params),
                )
                db.add(row)
                db.flush()
                return _series_view(row)
        except IntegrityError:
            continue  # made by another watcher in the meantime
    raise StoreError(f"cannot create the series {branch}@{host_class}")


def list_series(store: Store) -> list[SeriesView]:
    with store.transaction() as db:
        return [_series_view(r) for r in db.scalars(select(WatchSeries).order_by(WatchSeries.id))]


def find_series(store: Store, ref: str | None) -> list[SeriesView]:
    """Series by id, branch, or branch@host-class; every series when ``ref`` is None."""
    every = list_series(store)
    if ref is None:
        return every
    found = [
        s for s in every if ref in (str(s.id), s.branch, s.label) or s.label.startswith(ref + "@")
    ]
    if not found:
        known = ", ".join(f"{s.id} ({s.label})" for s in every) or "none yet"
        raise UsageError(f"--series {ref!r}: no such series (known: {known})")
    return found


def link_launch(store: Store, series_id: int, log_path: str, commit: str, ordinal: int) -> None:
    """Make the launch recorded with ``log_path`` (unique: a watcher's own log directory and
    the launch's number in it) one of the series' launches."""
    with store.transaction() as db:
        launch_id = db.scalars(select(Launch.id).where(Launch.log_path == log_path)).first()
        if launch_id is None:
            raise StoreError(f"no launch recorded with log {log_path}")
        db.add(
            WatchLaunch(series_id=series_id, launch_id=launch_id, commit=commit, ordinal=ordinal)
        )


@dataclass(frozen=True)
class SeriesLaunch:
    launch_id: int
    commit: str
    ordinal: int
    value: float | None  # None: the launch failed
    reason: str | None
    started_at: datetime
    host: str | None


def series_launches(store: Store, series_id: int) -> list[SeriesLaunch]:
    """The series' launches, by place on the branch, then in the order they ran."""
    with store.transaction() as db:
        rows = db.execute(
            select(WatchLaunch, Launch, EnvSnapshot.data)
            .join(Launch, WatchLaunch.launch_id == Launch.id)
            .outerjoin(EnvSnapshot, Launch.snapshot_id == EnvSnapshot.id)
            .where(WatchLaunch.series_id == series_id)
            .order_by(WatchLaunch.ordinal, Launch.id)
        ).all()
        return [
            SeriesLaunch(
                launch.id,
                link.commit,
                link.ordinal,
                launch.value,
                launch.reason,
                launch.started_at,
                str((data or {}).get("host")) if data else None,
            )
            for link, launch, data in rows
        ]


@dataclass(frozen=True)
class StoredChange:
    id: int
    series_id: int
    commit_before: str
    commit_after: str
    ordinal_after: int
    detected_at: datetime
    status: str
    stats: dict[str, Any]


def _change_view(row: ChangePointRow) -> StoredChange:
    return StoredChange(
        row.id,
        row.series_id,
        row.commit_before,
        row.commit_after,
        row.ordinal_after,
        row.detected_at,
        row.status,
        dict(row.stats or {}),
    )


@dataclass(frozen=True)
class FoundChange:
    """A change point of one analysis, to be stored."""

    commit_before: str
    commit_after: str
    ordinal_after: int
    stats: Mapping[str, Any]


def save_changes(
    store: Store, series_id: int, found: Sequence[FoundChange]
) -> list[tuple[StoredChange, bool]]:
    """Store one analysis's change points: each with its id (kept across analyses) and whether
    this analysis is the first to find it; the stored ones it no longer finds are withdrawn."""
    out: list[tuple[StoredChange, bool]] = []
    with store.transaction() as db:
        rows = {
            r.commit_after: r
            for r in db.scalars(select(ChangePointRow).where(ChangePointRow.series_id == series_id))
        }
        for change in found:
            row = rows.pop(change.commit_after, None)
            new = row is None or row.status != FOUND
            if row is None:
                row = ChangePointRow(
                    series_id=series_id,
                    commit_before=change.commit_before,
                    commit_after=change.commit_after,
                    ordinal_after=change.ordinal_after,
                    status=FOUND,
                    stats=dict(change.stats),
                )
                db.add(row)
            else:
                row.commit_before = change.commit_before
                row.status, row.stats, row.updated_at = FOUND, dict(change.stats), utcnow()
            db.flush()
            out.append((_change_view(row), new))
        for row in rows.values():
            if row.status == FOUND:
                row.status, row.updated_at = WITHDRAWN, utcnow()
    return out


def get_change(store: Store, change_id: int) -> tuple[StoredChange, SeriesView]:
    with store.transaction() as db:
        row = db.get(ChangePointRow, change_id)
        if row is None:
            raise UsageError(
                f"--from-change {change_id}: no such change point (see `perfbisect query changes`)"
            )
        series = db.get(WatchSeries, row.series_id)
        assert series is not None
        return _change_view(row), _series_view(series)


@dataclass(frozen=True)
class ChangeSession:
    session_id: int
    change_id: int
    status: str
    first_bad: str | None  # the culprit's commit, once the session found one


def change_sessions(store: Store, series_id: int) -> list[ChangeSession]:
    """The bisection sessions started from this series' change points (``from_change`` in
    their parameters), oldest first."""
    with store.transaction() as db:
        ids = set(
            db.scalars(select(ChangePointRow.id).where(ChangePointRow.series_id == series_id))
        )
        out = []
        for row in db.scalars(select(SessionRow).order_by(SessionRow.id)):
            change = (row.params or {}).get("from_change")
            if change in ids:
                culprit = ((row.result or {}).get("culprit") or {}).get("first_bad") or {}
                out.append(ChangeSession(row.id, int(change), row.status, culprit.get("commit")))
        return out


def watch_reusable(
    store: Store, *, experiment_sha256: str, metric: str, since: datetime
) -> dict[str, list[Reusable]]:
    """The successful launches of series of the same experiment file since ``since``, by
    configuration fingerprint, as ``history.reusable_launches`` gives sessions' launches: a
    bisection from a change point re-uses what the watcher measured."""
    with store.transaction() as db:
        series = list(
            db.scalars(
                select(WatchSeries.id).where(WatchSeries.experiment_sha256 == experiment_sha256)
            )
        )
        if not series:
            return {}
        rows = db.execute(
            select(Launch, EnvSnapshot.data)
            .join(WatchLaunch, WatchLaunch.launch_id == Launch.id)
            .join(EnvSnapshot, Launch.snapshot_id == EnvSnapshot.id)
            .where(
                WatchLaunch.series_id.in_(series),
                Launch.status == "ok",
                Launch.metric == metric,
                Launch.started_at >= since,
            )
            .order_by(Launch.id)
        ).all()
        return collect_reusable(db, rows)
