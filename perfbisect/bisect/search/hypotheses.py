"""The level hypotheses the search's posterior (model.py) weighs, and each launch's density
under them: the endpoints' levels as read from their launches or lower by a busy factor
(``END_FACTORS``, with a prior per machine chain), plateaus read from the points (each paying
its Occam factor), and each launch's log-density per machine state (normal with lone outliers,
or busy). ``_hypotheses`` builds them all and runs the forward algorithm (machine.py) over
them. Pure numpy, no I/O.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.posterior import _log_normal_grid, _log_slow_grid
from perfbisect.bisect.search.machine import (
    _BUSY_SPREAD,
    _CHAIN_PRIOR,
    _F,
    _K,
    BUSY_MOST,
    _forward,
)

OUTLIER = 0.03  # lone slow launches, whatever the machine's state
# The endpoints' launches ran in busy periods, each end's slowed by one of these factors (log).
# Priors: neither was (0.88); both alike, one period over the endpoint phase (0.06 over the
# factors); one end's and not the other's (0.057 each end, over the factors: an end launched
# again later on a quiet machine reads its level from those launches, and the other end's may
# all have run in periods: in seeded busy worlds the bad end's launches, each in a period,
# set a level twice that of the points past the step, which then read as a plateau below the
# threshold); each end by a factor of its own (0.0024 over the pairs; 0.02 was tried: each
# launch its own factor, seeds 1-5, 1 -> 4 wrong names at >= 99%). The grid is as fine as
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


def _shift_prior(none: float, alike: float, one_end: float, own: float) -> NDArray[np.float64]:
    """Log prior of each pair of end shifts (``_END_SHIFTS``' order): neither end shifted,
    both by one factor, one end's alone, each end by a factor of its own (each class's mass
    spread over its factors)."""
    mass = [none] + [alike / _SHIFTED] * _SHIFTED
    mass += [
        one_end / _SHIFTED if 0 in ik else own / (_SHIFTED * (_SHIFTED - 1))
        for ik in _END_SHIFTS[len(END_FACTORS) :]
    ]
    return np.log(np.asarray(mass, dtype=np.float64))


# The ends' shifts' prior per machine chain. On a chain busy most of the time
# (machine.BUSY_MOST) an end's launches all ran slow about as often as not (two launches in
# three slow: both of an end's two, 0.44), so its level read from them is one guess among
# the factors' (a good end read 1.6x slow set the good level at the bad one's, and a wrong
# step was named at > 99.9%).
_END_SHIFT_PRIOR = np.asarray(
    [
        _shift_prior(0.3, 0.2, 0.2, 0.1) if most else _shift_prior(0.88, 0.06, 0.057, 0.0024)
        for most in BUSY_MOST
    ]
)


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


@dataclass(frozen=True)
class _Launches:
    """The launches as ``believe`` reads them: log values, each launch's point (index into
    the measured points), each point's own level and launch count, the threshold, the noise."""

    xs: NDArray[np.float64]
    idx: NDArray[np.int64]
    own: NDArray[np.float64]
    counts: NDArray[np.int64]
    threshold: float | None
    sd: float
    chains: int  # the machine chains weighed: the first ``chains`` of machine.CHAINS


@dataclass(frozen=True)
class _Hypotheses:
    """Every level hypothesis (end shifts x plateaus) with its log prior per chain, the
    launches' emissions under it, and the forward algorithm's log-likelihood per (chain,
    hypothesis, gap) and last filtered state."""

    priors: NDArray[np.float64]  # (chain, hypothesis)
    levels: list[tuple[float, float, float, float, float]]  # good, bad, threshold, below, past
    emit: tuple[NDArray[np.float64], NDArray[np.float64]]  # below, past
    outlier: tuple[NDArray[np.float64], NDArray[np.float64]]
    loglik: NDArray[np.float64]
    alpha: NDArray[np.float64]

    def weights(self, mass: NDArray[np.float64]) -> NDArray[np.float64]:
        """Each (chain, hypothesis, gap)'s posterior weight (unnormalised), given each gap's
        prior mass."""
        chain_prior = _CHAIN_PRIOR[: len(self.priors)]
        score = self.loglik + chain_prior[:, None, None] + self.priors[:, :, None]
        score = score + np.log(mass)[None, None, :]
        return np.asarray(np.exp(score - score.max()), dtype=np.float64)


def _hypotheses(read: _Launches, good: float, bad: float, doubted: bool) -> _Hypotheses:
    """The level hypotheses: the ends' levels as read, or (``doubted``) lower by the shifts'
    factors, each with the plateaus its points read."""
    xs, idx, own, counts, sd = read.xs, read.idx, read.own, read.counts, read.sd
    threshold = read.threshold
    points = len(counts)
    levels = []
    e_below: list[NDArray[np.float64]] = []  # each launch's log-density in each machine state
    e_past: list[NDArray[np.float64]] = []
    o_below: list[NDArray[np.float64]] = []  # log share of a lone outlier in the normal state
    o_past: list[NDArray[np.float64]] = []
    priors = []
    h = read.chains
    shifts = zip(_END_SHIFTS, _END_SHIFT_PRIOR[:h].T) if doubted else [((0, 0), np.zeros(h))]
    for (i, k), shift_prior in shifts:
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
            at_below = _side_levels(xs, idx, points, g, lo, sd)
            at_past = _side_levels(xs, idx, points, b, hi, sd)
            for at, to_e, to_o in (
                (at_below, e_below, o_below),
                (at_past, e_past, o_past),
            ):
                states, outlier = _emissions(xs, at, sd)
                to_e.append(states)
                to_o.append(outlier)
    emit = (np.asarray(e_below), np.asarray(e_past))
    loglik, alpha = _forward(emit[0], emit[1], idx, points - 1, chains=h)
    return _Hypotheses(
        np.asarray(priors).T,
        levels,
        emit,
        (np.asarray(o_below), np.asarray(o_past)),
        loglik,
        alpha,
    )


def _end_levels(
    read: tuple[NDArray[np.float64], NDArray[np.int64]],
    own: NDArray[np.float64],
    threshold: float | None,
    sd: float,
) -> tuple[float, float]:
    """The levels of the good and the bad run (log): each end's launches pooled with the
    points that measured at its level (within ``max(10%, 2.5 noise)`` of its own level, two
    points at least, on its side of the threshold), so that two launches of an end that
    happened to run fast or slow do not set the levels (and a derived threshold) alone. A
    three-point question (reference, configuration, reference: the multi-axis search's) pools
    its one configuration's launches with the end at its level: it is launched until the
    question is answered, and two launches of an end, each off by a noise width, set a level
    its dozen launches then read 1.8 noise widths from one by one, which only a machine slow
    at each of them explained (multiaxis_bench, quiet, trial 756: `nccl 2.26.2` at 28.3 ms
    against a bad end read at 29.8 was judged below a threshold of 22.5 at 99.99%)."""
    xs, idx = read
    good, bad = float(own[0]), float(own[-1])
    tol = max(math.log(1.1), 2.5 * sd)
    inner = own[1:-1]
    t_log = math.log(threshold) if threshold is not None else (good + bad) / 2
    out: list[float | None] = []
    for end, side in zip((0, len(own) - 1), (inner < t_log, inner >= t_log)):
        launches = xs[idx == end]
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
        if len(inner) == 1 and len(near) == 1:
            theirs = xs[idx == 1]
            near = theirs[np.abs(theirs - near[0]) <= tol]
        elif len(near) < 2:
            out.append(None)
            continue
        out.append(float(np.median(np.concatenate([mine, near]))))
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
