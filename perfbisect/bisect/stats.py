"""Statistics for noisy launches: estimates, intervals, verdicts and instability flags.

A configuration's value is the median of its per-launch medians. Launch-to-launch variation
dominates (GPU clocks, NCCL channel setup, memory placement), so the interval is built from a
*relative* launch-to-launch standard deviation pooled across every configuration of the session
that has at least two launches, shrunk towards a prior. That lets one launch of an interior point
be judged with the noise learnt at the endpoints, which is what keeps launches per evaluation low.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Verdict(str, Enum):
    GOOD = "good"
    BAD = "bad"
    # Clearly worse than the good level and clearly better than the bad one: the regression
    # came in more than one step. Treated as "already regressed" while the first departure
    # from the good level is searched; the later step is searched afterwards.
    INTERMEDIATE = "intermediate"
    UNCLEAR = "unclear"
    SKIP = "skip"


@dataclass(frozen=True)
class NoiseModel:
    """Prior belief about launch-to-launch noise and the interval width.

    ``prior_rel_sd`` is the relative standard deviation assumed before any data, worth
    ``prior_weight`` degrees of freedom; ``z`` is the half-width multiplier of intervals.
    ``floor_rel_sd`` stops a lucky run of identical launches from claiming perfect precision.
    """

    prior_rel_sd: float = 0.05
    prior_weight: float = 4.0
    floor_rel_sd: float = 0.01
    z: float = 2.0


@dataclass(frozen=True)
class Estimate:
    median: float
    lo: float
    hi: float
    n: int

    def as_json(self) -> dict[str, object]:
        return {"median": self.median, "ci": [self.lo, self.hi], "launches": self.n}


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


_MEDIAN_ABS_DIFF = 0.6745 * math.sqrt(2)  # median |X1 - X2| / sigma for normal X


def pooled_rel_sd(groups: Iterable[Sequence[float]], noise: NoiseModel) -> float:
    """Relative launch-to-launch SD from all groups (one group = one configuration's launches).

    Robust on purpose: the median of the within-group pairwise relative differences, with the
    prior entered as ``prior_weight`` pseudo-differences. One outlier launch (a throttled GPU, a
    bad NCCL ring) must not inflate the noise estimate for the whole session, or every later
    point would need the maximum number of launches.
    """
    diffs = [_MEDIAN_ABS_DIFF * noise.prior_rel_sd] * max(1, round(noise.prior_weight))
    for group in groups:
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                centre = (abs(group[i]) + abs(group[j])) / 2
                if centre > 0:
                    diffs.append(abs(group[i] - group[j]) / centre)
    return max(statistics.median(diffs) / _MEDIAN_ABS_DIFF, noise.floor_rel_sd)


def own_rel_sd(values: Sequence[float]) -> float:
    """Robust relative spread of one configuration's launches (scaled MAD; 0 for one launch)."""
    if len(values) < 2:
        return 0.0
    centre = median(values)
    if centre == 0:
        return 0.0
    return 1.4826 * median([abs(x - centre) for x in values]) / abs(centre)


def estimate(launch_values: Sequence[float], rel_sd: float, z: float) -> Estimate:
    """Median of launches with an interval from the pooled noise, or the configuration's own
    spread when that is wider: launches that disagree with each other must not look precise."""
    centre = median(launch_values)
    spread = max(rel_sd, own_rel_sd(launch_values))
    half = z * spread * abs(centre) / math.sqrt(len(launch_values))
    return Estimate(centre, centre - half, centre + half, len(launch_values))


def classify(est: Estimate, threshold: float, higher_is_better: bool) -> Verdict | None:
    """GOOD/BAD when the whole interval is on one side of the threshold, else None (undecided)."""
    if est.hi < threshold:
        return Verdict.BAD if higher_is_better else Verdict.GOOD
    if est.lo > threshold:
        return Verdict.GOOD if higher_is_better else Verdict.BAD
    return None


@dataclass(frozen=True)
class Difference:
    delta: float
    lo: float
    hi: float

    def as_json(self) -> dict[str, object]:
        return {"delta": self.delta, "ci": [self.lo, self.hi]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Difference | None:
        if not data:
            return None
        lo, hi = data["ci"]
        return cls(float(data["delta"]), float(lo), float(hi))


def difference(a: Sequence[float], b: Sequence[float], rel_sd: float, z: float) -> Difference:
    """b - a (medians of launches) with an interval from the pooled relative noise."""
    ma, mb = median(a), median(b)
    sd = math.sqrt((rel_sd * ma) ** 2 / len(a) + (rel_sd * mb) ** 2 / len(b))
    delta = mb - ma
    return Difference(delta, delta - z * sd, delta + z * sd)


def difference_with_spread(
    a: Sequence[float], b: Sequence[float], rel_sd: float, z: float
) -> Difference:
    """b - a (medians of launches) with an interval that carries each side's launch-to-launch
    spread: the pooled noise, or that side's own spread when it is wider (a culprit whose two
    launches measured 6.03 and 8.13 ms must not get an effect known to +-0.5 ms)."""
    ma, mb = median(a), median(b)
    sa = max(rel_sd, own_rel_sd(a)) * abs(ma)
    sb = max(rel_sd, own_rel_sd(b)) * abs(mb)
    sd = math.sqrt(sa**2 / len(a) + sb**2 / len(b))
    delta = mb - ma
    return Difference(delta, delta - z * sd, delta + z * sd)


CORE_TOLERANCE = 0.15  # a launch this much slower than the best ones is not the same level
OUTLIER_RATIO = 1.4  # a launch this many times slower than the best one is an outlier launch
# The launch-to-launch noise assumed where launches from the history (of any session, or a
# watched series) are reduced to one configuration's value and no session's fit is at hand.
HISTORY_REL_SD = 0.04
# Slow launches spread more than this times the noise are no level of their own: a burst's
# launches (1.5-2x each) spread about twice the noise, a flaky configuration's slow mode like it
# (taken for bursts in under 1% of flaky configurations with 6-10 launches, simulated).
BURST_SPREAD = 2.0


def launch_times(values: Sequence[float], higher_is_better: bool = False) -> list[float] | None:
    """The launches in "time" terms, where a slow launch is the larger number (for a
    higher-is-better metric like tokens/s a slow launch is a low value); None when a value is
    not positive (no ratio between launches means anything then)."""
    if any(v <= 0 for v in values):
        return None
    return [1 / v if higher_is_better else v for v in values]


def core_launches(
    values: Sequence[float], rel_sd: float, higher_is_better: bool = False
) -> list[float]:
    """The launches that say what a configuration's level is. Outlier launches are slow
    (throttling, contention, a bad NCCL ring: 1.5-2x), never fast, so a launch
    ``OUTLIER_RATIO`` times slower than the best one is set aside (of two launches, or while
    such launches are a minority); and when at least two launches agree on the best level,
    slower ones are set aside too. Launches that alternate between levels (a flaky
    configuration) are all kept, and stay UNCLEAR; unless three or more fast ones agree and
    the slow ones spread more than ``BURST_SPREAD`` times the noise, as no level's launches
    do: those are a busy machine's bursts over most of the launches, and the fast ones say
    the level."""
    if len(values) < 2:
        return list(values)
    times = launch_times(values, higher_is_better)
    if times is None:
        return list(values)
    best = min(times)
    kept = fastest_launches(list(values), higher_is_better)
    if len(values) >= 3 and len(kept) * 2 <= len(values):
        slow = [v for v, t in zip(values, times, strict=True) if t >= best * OUTLIER_RATIO]
        bursts = (
            len(kept) >= 3
            and own_rel_sd(kept) <= 2 * rel_sd
            and own_rel_sd(slow) > BURST_SPREAD * rel_sd
        )
        if not bursts:
            return list(values)  # as many slow launches as others, at a level: flaky
    tolerance = max(CORE_TOLERANCE, 4 * rel_sd)
    agreeing = [
        v
        for v, t in zip(values, times, strict=True)
        if t < best * OUTLIER_RATIO and t <= best * (1 + tolerance)
    ]
    return agreeing if len(agreeing) >= 2 else kept


def fastest_launches(values: list[float], higher_is_better: bool = False) -> list[float]:
    """A configuration's launches within ``OUTLIER_RATIO`` of its best, whatever their share
    (slow launches are never fast: the noise of its level)."""
    times = launch_times(values, higher_is_better)
    if times is None:
        return values
    best = min(times)
    return [v for v, t in zip(values, times, strict=True) if t < best * OUTLIER_RATIO]


def fastest_rel_sd(
    launches: Iterable[list[float]], noise: NoiseModel, higher_is_better: bool = False
) -> float:
    """The launch-to-launch noise within one machine state: each configuration's launches near
    its best (``fastest_launches``: a busy period's slow launches never count), pooled."""
    return pooled_rel_sd([fastest_launches(v, higher_is_better) for v in launches], noise)


def history_value(values: Sequence[float], higher_is_better: bool = False) -> tuple[float, int]:
    """One configuration's value from its launches in the history, and how many launches it
    rests on: the median of those that agree on its level (``core_launches`` sets an outlier
    launch aside, as a session's report does), so a watched series' point and an
    explanation's delta read the launches as the report reads them."""
    kept = core_launches(values, HISTORY_REL_SD, higher_is_better)
    return float(statistics.median(kept)), len(kept)


def posterior_percent(p: float) -> str:
    """A posterior for people, in every view alike: never "100%" (0.9999996 is not
    certainty): ">99.9%" above 0.999, one decimal from 99%, whole percents below."""
    shown = min(p, 0.999)
    digits = f"{shown:.1%}" if shown >= 0.99 else f"{shown:.0%}"
    return (">" if p > 0.999 else "") + digits
