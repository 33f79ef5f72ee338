"""Verification: interleaved launches of a bracket's two sides before a step is claimed, back-to-back
pairs once the machine has shown bursts, and the confirmation of a level gap before it is searched.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

from perfbisect.bisect.engine_state import (
    _CORRECTED,
    _Batch,
    verification_failed,
)
from perfbisect.bisect.rules.levels import Levels
from perfbisect.bisect.stats import (
    Verdict,
    classify,
    estimate,
    median,
)
from perfbisect.bisect.values import (
    LaunchResult,
    Purpose,
    _Segment,
    midpoint,
)

# A first bad point with no other crossed point this many positions after it needs one more
# verification launch on a machine that has shown slow launches (see ``_lone_crossing``).
_LONE_GAP = 16


class Verification(Levels):
    """The launches that check a bracket or a level gap before anything is claimed."""

    def _check_level_beyond(self, seg: _Segment) -> Generator[_Batch, list[LaunchResult], bool]:
        """Once the machine seems to have shown a burst, points measured slower than the worse
        end at two positions or more may instead share a level worse than it (a later change
        took back part of the regression). The one launched longest ago is measured again,
        once, after a burst could have passed: at the same level, the level is its own and
        nothing is set aside for it; elsewhere, its launches were slow ones and the burst
        defences go on as before. True when it launched."""
        if not self._slow_launches_seen(seg):
            return False
        candidates = self._beyond_candidates(seg)
        if not candidates:
            return False
        self.level_checked.add(candidates[0])
        yield self._request([candidates[0]], Purpose.SEARCH)
        return True

    def _level_gap(
        self, a: int, b: int, probe: bool = False
    ) -> Generator[_Batch, list[LaunchResult], bool]:
        """Is ``b`` clearly worse than ``a``? A gap opens a whole new search, so one seen on few
        launches (often the single launch of the good endpoint) is confirmed with interleaved
        pairs first; single-step searches then rarely pay for a phantom second step. ``probe``:
        confirm whenever ``b``'s median is worse by the minimum effect, even if the launches so
        far (one of ``b``, an outlier among ``a``'s) are too few or too spread to show it."""
        first = self._looks_worse if probe else self._clearly_worse
        if not first(self.launches[a], self.launches[b]):
            return False
        for _ in range(self.policy.verify_max_pairs):
            yield self._request([a, b], Purpose.VERIFY)
            if {a, b} & (self.skip_reason.keys() | self.gave_up):
                return False
            if not self._clearly_worse(self.launches[a], self.launches[b]):
                return False  # the gap was noise
            # Strict: on one plateau, two ends a few launches each can sit 10% apart by chance,
            # and a phantom gap costs a whole search of points that all sit on its threshold.
            strict = self._clearly_worse(self.launches[a], self.launches[b], strict=True)
            if strict and min(len(self.launches[a]), len(self.launches[b])) >= 3:
                return True
        return self._clearly_worse(self.launches[a], self.launches[b], strict=True)

    def _verification(
        self, lo: int, hi: int, seg: _Segment | None = None
    ) -> tuple[bool, str | None]:
        """Verified only when the verification launches ran, agreed, and the effect's interval
        excludes zero; otherwise why not and what would settle it."""
        note = self.verify_notes.get((lo, hi))
        if note:
            return False, note
        a = self._possible(seg, lo) if seg else self.launches[lo]
        b = self._possible(seg, hi) if seg else self.launches[hi]
        worse = self._worse_by(a, b)
        if worse.lo <= 0:
            return False, (
                f"the effect's interval [{worse.lo:+.4g}, {worse.hi:+.4g}] reaches zero; more "
                f"interleaved launches of positions {lo} and {hi} would settle it"
            )
        floor = self.policy.min_effect * abs(median(a))
        if worse.delta < floor:
            return False, (
                f"the effect {worse.delta:+.4g} is below the minimum effect "
                f"({self.policy.min_effect:.0%}, {floor:.4g}): not a step of its own (creep?)"
            )
        return True, None

    def _verdicts_hold_at_both_levels(self, seg: _Segment, end: int) -> bool:
        """Would every point judged against the threshold keep its verdict whichever level of
        ``end``'s two is its own? Then the burst that split its launches misled nothing (with
        the two ends adjacent nothing was judged against the threshold at all: a noisy
        machine's two-configuration search is not redone for it)."""
        if self.fixed_threshold:
            return True  # a given threshold was not derived from the endpoint's launches
        other = seg.hi if end == seg.lo else seg.lo
        level = self._estimate(self.launches[other]).median
        values = self._core(self.launches[end])
        thresholds = [midpoint(level, v) for v in (min(values), max(values))]
        for p, verdict in seg.verdicts.items():
            if p in (seg.lo, seg.hi) or verdict not in (Verdict.GOOD, Verdict.BAD):
                continue
            est = self._estimate(self._possible(seg, p))
            if any(
                classify(est, t, self.policy.higher_is_better) is not verdict for t in thresholds
            ):
                return False
        return True

    def _own_side(self, seg: _Segment, position: int) -> Verdict | None:
        """The side of the threshold ``position``'s own launches put it on (no pooling)."""
        own = self._estimate(self._possible(seg, position))
        return classify(own, seg.threshold, self.policy.higher_is_better)

    def _crossing_unconfirmed(self, seg: _Segment, hi: int) -> bool:
        """Crossing first, the first bad point at a level of its own (clearly apart from both
        ends): named as the crossing only once its own launches put it past the threshold. A
        point of the lower plateau that two high launches lifted just past the threshold is
        such a level on two launches, and pooling finds no plateau to share it with."""
        if self.policy.all_steps or seg is not self._top or hi in (seg.lo, seg.hi):
            return False
        return self._own_side(seg, hi) is not Verdict.BAD

    def _verify(
        self, seg: _Segment, lo: int, hi: int
    ) -> Generator[_Batch, list[LaunchResult], int | None]:
        flipped = yield from self._verify_bracket(seg, lo, hi)
        if flipped is None and (yield from self._confirm_crossing(seg, hi)):
            return _CORRECTED
        return flipped

    def _confirm_crossing(
        self, seg: _Segment, hi: int
    ) -> Generator[_Batch, list[LaunchResult], bool]:
        """A first bad point at a level of its own is launched until its own launches place
        it on one side of the threshold (or run out). True when it then no longer crosses:
        the search goes on past it. Once per point: a point whose plateau's pooled side moves
        as its mates launch must not be verified and corrected in turn without end."""
        if hi in self.crossing_checked:
            return False
        self.crossing_checked.add(hi)
        while (
            seg.verdicts.get(hi) is Verdict.INTERMEDIATE
            and self._crossing_unconfirmed(seg, hi)
            and not self._spent(seg, hi)
            and hi not in self.skip_reason
            and hi not in self.gave_up
        ):
            yield self._request([hi], Purpose.VERIFY)
            if hi in self.skip_reason:
                return False
            if self._own_side(seg, hi) is not None:
                break
        if hi in self.skip_reason or seg.verdicts.get(hi) is not Verdict.INTERMEDIATE:
            return False
        verdict = self._decide(hi, seg) or Verdict.UNCLEAR
        self._set_verdict(hi, verdict, seg)
        return not self._crossed(seg, hi, verdict)

    def _verify_bracket(
        self, seg: _Segment, lo: int, hi: int
    ) -> Generator[_Batch, list[LaunchResult], int | None]:
        if not self.policy.paired_verify:
            return (yield from self._verify_single(seg, lo, hi))
        # Crossing first, the bracket's two sides are always launched back to back (A B): a
        # lone re-launch of the first bad point inside a busy period that also covered its
        # search launch confirms a wrong verdict; lo's launch next to it shows the period.
        # (Two configurations only: the endpoint phase launched them interleaved already.)
        paired = self._audited(seg) and (lo, hi) != (seg.lo, seg.hi)
        if not self._slow_launches_seen(seg) and not paired:
            flipped = yield from self._verify_single(seg, lo, hi)
            if flipped is None and self._lone_crossing(seg, hi):
                flipped = yield from self._verify_single(seg, lo, hi)
            # A burst that began at the bracket's last launch shows in its verification.
            if flipped is not None:
                return flipped
            if not self._slow_launches_seen(seg):
                if not self._no_step_shows(seg, lo, hi):
                    return None
                # lo may sit on hi's level, put below the threshold by pooling with a plateau
                # it does not share (or hi above it): back-to-back pairs say whether there is
                # a step here at all.
                return _CORRECTED if (yield from self._verify_pairs(seg, lo, hi)) else None
        measured = len(self.launches.get(hi, []))
        if (yield from self._verify_pairs(seg, lo, hi)):
            return _CORRECTED
        return (yield from self._verify_single(seg, lo, hi, measured))

    def _machine_busy(self, seg: _Segment) -> bool:
        """Has the machine shown a busy period (launches in a row that ran slow)? Audit.py
        reads it from the posterior; here, no."""
        return False

    def _audited(self, seg: _Segment) -> bool:
        """Is this segment's crossing checked by the audit (audit.py) before it is named?
        Crossing first, on the whole path: the audit weighs every launch at once, so the
        single-point rules it replaces (a lone crossing's extra launch, a verification launch
        beyond the worse end measured again) stand aside there."""
        return not self.policy.all_steps and seg is self._top

    def _lone_crossing(self, seg: _Segment, hi: int) -> bool:
        """Is ``hi`` judged past the step on two launches or fewer, with no crossed point within
        ``_LONE_GAP`` positions after it, on a machine that has shown a launch no level explains?
        Then one more verification launch. The search reached it by moving away from every
        crossed point, so the prior odds that the step lies right there are about 1 : gap, and
        two slow launches of a better point (an outlier, a burst at its verification) are what
        else explains its verdict; on such a machine two of them at one point happen."""
        if hi in (seg.lo, seg.hi) or seg.verdicts.get(hi) is not Verdict.BAD or self._audited(seg):
            return False
        if len(self._possible(seg, hi)) > 2:
            return False
        beyond = self._beyond_worse_end(seg)
        if beyond is None or not any(beyond(v) for v in self.in_order):
            return False
        i = seg.index[hi]
        crossed = [
            seg.index[p]
            for p, v in seg.verdicts.items()
            if p in seg.index and seg.index[p] > i and self._crossed(seg, p, v)
        ]
        return min(crossed, default=len(seg.order) - 1) - i >= _LONE_GAP

    def _no_step_shows(self, seg: _Segment, lo: int, hi: int) -> bool:
        """Is (lo, hi), after its verification, still the bracket, lo not the good end, and
        hi not clearly worse than lo: a crossing claimed where no step shows?"""
        if self._bracket(seg) != (seg.index[lo], seg.index[hi]) or lo in (seg.lo, seg.hi):
            return False
        return not self._clearly_worse(self._possible(seg, lo), self._possible(seg, hi))

    def _verify_pairs(
        self, seg: _Segment, lo: int, hi: int
    ) -> Generator[_Batch, list[LaunchResult], bool]:
        """Back-to-back pairs (lo, hi) until their ratios agree on a step or on none. No step:
        the verdict that put the step here came from slow launches; the pair's common level
        says which side of the threshold both are on, the misjudged one is corrected and the
        search goes on (True). A step, or undecided: False, and the usual re-judging follows."""
        since = (len(self.launches.get(lo, [])), len(self.launches.get(hi, [])))
        floor = 1 + self.policy.min_effect
        ends = (seg.lo, seg.hi)
        while True:
            yield self._request([lo, hi], Purpose.VERIFY)
            if {lo, hi} & (self.skip_reason.keys() | self.gave_up):
                return False
            ratios = self._pair_ratios(lo, hi, since)
            n = len(ratios)
            # One pair is enough unless a launch of it lies beyond the segment's worse end (no
            # configuration between the ends sits there, a slow launch does) or the machine has
            # shown a burst: a burst slows each launch of a pair by its own 1.5-2x, so the
            # ratio of one pair inside it can show a step that is not there.
            bursty = self._beyond(seg, lo, hi, since) or self._slow_launches_seen(seg)
            paired = self._audited(seg) and (lo, hi) != ends
            bursty = bursty or (paired and self._machine_busy(seg))
            need = self.policy.paired_min if bursty else 1
            if paired:
                # Crossing first: each pair's ratio times lo's own level is where hi lies, a
                # busy period slowing both launches of the pair alike or not at all.
                side = self._pair_side(seg, lo, hi, ratios)
                if side is Verdict.BAD and n >= need:
                    return False
                if side is Verdict.GOOD and hi not in ends:
                    self._set_verdict(hi, Verdict.GOOD, seg)
                    return True
                if n >= self.policy.paired_max:
                    return False
                continue
            if n >= need and min(ratios) >= floor:
                return False  # every pair shows the step
            if n >= self.policy.paired_min and median(ratios) < 1 + self.policy.min_effect / 2:
                break  # no step between them
            if n >= self.policy.paired_max:
                return False
        if lo in ends and hi in ends:
            return False
        pooled = self._core([*self.launches[lo], *self.launches[hi]])
        side = classify(self._estimate(pooled), seg.threshold, self.policy.higher_is_better)
        if side is Verdict.BAD and lo not in ends:
            self._set_verdict(lo, Verdict.BAD, seg)
        elif hi not in ends:
            self._set_verdict(hi, Verdict.GOOD if side is not None else Verdict.UNCLEAR, seg)
        else:
            return False
        return True

    def _pair_side(
        self, seg: _Segment, lo: int, hi: int, ratios: Sequence[float]
    ) -> Verdict | None:
        """The side of the threshold that back-to-back pairs put ``hi`` on: each pair's ratio
        (worse over better) applied to ``lo``'s level. Slow launches are never fast, so lo's
        level (from its fastest launches that agree) is the one a busy period misleads least,
        and a busy period that slows both launches of a pair leaves their ratio."""
        ref = self._level_of(self.launches[lo])
        if self.policy.higher_is_better:
            implied = [ref / r for r in ratios]
        else:
            implied = [ref * r for r in ratios]
        # a ratio carries the noise of two launches
        est = estimate(implied, self.rel_sd() * math.sqrt(2), self.policy.noise.z)
        return classify(est, seg.threshold, self.policy.higher_is_better)

    def _verify_single(
        self, seg: _Segment, lo: int, hi: int, measured: int | None = None
    ) -> Generator[_Batch, list[LaunchResult], int | None]:
        """Interleaved A B A B launches of the adjacent pair, then re-judge both. Returns the
        segment end whose verdict flipped (the levels cannot be trusted), else None. With
        ``measured`` (hi's launches before the pairs of ``_verify_pairs``) the pairs were the
        verification launches: only the re-judging remains."""
        pairs = 0
        ends = (seg.lo, seg.hi)
        launch = measured is None
        if measured is None:
            measured = len(self.launches.get(hi, []))
        if not launch and {lo, hi} & self.skip_reason.keys():
            return None
        v_lo, v_hi = self._decide(lo, seg), self._decide(hi, seg)
        while launch:
            # Outlier launches are slow (throttling, contention, a bad NCCL ring), so they can
            # only make a point look worse: the BAD side's verdict is the suspect one. (Also
            # re-measuring the GOOD side cost 0.1 launches per evaluation and bought no accuracy
            # in the benchmark; an outlier there only made it UNCLEAR.)
            yield self._request([lo, hi] if self.policy.verify_both else [hi], Purpose.VERIFY)
            pairs += 1
            if lo in self.skip_reason or hi in self.skip_reason:
                for p in (lo, hi):
                    if p in self.skip_reason and p not in ends:
                        self._set_verdict(p, Verdict.SKIP, seg)
                return None
            if {lo, hi} & self.gave_up:
                break
            v_lo, v_hi = self._decide(lo, seg), self._decide(hi, seg)
            # Launches of the first bad point slower than the segment's worse end show a level
            # no configuration has: outlier launches (two in a row happen). Until a launch at a
            # possible level is in, it is measured on (``_decide`` then sets them aside).
            beyond, possible = self._split_beyond(seg, hi)
            # (Crossing first the audit reads such a launch with all the others instead.)
            pending = bool(beyond) and not possible and hi != seg.hi and not self._audited(seg)
            if pending and len(self.launches.get(hi, [])) < self.policy.max_launches:
                continue
            if pairs >= self.policy.verify_min_pairs and v_lo is not None and v_hi is not None:
                break
            if pairs >= self.policy.verify_max_pairs:
                break
        if len(self.launches.get(hi, [])) == measured:
            # Every verification launch failed (after retries): the point keeps the verdict of
            # its earlier launches, but nothing was verified.
            failed = self.failures.get(hi, ["failed"])[-1]
            self.verify_notes[(lo, hi)] = verification_failed(hi, failed, measured)
            return None
        if (
            v_hi is Verdict.INTERMEDIATE
            and v_lo is Verdict.GOOD
            and lo not in ends
            and not self._clearly_worse(self.launches[lo], self.launches[hi])
        ):
            # Both sit on one plateau that straddles the threshold: no step between them.
            v_lo = Verdict.INTERMEDIATE
        flipped: int | None = None
        for p, v in ((lo, v_lo), (hi, v_hi)):
            new = v if v is not None else Verdict.UNCLEAR
            if (
                p in ends
                and seg is self._top
                and self._two_levels(self.launches[p])
                and not self._verdicts_hold_at_both_levels(seg, p)
            ):
                # An endpoint whose launches now fall at two levels: its first launches ran
                # in a burst and set the threshold, and a verdict depends on which level is
                # its own; it cannot be trusted (the session measures the endpoints again).
                flipped = p
                continue
            if p in ends and new is not seg.verdicts[p]:
                if new in (Verdict.UNCLEAR, Verdict.INTERMEDIATE):
                    # Undecided (an outlier launch widened its interval): the end keeps the
                    # verdict its threshold was derived from.
                    continue
                # A segment end judged on the other side means the machine drifted (or the
                # ends were misjudged): the threshold can no longer be trusted; stop here.
                flipped = p
                continue
            self._set_verdict(p, new, seg)
        return flipped
