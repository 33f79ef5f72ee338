"""The search engine: a pure state machine fed with launch results.

It never touches git, hosts or the database. The driver asks ``next_batch()`` for launch
requests (several at once, so parallel hosts can serve them), runs them, and hands the results
back with ``feed()``. Because the engine is deterministic, a resumed session is rebuilt exactly
by replaying the stored launch results in order.

Plan (docs/design.md sections 3-4): reproduce the endpoints and fix the threshold; binary search on
the path from good to bad, routing around SKIP/UNCLEAR points and never blaming them; verify the
adjacent pair with interleaved launches; if verification contradicts an earlier verdict (one
outlier launch can mislead a single-launch verdict), correct it and keep searching.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

from perfbisect.bisect.engine_state import (
    _CORRECTED,
    _MAX_STEPS,
    _Batch,
    _Search,
)
from perfbisect.bisect.rules.audit import AUDIT_TARGET
from perfbisect.bisect.rules.endpoints import Endpoints
from perfbisect.bisect.stats import (
    Verdict,
    difference,
)
from perfbisect.bisect.values import (
    THRESHOLD_TIGHTNESS,
    Culprit,
    LaunchRequest,
    LaunchResult,
    Outcome,
    PointResult,
    Policy,
    Purpose,
    Status,
    Unfinished,
    _Segment,
    midpoint,
)

# The whole search's launch ceiling, in units of a level gap's budget (3 x (log2 N + 3)).
_TOP_BUDGET_FACTOR = 4


class Engine(Endpoints):
    """The search plan on top of the layers below (see engine_state.py)."""

    @property
    def confidence_target(self) -> float:
        return AUDIT_TARGET  # the audit's, whatever --confidence (the model's) says

    def _run(self) -> _Search:
        if not (yield from self._endpoints()):
            return
        assert self.threshold is not None
        last = len(self.path) - 1
        self._top = _Segment(list(range(last + 1)), self.threshold)
        found = yield from self._steps(self._top)
        remeasured = ""
        while (
            isinstance(found, Unfinished)
            and found.flipped_end is not None
            and (not self._redone or self._set_aside_slow_end(found.flipped_end))
        ):
            # An endpoint judged on the other side late in the search: a burst at the start
            # can have set a wrong threshold (all of the first endpoint launches slow). Judge
            # the endpoints again on more launches and search anew; the launches made so far
            # count. Once; again only while the launches read in order hold some of that
            # endpoint's launches slow (they are set aside first): a burst that outlasted the
            # first re-measuring.
            which = "good" if found.flipped_end == 0 else "bad"
            why = found.redo_why or f"the {which} endpoint contradicted its first verdict"
            again = " once more" if self._redone else " again"
            remeasured += f"; {why}, so the endpoints were measured{again} and the search redone"
            self._redone = True
            self.seen_gaps.clear()
            self.creep_gaps.clear()
            if not self.fixed_threshold:
                self.threshold = None
            if not (yield from self._endpoints()):
                return
            assert self.threshold is not None
            self._top = _Segment(list(range(last + 1)), self.threshold)
            found = yield from self._steps(self._top)
        if isinstance(found, Unfinished):
            self._finish(found.status, found.message, unresolved=found.unresolved)
            return
        unresolved, steps = found
        culprit = self._crossing(steps)
        message = self.steps_headline(
            culprit, steps, last, "is the largest (no step's medians straddle the threshold)"
        )
        message += remeasured
        if unresolved:
            message += f"; {len(unresolved)} further level change(s) could not be pinned down"
        seen = tuple(self.seen_gaps)
        if seen:
            message += (
                f"; {len(seen)} other level change(s) seen, not searched (`--all-steps` maps them)"
            )
        self._finish(Status.FOUND, message, culprit, tuple(unresolved), tuple(steps), seen)

    def _steps(
        self, top: _Segment
    ) -> Generator[
        _Batch, list[LaunchResult], tuple[list[tuple[int, int]], list[Culprit]] | Unfinished
    ]:
        """Every step of ``top`` (its threshold crossing plus the steps of any level gaps next
        to it), or why the first search found none."""
        first = yield from self._bisect(top)
        if isinstance(first, Unfinished):
            return first
        if not self.policy.all_steps:
            # Crossing first: the user asked which configuration crosses the threshold. Other
            # level changes are named from the launches already made, at no further cost.
            self.seen_gaps.extend(self._seen_gaps(top, first))
            return [], [first]
        # A step that leaves a level gap on either side (19 -> 23 -> 29 ms) means the
        # regression came in stages: search each gap for its own step.
        steps = [first]
        unresolved: list[tuple[int, int]] = []
        queue = [(top, first)]
        while queue and len(steps) < _MAX_STEPS:
            seg, step = queue.pop(0)
            lo, hi = step.last_good.position, step.first_bad.position
            for seg_lo, seg_hi in ((seg.lo, lo), (hi, seg.hi)):
                if seg_lo == seg_hi or len(steps) >= _MAX_STEPS:
                    continue
                if not (yield from self._level_gap(seg_lo, seg_hi)):
                    continue
                threshold = midpoint(self._level(seg_lo), self._level(seg_hi))
                gap = seg.slice(seg_lo, seg_hi, threshold)
                found = yield from self._bisect(gap, budgeted=True)
                if isinstance(found, Unfinished):
                    # Never silent: an open range (out of launches, unjudged points) goes in the
                    # report; a gap whose ends turned out to be one level does not.
                    if found.flipped_end is None:
                        unresolved.extend(found.unresolved)
                elif not self._big_enough(found):
                    # The gap's ends differ, its one "step" does not: the level crept.
                    self.creep_gaps.append((seg_lo, seg_hi))
                else:
                    steps.append(found)
                    queue.append((gap, found))
        steps.sort(key=lambda c: top.index[c.first_bad.position])
        return unresolved, steps

    def _evaluate(
        self, seg: _Segment, position: int
    ) -> Generator[_Batch, list[LaunchResult], None]:
        """Adaptive launches of one point until its interval leaves the threshold."""
        yield from self._evaluate_many(seg, [position])

    def _picks(self, open_points: Sequence[int], i_lo: int, i_hi: int) -> list[int]:
        """The open points to launch this round: the one nearest the middle (binary search),
        or with S slots the ones nearest the S points that split the bracket into S + 1 equal
        parts (k-ary search: log_(S+1) N rounds instead of log_2 N)."""
        k = min(self.policy.slots, len(open_points))
        picks: list[int] = []
        for j in range(1, k + 1):
            target = i_lo + (i_hi - i_lo) * j / (k + 1)
            free = [i for i in open_points if i not in picks]
            picks.append(min(free, key=lambda i: (abs(i - target), i)))
        return sorted(picks)

    def _evaluate_many(
        self, seg: _Segment, positions: Sequence[int]
    ) -> Generator[_Batch, list[LaunchResult], None]:
        """Adaptive launches of points until each one's interval leaves the threshold (or its
        launches run out: UNCLEAR). Launches from an earlier segment count: a point is only
        measured again when they do not decide it. Each round launches every point still
        undecided, in one batch (with several slots, at once)."""
        first = [
            p
            for p in positions
            for _ in range(max(0, self.policy.min_launches - len(self.launches.get(p, []))))
        ]
        if first:
            yield self._request(first, Purpose.SEARCH)
        pending = list(positions)
        while pending:
            undecided = []
            for position in pending:
                if position in self.skip_reason:
                    self._set_verdict(position, Verdict.SKIP, seg)
                    continue
                verdict = self._decide(position, seg)
                if verdict is not None:
                    self._set_verdict(position, verdict, seg)
                elif self._spent(seg, position) or position in self.gave_up:
                    self._set_verdict(position, Verdict.UNCLEAR, seg)
                else:
                    undecided.append(position)
            if undecided:
                yield self._request(undecided, Purpose.SEARCH)
            pending = undecided

    def _bisect(
        self, seg: _Segment, budgeted: bool = False
    ) -> Generator[_Batch, list[LaunchResult], Culprit | Unfinished]:
        """Binary search of one segment: the verified step, or why there is none (for a later
        segment, also when its ends turned out to be one level)."""
        verified: set[tuple[int, int]] = set()
        top = seg is self._top
        # A level gap's segment gets the launches of an ordinary search of its length and no
        # more: a gap that was noise after all shows up as a run of UNCLEAR points. (A segment
        # of its own, like a culprit axis's, has a step that was established before.)
        # More launches per point (--min-launches) buy a proportionally larger budget.
        per_point = max(1, self.policy.min_launches)
        budget = 3 * per_point * (math.ceil(math.log2(max(2, len(seg.order) - 1))) + 3)
        if top and not budgeted:
            # The whole search has a ceiling too: on a machine noisy enough that verdicts keep
            # being reopened and re-verified, an honest "this range, after N launches" beats
            # hundreds of launches (the real-history benchmark once spent 1226 on one search).
            budget *= _TOP_BUDGET_FACTOR
        start = self.launch_count
        while True:
            if (budgeted or top) and self.launch_count - start > budget:
                i_lo, i_hi = self._bracket(seg)
                lo, hi = seg.order[i_lo], seg.order[i_hi]
                left = math.ceil(math.log2(max(2, i_hi - i_lo))) + 1
                what = "this level change" if budgeted else "the crossing"
                self.unresolved_why[(lo, hi)] = why = (
                    f"the search for {what} ran out of its {budget} launches; finishing it "
                    f"would take about {left * per_point + 2} more launches "
                    + (
                        "(`--all-steps` searches every step)"
                        if budgeted
                        else "(the machine's noise kept reopening verdicts; `--min-launches` "
                        "raises the budget)"
                    )
                )
                return Unfinished(Status.AMBIGUOUS, why, ((lo, hi),))
            if (yield from self._check_level_beyond(seg)):
                continue
            if self._reopen_burst_verdicts(seg):
                continue
            if top and self._good_end_outdone(seg):
                return Unfinished(
                    Status.AMBIGUOUS,
                    "a configuration between the endpoints measured clearly better than the good "
                    "endpoint (its launches may have run slow); the regression is in this range",
                    ((seg.lo, seg.hi),),
                    seg.lo,
                    "a configuration between them measured clearly better than the good endpoint",
                )
            if (yield from self._refine_threshold(seg)):
                continue
            if (yield from self._recheck_doubted(seg)):
                continue
            # Segment ends keep their verdicts (a flip ends the search), so the bracket exists.
            i_lo, i_hi = self._bracket(seg)
            lo, hi = seg.order[i_lo], seg.order[i_hi]
            if not self.policy.all_steps and top:
                # An UNCLEAR point of a plateau may be decided by now: its plateau's other
                # points have launched since (no launch of its own is needed for that).
                redecided = False
                for i in range(i_lo + 1, i_hi):
                    p = seg.order[i]
                    if seg.verdicts.get(p) is Verdict.UNCLEAR and p not in self.skip_reason:
                        verdict = self._decide(p, seg)
                        if verdict is not None:
                            self._set_verdict(p, verdict, seg)
                            redecided = True
                if redecided:
                    continue
            # Open: never judged, or left UNCLEAR by a verification before its launches ran out.
            open_points = [
                i
                for i in range(i_lo + 1, i_hi)
                if seg.order[i] not in seg.verdicts
                or (
                    seg.verdicts[seg.order[i]] is Verdict.UNCLEAR
                    and not self._spent(seg, seg.order[i])
                    and seg.order[i] not in self.skip_reason
                )
            ]
            if open_points:
                picks = self._picks(open_points, i_lo, i_hi)
                if len(picks) == 1:
                    yield from self._evaluate(seg, seg.order[picks[0]])
                else:
                    yield from self._evaluate_many(seg, [seg.order[i] for i in picks])
                continue
            # The bracket is final: confirm both ends with interleaved launches before
            # reporting it, culprit or unresolved range alike. A contradiction (one outlier
            # launch misled a single-launch verdict) re-opens the search.
            if (lo, hi) not in verified:
                verified.add((lo, hi))
                flipped = yield from self._verify(seg, lo, hi)
                if flipped == _CORRECTED:
                    verified.discard((lo, hi))
                    continue
                if flipped is not None:
                    which = "good" if flipped == seg.lo else "bad"
                    return Unfinished(
                        Status.AMBIGUOUS,
                        f"re-measuring the {which} endpoint contradicted its first verdict "
                        "(the machine may have drifted); the regression is in this range",
                        ((lo, hi),),
                        flipped,
                    )
                continue
            mates = self._plateau_mates(seg, i_lo, i_hi) if top else []
            if mates:
                # A point of a plateau at the threshold is still undecided on all its own
                # launches: the other points of its plateau launch for it (they share its
                # level), before the range is called ambiguous.
                yield self._request(mates, Purpose.SEARCH)
                continue
            if (yield from self._audit(seg, lo, hi)):
                continue  # the launches as a whole doubt the crossing: judged again
            if i_hi - i_lo > 1:
                n_open = i_hi - i_lo - 1
                return Unfinished(
                    Status.AMBIGUOUS,
                    f"{n_open} configuration(s) between the last good and the first bad could "
                    "not be judged (skipped or unclear); the regression is in this range",
                    ((lo, hi),),
                )
            break
        i_lo, i_hi = self._bracket(seg)
        lo, hi = seg.order[i_lo], seg.order[i_hi]
        a, b = self._possible(seg, lo), self._possible(seg, hi)
        effect = difference(a, b, self.rel_sd(), self.policy.noise.z)
        ok, note = self._verification(lo, hi, seg)
        confidence = self.audit_posterior.get(hi) if self._audited(seg) else None
        if ok and confidence is not None and confidence < AUDIT_TARGET:
            # Verified means the posterior with the verification's launches in it, not only
            # an effect that excludes zero (a busy period can slow one side's launches).
            ok, note = (
                False,
                (
                    f"with every launch read in the order it ran (the verification's back-to-back "
                    f"launches included), position {hi} is the first configuration past the "
                    f"threshold with probability {confidence:.1%}, below the {AUDIT_TARGET:.0%} "
                    "the verification needs"
                ),
            )
        return Culprit(self.point(lo), self.point(hi), effect, ok, note, confidence)


# The value types live in values.py; importing them from here keeps working.
__all__ = [
    "THRESHOLD_TIGHTNESS",
    "Culprit",
    "Engine",
    "LaunchRequest",
    "LaunchResult",
    "Outcome",
    "PointResult",
    "Policy",
    "Purpose",
    "Status",
    "Unfinished",
    "_Batch",
    "_Segment",
    "midpoint",
]
