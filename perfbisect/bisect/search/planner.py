"""Which launch(es) next: the one whose result is expected to tell the most about where the
crossing is, per unit of cost (expected information gain, in bits, over what the launch costs:
a measured point or an endpoint launched again reuses its build, so it costs what this
session's launches again have cost against its first launches).

A launch at position x reads "past" or "below" the threshold. Its reading says which side x is
on, so it speaks about the crossing through ``q = P(crossing <= x)`` alone, and it can err: a
point below read past when the launch runs slow, a point past read below only through noise.
The machine's state for the next launch comes from the posterior, given the side the launch
would test: a point whose launches read past is below only if a busy period made them, and
that period likely goes on, so launching it again inside it would err the same way (and a
busy period likely still going makes every single launch worth less). The gain is the mutual
information between the reading and x's side. Candidates are every position that can be launched, measured or not:
launching a measured point or an endpoint again is a candidate like any other, so re-checks are
chosen when they are worth it, not by a rule of their own.

A pair (two neighbouring measured points launched back to back, A then B) reads "a step lies
between them" or not from the ratio of its two launches: a busy period slows both alike, so
the pair errs only when the machine's state changes between its two launches. It costs two
launches; it wins when the machine is likely busy, where single launches read little.

With k slots the k positions are chosen greedily to split the posterior's mass into the most
even parts (what k readings at once can at best tell apart), a slot beyond the first only while
its split is worth ``SLOT_MIN_BITS``: launches are the currency, and a slot left idle costs a
round's wall time, not a launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.search.hypotheses import OUTLIER
from perfbisect.bisect.search.machine import _F as _BUSY_F
from perfbisect.bisect.search.machine import CHAINS, SHARED, SWITCH
from perfbisect.bisect.search.model import Belief

_F = np.concatenate([[0.0], _BUSY_F])  # log slow-down per machine state
_SLOW = (math.log(1.15), math.log(3.0))
_STAY = CHAINS[SHARED][1] * (1 - SWITCH)
# A slot beyond the first launches only where its cut splits this much of the posterior's
# partition entropy (bits): late in a search, when the mass sits on a few positions, the
# even split left every other slot a launch that tells next to nothing (the search table's
# --rounds, 8 slots: 36.6 launches a search against the rule engine's 32.5, 28.3 with it at
# 0.15 bits). 0.2: the given threshold at 2 slots 18.29 -> 18.25 launches (the rules' 18.25),
# 8 slots 27.29 -> 26.75, every row still 100% right; 0.25 left one search in a hundred
# wrong at 8 slots.
SLOT_MIN_BITS = 0.2


@dataclass(frozen=True)
class Plan:
    """Positions to launch next, in order; ``pair``: they are a back-to-back pair."""

    positions: tuple[int, ...]
    pair: bool
    gain: float  # expected bits per launch


def _h(p: NDArray[np.float64]) -> NDArray[np.float64]:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.asarray(-(p * np.log2(p) + (1 - p) * np.log2(1 - p)), dtype=np.float64)


_erf = np.frompyfunc(math.erf, 1, 1)


def _above(d: NDArray[np.float64], sd: float) -> NDArray[np.float64]:
    """P(normal noise > d), elementwise."""
    erf = np.asarray(_erf(d / (sd * math.sqrt(2))), dtype=np.float64)
    return np.asarray(0.5 * (1 - erf), dtype=np.float64)


def _states_given_side(
    b: Belief, cdf: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The next launch's machine state (positions x states) given that each position is
    below, and given that it is past: a point whose launches read past is below only if a
    busy period made them, and that period likely goes on, so launching it again in it tells
    little (the same state errs the same way twice)."""
    n = len(cdf) - 1
    if b.busy_by_gap is None:
        same = np.broadcast_to(b.busy_next, (n + 1, len(b.busy_next)))
        return same, same
    gap_of = np.clip(np.searchsorted(b.points, np.arange(n + 1), side="left"), 1, None)
    weighted = b.per_position()[:, None] * b.busy_by_gap[gap_of - 1]
    at_or_before = np.cumsum(weighted, axis=0)
    after = at_or_before[-1][None, :] - at_or_before

    def norm(m: NDArray[np.float64], mass: NDArray[np.float64]) -> NDArray[np.float64]:
        ok = mass[:, None] > 1e-9
        return np.where(ok, m / np.where(ok, mass[:, None], 1.0), b.busy_next[None, :])

    return norm(after, np.asarray(1 - cdf, dtype=np.float64)), norm(at_or_before, cdf)


def _read_past_when_below(
    level: NDArray[np.float64], b: Belief, states: NDArray[np.float64]
) -> NDArray[np.float64]:
    """For points below at ``level`` (log): the chance the next launch reads past, the
    machine's state for it per point (``states``: points x states)."""
    d = b.threshold - level[:, None] - _F[None, :]  # how far the threshold is, per state
    per_state = _above(d, b.sd)
    slow_part = np.clip(
        (_SLOW[1] - np.maximum(b.threshold - level, _SLOW[0])) / (_SLOW[1] - _SLOW[0]), 0, 1
    )
    # the last state, busy launch by launch: any factor of the grid, each as likely
    per_state = np.concatenate([per_state, per_state[:, 1:].mean(axis=1, keepdims=True)], axis=1)
    per = (1 - OUTLIER) * per_state + OUTLIER * slow_part[:, None]
    return np.asarray((per * states).sum(axis=1), dtype=np.float64)


def _read_below_when_past(
    level: NDArray[np.float64], b: Belief, states: NDArray[np.float64]
) -> NDArray[np.float64]:
    d = np.asarray(b.threshold - level, dtype=np.float64)  # <= 0: past; slow: further past
    return np.asarray((1 - OUTLIER) * states[:, 0] * (1 - _above(d, b.sd)), dtype=np.float64)


def single_gains(
    b: Belief, cdf: NDArray[np.float64], launchable: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """Expected bits from one launch at each position 0..n (0 where it cannot launch)."""
    n = len(cdf) - 1
    below_lv = np.full(n + 1, b.good)
    past_lv = np.full(n + 1, b.bad)
    if_below, if_past = _states_given_side(b, cdf)
    e_bp = _read_past_when_below(below_lv, b, if_below)
    e_pb = _read_below_when_past(past_lv, b, if_past)
    q = cdf
    read_past = q * (1 - e_pb) + (1 - q) * e_bp
    gain = _h(read_past) - q * _h(e_pb) - (1 - q) * _h(e_bp)
    return np.where(launchable, gain, 0.0)


def pair_gains(b: Belief) -> NDArray[np.float64]:
    """Expected bits from a back-to-back pair of each two neighbouring measured points
    (index j: points[j-1] then points[j])."""
    p = b.gap[1:]
    busy = 1 - b.busy_next[0]
    # The pair's ratio misleads when the state changes between its two launches, or a lone
    # outlier hits one of them.
    start = CHAINS[SHARED][0]
    # busy launch by launch, the two launches' factors differ as often as not
    unsteady = b.busy_next[-1]
    err = 2 * OUTLIER + (1 - busy) * start + (busy - unsteady) * (1 - _STAY) + unsteady * 0.5
    read = p * (1 - err) + (1 - p) * err
    return np.asarray(_h(read) - _h(np.full_like(p, err)), dtype=np.float64)


def plan(
    b: Belief,
    launchable: NDArray[np.bool_],
    slots: int,
    cost: NDArray[np.float64] | None = None,
) -> Plan:
    """The next launch(es) by expected information gain per unit of cost. ``cost``: what a
    launch of each position costs (0..n; relative: a measured point launched again reuses
    its build); None: every launch alike."""
    cdf = b.cdf()
    n = len(cdf) - 1
    cost = np.ones(n + 1) if cost is None else cost
    singles = single_gains(b, cdf, launchable)
    per_cost = singles / cost
    x = int(np.argmax(per_cost))
    pairs = pair_gains(b)
    if len(pairs):
        pair_cost = cost[b.points[:-1]] + cost[b.points[1:]]
        j = int(np.argmax(pairs / pair_cost)) + 1
        if pairs[j - 1] / pair_cost[j - 1] > per_cost[x]:
            return Plan((int(b.points[j - 1]), int(b.points[j])), True, float(pairs[j - 1] / 2))
    # An endpoint launched again narrows the endpoints' levels (and a derived threshold): it
    # buys its share of the bits their doubt holds about the crossing.
    n_good, n_bad = b.end_launches
    end, end_gain = max(
        ((0, b.level_bits / (n_good + 1)), (n, b.level_bits / (n_bad + 1))),
        key=lambda e: e[1] / cost[e[0]],
    )
    if end_gain / cost[end] > per_cost[x] and launchable[end]:
        return Plan((end,), False, end_gain)
    picks = [x]
    while len(picks) < min(slots, int(launchable.sum())):
        more, bits = _split_most(cdf, picks, launchable)
        if bits < SLOT_MIN_BITS:
            break
        picks.append(more)
    return Plan(tuple(sorted(picks)), False, float(singles[x]))


def _split_most(
    cdf: NDArray[np.float64], cuts: list[int], launchable: NDArray[np.bool_]
) -> tuple[int, float]:
    """The launchable position that, added to ``cuts``, splits the posterior's mass into the
    most even parts, and that gain in the partition's entropy (bits)."""
    edges = sorted({*cuts, -1, len(cdf) - 1})
    mass_at = np.concatenate([[0.0], cdf])  # mass_at[x + 1] = cdf[x]
    positions = np.arange(len(cdf))
    seg = np.searchsorted(np.asarray(edges), positions, side="left")
    seg = np.clip(seg, 1, len(edges) - 1)
    lo = np.asarray(edges)[seg - 1]
    hi = np.asarray(edges)[seg]
    total = mass_at[hi + 1] - mass_at[lo + 1]
    left = mass_at[positions + 1] - mass_at[lo + 1]
    right = total - left

    def xlogx(v: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(np.where(v > 1e-15, v * np.log2(np.maximum(v, 1e-15)), 0.0))

    gain = xlogx(total) - xlogx(left) - xlogx(right)
    gain = np.where(launchable & ~np.isin(positions, cuts), gain, -1.0)
    best = int(np.argmax(gain))
    return best, float(gain[best])
