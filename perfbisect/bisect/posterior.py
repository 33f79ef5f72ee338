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
* time: whether a launch ran slow follows a two-state Markov chain over the launches in the
  order they ran (a slow launch follows a slow one more often than a normal one); its two rates
  are fitted to the session's launches, so a machine with rare lone outliers is not treated like
  one with bursts;
* the crossing is the first run whose level is at or past the threshold; its posterior over the
  measured points is exact for the levels (dynamic programming over the runs) given each
  launch's chance of being slow, and that chance is read from the chain given the other launches
  (a few rounds of alternating the two).

Pure computation, no I/O: the engine asks it before naming a crossing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

# A slow launch is this many times its level (log-uniform between), with soft edges beyond.
_SLOW_LO, _SLOW_HI = 1.15, 3.0
_SLOW_EDGE_LO, _SLOW_EDGE_HI = 0.03, 0.3  # how fast its density falls off past each edge
_LOG_SLOW = -math.log(math.log(_SLOW_HI / _SLOW_LO))
# Priors of the chain's rates, as (mean, pseudo-launches): a slow launch after a normal one is
# rare; a slow one after a slow one (a burst going on) has moderate odds until the session's
# own launches say otherwise.
_START_PRIOR = (0.03, 40.0)
_STAY_PRIOR = (0.3, 4.0)
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
    run slow; ``start``/``stay``: the fitted rates of the chain."""

    crossing: list[float]
    slow: list[float]
    start: float
    stay: float

    def past(self, point: int) -> float:
        """The probability that measured point ``point`` is at or past the threshold."""
        return sum(self.crossing[: point + 1])


def _logsumexp_last(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """log(sum(exp)) over the last axis; -inf where every entry is -inf (or there is none)."""
    if values.shape[-1] == 0:
        return np.full(values.shape[:-1], -np.inf)
    top = np.max(values, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(values - safe), axis=-1)) + safe[..., 0]
    return np.where(np.isfinite(top[..., 0]), out, -np.inf)


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values, default=-math.inf)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


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
    return -0.5 * (u / sd) ** 2 - math.log(sd) - 0.5 * _LOG_2PI


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
    start, stay = _START_PRIOR[0], _STAY_PRIOR[0]
    q = [start / (1 - stay + start)] * len(launches)  # each launch's chance of running slow
    crossing: list[float] = [0.0] * points
    slow: list[float] = list(q)
    cells = np.asarray(grid)
    u = np.asarray(xs)[:, None] - cells[None, :]  # each launch against each level
    normal, slow_at = _log_normal_grid(u, sd), _log_slow_grid(u)
    owner = np.asarray([launch.point for launch in launches])
    for _ in range(_ROUNDS):
        slow_rate = np.asarray(q)[:, None]
        mix = np.logaddexp(np.log1p(-slow_rate) + normal, np.log(slow_rate) + slow_at)
        point_ll = np.zeros((points, len(grid)))
        np.add.at(point_ll, owner, mix)
        crossing, level_of = _crossing_by_runs(
            point_ll, cells, below, log_density, log_change, log_stay
        )
        emit = [
            (
                _log_normal(xs[t] - level_of[launch.point], sd),
                _log_slow(xs[t] - level_of[launch.point]),
            )
            for t, launch in enumerate(launches)
        ]
        q, slow, start, stay = _fit_chain(emit, start, stay)
    return CrossingPosterior(crossing, slow, start, stay)


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


def _fit_chain(
    emit: Sequence[tuple[float, float]], start: float, stay: float
) -> tuple[list[float], list[float], float, float]:
    """Fit the chain's rates to the launches (a few EM rounds, with the priors as
    pseudo-counts). Returns each launch's chance of being slow given the *other* launches (what
    the levels' likelihood takes as its prior), given all of them (its own value too), and the
    rates."""
    for _ in range(3):
        _, _, _, counts = _forward_backward(emit, start, stay)
        m, w = _START_PRIOR
        start = (counts[1] + m * w) / (counts[0] + counts[1] + w)
        m, w = _STAY_PRIOR
        stay = (counts[3] + m * w) / (counts[2] + counts[3] + w)
    _, cavity, posterior, _ = _forward_backward(emit, start, stay)
    return [min(0.999, max(1e-4, c)) for c in cavity], posterior, start, stay


def _forward_backward(
    emit: Sequence[tuple[float, float]], start: float, stay: float
) -> tuple[float, list[float], list[float], list[float]]:
    """Log-likelihood; each launch's probability of being slow given the other launches only,
    and given all of them; the expected transition counts (N->N, N->S, S->N, S->S). Scaled
    probabilities (each step normalised), not logs: the chain has two states and this runs at
    every step of a search."""
    t00, t01, t10, t11 = 1 - start, start, 1 - stay, stay
    init = start / (1 - stay + start)
    n = len(emit)
    # each launch's emission, scaled so that the larger of the two is 1 (the scale is kept)
    en, es, scale = [], [], 0.0
    for e0, e1 in emit:
        m = max(e0, e1)
        en.append(math.exp(e0 - m))
        es.append(math.exp(e1 - m))
        scale += m
    pred: list[tuple[float, float]] = []  # P(state | launches before it)
    alpha: list[tuple[float, float]] = []  # P(state | launches up to it)
    norms: list[float] = []
    log_like = scale
    for t in range(n):
        if t == 0:
            p0, p1 = 1 - init, init
        else:
            a0, a1 = alpha[-1]
            p0, p1 = a0 * t00 + a1 * t10, a0 * t01 + a1 * t11
        pred.append((p0, p1))
        f0, f1 = p0 * en[t], p1 * es[t]
        c = f0 + f1
        norms.append(c)
        log_like += math.log(c)
        alpha.append((f0 / c, f1 / c))
    beta: list[tuple[float, float]] = [(1.0, 1.0)] * n
    for t in range(n - 2, -1, -1):
        n1, s1 = en[t + 1] * beta[t + 1][0], es[t + 1] * beta[t + 1][1]
        c = norms[t + 1]
        beta[t] = ((t00 * n1 + t01 * s1) / c, (t10 * n1 + t11 * s1) / c)
    cavity, posterior = [], []
    for t in range(n):
        b0, b1 = beta[t]
        c_slow, c_normal = pred[t][1] * b1, pred[t][0] * b0
        cavity.append(c_slow / (c_slow + c_normal))
        g_slow, g_normal = alpha[t][1] * b1, alpha[t][0] * b0
        posterior.append(g_slow / (g_slow + g_normal))
    counts = [0.0, 0.0, 0.0, 0.0]
    trans = ((t00, t01), (t10, t11))
    for t in range(n - 1):
        e = (en[t + 1] * beta[t + 1][0], es[t + 1] * beta[t + 1][1])
        c = norms[t + 1]
        for i in (0, 1):
            for k in (0, 1):
                counts[2 * i + k] += alpha[t][i] * trans[i][k] * e[k] / c
    return log_like, cavity, posterior, counts
