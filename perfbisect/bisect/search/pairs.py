"""Back-to-back pairs: a bracket's two sides launched one right after the other, so that a busy
period of the machine slows both alike (their ratio stays) and cannot make a step by itself.

Every search of the model (the whole path, a level gap of ``--all-steps``, an axis's values or a
ddmin subset) names a bracket only after such pairs, and counts a pair only when both of its
launches ran and its bad side ran slower than its good side by the step it is to show.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Generator

import numpy as np

from perfbisect.bisect.engine_state import EngineState, _Batch, verification_failed
from perfbisect.bisect.posterior import _log_normal_grid
from perfbisect.bisect.search.model import Belief
from perfbisect.bisect.stats import fastest_rel_sd, launch_times
from perfbisect.bisect.values import LaunchResult, Purpose

# Pairs of the named bracket before it is named: one on a quiet machine, two (A B A B) once the
# launches make a shared machine (busy periods) the likelier one, so that a period that begins
# or ends inside one pair cannot confirm a step alone.
PAIRS_QUIET, PAIRS_SHARED = 1, 2
# A one-configuration bracket's pair is launched from this posterior on (short of the target):
# it is due before the name anyway, and reads both sides at once. On 400 seeded worlds of the
# 8% noise row: from 0.9 or 0.95, 98.0% named right at 21.7-21.9 launches; from 0.97, 99.2% at
# 22.4, as many as pairing at the target (99.2%, 23.6 launches).
PAIR_FROM = 0.97
# Pairs beyond those needed, for a bracket whose pairs do not all show its step; then it is
# said, not named (a busy period may have made the step).
MORE_PAIRS = 2


def pairs_needed(b: Belief) -> int:
    """The pairs a bracket needs before it is named, on the machine the posterior reads."""
    return PAIRS_SHARED if b.reads_shared else PAIRS_QUIET


class Pairs:
    """The brackets launched back to back in one session (shared by all of its searches): how
    often each was tried, and each counted pair's two launches (indices into the launch order)."""

    def __init__(self) -> None:
        self.tried: Counter[tuple[int, int]] = Counter()
        self.seqs: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def launch(
        self, state: EngineState, lo: int, hi: int
    ) -> Generator[_Batch, list[LaunchResult], None]:
        """``lo`` and ``hi`` launched back to back; a pair only when both launches ran (a side
        that failed past its retries leaves a note on why the bracket is not verified)."""
        before = [len(state.launches.get(p, [])) for p in (lo, hi)]
        self.tried[(lo, hi)] += 1
        yield state._request([lo, hi], Purpose.VERIFY)
        after = [len(state.launches.get(p, [])) for p in (lo, hi)]
        if all(a > b for a, b in zip(after, before)):
            self.seqs.setdefault((lo, hi), []).append((state.seq[lo][-1], state.seq[hi][-1]))
            return
        side = hi if after[1] == before[1] else lo
        failed = state.failures.get(side, ["failed"])[-1]
        state.verify_notes[(lo, hi)] = verification_failed(side, failed, before[side == hi])

    def showing(self, state: EngineState, lo: int, hi: int, step: float) -> int:
        """How many pairs of ``lo`` and ``hi`` show the step: the bad side's launch slower
        than the good side's by at least ``step`` (log time)."""
        times = launch_times(state.in_order, state.policy.higher_is_better)
        assert times is not None, "launch values must be positive"
        pairs = self.seqs.get((lo, hi), [])
        return sum(1 for i, k in pairs if math.log(times[k]) - math.log(times[i]) >= step)

    def apart(self, state: EngineState, lo: int, hi: int, step: float) -> float:
        """The probability, from the pairs of ``lo`` and ``hi`` alone, that ``hi``'s level is
        worse than ``lo``'s by at least ``step`` (log time). Each pair's log ratio is the two
        levels' difference plus two launches' noise, whatever the machine's state while it ran
        (both of its launches ran in it), or, with probability ``PAIR_OUTLIER`` (a pair in
        ~16), a launch off its level (a lone slow launch on either side: the ratio either way,
        wide); flat prior on the difference, over a grid."""
        times = launch_times(state.in_order, state.policy.higher_is_better)
        assert times is not None, "launch values must be positive"
        pairs = self.seqs.get((lo, hi), [])
        if not pairs:
            return 0.0
        ratios = np.asarray([math.log(times[k]) - math.log(times[i]) for i, k in pairs])
        u = ratios[:, None] - _DIFFERENCES[None, :]
        sd = math.sqrt(2) * max(_launch_noise(state), 0.01)
        fits = np.logaddexp(
            math.log(1 - PAIR_OUTLIER) + _log_normal_grid(u, sd),
            math.log(PAIR_OUTLIER) + _log_normal_grid(u, _OFF_LEVEL),
        ).sum(axis=0)
        weight = np.exp(fits - fits.max())
        return float(weight[step <= _DIFFERENCES].sum() / weight.sum())


def _launch_noise(state: EngineState) -> float:
    """The noise of one launch within a machine state (both of a pair's launches ran in one):
    from each configuration's launches near its best, as the path search reads its own (then
    its cached ``rel_sd``). The multi-axis session's own estimate may pool a configuration's
    launches of a busy period as its core: it read 0.23 for launches of 4%, and four
    back-to-back pairs of a 1.33x step, each showing it, held it at 93% (multiaxis_bench
    --load, seed 1, trial 36)."""
    if state.noise_from_fastest:
        return state.rel_sd()
    launches = state.launches.values()
    return fastest_rel_sd(launches, state.policy.noise, state.policy.higher_is_better)


# A pair with one launch off its level (two launches, each a lone outlier one time in ~30), and
# how far off (log, either way); the differences a pair's levels may take (log, flat prior).
PAIR_OUTLIER = 0.06
_OFF_LEVEL = 0.5
_DIFFERENCES = np.linspace(-1.0, 2.0, 1201)


__all__ = ["MORE_PAIRS", "PAIRS_QUIET", "PAIRS_SHARED", "PAIR_FROM", "Pairs", "pairs_needed"]
