"""Change points of a series, found by Apache Otava (E-divisive means with its t-test merge
step), with the guards a shared machine needs. No I/O: values in, change points out.

Otava finds every significant shift of the mean. Two kinds of shift are not what a watcher
reports: one noisy point (a burst of slow launches on one commit) and a slow creep (a ramp has
segments with different means, so E-divisive splits it). So the series otava reads has its
lone odd points set to their neighbours' median first (``clip``: a point more than ``clip``
(relative) away from the median of the ``2 * radius + 1`` points around it; the newest points
have fewer neighbours on one side), and a change point otava returns is kept only when

- at least ``min_points`` points lie on each side of it up to the next change point (one or two
  odd points make two change points around them; neither is kept), and
- the level steps *at* it: the median of the ``local`` points right after it differs from the
  median of the ``local`` points right before it by at least ``min_step`` (relative). On a ramp
  the points next to a split differ by the slope times a few commits, not by the difference of
  the two segments' means.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfbisect.bisect.stats import history_value
from perfbisect.errors import UsageError


@dataclass(frozen=True)
class Tuning:
    """How change points are found: otava's parameters and the guards (see the module)."""

    window_len: int = 50  # otava's default
    max_pvalue: float = 0.001  # otava's default
    min_magnitude: float = 0.0  # otava's default
    min_points: int = 1
    local: int = 0  # 0: no step check
    min_step: float = 0.0
    clip: float = 0.0  # 0: no point is set to its neighbours' median
    radius: int = 3

    def as_json(self) -> dict[str, Any]:
        return {
            "window_len": self.window_len,
            "max_pvalue": self.max_pvalue,
            "min_magnitude": self.min_magnitude,
            "min_points": self.min_points,
            "local": self.local,
            "min_step": self.min_step,
            "clip": self.clip,
            "radius": self.radius,
        }


OTAVA_DEFAULTS = Tuning()
# Chosen with benchmarks/watch_bench.py (40 seeded series of 200 points, a shared machine's
# noise): a 10% step is reported within 5 points in 95% of series, with 0.5 false change points
# per 100 points on a flat series (0.6 on a creep of 0.1% a point). A step of 6% let 0.6 through
# on the flat series; 7% missed 7.5% of the steps.
TUNED = Tuning(
    window_len=30,
    max_pvalue=0.002,
    min_magnitude=0.03,
    min_points=3,
    local=4,
    min_step=0.065,
    clip=0.15,
)
TUNINGS = {"tuned": TUNED, "otava": OTAVA_DEFAULTS}


@dataclass(frozen=True)
class Level:
    """A segment's mean with a 95% interval of it, and how many points it holds."""

    mean: float
    lo: float
    hi: float
    n: int

    def as_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "ci": [self.lo, self.hi], "points": self.n}


@dataclass(frozen=True)
class Change:
    """A change point: ``index`` is the first point of the new level."""

    index: int
    before: Level
    after: Level
    rel_change: float  # after / before - 1
    pvalue: float
    local_step: float  # median of the points right after / right before - 1


def point_value(launch_values: Sequence[float], higher_is_better: bool = False) -> float:
    """One commit's value from its launches: the median of the launches that agree on its level
    (an outlier launch, 1.4x slower than the best, is set aside: ``core_launches``)."""
    return history_value(launch_values, higher_is_better)[0]


def _level(values: Sequence[float]) -> Level:
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    return Level(mean, mean - half, mean + half, n)


def _step(values: Sequence[float], index: int, local: int) -> float:
    before = statistics.median(values[max(0, index - local) : index])
    after = statistics.median(values[index : index + local])
    return after / before - 1.0 if before else 0.0


def despiked(values: Sequence[float], clip: float, radius: int) -> list[float]:
    """``values`` with each point that is more than ``clip`` away from the median of the points
    around it (``radius`` each side, fewer at the ends) set to that median."""
    out = [float(v) for v in values]
    if clip <= 0:
        return out
    for i, v in enumerate(values):
        around = values[max(0, i - radius) : i + radius + 1]
        centre = float(statistics.median(around))
        if centre and abs(v / centre - 1.0) > clip:
            out[i] = centre
    return out


def _steps(values: Sequence[float], indexes: Sequence[int], k: int, tuning: Tuning) -> bool:
    """Does the level step at ``indexes[k]``, in the direction of the two segments' means?"""
    i = indexes[k]
    start = indexes[k - 1] if k else 0
    end = indexes[k + 1] if k + 1 < len(indexes) else len(values)
    step = _step(values, i, tuning.local)
    shift = statistics.fmean(values[i:end]) - statistics.fmean(values[start:i])
    return abs(step) >= tuning.min_step and step * shift > 0


def find_changes(values: Sequence[float], tuning: Tuning = TUNED) -> list[Change]:
    """The change points of ``values`` (one value per commit, oldest first)."""
    if len(values) < 2 * max(tuning.min_points, 1):
        return []
    try:
        from otava.analysis import TTestSignificanceTester, compute_change_points
    except ImportError:
        raise UsageError(
            "change points need Apache Otava: pip install 'perfbisect[watch]' "
            "(or apache-otava==0.8.0)"
        ) from None

    values = despiked(values, tuning.clip, tuning.radius)
    found, _weak = compute_change_points(
        values,
        window_len=tuning.window_len,
        max_pvalue=tuning.max_pvalue,
        min_magnitude=tuning.min_magnitude,
    )
    indexes = sorted(int(cp.index) for cp in found)
    kept = [
        i
        for k, i in enumerate(indexes)
        if i - (indexes[k - 1] if k else 0) >= tuning.min_points
        and (indexes[k + 1] if k + 1 < len(indexes) else len(values)) - i >= tuning.min_points
        and (not tuning.local or _steps(values, indexes, k, tuning))
    ]
    tester = TTestSignificanceTester(tuning.max_pvalue)
    changes = []
    for k, i in enumerate(kept):
        start = kept[k - 1] if k else 0
        end = kept[k + 1] if k + 1 < len(kept) else len(values)
        before, after = _level(values[start:i]), _level(values[i:end])
        changes.append(
            Change(
                index=i,
                before=before,
                after=after,
                rel_change=after.mean / before.mean - 1.0 if before.mean else 0.0,
                # otava's test again, on the segments left once the guards dropped points
                pvalue=float(tester.compare(values[start:i], values[i:end]).pvalue),
                local_step=_step(values, i, max(tuning.local, 1)),
            )
        )
    return changes


def is_regression(change: Change, threshold: float, higher_is_better: bool) -> bool:
    """Past the threshold (a relative change) in the bad direction."""
    worse = -change.rel_change if higher_is_better else change.rel_change
    return worse >= threshold
