"""How sure the launches make a claimed crossing: a posterior over where the first configuration
at or past the threshold lies, for a machine whose slow launches come in bursts.

The search judges each point on its own launches. A shared machine's burst slows a few launches in
a row by 1.5-2x, so a good point's search launch and its verification launch right after it can
both land in the bad range, and nothing in the point's own launches tells the two apart. What does
is the rest of the session: *when* each launch ran (a burst's launches are neighbours in time)
and *what the neighbouring points measured* (levels change only at steps, so points between two
steps share one level). This module weighs both:

* levels: the measured points, in path order, fall into runs of one level each; a change between
  two neighbouring measured points has a prior that grows with the positions between them; each
  run's level is unknown (integrated over, with a flat prior on a log scale), so an extra run
  pays for itself only when the launches ask for it;
* launches: a normal launch is log-normal around its point's level with the session's noise; a
  slow one is 1.15-3x the level (log-uniform: bursts and outliers of 1.3-2x), never faster;
* time: the machine's state follows a Markov chain over the launches in the order they ran:
  normal, or busy with one slow-down factor (a grid over 1.15-3x) that a busy period keeps
  while it lasts (another job's share of the machine), so a good configuration launched in
  one reads 1.6x like its neighbours in time, and a known configuration launched next to a
  doubted one (the verification's back-to-back pairs) says what the period's factor is; its
  rates (a period starts, lasts, changes its factor) are fitted to the session's launches, so
  a machine with rare lone outliers is not treated like one with busy periods;
* the crossing is the first run whose level is at or past the threshold; its posterior over the
  measured points is exact for the levels (dynamic programming over the runs) given each
  launch's chance of being slow (and its factor), and those are read from the chain given the
  other launches (a few rounds of alternating the two, from three starts, weighed by how well
  each fixed point explains the launches: a busy period over a whole run of points and a level
  of their own are both kept in view).

Pure computation, no I/O: the engine asks it before naming a crossing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

# A slow launch is this many times its level (log-uniform between), with soft edges beyond.
_SLOW_LO, _SLOW_HI = 1.15, 3.0
_SLOW_EDGE_LO, _SLOW_EDGE_HI = 0.03, 0.3  # how fast its density falls off past each edge
_LOG_SLOW = -math.log(math.log(_SLOW_HI / _SLOW_LO))
# The machine's busy states: a busy period (another job, a compile, power capping) slows the
# launches it covers by one factor, kept while it lasts; these factors, log-spaced over the
# slow range, are the chain's busy states. A launch in a busy state lies around its level times
# the state's factor (the session's noise widened by half the grid's spacing), or, with
# _BUSY_LOOSE, anywhere in the slow range (an outlier, a burst whose launches each differ).
_BUSY_STATES = 16
_BUSY_LOG = [
    math.log(_SLOW_LO) + k * math.log(_SLOW_HI / _SLOW_LO) / (_BUSY_STATES - 1)
    for k in range(_BUSY_STATES)
]
_BUSY_SPREAD = 0.5 * math.log(_SLOW_HI / _SLOW_LO) / (_BUSY_STATES - 1)
_BUSY_LOOSE = 0.1
# Priors of the chain's rates, as (mean, pseudo-launches): a slow launch after a normal one is
# rare; a slow one after a slow one (a burst going on) has moderate odds until the session's
# own launches say otherwise; a busy launch after a busy one keeps its factor unless the
# launches say that the machine's bursts slow each launch by its own factor.
_START_PRIOR = (0.03, 40.0)
_STAY_PRIOR = (0.3, 4.0)
_SWITCH_PRIOR = (0.3, 4.0)
_ROUNDS = 3  # rounds of alternating levels and the chain
_GRID_STEP = 0.5  # the level grid's step, in units of the noise
_LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class TimedLaunch:
    """One launch, in the order they ran: which measured point (index into the measured points
    in path order: 0 the better end, the last one the worse end) and its value in "time" terms
    (larger is worse; positive)."""

    point: int
    time: float


@dataclass(frozen=True)
class CrossingPosterior:
    """``crossing[j]``: the probability that measured point j is the first one at or past the
    threshold (entry 0, the better end, is 0); ``slow``: each launch's probability of having
    run slow (in a busy state of the machine); ``start``/``stay``: the fitted rates of the
    chain (normal -> busy, busy -> busy); ``switch``: a busy launch's chance of a factor other
    than the one before it."""

    crossing: list[float]
    slow: list[float]
    start: float
    stay: float
    switch: float = 0.0

    def past(self, point: int) -> float:
        """The probability that measured point ``point`` is at or past the threshold."""
        return sum(self.crossing[: point + 1])


def _logsumexp_last(values: NDArray[Any]) -> NDArray[np.float64]:
    """log(sum(exp)) over the last axis; -inf where every entry is -inf (or there is none)."""
    if values.shape[-1] == 0:
        return np.full(values.shape[:-1], -np.inf)
    top = np.max(values, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(values - safe), axis=-1)) + safe[..., 0]
    return np.where(np.isfinite(top[..., 0]), out, -np.inf)


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    if a < b:
        a, b = b, a
    return a + math.log1p(math.exp(b - a))


def _log_normal(u: float, sd: float) -> float:
    return -0.5 * (u / sd) ** 2 - math.log(sd) - 0.5 * _LOG_2PI


def _log_slow(u: float) -> float:
    lo, hi = math.log(_SLOW_LO), math.log(_SLOW_HI)
    if u < lo:
        return _LOG_SLOW - (lo - u) / _SLOW_EDGE_LO
    if u > hi:
        return _LOG_SLOW - (u - hi) / _SLOW_EDGE_HI
    return _LOG_SLOW


def _log_normal_grid(u: NDArray[np.float64], sd: float) -> NDArray[np.float64]:
    # asarray: numpy's stubs differ between releases on the dtype this arithmetic gives
    return np.asarray(-0.5 * (u / sd) ** 2 - math.log(sd) - 0.5 * _LOG_2PI, dtype=np.float64)


def _log_slow_grid(u: NDArray[np.float64]) -> NDArray[np.float64]:
    lo, hi = math.log(_SLOW_LO), math.log(_SLOW_HI)
    below = _LOG_SLOW - (lo - u) / _SLOW_EDGE_LO
    above = _LOG_SLOW - (u - hi) / _SLOW_EDGE_HI
    return np.where(u < lo, below, np.where(u > hi, above, _LOG_SLOW))


def crossing_posterior(
    launches: Sequence[TimedLaunch],
    points: int,
    gaps: Sequence[int],
    threshold: float,
    rel_sd: float,
    changes: float = 2.0,
) -> CrossingPosterior:
    """The posterior of the crossing among ``points`` measured points. ``gaps[i]`` (i >= 1):
    positions between measured point i - 1 and i (a level change is likelier across many);
    ``changes``: level changes expected along the whole path, for that prior; ``threshold``
    in time terms. Every measured point needs at least one launch."""
    sd = max(rel_sd, 0.01)
    xs = [math.log(launch.time) for launch in launches]
    lo_x, hi_x = min(xs) - 0.2, max(xs) + 0.1
    step = _GRID_STEP * sd
    grid = [lo_x + step * (k + 0.5) for k in range(max(1, math.ceil((hi_x - lo_x) / step)))]
    log_density = math.log(step / (hi_x - lo_x))  # a run's flat level prior, per grid cell
    log_t = math.log(threshold)
    below = np.asarray([g < log_t for g in grid])
    total = sum(gaps[1:points])
    rate = changes / max(total, 1)
    log_change = [0.0] * points
    log_stay = [0.0] * points
    for i in range(1, points):
        p = min(1 - 1e-9, max(1e-9, 1 - (1 - rate) ** max(gaps[i], 1)))
        log_change[i], log_stay[i] = math.log(p), math.log(1 - p)
    cells = np.asarray(grid)
    u = np.asarray(xs)[:, None] - cells[None, :]  # each launch against each level
    spread = math.hypot(sd, _BUSY_SPREAD)
    normal, loose = _log_normal_grid(u, sd), _log_slow_grid(u)
    factors = np.asarray(_BUSY_LOG)
    at_factor = _log_normal_grid(u[..., None] - factors, spread)  # (launch, level, state)
    owner = np.asarray([launch.point for launch in launches])

    def settle(levels: list[float] | None) -> tuple[float, CrossingPosterior]:
        """Alternate the levels and the chain from a start (the chain's priors, or given
        levels); the fixed point's posterior and its score (the launches' likelihood under
        the chain given its levels, and the prior of its division into runs)."""
        start, stay, switch = _START_PRIOR[0], _STAY_PRIOR[0], _SWITCH_PRIOR[0]
        q0 = start / (1 - stay + start)
        busy: NDArray[Any] = np.full((len(launches), _BUSY_STATES), q0 / _BUSY_STATES)
        slow: list[float] = [q0] * len(launches)
        if levels is not None:
            emit = [_emission(xs[t] - levels[w.point], sd, spread) for t, w in enumerate(launches)]
            cavity, slow, start, stay, switch, _ = _fit_chain(emit, start, stay, switch)
            busy = np.asarray(cavity)
        crossing: list[float] = [0.0] * points
        log_like = 0.0
        level_of: list[float] = [0.0] * points
        for _ in range(_ROUNDS):
            q = np.clip(busy.sum(axis=1), 1e-4, 0.999)[:, None]
            with np.errstate(divide="ignore"):
                tight = _logsumexp_last(np.log((1 - _BUSY_LOOSE) * busy)[:, None, :] + at_factor)
            slow_at = np.logaddexp(tight, math.log(_BUSY_LOOSE) + np.log(q) + loose)
            mix = np.logaddexp(np.log1p(-q) + normal, slow_at)
            point_ll = np.zeros((points, len(grid)))
            np.add.at(point_ll, owner, mix)
            crossing, level_of = _crossing_by_runs(
                point_ll, cells, below, log_density, log_change, log_stay
            )
            emit = [
                _emission(xs[t] - level_of[w.point], sd, spread) for t, w in enumerate(launches)
            ]
            cavity, slow, start, stay, switch, log_like = _fit_chain(emit, start, stay, switch)
            busy = np.asarray(cavity)
        division = log_density + sum(
            log_change[i] + log_density if level_of[i] != level_of[i - 1] else log_stay[i]
            for i in range(1, points)
        )
        return log_like + division, CrossingPosterior(crossing, slow, start, stay, switch)

    # Three starts: the chain's priors (launches normal unless they stand out); every point at
    # the lowest level measured up to it on the path (a busy period that slowed a run of
    # points alike, which each point's own launches cannot tell from a level); every point at
    # the level of the end whose side of the threshold it measured on (launches beyond the
    # worse end slow ones, not a level). Alternating from one start keeps the explanation it
    # began with; the fixed points are weighed by how well each explains the launches.
    own: dict[int, float] = {}
    for t, w in enumerate(launches):
        own[w.point] = min(xs[t], own.get(w.point, math.inf))
    mins = [own.get(k, math.inf) for k in range(points)]
    envelope = list(itertools.accumulate(mins, min))
    ends = [mins[0] if mins[k] < log_t else mins[-1] for k in range(points)]
    fits = [settle(None), settle(envelope), settle(ends)]
    top = max(score for score, _ in fits)
    weights = [math.exp(score - top) for score, _ in fits]
    total_w = sum(weights)
    best = max(fits, key=lambda f: f[0])[1]
    crossing = [
        sum(wt * f.crossing[j] for wt, (_, f) in zip(weights, fits)) / total_w
        for j in range(points)
    ]
    return CrossingPosterior(crossing, best.slow, best.start, best.stay, best.switch)


def slow_launches(
    launches: Sequence[TimedLaunch], points: int, gaps: Sequence[int], rel_sd: float
) -> list[float]:
    """Each launch's probability of having run slow (in the order given), when no threshold is
    known yet (the endpoints' own launches): the levels' most likely division and the chain do
    not depend on one, only the crossing does, so any threshold between the points serves."""
    by_point: dict[int, float] = {}
    for launch in launches:
        by_point[launch.point] = min(launch.time, by_point.get(launch.point, math.inf))
    placeholder = math.sqrt(by_point[0] * by_point[points - 1])
    return crossing_posterior(launches, points, gaps, placeholder, rel_sd).slow


def _crossing_by_runs(
    point_ll: NDArray[np.float64],
    grid: NDArray[np.float64],
    below: NDArray[np.bool_],
    log_density: float,
    log_change: Sequence[float],
    log_stay: Sequence[float],
) -> tuple[list[float], list[float]]:
    """The crossing's posterior over the measured points (summing over every division of the
    points into runs of one level), and each point's level in the most likely division."""
    n = len(point_ll)
    # Log-likelihood of every run a..b (the sum of its points' rows, by prefix sums) with its
    # level below / at or past the threshold, and the run's best level; inner: no change
    # inside the run.
    prefix = np.vstack([np.zeros(point_ll.shape[1]), np.cumsum(point_ll, axis=0)])
    acc = prefix[None, 1:, :] - prefix[:-1, None, :]  # acc[a, b] = rows a..b summed
    stays = np.concatenate([[0.0], np.cumsum(log_stay[1:])])
    inner = stays[None, :] - stays[:, None]  # inner[a, b] = log_stay[a+1..b]
    split = int(np.count_nonzero(below))  # the grid is sorted: cells below come first
    lo_part = _logsumexp_last(acc[..., :split])
    hi_part = _logsumexp_last(acc[..., split:])
    best_cell = np.argmax(acc, axis=2)
    best_ll = np.take_along_axis(acc, best_cell[..., None], axis=2)[..., 0]
    valid = np.triu(np.ones((n, n), dtype=bool))
    run_below = np.where(valid, lo_part + log_density + inner, -np.inf)
    run_above = np.where(valid, hi_part + log_density + inner, -np.inf)
    run_any = np.logaddexp(run_below, run_above)
    run_score = np.where(valid, best_ll + log_density + inner, -np.inf)
    run_level = grid[best_cell]
    change = np.asarray(log_change, dtype=float)
    # Forward: points 0..b in runs all below, the last run ending at b (``before[a]``: the
    # points before a run starting at a, all below).
    before = np.full(n, -np.inf)
    before[0] = 0.0
    fwd_below = np.full(n, -np.inf)
    for b in range(n):
        fwd_below[b] = np.logaddexp.reduce(before[: b + 1] + run_below[: b + 1, b])
        if b + 1 < n:
            before[b + 1] = fwd_below[b] + change[b + 1]
    # Backward: points a..n-1 in runs of any level, a run starting at a (``after[b]``: the
    # points after a run ending at b).
    after = np.full(n, -np.inf)
    after[n - 1] = 0.0
    for a in range(n - 1, -1, -1):
        bwd = np.logaddexp.reduce(run_any[a, a:] + after[a:])
        if a > 0:
            after[a - 1] = change[a] + bwd
    first = np.concatenate([[-np.inf], fwd_below[:-1] + change[1:]])
    with np.errstate(invalid="ignore"):
        weights = first + _logsumexp_last(run_above + after[None, :])
    weights[0] = -np.inf
    finite = weights[np.isfinite(weights)]
    crossing = np.exp(weights - np.logaddexp.reduce(finite)).tolist() if finite.size else [0.0] * n
    # The most likely division (Viterbi over runs) gives each point a level for the chain.
    best = np.full(n, -np.inf)
    back = [0] * n
    lead = np.full(n, -np.inf)  # lead[a]: the best division of the points before a
    lead[0] = 0.0
    for b in range(n):
        scores = lead[: b + 1] + run_score[: b + 1, b]
        back[b] = int(np.argmax(scores))
        best[b] = scores[back[b]]
        if b + 1 < n:
            lead[b + 1] = best[b] + change[b + 1]
    level_of = [0.0] * n
    b = n - 1
    while b >= 0:
        a = back[b]
        for i in range(a, b + 1):
            level_of[i] = float(run_level[a, b])
        b = a - 1
    return [float(c) for c in crossing], level_of


def _emission(u: float, sd: float, spread: float) -> list[float]:
    """A launch ``u`` (log) above its level: its log-density in each state of the machine
    (normal, then each busy factor)."""
    loose = math.log(_BUSY_LOOSE) + _log_slow(u)
    tight = math.log(1 - _BUSY_LOOSE)
    return [
        _log_normal(u, sd),
        *(_logaddexp(tight + _log_normal(u - f, spread), loose) for f in _BUSY_LOG),
    ]


def _fit_chain(
    emit: Sequence[Sequence[float]], start: float, stay: float, switch: float
) -> tuple[list[list[float]], list[float], float, float, float, float]:
    """Fit the chain's rates to the launches (a few EM rounds, with the priors as
    pseudo-counts). Returns each launch's chance of each busy state given the *other* launches
    (what the levels' likelihood takes as its prior), its chance of having run slow given all
    of them (its own value too), the rates and the launches' log-likelihood under them."""
    for _ in range(3):
        _, _, _, counts = _forward_backward(emit, start, stay, switch)
        m, w = _START_PRIOR
        start = (counts[1] + m * w) / (counts[0] + counts[1] + w)
        m, w = _STAY_PRIOR
        stay = (counts[3] + counts[4] + m * w) / (counts[2] + counts[3] + counts[4] + w)
        m, w = _SWITCH_PRIOR
        switch = (counts[4] + m * w) / (counts[3] + counts[4] + w)
    log_like, cavity, posterior, _ = _forward_backward(emit, start, stay, switch)
    return cavity, posterior, start, stay, switch, log_like


def _forward_backward(
    emit: Sequence[Sequence[float]], start: float, stay: float, switch: float
) -> tuple[float, list[list[float]], list[float], list[float]]:
    """Log-likelihood; each launch's probability of each busy state given the other launches
    only; its probability of being slow given all of them; the expected transition counts
    (normal -> normal, normal -> busy, busy -> normal, busy -> the same factor, busy -> another
    factor). Scaled probabilities (each step normalised), not logs; the transitions have a
    shape (a busy period starts at any factor, keeps it or switches to any other) that makes
    each step linear in the states, not quadratic."""
    k_n = _BUSY_STATES
    to_busy = start / k_n
    keep = stay * (1 - switch)
    hop = stay * switch / (k_n - 1)
    init_busy = start / (1 - stay + start)
    n = len(emit)
    scaled: list[list[float]] = []
    log_like = 0.0
    for e in emit:
        m = max(e)
        scaled.append([math.exp(v - m) for v in e])
        log_like += m
    pred: list[list[float]] = []
    alpha: list[list[float]] = []
    norms: list[float] = []
    for t in range(n):
        if t == 0:
            p = [1 - init_busy, *([init_busy / k_n] * k_n)]
        else:
            a = alpha[-1]
            total = sum(a[1:])
            p = [a[0] * (1 - start) + total * (1 - stay)]
            p.extend(a[0] * to_busy + a[k] * keep + (total - a[k]) * hop for k in range(1, k_n + 1))
        pred.append(p)
        f = [pk * ek for pk, ek in zip(p, scaled[t])]
        c = sum(f)
        norms.append(c)
        log_like += math.log(c)
        alpha.append([v / c for v in f])
    ones = [1.0] * (k_n + 1)
    beta: list[list[float]] = [ones] * n
    for t in range(n - 2, -1, -1):
        g = [ek * bk for ek, bk in zip(scaled[t + 1], beta[t + 1])]
        big = sum(g[1:])
        c = norms[t + 1]
        b = [((1 - start) * g[0] + to_busy * big) / c]
        b.extend(
            ((1 - stay) * g[0] + keep * g[k] + hop * (big - g[k])) / c for k in range(1, k_n + 1)
        )
        beta[t] = b
    cavity: list[list[float]] = []
    posterior: list[float] = []
    for t in range(n):
        given_others = [pk * bk for pk, bk in zip(pred[t], beta[t])]
        total = sum(given_others)
        cavity.append([min(0.999, max(1e-6, v / total)) for v in given_others[1:]])
        post = [ak * bk for ak, bk in zip(alpha[t], beta[t])]
        posterior.append(1 - post[0] / sum(post))
    counts = [0.0] * 5
    for t in range(n - 1):
        g = [ek * bk for ek, bk in zip(scaled[t + 1], beta[t + 1])]
        big = sum(g[1:])
        c = norms[t + 1]
        a = alpha[t]
        busy_now = sum(a[1:])
        counts[0] += a[0] * (1 - start) * g[0] / c
        counts[1] += a[0] * to_busy * big / c
        counts[2] += busy_now * (1 - stay) * g[0] / c
        same = sum(a[k] * g[k] for k in range(1, k_n + 1))
        counts[3] += keep * same / c
        counts[4] += hop * (busy_now * big - same) / c
    return log_like, cavity, posterior, counts
