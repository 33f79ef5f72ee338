"""A series' points (one per commit, from its launches) and its change points, found anew
and stored (each keeps its id across analyses)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfbisect.store.database import Store
from perfbisect.store.watch import (
    FoundChange,
    SeriesLaunch,
    SeriesView,
    StoredChange,
    save_changes,
    series_launches,
)
from perfbisect.watch.changes import Change, Tuning, find_changes, is_regression, point_value

DEFAULT_THRESHOLD = 0.05  # a relative change in the bad direction past which a change matters


@dataclass(frozen=True)
class Point:
    commit: str
    ordinal: int
    launches: tuple[SeriesLaunch, ...]
    value: float  # from the launches that produced a value

    def as_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "ordinal": self.ordinal,
            "value": self.value,
            "launches": [
                {"id": la.launch_id, "value": la.value, "host": la.host} for la in self.launches
            ],
        }


@dataclass(frozen=True)
class ReportedChange:
    stored: StoredChange
    new: bool  # this analysis is the first to find it
    change: Change
    crosses: bool  # past the threshold, in the bad direction

    def as_json(self) -> dict[str, Any]:
        c = self.change
        return {
            "id": self.stored.id,
            "series": self.stored.series_id,
            "commit_before": self.stored.commit_before,
            "commit_after": self.stored.commit_after,
            "ordinal_after": self.stored.ordinal_after,
            "detected_at": self.stored.detected_at.isoformat(timespec="seconds") + "Z",
            "before": c.before.as_json(),
            "after": c.after.as_json(),
            "relative_change": c.rel_change,
            "local_step": c.local_step,
            "pvalue": c.pvalue,
            "crosses_threshold": self.crosses,
            "new": self.new,
        }


@dataclass(frozen=True)
class SeriesAnalysis:
    series: SeriesView
    points: tuple[Point, ...]
    changes: tuple[ReportedChange, ...]
    threshold: float
    tuning: Tuning

    def as_json(self) -> dict[str, Any]:
        return {
            "series": self.series.as_json(),
            "threshold": self.threshold,
            "tuning": self.tuning.as_json(),
            "points": [p.as_json() for p in self.points],
            "changes": [c.as_json() for c in self.changes],
        }


def points_of(launches: Sequence[SeriesLaunch], higher_is_better: bool) -> list[Point]:
    """One point per commit that has a value (a commit whose launches all failed has none)."""
    by_commit: dict[str, list[SeriesLaunch]] = {}
    for launch in launches:
        by_commit.setdefault(launch.commit, []).append(launch)
    points = []
    for commit, group in by_commit.items():
        values = [la.value for la in group if la.value is not None]
        if values:
            points.append(
                Point(commit, group[0].ordinal, tuple(group), point_value(values, higher_is_better))
            )
    return sorted(points, key=lambda p: p.ordinal)


def analyze(
    store: Store,
    series: SeriesView,
    tuning: Tuning,
    threshold: float | None = None,
) -> SeriesAnalysis:
    """Find the series' change points now, store them, say which are new."""
    higher = bool(series.params.get("higher_is_better", False))
    limit = threshold if threshold is not None else _threshold(series)
    points = points_of(series_launches(store, series.id), higher)
    found = find_changes([p.value for p in points], tuning)
    stored = save_changes(
        store,
        series.id,
        [
            FoundChange(
                points[c.index - 1].commit,
                points[c.index].commit,
                points[c.index].ordinal,
                {
                    "before": c.before.as_json(),
                    "after": c.after.as_json(),
                    "relative_change": c.rel_change,
                    "pvalue": c.pvalue,
                },
            )
            for c in found
        ],
    )
    changes = tuple(
        ReportedChange(s, new, c, is_regression(c, limit, higher))
        for (s, new), c in zip(stored, found, strict=True)
    )
    return SeriesAnalysis(series, tuple(points), changes, limit, tuning)


def _threshold(series: SeriesView) -> float:
    return float(series.params.get("threshold", DEFAULT_THRESHOLD))
