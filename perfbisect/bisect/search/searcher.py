"""The search as one model: the driver's interface (``next_batch``/``feed``, verdicts, the
outcome) over the posterior (model.py), the information rule that picks launches (planner.py)
and the stop rule (stop.py).

After the endpoints (launched interleaved, B G B, until they differ), the path is searched by
the one loop every search of the model runs (segment.py's ``search``): compute the posterior of
the crossing from every launch in the order it ran; stop if it names the crossing at the target
confidence (``Policy.confidence``, 99% by default) or the launch budget is spent; else launch
what the planner says tells most per launch. "Verified" means the named bracket's two sides
were launched back to back (A B; twice on a shared machine), each pair showing the step, and
the posterior with those pairs in it is still at the target (pairs.py); on a machine that reads
shared, also with the ends' levels in doubt (segment.py, ``_holds_with_ends_doubted``). Every verdict the report shows is the posterior's reading of a
point's side. No rule of its own sets launches aside, re-checks a point or re-measures an
endpoint: those are launches the planner picks when they are worth most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfbisect.bisect.engine_state import EngineState, _Search
from perfbisect.bisect.search.model import Belief
from perfbisect.bisect.search.pairs import Pairs
from perfbisect.bisect.search.segment import (
    Answer,
    belief,
    culprit,
    search,
    side_verdict,
)
from perfbisect.bisect.search.steps import every_step
from perfbisect.bisect.search.two_levels import endpoints
from perfbisect.bisect.stats import Verdict, posterior_percent
from perfbisect.bisect.values import Status
from perfbisect.config import Configuration


class ModelEngine(EngineState):
    """The crossing-first search over one path, decided by one posterior."""

    noise_from_fastest = True  # (engine_state.py: the noise from launches near the best)
    busy_most_weighed = True  # (engine_state.py: a machine busy most of the time weighed too)

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
        self.pairs = Pairs()  # the brackets launched back to back, by every search here
        super().__init__(path, policy, threshold)  # type: ignore[arg-type]

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
        why = yield from endpoints(self, 0, n)
        if why:
            self._finish(Status.NOT_REPRODUCED, why)
            return
        threshold = self.threshold if self.fixed_threshold else None
        answer = yield from search(
            self, range(n + 1), threshold, self.pairs, prior=self.prior, read=self._adopt
        )
        if not answer.named:
            self.unresolved_why[(answer.lo, answer.hi)] = answer.why
            self._finish(Status.AMBIGUOUS, answer.why, unresolved=((answer.lo, answer.hi),))
            return
        self._name(answer)
        if self.policy.all_steps:  # every step: steps.py goes on
            yield from every_step(self, self.pairs)

    def _adopt(self, b: Belief) -> None:
        """The posterior now: the threshold (derived) and every point's verdict read from it."""
        self.belief = b
        if not self.fixed_threshold:
            level = math.exp(b.threshold)
            self.threshold = 1 / level if self.policy.higher_is_better else level
        self._read_verdicts(b)

    def _posterior(self, per_launch: bool = False) -> Belief:
        threshold = self.threshold if self.fixed_threshold else None
        return belief(self, range(self.bad_end + 1), threshold, self.prior, per_launch)

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

    def _name(self, answer: Answer) -> None:
        """FOUND: the one configuration the search named (verified or, where a side failed
        past its retries, not, with why)."""
        step = culprit(self, answer)
        paired = "with its last good launched back to back" if step.verified else "not verified"
        self._finish(
            Status.FOUND,
            f"first bad configuration at position {answer.hi} of {self.bad_end} "
            f"(posterior {posterior_percent(answer.probability)}, {paired})",
            step,
        )


__all__ = ["ModelEngine"]
