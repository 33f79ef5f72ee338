"""The search as one model: the driver's interface (``next_batch``/``feed``, verdicts, the
outcome) over the posterior (model.py), the information rule that picks launches (planner.py)
and the stop rule (stop.py).

After the endpoints (launched interleaved, B G B, until they differ), every step is the same:
compute the posterior of the crossing from every launch in the order it ran; stop if it names
the crossing at the target confidence (``Policy.confidence``, 99% by default) or the launch
budget is spent; else launch what the planner says tells most per launch. "Verified" means the
named bracket's two sides were launched back to back (A B) and the posterior with that pair in
it is still at the target. Every verdict the report shows is the posterior's reading of a
point's side. No rule of its own sets launches aside, re-checks a point or re-measures an
endpoint: those are launches the planner picks when they are worth most.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.engine_state import EngineState, _Search, verification_failed
from perfbisect.bisect.search.model import Belief, believe
from perfbisect.bisect.search.planner import plan
from perfbisect.bisect.search.segment import costs, endpoints, side_verdict
from perfbisect.bisect.search.steps import every_step
from perfbisect.bisect.search.stop import launches_to_target, likeliest, named
from perfbisect.bisect.stats import Verdict, difference, launch_times, posterior_percent
from perfbisect.bisect.values import Culprit, Purpose, Status
from perfbisect.config import Configuration

_TOP_BUDGET = 12  # launches per halving of the path (3 per halving, x4: the rule engine's)
# Back-to-back pairs of the named bracket's two sides before it is named: one on a quiet
# machine, two (A B A B) once the launches make a shared machine (busy periods) the likelier
# one, so that a period that begins or ends inside one pair cannot confirm a step alone.
_PAIRS_QUIET, _PAIRS_SHARED = 1, 2
# A one-configuration bracket's pair is launched from this posterior on (short of the target):
# it is due before the name anyway, and reads both sides at once. On 400 seeded worlds of the
# 8% noise row: from 0.9 or 0.95, 98.0% named right at 21.7-21.9 launches; from 0.97, 99.2% at
# 22.4, as many as pairing at the target (99.2%, 23.6 launches).
_PAIR_FROM = 0.97
_MORE_PAIRS = 2  # pairs beyond those needed, for a bracket whose pairs do not all show its step


class ModelEngine(EngineState):
    """The crossing-first search over one path, decided by one posterior."""

    def __init__(
        self,
        path: Sequence[Configuration],
        policy: object = None,
        threshold: float | None = None,
        prior: Sequence[float] | None = None,
        prior_note: str = "",
    ) -> None:
        self.belief: Belief | None = None
        # Each position's prior weight of being the crossing (the crossing-first search's
        # only; --all-steps' level gaps start flat) and what it says, for the report.
        self.prior = list(prior) if prior is not None else None
        self.prior_note = prior_note
        self._pairs: Counter[tuple[int, int]] = Counter()  # brackets launched back to back
        # each pair's two launches (indices into the launch order), per bracket
        self._pair_seqs: dict[tuple[int, int], list[tuple[int, int]]] = {}
        super().__init__(path, policy, threshold)  # type: ignore[arg-type]

    # --- what the report asks of every engine -------------------------------------------
    def creep(self, steps: object, seen: object) -> list[tuple[int, int]]:
        return list(self.creep_gaps)  # gaps --all-steps searched without one step (steps.py)

    def beyond_bad_end(self) -> None:
        return None

    # --- the search -------------------------------------------------------------------------
    def _run(self) -> _Search:
        yield from self._search_path()
        self._hold_slow()

    def _hold_slow(self) -> None:
        """Once the search is over: the launches the posterior holds slow (at least even odds)
        leave their configurations' medians, as every view shows them, and stay listed with
        why. Not during the search, whose posterior weighs every launch itself; a point all
        of whose launches it holds slow keeps them (nothing else tells its level)."""
        if len(self.launches) < 2 or self.outcome is None:
            return
        # (the posterior alone: the verdicts stay as the search left them, --all-steps' too)
        slow = self._posterior(per_launch=True).slow
        assert slow is not None
        self.slow_probability = {i: float(slow[i]) for i in range(len(self.in_order))}
        for position, indices in list(self.seq.items()):
            held = {i for i in indices if slow[i] >= 0.5}
            if held and len(held) < len(indices):
                self._set_aside_launches(position, held)
                self.held_slow |= held

    def _search_path(self) -> _Search:
        n = self.bad_end
        p = self.policy
        why = yield from endpoints(self, 0, n)
        if why:
            self._finish(Status.NOT_REPRODUCED, why)
            return
        budget = _TOP_BUDGET * p.min_launches * (math.ceil(math.log2(max(2, n))) + 3)
        start = self.launch_count
        target = p.confidence
        while True:
            b = self._believe()
            need = _PAIRS_SHARED if b.shared >= 0.5 else _PAIRS_QUIET
            # One configuration likelier than not the crossing: its back-to-back pair is due
            # before it can be named anyway, and it is as informative now as a single launch
            # of either side (the planner's usual pick there), so it comes first.
            found = named(b, _PAIR_FROM, self._unlaunchable())
            if found is None or not found.one or self._agreeing(found.lo, found.hi, b) >= need:
                found = named(b, target, self._unlaunchable())
            unpaired = found is not None and self._agreeing(found.lo, found.hi, b) < need
            # A pair shows the step only when its bad side ran slower than its good side by
            # the step (both sides of a pair in one busy period keep their ratio); pairs that
            # do not are launched again, up to two more than needed.
            tries = found is not None and self._pairs[(found.lo, found.hi)] < need + _MORE_PAIRS
            if found is not None and unpaired and tries and not {found.lo, found.hi} & self.gave_up:
                # The stop rule would name it (a configuration, or a range around ones that
                # cannot run): its two sides back to back first (twice on a shared machine),
                # so that a busy period cannot have made the step (the pairs enter the
                # posterior, which must still name it after them).
                yield from self._pair(found.lo, found.hi)
                continue
            if found is not None and unpaired and not tries and found.one and found.probability >= target:
                shown = self._agreeing(found.lo, found.hi, b)
                if not {found.lo, found.hi} & self.gave_up:
                    # Its pairs keep disagreeing with its step: the step is not the
                    # launches' to claim (a busy period may have made it); said, not named.
                    why = (
                        f"the crossing is in ({found.lo}, {found.hi}] with probability "
                        f"{posterior_percent(found.probability)}, but only {shown} of its "
                        f"{self._pairs[(found.lo, found.hi)]} back-to-back pairs show the step: "
                        "the machine's load may have made it; run again on a quieter machine"
                    )
                    self.unresolved_why[(found.lo, found.hi)] = why
                    self._finish(Status.AMBIGUOUS, why, unresolved=((found.lo, found.hi),))
                    return
            if found is not None and found.probability >= target:
                # A side whose launches failed past the retries cannot be paired: named on
                # the launches it had, not verified, and the report says why.
                self._name(found.lo, found.hi, found.probability, found.one and not unpaired)
                if self.policy.all_steps and found.one:  # every step: steps.py goes on
                    yield from every_step(self, self._pairs)
                return
            launchable = self._launchable(b)
            if self.launch_count - start > budget or not launchable.any():
                best = likeliest(b)
                more = launches_to_target(b, target)
                why = (
                    f"the launch budget ({budget}) is spent"
                    if launchable.any()
                    else "nothing left to launch"
                )
                self.unresolved_why[(best.lo, best.hi)] = msg = (
                    f"{why}: the crossing is in ({best.lo}, {best.hi}] with probability "
                    f"{posterior_percent(best.probability)}; reaching {target:.0%} would take about {more} "
                    "more launches"
                )
                self._finish(Status.AMBIGUOUS, msg, unresolved=((best.lo, best.hi),))
                return
            picked = plan(b, launchable, p.slots, costs(self, range(n + 1)))
            if picked.pair:
                yield from self._pair(picked.positions[0], picked.positions[1])
            else:
                yield self._request(list(picked.positions), Purpose.SEARCH)

    def _pair(self, lo: int, hi: int) -> _Search:
        """``lo`` and ``hi`` launched back to back; a pair only when both launches ran (a
        side that failed past its retries leaves a note on why the bracket is not verified)."""
        before = [len(self.launches.get(p, [])) for p in (lo, hi)]
        yield self._request([lo, hi], Purpose.VERIFY)
        after = [len(self.launches.get(p, [])) for p in (lo, hi)]
        if all(a > b for a, b in zip(after, before)):
            self._pairs[(lo, hi)] += 1
            self._pair_seqs.setdefault((lo, hi), []).append((self.seq[lo][-1], self.seq[hi][-1]))
            return
        side = hi if after[1] == before[1] else lo
        failed = self.failures.get(side, ["failed"])[-1]
        self.verify_notes[(lo, hi)] = verification_failed(side, failed, before[side == hi])

    def _agreeing(self, lo: int, hi: int, b: Belief) -> int:
        """How many of the back-to-back pairs of ``lo`` and ``hi`` show the step: the bad
        side's launch at least threshold / level-below slower than the good side's."""
        times = launch_times(self.in_order, self.policy.higher_is_better)
        assert times is not None
        step = b.threshold - b.below
        pairs = self._pair_seqs.get((lo, hi), [])
        return sum(1 for i, k in pairs if math.log(times[k]) - math.log(times[i]) >= step)

    def _believe(self) -> Belief:
        """The posterior now; the threshold (derived) and every point's verdict read from it."""
        b = self._posterior()
        self.belief = b
        if not self.fixed_threshold:
            level = math.exp(b.threshold)
            self.threshold = 1 / level if self.policy.higher_is_better else level
        self._read_verdicts(b)
        return b

    def _posterior(self, per_launch: bool = False) -> Belief:
        at = [0] * len(self.in_order)
        for seqs in (self.seq, self.set_aside_seq):
            for position, indices in seqs.items():
                for i in indices:
                    at[i] = position
        times = launch_times(self.in_order, self.policy.higher_is_better)
        assert times is not None, "launch values must be positive"
        t = self.threshold if self.fixed_threshold else None
        if t is not None and self.policy.higher_is_better:
            t = 1 / t
        return believe(list(zip(at, times)), self.bad_end, t, self.rel_sd(), self.prior, per_launch)

    def _read_verdicts(self, b: Belief) -> None:
        cdf = b.cdf()
        for position in (int(p) for p in b.points):
            below = 1 - float(cdf[position])
            verdict = side_verdict(below)
            if self.verdicts.get(position) is not verdict:
                self._set_verdict(position, verdict)
        for position in self.skip_reason:
            if position not in self.verdicts:
                self._set_verdict(position, Verdict.SKIP)

    def _unlaunchable(self) -> set[int]:
        return set(self.skip_reason) | self.gave_up

    def _launchable(self, b: Belief) -> NDArray[np.bool_]:
        ok = np.ones(self.bad_end + 1, dtype=bool)
        for position in self._unlaunchable():
            ok[position] = False
        cap = 3 * self.policy.max_launches
        for position, values in self.launches.items():
            if len(values) >= cap:
                ok[position] = False
        return ok

    def _name(self, lo: int, hi: int, probability: float, verified: bool) -> None:
        a, b = self.launches.get(lo, []), self.launches.get(hi, [])
        if a and b:
            effect = difference(self._core(a), self._core(b), self.rel_sd(), self.policy.noise.z)
        else:
            effect = difference([1.0], [1.0], 0.0, 0.0)
        note = self.verify_notes.get((lo, hi))
        if hi - lo > 1:
            note = f"positions {lo + 1}..{hi - 1} cannot be launched"
        culprit = Culprit(self.point(lo), self.point(hi), effect, verified, note, probability)
        n = self.bad_end
        if hi - lo > 1:
            self.unresolved_why[(lo, hi)] = note or ""
            self._finish(
                Status.AMBIGUOUS,
                f"the crossing is in ({lo}, {hi}] with probability {posterior_percent(probability)}; {note}",
                unresolved=((lo, hi),),
            )
            return
        paired = "with its last good launched back to back" if verified else "not verified"
        self._finish(
            Status.FOUND,
            f"first bad configuration at position {hi} of {n} "
            f"(posterior {posterior_percent(probability)}, {paired})",
            culprit,
        )


__all__ = ["ModelEngine"]
