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
    below = [g < log_t for g in grid]
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
    for _ in range(_ROUNDS):
        point_ll = [[0.0] * len(grid) for _ in range(points)]
        for t, launch in enumerate(launches):
            log_keep, log_rate = math.log(1 - q[t]), math.log(q[t])
            row = point_ll[launch.point]
            for k, g in enumerate(grid):
                u = xs[t] - g
                row[k] += _logaddexp(log_keep + _log_normal(u, sd), log_rate + _log_slow(u))
        crossing, level_of = _crossing_by_runs(
            point_ll, grid, below, log_density, log_change, log_stay
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
    point_ll: Sequence[Sequence[float]],
    grid: Sequence[float],
    below: Sequence[bool],
    log_density: float,
    log_change: Sequence[float],
    log_stay: Sequence[float],
) -> tuple[list[float], list[float]]:
    """The crossing's posterior over the measured points (summing over every division of the
    points into runs of one level), and each point's level in the most likely division."""
    n = len(point_ll)
    cells = len(grid)
    # Log-likelihood of every run a..b with its level below / at or past the threshold, and
    # the best level of the run.
    run_below = [[-math.inf] * n for _ in range(n)]
    run_above = [[-math.inf] * n for _ in range(n)]
    run_best = [[(-math.inf, 0.0)] * n for _ in range(n)]
    for a in range(n):
        acc = [0.0] * cells
        inner = 0.0  # no change inside the run
        for b in range(a, n):
            row = point_ll[b]
            for k in range(cells):
                acc[k] += row[k]
            if b > a:
                inner += log_stay[b]
            lo_part = _logsumexp([acc[k] for k in range(cells) if below[k]])
            hi_part = _logsumexp([acc[k] for k in range(cells) if not below[k]])
            run_below[a][b] = lo_part + log_density + inner
            run_above[a][b] = hi_part + log_density + inner
            k_best = max(range(cells), key=acc.__getitem__)
            run_best[a][b] = (acc[k_best] + log_density + inner, grid[k_best])
    # Forward: points 0..b in runs all below, the last run ending at b.
    fwd_below = [-math.inf] * n
    for b in range(n):
        terms = []
        for a in range(b + 1):
            before = 0.0 if a == 0 else fwd_below[a - 1] + log_change[a]
            terms.append(before + run_below[a][b])
        fwd_below[b] = _logsumexp(terms)
    # Backward: points a..n-1 in runs of any level, a run starting at a.
    bwd_any = [-math.inf] * (n + 1)
    bwd_any[n] = 0.0
    for a in range(n - 1, -1, -1):
        terms = []
        for b in range(a, n):
            after = 0.0 if b == n - 1 else log_change[b + 1] + bwd_any[b + 1]
            terms.append(_logaddexp(run_below[a][b], run_above[a][b]) + after)
        bwd_any[a] = _logsumexp(terms)
    weights = [-math.inf] * n
    for j in range(1, n):
        first = fwd_below[j - 1] + log_change[j]
        terms = []
        for b in range(j, n):
            after = 0.0 if b == n - 1 else log_change[b + 1] + bwd_any[b + 1]
            terms.append(run_above[j][b] + after)
        weights[j] = first + _logsumexp(terms)
    norm = _logsumexp(weights)
    crossing = [0.0 if w == -math.inf else math.exp(w - norm) for w in weights]
    # The most likely division (Viterbi over runs) gives each point a level for the chain.
    best = [-math.inf] * n
    back = [0] * n
    for b in range(n):
        for a in range(b + 1):
            before = 0.0 if a == 0 else best[a - 1] + log_change[a]
            score = before + run_best[a][b][0]
            if score > best[b]:
                best[b], back[b] = score, a
    level_of = [0.0] * n
    b = n - 1
    while b >= 0:
        a = back[b]
        for i in range(a, b + 1):
            level_of[i] = run_best[a][b][1]
        b = a - 1
    return crossing, level_of


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
    and given all of them; the expected transition counts (N->N, N->S, S->N, S->S)."""
    trans = (
        (math.log(1 - start), math.log(start)),
        (math.log(1 - stay), math.log(stay)),
    )
    init = start / (1 - stay + start)
    prior0 = (math.log(1 - init), math.log(init))
    n = len(emit)
    # pred[t]: log P(state at t | launches before t); alpha[t] adds launch t's own emission.
    pred: list[tuple[float, float]] = []
    alpha: list[tuple[float, float]] = []
    for t in range(n):
        if t == 0:
            p = prior0
        else:
            a = alpha[-1]
            p = (
                _logaddexp(a[0] + trans[0][0], a[1] + trans[1][0]),
                _logaddexp(a[0] + trans[0][1], a[1] + trans[1][1]),
            )
        pred.append(p)
        alpha.append((p[0] + emit[t][0], p[1] + emit[t][1]))
    log_like = _logaddexp(*alpha[-1]) if n else 0.0
    beta: list[tuple[float, float]] = [(0.0, 0.0)] * n
    for t in range(n - 2, -1, -1):
        e, b = emit[t + 1], beta[t + 1]
        beta[t] = (
            _logaddexp(trans[0][0] + e[0] + b[0], trans[0][1] + e[1] + b[1]),
            _logaddexp(trans[1][0] + e[0] + b[0], trans[1][1] + e[1] + b[1]),
        )
    cavity, posterior = [], []
    for t in range(n):
        slow, normal = pred[t][1] + beta[t][1], pred[t][0] + beta[t][0]
        cavity.append(_logistic(slow - normal))
        posterior.append(_logistic(slow + emit[t][1] - normal - emit[t][0]))
    counts = [0.0, 0.0, 0.0, 0.0]
    for t in range(n - 1):
        e, b = emit[t + 1], beta[t + 1]
        for i in (0, 1):
            for k in (0, 1):
                counts[2 * i + k] += math.exp(alpha[t][i] + trans[i][k] + e[k] + b[k] - log_like)
    return log_like, cavity, posterior, counts


def _logistic(x: float) -> float:
    if x >= 0:
        return 1 / (1 + math.exp(-x))
    return math.exp(x) / (1 + math.exp(x))
