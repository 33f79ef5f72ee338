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
  levels, and those levels are read from the endpoints' launches the chain holds normal,
  pooled with the points measured at their level (a three-point question's one point too);
* launches: log-normal around their point's level with the session's noise, except lone
  outliers (hypotheses.py: ``OUTLIER`` of launches, 1.15-3x slower; ``WIDE``, off their level
  either way, three noise widths wide) and the machine's state;
* the machine: normal, or busy, following a Markov chain over the launch order. Half of the
  busy periods keep one slow-down factor (a grid over 1.3-3x) while they last; in the other
  half each launch draws its own factor from that grid (load that varies launch by launch).
  Three chains are weighed by how well each explains the launches: a quiet machine (periods
  rare), a shared one (periods start after about one launch in twenty and last about ten)
  and one busy most of the time, launch by launch (six launches in ten slow). Back-to-back
  launches of two points in one steady period share its factor, which is what lets a pair
  tell a step from a slow period;
* plateaus read from the points (hypotheses.py, ``_plateaus``) are a hypothesis weighed against
  none (even odds), as the endpoints' slow-downs are: slow launches of a busy period scattered
  along the path read like a plateau worse than the bad end, and a plateau taken as given
  explained them without the period, which then named a wrong neighbour at 99%. A plateau's
  level is fitted to its own launches, so it pays its Occam factor (``_occam``: the width its
  launches pin the level to, against the range a plateau's level may take), as a busy
  period's factor pays for its grid: unpaid, a steady period read as a plateau for free.

The forward algorithm (machine.py) runs once per gap (vectorised over gaps and the chains),
so the posterior is exact for the model, not a point estimate of the machine's state; with
``per_launch``, forward-backward gives each launch's probability of having run slow. Pure
numpy, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.search.hypotheses import (
    _end_levels,
    _hypotheses,
    _Launches,
    point_level,
)
from perfbisect.bisect.search.machine import _TRANS, BUSY_MOST, CHAINS, _slow_launches


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

    @property
    def reads_shared(self) -> bool:
        """The machine with load (busy periods, or busy most of the time) is the likelier one:
        where the stop rule asks two back-to-back pairs and the ends' levels in doubt."""
        return self.shared >= 0.5

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


def believe(
    launches: Sequence[tuple[int, float]],
    n: int,
    threshold: float | None,
    sd: float,
    prior: Sequence[float] | None = None,
    per_launch: bool = False,
    chains: int = len(CHAINS),
    ends_doubted: bool = False,
) -> Belief:
    """The posterior given ``launches`` ((position, value in time terms: larger is worse), in
    the order they ran; both endpoints among them), a path of positions 0..n, the threshold
    (time terms; None: derived from the endpoints), the session's relative noise and each
    position's prior weight of being the crossing (0..n, positive; None: all alike). With
    ``per_launch``, also each launch's probability of having run slow (``Belief.slow``).
    ``chains``: the machine chains weighed, the first of machine.CHAINS. ``ends_doubted``: the
    ends' busy shifts weighed whatever the launches say (the stop rule asks this posterior too
    before it names a crossing: segment.py, ``_holds_with_ends_doubted``)."""
    sd = max(sd, 0.01)
    weights = None if prior is None else np.asarray(prior, dtype=np.float64)
    pos = np.asarray([p for p, _ in launches], dtype=np.int64)
    xs = np.log(np.asarray([v for _, v in launches], dtype=np.float64))
    points = np.unique(pos)
    idx = np.searchsorted(points, pos)
    own = np.asarray([point_level(xs[idx == i]) for i in range(len(points))])
    counts = np.bincount(idx, minlength=len(points))
    good, bad = _end_levels((xs, idx), own, threshold, sd)
    n_good, n_bad = int(counts[0]), int(counts[-1])
    gaps = len(points) - 1
    # Only launches that no level read from the endpoints explains make the shifts worth
    # weighing: something faster than the good level, the bad end below the threshold, or
    # points at a level of their own between the good end and the threshold (a plateau, or
    # the level of an end whose launches all ran slow).
    t_first = math.log(threshold) if threshold is not None else (good + bad) / 2
    inner = own[1:-1]
    doubted = (
        ends_doubted
        or bool(np.any(xs < good - 3 * sd))
        or bool(np.any(xs[idx == len(points) - 1] < t_first))
        or bool(np.any((inner > good + 3 * sd) & (inner < t_first - 3 * sd)))
    )
    read = _Launches(xs, idx, own, counts, threshold, sd, chains)
    hyp = _hypotheses(read, good, bad, doubted)
    if weights is None:
        mass = np.diff(points).astype(np.float64)  # a gap's prior: its positions
    else:
        assert len(weights) == n + 1 and bool(np.all(weights[1:] > 0)), "prior: n+1 weights"
        cum = np.concatenate([[0.0], np.cumsum(weights)])
        mass = cum[points[1:] + 1] - cum[points[:-1] + 1]
    w = hyp.weights(mass)
    if not doubted and float(w[BUSY_MOST[:chains]].sum() / w.sum()) >= 0.5:
        # A machine likelier busy most of the time than not may have run an end's every
        # launch slow: the ends' levels read from them are then a guess among the shifts'.
        # (At a 1% share, a quiet world's middle level near the threshold, which the third
        # chain explained at 26%, let a good end 1.25x lower set the threshold under it:
        # the search table's two steps, trial 115, named the middle step at 99.99%.)
        hyp = _hypotheses(read, good, bad, True)
        w = hyp.weights(mass)
    alpha, levels = hyp.alpha, hyp.levels
    gap = np.concatenate([[0.0], w.sum(axis=(0, 1)) / w.sum()])
    nxt = np.einsum("hdgs,hsr->hdgr", alpha, _TRANS[:chains])
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
    shared = float(1 - by_chain[0] / by_chain.sum())
    slow = None
    if per_launch:
        slow = _slow_launches(hyp.emit, hyp.outlier, idx, gaps, w / w.sum())
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
