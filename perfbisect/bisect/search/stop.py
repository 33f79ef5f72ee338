"""When the search stops: when the posterior names the crossing at the target confidence, or
when the launch budget is spent (then it says how sure it is and what the target would cost)."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from perfbisect.bisect.search.model import Belief

# A launch that agrees with the likeliest crossing multiplies its odds by about this much on
# the case's noise (one slow launch in ~30); the cost estimate of reaching the target uses it.
_ODDS_PER_LAUNCH = 30.0


# The stop rule asks the posterior for this many times the target's odds against. The model is
# a model: measured on 3000 seeded worlds (search_bench.py --load --seeds 1,2,3,4,5: a quiet
# machine, busy periods, busy launches each slowed by its own factor), names claimed at 99.0-
# 99.9% were right in 97.2% (239 of 246), so a claim stopped at the target was not worth the
# target. With the margin every claim is at >= 99.9%, wrong names at >= 99% fall from 11 to 4
# of 3000, and the searches take 0.1-1.2 launches more on average.
_MARGIN = 10.0


def stop_at(confidence: float) -> float:
    """The posterior at which the stop rule names a crossing, for a target ``confidence``:
    the target's odds against, divided by ``_MARGIN`` (99% -> 99.9%)."""
    return 1 - (1 - confidence) / _MARGIN


@dataclass(frozen=True)
class Named:
    """The range the posterior holds at the target: ``lo`` below, ``hi`` the first past (with
    positions between them that cannot be launched, it is a range, not one configuration)."""

    lo: int
    hi: int
    probability: float

    @property
    def one(self) -> bool:
        return self.hi - self.lo == 1


def named(b: Belief, target: float, unlaunchable: Collection[int]) -> Named | None:
    """The gap between two neighbouring measured points that holds the crossing with at least
    ``target`` probability and has nothing inside left to launch; None while there is none."""
    for j in range(1, len(b.points)):
        if b.gap[j] < target:
            continue
        lo, hi = int(b.points[j - 1]), int(b.points[j])
        if all(p in unlaunchable for p in range(lo + 1, hi)):
            return Named(lo, hi, float(b.gap[j]))
    return None


def likeliest(b: Belief) -> Named:
    """The gap holding the most posterior mass (for a search stopped short)."""
    j = max(range(1, len(b.points)), key=lambda k: float(b.gap[k]))
    return Named(int(b.points[j - 1]), int(b.points[j]), float(b.gap[j]))


def launches_to_target(b: Belief, target: float) -> int:
    """About how many launches more the likeliest gap needs to reach ``target``: halving it
    down to one position, then agreeing launches until its odds reach the target's."""
    best = likeliest(b)
    halvings = math.ceil(math.log2(max(1, best.hi - best.lo)))
    p = min(max(best.probability, 1e-6), 1 - 1e-9)
    odds_needed = math.log(target / (1 - target)) - math.log(p / (1 - p))
    return halvings + max(0, math.ceil(odds_needed / math.log(_ODDS_PER_LAUNCH))) + 2
