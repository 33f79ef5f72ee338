"""The search's state as one posterior: where the first configuration at or past the threshold
lies, given every launch in the order it ran, on a machine whose load comes and goes.

What it assumes (every rule of the search follows from these and nothing else):

* positions: the crossing is at any position of the path with equal prior, or with the
  weights a prior from the change gives (``--prior-path``: the commits that touch the named
  paths hold half of it); a configuration that cannot run can still be the crossing (it only
  cannot be measured). Given the crossing ``c``,
  every measured point before ``c`` is *below* the threshold and every one from ``c`` on is
  *past* it. The measured points cut the path into gaps; the crossing's posterior is exact over
  the gaps and even within one (nothing inside a gap was measured);
* levels: a point below lies at the good endpoint's level, or at the level of a plateau between
  that and the threshold (one level for the points measured there); a point past lies at the
  bad endpoint's level, or at a plateau's clearly past the threshold and apart from it (a later commit took part
  of it back, or creep). A derived threshold is the geometric midpoint of the endpoints'
  levels, and those levels are read from the endpoints' launches the chain holds normal;
* launches: log-normal around their point's level with the session's noise, except lone
  outliers (``OUTLIER`` of launches, 1.15-3x slower; ``WIDE``, off their level either way,
  three noise widths wide) and the machine's state;
* the machine: normal, or busy, following a Markov chain over the launch order. Half of the
  busy periods keep one slow-down factor (a grid over 1.3-3x) while they last; in the other
  half each launch draws its own factor from that grid (load that varies launch by launch).
  Two chains are weighed by how well each explains the launches: a quiet machine (periods
  rare) and a shared one (periods start after about one launch in twenty and last about
  ten). Back-to-back launches of two points in one steady period share its factor, which is
  what lets a pair tell a step from a slow period;
* plateaus read from the points (see ``_plateaus``) are a hypothesis weighed against none
  (even odds), as the endpoints' slow-downs are: slow launches of a busy period scattered
  along the path read like a plateau worse than the bad end, and a plateau taken as given
  explained them without the period, which then named a wrong neighbour at 99%. A plateau's
  level is fitted to its own launches, so it pays its Occam factor (``_occam``: the width its
  launches pin the level to, against the range a plateau's level may take), as a busy
  period's factor pays for its grid: unpaid, a steady period read as a plateau for free.

The forward algorithm (machine.py) runs once per gap (vectorised over gaps and both chains),
so the posterior is exact for the model, not a point estimate of the machine's state; with
``per_launch``, forward-backward gives each launch's probability of having run slow. Pure
numpy, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.posterior import _log_normal_grid, _log_slow_grid
from perfbisect.bisect.search.machine import (
    _BUSY_SPREAD,
    _CHAIN_PRIOR,
    _F,
    _K,
    _TRANS,
    _forward,
    _slow_launches,
)

OUTLIER = 0.03  # lone slow launches, whatever the machine's state
# The endpoints' launches ran in busy periods, each end's slowed by one of these factors (log).
# Priors: neither was (0.88); both alike, one period over the endpoint phase (0.06 over the
# factors); one end's and not the other's (0.057 each end, over the factors: an end launched
# again later on a quiet machine reads its level from those launches, and the other end's may
# all have run in periods: in seeded busy worlds the bad end's launches, each in a period,
# set a level twice that of the points past the step, which then read as a plateau below the
# threshold); each end by a factor of its own (0.0024 over the pairs). The grid is as fine as
# a level must be read: at 1.5x, 2x and 2.5x alone a good end launched twice at 1.78x and
# 1.6x read 12% off its level (3.5 noise widths) on every factor, and the good points, at
# their true level, read as a plateau of their own below a threshold the shift set too low
# (the search table's real history, trial 198: a wrong step at 99.99999%).
END_FACTORS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5)
SHIFTS = np.log(np.asarray(END_FACTORS))
_SHIFTED = len(END_FACTORS) - 1
_END_SHIFTS = [(i, i) for i in range(len(END_FACTORS))] + [
    (i, k) for i in range(len(END_FACTORS)) for k in range(len(END_FACTORS)) if i != k
]
_END_SHIFT_PRIOR = np.log(
    np.asarray(
        [0.88]
        + [0.06 / _SHIFTED] * _SHIFTED
        + [
            0.057 / _SHIFTED if 0 in ik else 0.0024 / (_SHIFTED * (_SHIFTED - 1))
            for ik in _END_SHIFTS[len(END_FACTORS) :]
        ]
    )
)


@dataclass(frozen=True)
class Belief:
    """The posterior after the launches so far. ``points``: the measured positions in path
    order (0 and the bad end first and last); ``gap[j]`` (j >= 1): the probability that the
    crossing lies in (points[j-1], points[j]]; ``busy_next``: each machine state's probability
    for the next launch (0 normal, then the busy factors); ``good``/``bad``/``threshold`` in
    log time; ``below``/``past``: the level of a plateau on either side (log time; the end's level
    where the launches show none)."""

    points: NDArray[np.int64]
    gap: NDArray[np.float64]
    busy_next: NDArray[np.float64]
    good: float
    bad: float
    threshold: float
    below: float
    past: float
    sd: float
    level_bits: float = 0.0  # bits about the crossing the endpoints' levels' doubt holds
    end_launches: tuple[int, int] = (1, 1)  # launches of the good and the bad end
    shared: float = 0.0  # the probability that the machine is the shared one (busy periods)
    # Each position's prior weight of being the crossing (0..n; None: all alike). Within a gap
    # nothing was measured, so the gap's mass spreads over its positions by these weights.
    prior: NDArray[np.float64] | None = None
    # Each launch's probability (in launch order) that it ran slow: in a busy period of the
    # machine or a lone outlier (``believe(..., per_launch=True)``; None otherwise).
    slow: NDArray[np.float64] | None = None
    # The next launch's machine state given the crossing in each gap (row j - 1 for gap j):
    # where a point's launches read past, its being below asks that a busy period made them,
    # and that period's state is the one the next launch most likely runs in.
    busy_by_gap: NDArray[np.float64] | None = None

    def per_position(self) -> NDArray[np.float64]:
        """Each position's probability of being the crossing (0..n)."""
        n = int(self.points[-1])
        per = np.zeros(n + 1)
        for j in range(1, len(self.points)):
            a, b = int(self.points[j - 1]), int(self.points[j])
            if self.prior is None:
                per[a + 1 : b + 1] = self.gap[j] / (b - a)
            else:
                inside = self.prior[a + 1 : b + 1]
                per[a + 1 : b + 1] = self.gap[j] * inside / inside.sum()
        return per

    def crossing_at(self, position: int) -> float:
        """The probability that ``position`` is the first past the threshold."""
        if not 0 < position <= int(self.points[-1]):
            return 0.0
        return float(self.per_position()[position])

    def cdf(self) -> NDArray[np.float64]:
        """``cdf[x]``: the probability that the crossing is at or before position x (0..n)."""
        return np.cumsum(self.per_position())

    def best(self) -> tuple[int, float]:
        """The likeliest crossing and its probability."""
        per = self.per_position()
        x = int(np.argmax(per))
        return x, float(per[x])


def point_level(xs: NDArray[np.float64]) -> float:
    """A point's own level from its launches (log): the median of those within 15% of the
    fastest (slow launches are never fast; the fastest alone where no other agrees)."""
    close = xs[xs <= np.min(xs) + math.log(1.15)]
    return float(np.median(close))


def _emissions(
    xs: NDArray[np.float64], levels: NDArray[np.float64], sd: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Log-density of each launch in each machine state (normal, then the busy factors), its
    point at ``levels`` (per launch); and each launch's log probability, in the normal state,
    of being a lone outlier (the per-launch slow probability reads it)."""
    spread = math.hypot(sd, _BUSY_SPREAD)
    u = np.asarray(xs - levels, dtype=np.float64)  # numpy 2.2's stubs widen the difference
    loose = _loose(u, sd)
    normal = np.logaddexp(math.log(1 - OUTLIER) + _log_normal_grid(u, sd), loose)
    per_factor = _log_normal_grid(u[:, None] - _F[None, :], spread)
    busy = np.logaddexp(math.log(1 - OUTLIER) + per_factor, loose[:, None])
    # Busy launch by launch: any factor of the grid, each as likely, drawn anew every launch.
    anyone = np.logaddexp.reduce(per_factor, axis=1) - math.log(_K)
    unsteady = np.logaddexp(math.log(1 - OUTLIER) + anyone, loose)
    states = np.concatenate([normal[:, None], busy, unsteady[:, None]], axis=1)
    return np.asarray(states, dtype=np.float64), np.asarray(loose - normal, dtype=np.float64)


# Launches off their level by more than the session's noise says, either way (the noise is
# read from each point's core launches, so its tails are thinner than the machine's): a bad
# end's launch 26% fast (3.3 sd of an 8% noise) set its level low, and the points past the step
# read as a plateau worse than it (the search table's shift 8%, trial 54: a wrong step at 99.97%).
WIDE = 0.001


def _loose(u: NDArray[np.float64], sd: float) -> NDArray[np.float64]:
    """Log-density of a launch off its level by ``u`` (log) outside the machine's state: a
    lone slow outlier, or a draw three noise widths wide either way."""
    slow = math.log(OUTLIER) + _log_slow_grid(u)
    wide = math.log(WIDE) + _log_normal_grid(u, 3 * sd)
    return np.asarray(np.logaddexp(slow, wide), dtype=np.float64)


def _side_levels(
    xs: NDArray[np.float64],
    idx: NDArray[np.int64],
    points: int,
    end: float,
    plateau: float,
    sd: float,
) -> NDArray[np.float64]:
    """Each launch's level on one side: its point's, the end's level or the side's plateau,
    whichever its launches fit best (normal or a lone outlier; levels come in runs, so a point
    on a plateau pays nothing for it, launch by launch)."""
    scores = []
    for level in (end, plateau):
        u = np.asarray(xs - level, dtype=np.float64)
        per = np.logaddexp(
            math.log(1 - OUTLIER) + _log_normal_grid(u, sd),
            math.log(OUTLIER) + _log_slow_grid(u),
        )
        scores.append(np.bincount(idx, weights=per, minlength=points))
    at_end = scores[0] >= scores[1]
    return np.where(at_end, end, plateau)[idx]


def believe(
    launches: Sequence[tuple[int, float]],
    n: int,
    threshold: float | None,
    sd: float,
    prior: Sequence[float] | None = None,
    per_launch: bool = False,
) -> Belief:
    """The posterior given ``launches`` ((position, value in time terms: larger is worse), in
    the order they ran; both endpoints among them), a path of positions 0..n, the threshold
    (time terms; None: derived from the endpoints), the session's relative noise and each
    position's prior weight of being the crossing (0..n, positive; None: all alike). With
    ``per_launch``, also each launch's probability of having run slow (``Belief.slow``)."""
    sd = max(sd, 0.01)
    weights = None if prior is None else np.asarray(prior, dtype=np.float64)
    pos = np.asarray([p for p, _ in launches], dtype=np.int64)
    xs = np.log(np.asarray([v for _, v in launches], dtype=np.float64))
    points = np.unique(pos)
    idx = np.searchsorted(points, pos)
    own = np.asarray([point_level(xs[idx == i]) for i in range(len(points))])
    counts = np.bincount(idx, minlength=len(points))
    good, bad = _end_levels((xs[idx == 0], xs[idx == len(points) - 1]), own, threshold, sd)
    n_good, n_bad = int(counts[0]), int(counts[-1])
    gaps = len(points) - 1
    levels = []
    e_below: list[NDArray[np.float64]] = []  # each launch's log-density in each machine state
    e_past: list[NDArray[np.float64]] = []
    o_below: list[NDArray[np.float64]] = []  # log share of a lone outlier in the normal state
    o_past: list[NDArray[np.float64]] = []
    # Only launches that no level read from the endpoints explains make the shifts worth
    # weighing: something faster than the good level, the bad end below the threshold, or
    # points at a level of their own between the good end and the threshold (a plateau, or
    # the level of an end whose launches all ran slow).
    t_first = math.log(threshold) if threshold is not None else (good + bad) / 2
    inner = own[1:-1]
    doubted = (
        bool(np.any(xs < good - 3 * sd))
        or bool(np.any(xs[idx == len(points) - 1] < t_first))
        or bool(np.any((inner > good + 3 * sd) & (inner < t_first - 3 * sd)))
    )
    priors = []
    for (i, k), shift_prior in zip(_END_SHIFTS if doubted else _END_SHIFTS[:1], _END_SHIFT_PRIOR):
        # The endpoints' launches may have run in busy periods: their levels (and a derived
        # threshold, midway between them: geometric, as noise is relative) lower by these
        # factors is a hypothesis the later launches weigh.
        g, b = good - SHIFTS[i], bad - SHIFTS[k]
        if (i or k) and b <= g + 0.02:
            continue  # a bad end not 2% worse than the good one explains no search
        t_log = math.log(threshold) if threshold is not None else (g + b) / 2
        below, past = _plateaus(own, counts, g, b, t_log, sd)
        # Plateaus read from the points are a hypothesis too, weighed against none: busy
        # periods slow points scattered along the path, and taking those as a plateau worse
        # than the bad end freed the machine's chain from the period that explained them all
        # (tests/test_model_engine.py, the worlds with slow points scattered by busy periods).
        # Their levels are fitted, so they pay their Occam factor (a steady period read as a
        # plateau for free named a wrong neighbour at 99.94%: the same file, busy worlds whose
        # period read as a plateau).
        # Each side's plateau is weighed on its own: a real plateau below the threshold must
        # not need a busy period's slow points past it read as a plateau too.
        lows = [(g, 0.0)] if below[0] == g else [below, (g, 0.0)]
        highs = [(b, 0.0)] if past[0] == b else [past, (b, 0.0)]
        side_odds = math.log(len(lows)) + math.log(len(highs))
        for (lo, paid_lo), (hi, paid_hi) in itertools.product(lows, highs):
            priors.append(shift_prior - side_odds + paid_lo + paid_hi)
            levels.append((g, b, t_log, lo, hi))
            at_below = _side_levels(xs, idx, len(points), g, lo, sd)
            at_past = _side_levels(xs, idx, len(points), b, hi, sd)
            for at, to_e, to_o in ((at_below, e_below, o_below), (at_past, e_past, o_past)):
                states, outlier = _emissions(xs, at, sd)
                to_e.append(states)
                to_o.append(outlier)
    loglik, alpha = _forward(np.asarray(e_below), np.asarray(e_past), idx, gaps)
    if weights is None:
        mass = np.diff(points).astype(np.float64)  # a gap's prior: its positions
    else:
        assert len(weights) == n + 1 and bool(np.all(weights[1:] > 0)), "prior: n+1 weights"
        cum = np.concatenate([[0.0], np.cumsum(weights)])
        mass = cum[points[1:] + 1] - cum[points[:-1] + 1]
    score = loglik + _CHAIN_PRIOR[:, None, None] + np.asarray(priors)[None, :, None]
    score = score + np.log(mass)[None, None, :]
    w = np.exp(score - score.max())
    gap = np.concatenate([[0.0], w.sum(axis=(0, 1)) / w.sum()])
    nxt = np.einsum("hdgs,hsr->hdgr", alpha, _TRANS)
    busy_next = (w[..., None] * nxt).sum(axis=(0, 1, 2)) / w.sum()
    per_gap = w.sum(axis=(0, 1))
    busy_by_gap = (w[..., None] * nxt).sum(axis=(0, 1)) / np.maximum(per_gap, 1e-300)[:, None]
    by_level = w.sum(axis=0)  # (shift, gap)
    weight = by_level.sum(axis=1)
    given = by_level / np.maximum(weight, 1e-300)[:, None]
    # What the endpoints' levels' uncertainty costs: the bits about the crossing that knowing
    # them would give (launching an endpoint again buys part of them).
    level_bits = float(_entropy(gap[1:])) - float(np.sum(weight / weight.sum() * _entropy(given)))
    g, b, t_log, lo, hi = levels[int(np.argmax(weight))]
    by_chain = w.sum(axis=(1, 2))
    shared = float(by_chain[1] / by_chain.sum())
    slow = None
    if per_launch:
        e = (np.asarray(e_below), np.asarray(e_past))
        o = (np.asarray(o_below), np.asarray(o_past))
        slow = _slow_launches(e, o, idx, gaps, w / w.sum())
    return Belief(
        points,
        gap,
        busy_next,
        g,
        b,
        t_log,
        lo,
        hi,
        sd,
        max(0.0, level_bits),
        (n_good, n_bad),
        shared,
        weights,
        slow,
        busy_by_gap,
    )


def _entropy(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Entropy in bits over the last axis."""
    q = np.clip(p, 1e-300, None)
    return np.asarray(-(p * np.log2(q)).sum(axis=-1), dtype=np.float64)


def _end_levels(
    ends: tuple[NDArray[np.float64], NDArray[np.float64]],
    own: NDArray[np.float64],
    threshold: float | None,
    sd: float,
) -> tuple[float, float]:
    """The levels of the good and the bad run (log): each end's launches pooled with the
    points that measured at its level (within ``max(10%, 2.5 noise)`` of its own level, two points at least,
    on its side of the threshold), so that two launches of an end that happened to run fast
    or slow do not set the levels (and a derived threshold) alone."""
    good, bad = float(own[0]), float(own[-1])
    tol = max(math.log(1.1), 2.5 * sd)
    inner = own[1:-1]
    t_log = math.log(threshold) if threshold is not None else (good + bad) / 2
    out = []
    for launches, side in zip(ends, (inner < t_log, inner >= t_log)):
        centre = point_level(launches)
        # A point pooled with an end is nearer its level than the threshold: with 5% noise,
        # points of a middle level 21% below the bad end read within the tolerance of it,
        # pulled the bad end's level down to theirs and the threshold under them (two steps
        # 19 -> 23 -> 29, the search table's trials 34, 143 and 150: the first step named at
        # 99.9%).
        close = side & (np.abs(inner - centre) <= tol)
        close &= np.abs(inner - centre) < np.abs(inner - t_log)
        near = inner[close]
        mine = launches[np.abs(launches - centre) <= tol]
        out.append(float(np.median(np.concatenate([mine, near]))) if len(near) >= 2 else None)
    return (out[0] if out[0] is not None else good), (out[1] if out[1] is not None else bad)


# How far past the threshold a plateau beyond the bad end's level may lie (log; 2x the bad
# end): the range its Occam factor weighs its fitted level against.
PAST_REACH = math.log(2.0)


def _occam(width: float, launches: int, sd: float) -> float:
    """log of a plateau's Occam factor: its level, fitted to its ``launches``, is one of the
    levels in a range ``width`` wide (log) it could have taken; the hypothesis is worth the
    share of that range its launches pin the level to (the likelihood's width, sqrt(2 pi) sd /
    sqrt(k)), as a busy period's factor pays for its grid. Never more than even odds."""
    fitted = math.sqrt(2 * math.pi) * sd / math.sqrt(max(1, launches))
    return min(0.0, math.log(fitted / max(width, fitted)))


def _plateaus(
    own: NDArray[np.float64],
    counts: NDArray[np.int64],
    good: float,
    bad: float,
    t_log: float,
    sd: float,
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The level of a plateau on each side, shared by every point on it (levels come in runs:
    a plateau's points pool their launches, and a point that reads like the plateau is not
    past the threshold by a level of its own). Below: the points between the good level and
    the threshold; past: the points clearly past it but clearly apart from the bad level (a
    later commit took part of it back). The end's level where no point shows one. Each with
    the log Occam factor a plateau read there pays, weighed on the launches of its points."""
    inner, inner_n = own[1:-1], counts[1:-1]
    on_lower = (inner > good + 3 * sd) & (inner < t_log)
    lower = inner[on_lower]
    # A plateau worse than the bad end is a run of points: one point alone sets none there (its
    # own launches would set the level they are judged against, and a slow launch is never
    # fast, so only that side is one busy period away from any point). On this machine, with
    # its load coming and going, one good point whose launches all ran in busy periods read as
    # a past plateau of its own at 9.3 ms against a bad end of 6.7, and was named the culprit
    # at 99.5% (tests/test_model_engine.py, the live sequence). Between the threshold and the
    # bad end one point may hold a level of its own (a patch stack's intermediate step).
    on_upper = (inner >= t_log + 3 * sd) & (np.abs(inner - bad) > 3 * sd)
    if np.sum(on_upper & (inner > bad)) == 1:
        on_upper &= inner <= bad
    upper = inner[on_upper]
    below = (good, 0.0)
    if len(lower):
        paid = _occam(t_log - good, int(inner_n[on_lower].sum()), sd)
        below = (float(np.median(lower)), paid)
    past = (bad, 0.0)
    if len(upper):
        paid = _occam(bad - t_log + PAST_REACH, int(inner_n[on_upper].sum()), sd)
        past = (float(np.median(upper)), paid)
    return below, past
