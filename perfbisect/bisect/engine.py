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

import itertools
import math
from collections.abc import Callable, Generator, Sequence

from perfbisect.bisect.stats import (
    OUTLIER_RATIO,
    Difference,
    Estimate,
    Verdict,
    classify,
    core_launches,
    difference,
    estimate,
    median,
    own_rel_sd,
    pooled_rel_sd,
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
    _Segment,
    midpoint,
)
from perfbisect.config import Configuration
from perfbisect.errors import lead_with_error

_Batch = list[LaunchRequest]
_Search = Generator[_Batch, list[LaunchResult], None]
_MAX_STEPS = 4  # steps reported at most: each further one costs a whole binary search
_CORRECTED = -1  # from _verify: a verdict was corrected, the bracket moved (search on)
# A burst of a shared machine slows a few launches in a row (2-4 seen); launches this close in
# time to one no level can explain are suspect.
_BURST_REACH = 3
_REOPEN_MAX = 2  # a point judged again after bursts at most this often
_POOL_TOLERANCE = 0.1  # core_launches' rel_sd for pooling: it keeps launches within 1.4x
BURST_MARGIN = 0.25  # "no level explains it": 25% beyond the worse end (bursts are 1.5-2x)


class Engine:
    def __init__(
        self,
        path: Sequence[Configuration],
        policy: Policy | None = None,
        threshold: float | None = None,
    ) -> None:
        if len(path) < 2:
            raise ValueError("the search path needs at least the good and the bad configuration")
        self.path = list(path)
        self.policy = policy or Policy()
        self.threshold = threshold
        self.fixed_threshold = threshold is not None
        self.launches: dict[int, list[float]] = {}
        self.skip_reason: dict[int, str] = {}  # never measured: the configuration cannot run
        self.failures: dict[int, list[str]] = {}  # every failed launch's reason, per position
        self.gave_up: set[int] = set()  # measured, then failed past the retries
        self.verify_notes: dict[tuple[int, int], str] = {}  # verifications that could not run
        self.unresolved_why: dict[tuple[int, int], str] = {}  # why a range was left open
        self.seen_gaps: list[tuple[int, int]] = []  # level changes seen, not searched
        self.creep_gaps: list[tuple[int, int]] = []  # level gaps searched, with no one step
        self.in_order: list[float] = []  # every launch value, in launch order
        self.seq: dict[int, list[int]] = {}  # each launch's index into in_order, per position
        # Launches taken out of a point's evidence because they ran in a burst of the machine
        # (next to a launch no level can explain); they stay in the store and the log.
        self.set_aside: dict[int, list[float]] = {}
        self._rel_sd_at = -1
        self._rel_sd = 0.0
        self._exhausted: tuple[int, int] | None = None
        self._flipped_end: int | None = None  # an endpoint contradicted its verdict (redo once)
        self._redone = False
        self._reopened: dict[int, int] = {}  # times a point's verdict was reopened (bursts)
        self._failing: dict[int, int] = {}  # failures in a row since the last value
        self.verdicts: dict[int, Verdict] = {}
        self.evaluations = 0
        self.launch_count = 0
        self.rounds = 0  # batches of launches asked for (launched at once with several slots)
        self.outcome: Outcome | None = None
        self._new_verdicts: list[PointResult] = []
        self._top: _Segment | None = None
        self._pending: _Batch = []
        self._search = self._run()
        self._advance(None)

    # ---- driver interface -------------------------------------------------------------------

    def next_batch(self) -> list[LaunchRequest]:
        """Launches wanted now, in the order they should run; empty once the search is over."""
        return list(self._pending)

    def feed(self, results: Sequence[LaunchResult]) -> None:
        if len(results) != len(self._pending):
            raise ValueError(f"expected {len(self._pending)} results, got {len(results)}")
        retry: _Batch = []
        for request, result in zip(self._pending, results):
            self.launch_count += 1
            position = request.position
            if result.ok:
                assert result.value is not None
                self.launches.setdefault(position, []).append(result.value)
                self.seq.setdefault(position, []).append(len(self.in_order))
                self.in_order.append(result.value)
                self._failing.pop(position, None)
                continue
            reason = result.reason or "failed"
            self.failures.setdefault(position, []).append(reason)
            if position not in self.launches:
                self.skip_reason[position] = reason
                continue
            failing = self._failing.get(position, 0) + 1
            self._failing[position] = failing
            if failing <= self.policy.launch_retries:
                retry.append(request)
            else:
                self.gave_up.add(position)
        if retry:  # the search waits for the retried launches before it goes on
            self._pending = retry
            self.rounds += 1
            return
        self._advance(list(results))

    def take_verdicts(self) -> list[PointResult]:
        """Verdicts reached since the last call (for the driver to store)."""
        out, self._new_verdicts = self._new_verdicts, []
        return out

    def point(self, position: int) -> PointResult:
        verdict = self.verdicts.get(position)
        values = self.launches.get(position)
        est = self._estimate(values) if values else None
        return PointResult(
            position,
            self.path[position],
            verdict if verdict is not None else Verdict.UNCLEAR,
            est,
            self.skip_reason.get(position),
        )

    def evaluated_points(self) -> list[PointResult]:
        return [self.point(p) for p in sorted(self.verdicts)]

    def rel_sd(self) -> float:
        # Launch values change only in feed(): one computation per batch, not per question.
        if self._rel_sd_at != self.launch_count:
            # Without each point's outlier launches (1.4x its best and slower): slow outliers
            # and bursts must not inflate the noise that every interval is built from (they
            # are set aside anyway). A wide tolerance keeps the ordinary spread.
            hib = self.policy.higher_is_better
            groups = [core_launches(v, _POOL_TOLERANCE, hib) for v in self.launches.values()]
            self._rel_sd = pooled_rel_sd(groups, self.policy.noise)
            self._rel_sd_at = self.launch_count
        return self._rel_sd

    # ---- internals --------------------------------------------------------------------------

    def _advance(self, results: list[LaunchResult] | None) -> None:
        try:
            batch = next(self._search) if results is None else self._search.send(results)
        except StopIteration:
            batch = []
        self._pending = batch
        if batch:
            self.rounds += 1

    def _core(self, values: Sequence[float]) -> list[float]:
        return core_launches(values, self.rel_sd(), self.policy.higher_is_better)

    def _estimate(self, values: Sequence[float]) -> Estimate:
        return estimate(self._core(values), self.rel_sd(), self.policy.noise.z)

    def _set_verdict(self, position: int, verdict: Verdict, seg: _Segment | None = None) -> None:
        if seg is not None:
            seg.verdicts[position] = verdict
        # The reported verdict is the one against the session's threshold; a later segment
        # (another level pair) only fills in points the first search never judged.
        if seg is None or seg is self._top or position not in self.verdicts:
            self.verdicts[position] = verdict
        self.evaluations += 1
        self._new_verdicts.append(self.point(position))

    def _finish(
        self,
        status: Status,
        message: str,
        culprit: Culprit | None = None,
        unresolved: tuple[tuple[int, int], ...] = (),
        steps: tuple[Culprit, ...] | None = None,
        seen: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.outcome = Outcome(
            status,
            self.threshold,
            message,
            culprit,
            unresolved,
            len(self.verdicts),
            self.launch_count,
            steps if steps is not None else ((culprit,) if culprit else ()),
            None if self.fixed_threshold else self.threshold_interval(),
            seen,
        )

    def _request(self, positions: Sequence[int], purpose: Purpose) -> _Batch:
        return [LaunchRequest(p, self.path[p], purpose) for p in positions]

    def _decide(self, position: int, seg: _Segment | None = None) -> Verdict | None:
        threshold = seg.threshold if seg is not None else self.threshold
        assert threshold is not None
        values = self.launches.get(position, [])
        if not values:
            return None
        if seg is not None and position not in (seg.lo, seg.hi):
            # Launches slower than the segment's worse end show a level no configuration has
            # (outliers, maybe two in a row): with launches at a possible level, those decide.
            beyond, possible = self._split_beyond(seg, position)
            if beyond and possible:
                values = possible
        # A level of its own takes precedence over the side of the threshold it falls on, so
        # that every point of one plateau gets the same verdict. Two launches at least: one
        # launch cannot tell a plateau from a shifted launch.
        side = classify(self._estimate(values), threshold, self.policy.higher_is_better)
        crossing_first = not self.policy.all_steps and seg is not None and seg is self._top
        if crossing_first and side is None:
            # A point near the threshold shares its level with the other points of its plateau
            # (levels only change at steps): their launches together decide its side, so each
            # point of a plateau near the threshold costs a launch or two, not five.
            assert seg is not None
            pooled = self._plateau(position, seg)
            if len(pooled) > len(values):
                side = classify(self._estimate(pooled), threshold, self.policy.higher_is_better)
        if seg is not None and len(values) >= 2 and self._between(seg, values):
            if crossing_first and side is None:
                return None  # a level of its own must still be placed on one side
            return Verdict.INTERMEDIATE
        return side

    def _clearly_worse(
        self, better: Sequence[float], worse: Sequence[float], strict: bool = False
    ) -> bool:
        """``worse`` is worse than ``better`` by at least the minimum effect, significantly,
        also against each side's own spread (launches that disagree prove nothing). ``strict``:
        the whole interval beyond the minimum effect, not only the estimate."""
        better, worse = self._core(better), self._core(worse)
        rel = max(self.rel_sd(), own_rel_sd(better), own_rel_sd(worse))
        diff = difference(better, worse, rel, self.policy.noise.z)
        if self.policy.higher_is_better:
            diff = Difference(-diff.delta, -diff.hi, -diff.lo)
        floor = self.policy.min_effect * abs(median(better))
        return diff.lo >= floor if strict else diff.lo > 0 and diff.delta >= floor

    def _between(self, seg: _Segment, values: Sequence[float]) -> bool:
        """Near the threshold but clearly apart from both levels: a level of its own."""
        lo, hi = self.launches[seg.lo], self.launches[seg.hi]
        return self._clearly_worse(lo, values) and self._clearly_worse(values, hi)

    def _run(self) -> _Search:
        if not (yield from self._endpoints()):
            return
        assert self.threshold is not None
        last = len(self.path) - 1
        self._top = _Segment(list(range(last + 1)), self.threshold)
        found = yield from self._steps(self._top)
        remeasured = ""
        if found is None and self._flipped_end is not None:
            # An endpoint judged on the other side late in the search: a burst at the start
            # can have set a wrong threshold (all of the first endpoint launches slow). Judge
            # the endpoints again on more launches, once, and search anew; the launches made
            # so far count.
            which = "good" if self._flipped_end == 0 else "bad"
            remeasured = (
                f"; the {which} endpoint contradicted its first verdict, so the endpoints were "
                "measured again and the search redone"
            )
            self._flipped_end = None
            self.outcome = None
            self.seen_gaps.clear()
            self.creep_gaps.clear()
            if not self.fixed_threshold:
                self.threshold = None
            if not (yield from self._endpoints()):
                return
            assert self.threshold is not None
            self._top = _Segment(list(range(last + 1)), self.threshold)
            found = yield from self._steps(self._top)
        if found is None:
            return
        unresolved, steps = found
        culprit = self._crossing(steps)
        if len(steps) == 1:
            message = f"first bad configuration at position {culprit.first_bad.position} of {last}"
        else:
            where = ", ".join(str(c.first_bad.position) for c in steps)
            # Only what the numbers show: "crosses" when the two medians straddle the threshold.
            which = (
                "crosses the threshold"
                if self.straddles(culprit)
                else "is the largest (no step's medians straddle the threshold)"
            )
            message = (
                f"the regression came in {len(steps)} steps (at positions {where} of {last}); "
                f"position {culprit.first_bad.position} {which}"
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
    ) -> Generator[_Batch, list[LaunchResult], tuple[list[tuple[int, int]], list[Culprit]] | None]:
        """Every step of ``top`` (its threshold crossing plus the steps of any level gaps next
        to it), or None after ``_finish`` said why the first search failed."""
        first = yield from self._bisect(top)
        if first is None:
            return None
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
                if found is not None and not self._big_enough(found):
                    # The gap's ends differ, its one "step" does not: the level crept.
                    self.creep_gaps.append((seg_lo, seg_hi))
                elif found is not None:
                    steps.append(found)
                    queue.append((gap, found))
                elif self.outcome is not None and self.outcome.unresolved:
                    unresolved.extend(self.outcome.unresolved)
                elif self._exhausted is not None:  # never silent: its bracket goes in the report
                    unresolved.append(self._exhausted)
                self._exhausted = None
                self.outcome = None
        steps.sort(key=lambda c: top.index[c.first_bad.position])
        return unresolved, steps

    def _seen_gaps(self, seg: _Segment, step: Culprit) -> list[tuple[int, int]]:
        """Brackets on either side of ``step`` whose ends' launches already show a clear level
        change (the first measured point clearly worse than that side's start, and the measured
        point before it)."""
        lo, hi = step.last_good.position, step.first_bad.position
        measured = [p for p in seg.order if self.launches.get(p)]
        gaps = []
        sides = (
            [p for p in measured if seg.index[p] <= seg.index[lo]],
            [p for p in measured if seg.index[p] >= seg.index[hi]],
        )
        for side in sides:
            start = self.launches[side[0]]
            for a, b in itertools.pairwise(side):
                values = self.launches[b]
                # Named only on solid evidence: two launches a side at least, and the whole
                # interval beyond the minimum effect (a single slow launch is not a level).
                if min(len(start), len(values)) < 2:
                    continue
                if self._clearly_worse(start, values, strict=True):
                    gaps.append((a, b))
                    break
        return gaps

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

    def _looks_worse(self, better: Sequence[float], worse: Sequence[float]) -> bool:
        sign = -1.0 if self.policy.higher_is_better else 1.0
        better_level, worse_level = self._level_of(better), self._level_of(worse)
        return sign * (worse_level - better_level) >= self.policy.min_effect * abs(better_level)

    def _level(self, position: int) -> float:
        return self._level_of(self.launches[position])

    def _level_of(self, values: Sequence[float]) -> float:
        """A level for deriving a threshold (or a first look at a gap). Outlier launches are
        slow, so with fewer than three launches the fastest one (the best for higher-is-better
        metrics) is the least contaminated estimate; from three on, the median of the launches
        that agree with the best ones."""
        if len(values) >= 3:
            return median(self._core(values))
        return max(values) if self.policy.higher_is_better else min(values)

    def creep(
        self, steps: Sequence[Culprit], seen: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """Ranges beside the steps found where the level still moved by more than the minimum
        effect (the whole interval beyond it, on launches of both ends) while no step or seen
        level change lies inside: a gradual rise, or steps too small to search one by one."""
        ordered = sorted((c.last_good.position, c.first_bad.position) for c in steps)
        if not ordered:
            return []
        marks = [0, *[p for pair in ordered for p in pair], len(self.path) - 1]
        explained = [*ordered, *seen]
        out = list(self.creep_gaps)
        for a, b in zip(marks[::2], marks[1::2]):
            if a >= b or not self.launches.get(a) or not self.launches.get(b):
                continue
            if any(a <= x and y <= b for x, y in [*explained, *out]):
                continue
            if min(len(self.launches[a]), len(self.launches[b])) < 2:
                continue
            if self._clearly_worse(self.launches[a], self.launches[b], strict=True):
                out.append((a, b))
        return out

    def straddles(self, step: Culprit, threshold: float | None = None) -> bool:
        """Do the medians of the step's two sides lie on either side of the threshold?"""
        threshold = self.threshold if threshold is None else threshold
        lo = self.launches.get(step.last_good.position)
        hi = self.launches.get(step.first_bad.position)
        if threshold is None or not lo or not hi:
            return False
        # the medians the report shows (of the launches that agree), not the raw ones
        a, b = self._estimate(lo).median, self._estimate(hi).median
        sign = -1.0 if self.policy.higher_is_better else 1.0
        return sign * a < sign * threshold <= sign * b

    def _crossing(self, steps: Sequence[Culprit]) -> Culprit:
        """The step whose levels straddle the session threshold, else the largest one."""
        assert self.threshold is not None
        sign = -1.0 if self.policy.higher_is_better else 1.0

        def level(p: PointResult) -> float:
            return sign * median(self.launches[p.position])

        t = sign * self.threshold
        straddling = [c for c in steps if level(c.last_good) < t <= level(c.first_bad)]
        pool = straddling or list(steps)
        return max(pool, key=lambda c: level(c.first_bad) - level(c.last_good))

    def threshold_interval(self) -> tuple[float, float] | None:
        """Where the derived threshold could lie, given the endpoints' intervals."""
        g, b = self.launches.get(0), self.launches.get(len(self.path) - 1)
        if not g or not b:
            return None
        eg, eb = self._estimate(g), self._estimate(b)
        ends = sorted((midpoint(eg.lo, eb.lo), midpoint(eg.hi, eb.hi)))
        return ends[0], ends[1]

    def _threshold_tight(self) -> bool:
        interval = self.threshold_interval()
        g, b = self.launches[0], self.launches[len(self.path) - 1]
        gap = abs(self._estimate(b).median - self._estimate(g).median)
        return interval is not None and interval[1] - interval[0] <= THRESHOLD_TIGHTNESS * gap

    def _worse_by(self, good: Sequence[float], bad: Sequence[float]) -> Difference:
        """How much worse bad is than good, positive = worse, in the metric's unit."""
        diff = difference(self._core(good), self._core(bad), self.rel_sd(), self.policy.noise.z)
        if self.policy.higher_is_better:
            return Difference(-diff.delta, -diff.hi, -diff.lo)
        return diff

    def _endpoints(self) -> Generator[_Batch, list[LaunchResult], bool]:
        good, bad = 0, len(self.path) - 1
        # Interleave B, G, B, ... so that slow drift of the machine hits both alike. The bad
        # endpoint gets the extra launch by default: outlier launches are slow, and a slow
        # outlier at the bad endpoint would push the threshold up unnoticed, while one at the
        # good endpoint only narrows the gap, which buys more launches by itself.
        order: list[int] = []
        counts = {good: self.policy.good_endpoint_launches, bad: self.policy.bad_endpoint_launches}
        if self.fixed_threshold:
            # A given threshold does not move with a slow outlier at the bad endpoint, so the
            # extra launch buys nothing there; a contradicting verdict is confirmed below.
            counts[bad] = self.policy.good_endpoint_launches
        while counts[good] or counts[bad]:
            for pos in (bad, good):
                if counts[pos]:
                    order.append(pos)
                    counts[pos] -= 1
        yield self._request(order, Purpose.ENDPOINT)
        while True:
            for pos, name in ((good, "good"), (bad, "bad")):
                if pos in self.skip_reason:
                    self._set_verdict(pos, Verdict.SKIP)
                    self._finish(
                        Status.NOT_REPRODUCED,
                        f"{name} endpoint could not be measured: {self.skip_reason[pos]}",
                    )
                    return False
            g, b = self.launches[good], self.launches[bad]
            n = min(len(g), len(b))
            wanted = [good, bad]
            if self.fixed_threshold:
                vg, vb = self._decide(good), self._decide(bad)
                # Each endpoint on its side settles it; a verdict that contradicts the user's
                # good/bad (one slow outlier launch makes a good endpoint look bad) is only
                # accepted once more launches of that endpoint confirm it.
                wanted = [
                    p
                    for p, v, want in ((bad, vb, Verdict.BAD), (good, vg, Verdict.GOOD))
                    if v is not want
                ]
                confirmed = all(
                    self._decide(p) is not None
                    and len(self.launches[p]) >= self.policy.endpoint_confirm_launches
                    for p in wanted
                )
                settled = not wanted or confirmed
            else:
                worse = self._worse_by(g, b)
                big_enough = worse.delta >= self.policy.min_effect * abs(median(g))
                if worse.lo > 0 and big_enough:
                    # Both endpoints must sit clearly on their side of the midpoint, so that
                    # one outlier launch cannot drag the threshold.
                    self.threshold = midpoint(median(g), median(b))
                    settled = self._decide(good) is not None and self._decide(bad) is not None
                    self.threshold = None
                    settled = settled and self._threshold_tight()
                else:
                    settled = worse.hi < 0 and n >= self.policy.endpoint_confirm_launches
            # An endpoint whose launches fall at two levels (a burst slowed some of them)
            # does not have a level yet: it is measured on, up to twice the usual launches.
            split = [
                p
                for p in (good, bad)
                if self._two_levels(self.launches[p])
                and len(self.launches[p]) < 2 * self.policy.max_launches
            ]
            if split:
                settled = False
                if self.fixed_threshold:
                    wanted = sorted(set(wanted) | set(split))
            if settled or {good, bad} & self.gave_up:
                break
            if n >= self.policy.max_launches and not split:
                break
            yield self._request(wanted, Purpose.ENDPOINT)

        est_g, est_b = self._estimate(g), self._estimate(b)
        unit = (
            f"(good {est_g.median:.4g} [{est_g.lo:.4g}, {est_g.hi:.4g}], "
            f"bad {est_b.median:.4g} [{est_b.lo:.4g}, {est_b.hi:.4g}])"
        )
        if self.fixed_threshold:
            vg, vb = self._decide(good), self._decide(bad)
            self._set_verdict(good, vg or Verdict.UNCLEAR)
            self._set_verdict(bad, vb or Verdict.UNCLEAR)
            problems = []
            if vg is not Verdict.GOOD:
                problems.append(
                    f"good endpoint is {(vg or Verdict.UNCLEAR).value} "
                    f"against threshold {self.threshold:.4g}"
                )
            if vb is not Verdict.BAD:
                problems.append(
                    f"bad endpoint is {(vb or Verdict.UNCLEAR).value} "
                    f"against threshold {self.threshold:.4g}"
                )
            if problems:
                self._finish(Status.NOT_REPRODUCED, "; ".join(problems) + " " + unit)
                return False
            return True
        worse = self._worse_by(g, b)
        big_enough = worse.delta >= self.policy.min_effect * abs(est_g.median)
        if worse.lo > 0 and big_enough:
            self.threshold = midpoint(est_g.median, est_b.median)
            self._set_verdict(good, Verdict.GOOD)
            self._set_verdict(bad, Verdict.BAD)
            return True
        self._set_verdict(good, Verdict.UNCLEAR)
        self._set_verdict(bad, Verdict.UNCLEAR)
        if worse.hi < 0:
            why = "the bad endpoint measured better than the good one"
        else:
            why = (
                f"the endpoints do not differ significantly (difference {worse.delta:.4g}, "
                f"interval [{worse.lo:.4g}, {worse.hi:.4g}], minimum effect "
                f"{self.policy.min_effect:.0%})"
            )
        self._finish(Status.NOT_REPRODUCED, f"{why} {unit}")
        return False

    def _two_levels(self, values: Sequence[float]) -> bool:
        """Launches at two levels, as many slow as fast: none of them set aside as outliers
        although some are 1.4x the best one (a burst, or a flaky configuration)."""
        if len(values) < 3:
            return False
        core = self._core(values)
        times = [1 / v if self.policy.higher_is_better else v for v in values if v > 0]
        return len(core) == len(values) and max(times) >= OUTLIER_RATIO * min(times)

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
                elif (
                    len(self.launches[position]) >= self.policy.max_launches
                    or position in self.gave_up
                ):
                    self._set_verdict(position, Verdict.UNCLEAR, seg)
                else:
                    undecided.append(position)
            if undecided:
                yield self._request(undecided, Purpose.SEARCH)
            pending = undecided

    def _plateau(self, position: int, seg: _Segment) -> list[float]:
        """The launches of ``position`` and of every other point of the segment that sits on
        the same intermediate level (clearly apart from neither), for a side decision."""
        own = self.launches[position]
        pooled = list(own)
        if own_rel_sd(own) > 2.5 * self.rel_sd():
            return pooled  # its launches disagree (bimodal): it has no one level to share

        sides: set[Verdict] = set()
        for other, values in self.launches.items():
            if other == position or other not in seg.index:
                continue
            if self._clearly_worse(own, values) or self._clearly_worse(values, own):
                continue
            pooled.extend(values)
            verdict = seg.verdicts.get(other)
            if verdict in (Verdict.GOOD, Verdict.BAD):
                sides.add(verdict)
        if len(sides) == 2:
            # Alike both points judged good and points judged bad: its launches are too few
            # to tell which plateau it is on, and the pool would mix the two.
            return list(own)
        return pooled

    def _plateau_mates(self, seg: _Segment, i_lo: int, i_hi: int) -> list[int]:
        """Crossing first: for the first UNCLEAR point inside the bracket, up to two other
        points of its plateau (measured, not clearly apart from it, nearest first) that have
        launches left."""
        if self.policy.all_steps:
            return []
        stuck = [
            seg.order[i]
            for i in range(i_lo + 1, i_hi)
            if seg.verdicts.get(seg.order[i]) is Verdict.UNCLEAR
            and seg.order[i] not in self.skip_reason
            and self.launches.get(seg.order[i])
        ]
        if not stuck:
            return []
        u = stuck[0]
        own = self.launches[u]
        if own_rel_sd(own) > 2.5 * self.rel_sd():
            return []  # bimodal: no one level to share
        candidates = [
            p
            for p, values in self.launches.items()
            if p != u
            and p in seg.index
            and p not in (seg.lo, seg.hi)
            and p not in self.gave_up
            and p not in self.skip_reason
            and len(values) < self.policy.max_launches
            and not self._clearly_worse(own, values)
            and not self._clearly_worse(values, own)
        ]
        candidates.sort(key=lambda p: abs(seg.index[p] - seg.index[u]))
        return candidates[:2]

    def _crossed(self, seg: _Segment, position: int, verdict: Verdict) -> bool:
        """Is this judged point past the step the segment searches? With every step mapped
        (and in a level gap's segment) any departure from the lower level is; crossing first, an
        intermediate level counts by the side of the threshold its median is on."""
        if verdict is Verdict.BAD:
            return True
        if verdict is not Verdict.INTERMEDIATE:
            return False
        if self.policy.all_steps or seg is not self._top:
            return True
        pooled = self._plateau(position, seg)
        side = classify(self._estimate(pooled), seg.threshold, self.policy.higher_is_better)
        return side is Verdict.BAD

    def _bracket(self, seg: _Segment) -> tuple[int, int]:
        """(last point before the first crossed one, first crossed point) as indexes into the
        segment's order: the range holding the step the segment searches."""
        judged = [(seg.index[p], p, v) for p, v in seg.verdicts.items() if p in seg.index]
        hi = min(i for i, p, v in judged if self._crossed(seg, p, v))
        below = (Verdict.GOOD, Verdict.INTERMEDIATE)
        lo = max(i for i, p, v in judged if v in below and i < hi and not self._crossed(seg, p, v))
        return lo, hi

    def _bisect(
        self, seg: _Segment, budgeted: bool = False
    ) -> Generator[_Batch, list[LaunchResult], Culprit | None]:
        """Binary search of one segment; the verified step, or None after ``_finish`` said why
        (or, for a later segment, when its ends turned out to be one level)."""
        verified: set[tuple[int, int]] = set()
        top = seg is self._top
        # A level gap's segment gets the launches of an ordinary search of its length and no
        # more: a gap that was noise after all shows up as a run of UNCLEAR points. (A segment
        # of its own, like a culprit axis's, has a step that was established before.)
        # More launches per point (--min-launches) buy a proportionally larger budget.
        per_point = max(1, self.policy.min_launches)
        budget = 3 * per_point * (math.ceil(math.log2(max(2, len(seg.order) - 1))) + 3)
        start = self.launch_count
        while True:
            if budgeted and self.launch_count - start > budget:
                i_lo, i_hi = self._bracket(seg)
                lo, hi = seg.order[i_lo], seg.order[i_hi]
                left = math.ceil(math.log2(max(2, i_hi - i_lo))) + 1
                self._exhausted = (lo, hi)
                self.unresolved_why[(lo, hi)] = (
                    f"the search for this level change ran out of its {budget} launches; "
                    f"finishing it would take about {left * per_point + 2} more launches "
                    "(`--all-steps` searches every step)"
                )
                return None
            if self._reopen_burst_verdicts(seg):
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
                    and len(self.launches.get(seg.order[i], [])) < self.policy.max_launches
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
                    if top and not self._redone:
                        self._redone = True
                        self._flipped_end = flipped
                    if top:
                        which = "good" if flipped == seg.lo else "bad"
                        self._finish(
                            Status.AMBIGUOUS,
                            f"re-measuring the {which} endpoint contradicted its first verdict "
                            "(the machine may have drifted); the regression is in this range",
                            unresolved=((lo, hi),),
                        )
                    return None
                continue
            mates = self._plateau_mates(seg, i_lo, i_hi) if top else []
            if mates:
                # A point of a plateau at the threshold is still undecided on all its own
                # launches: the other points of its plateau launch for it (they share its
                # level), before the range is called ambiguous.
                yield self._request(mates, Purpose.SEARCH)
                continue
            if i_hi - i_lo > 1:
                n_open = i_hi - i_lo - 1
                self._finish(
                    Status.AMBIGUOUS,
                    f"{n_open} configuration(s) between the last good and the first bad could "
                    "not be judged (skipped or unclear); the regression is in this range",
                    unresolved=((lo, hi),),
                )
                return None
            break
        i_lo, i_hi = self._bracket(seg)
        lo, hi = seg.order[i_lo], seg.order[i_hi]
        a, b = self._possible(seg, lo), self._possible(seg, hi)
        effect = difference(a, b, self.rel_sd(), self.policy.noise.z)
        ok, note = self._verification(lo, hi, seg)
        return Culprit(self.point(lo), self.point(hi), effect, ok, note)

    def _possible(self, seg: _Segment, position: int) -> list[float]:
        """The launches that say ``position``'s level: those at a possible level when some
        lie beyond the segment's worse end (as ``_decide`` judges it)."""
        if position in (seg.lo, seg.hi):
            return self.launches[position]
        beyond, possible = self._split_beyond(seg, position)
        return possible if beyond and possible else self.launches[position]

    def _big_enough(self, step: Culprit) -> bool:
        lo, hi = step.last_good.position, step.first_bad.position
        worse = self._worse_by(self.launches[lo], self.launches[hi])
        return worse.delta >= self.policy.min_effect * abs(median(self.launches[lo]))

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

    def _pair_ratios(self, lo: int, hi: int, since: tuple[int, int]) -> list[float]:
        """hi/lo per back-to-back pair launched since ``since`` (worse over better)."""
        a = self.launches.get(lo, [])[since[0] :]
        b = self.launches.get(hi, [])[since[1] :]
        pairs = list(zip(a, b))
        if self.policy.higher_is_better:
            return [x / y for x, y in pairs if y > 0]
        return [y / x for x, y in pairs if x > 0]

    def _verify(
        self, seg: _Segment, lo: int, hi: int
    ) -> Generator[_Batch, list[LaunchResult], int | None]:
        if not self.policy.paired_verify:
            return (yield from self._verify_single(seg, lo, hi))
        if not self._slow_launches_seen(seg):
            flipped = yield from self._verify_single(seg, lo, hi)
            # A burst that began at the bracket's last launch shows in its verification.
            if flipped is not None or not self._slow_launches_seen(seg):
                return flipped
        measured = len(self.launches.get(hi, []))
        if (yield from self._verify_pairs(seg, lo, hi)):
            return _CORRECTED
        return (yield from self._verify_single(seg, lo, hi, measured))

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
            # One pair is enough unless a launch of it lies beyond the segment's worse end:
            # no configuration between the ends sits there, a slow launch (a burst) does.
            need = self.policy.paired_min if self._beyond(seg, lo, hi, since) else 1
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

    def _beyond_worse_end(
        self, seg: _Segment, at_least: float = 0.1
    ) -> Callable[[float], bool] | None:
        """Whether a launch value lies clearly beyond the segment's worse end's level (a level
        no configuration between the ends has), by ``at_least`` of it or the noise's interval,
        or None before that end has launched."""
        worse_end = self.launches.get(seg.hi)
        if not worse_end:
            return None
        level = self._level_of(worse_end)
        margin = 1 + max(at_least, self.policy.noise.z * self.rel_sd())
        if self.policy.higher_is_better:
            return lambda v: v * margin < level
        return lambda v: v > level * margin

    def _slow_launches_seen(self, seg: _Segment) -> bool:
        """Has this machine shown a burst: two launches in a row slower than any level can
        explain (beyond the segment's worse end)? Then a bracket is verified in back-to-back
        pairs; a machine with at most sporadic outliers verifies with one launch."""
        beyond = self._beyond_worse_end(seg)
        if beyond is None:
            return False
        slow = [beyond(v) for v in self.in_order]
        return any(a and b for a, b in itertools.pairwise(slow))

    def _reopen_burst_verdicts(self, seg: _Segment) -> bool:
        """Once the machine has shown a burst, launches near one no level explains (slower
        than the segment's worse end) are suspect: a burst slows a good configuration's launch
        into the bad range without leaving it. A point judged on the worse side on such a
        launch has it set aside and is judged again (re-measured if nothing else decides it).
        Slow launches cannot make a point look better, so better-side verdicts stand. True
        when a verdict was reopened."""
        if not self._slow_launches_seen(seg):
            return False
        beyond = self._beyond_worse_end(seg, BURST_MARGIN)
        assert beyond is not None
        suspect: set[int] = set()
        for i, v in enumerate(self.in_order):
            if beyond(v):
                suspect.update(range(i - _BURST_REACH, i + _BURST_REACH + 1))
        reopened = False
        for p, verdict in list(seg.verdicts.items()):
            if p in (seg.lo, seg.hi) or not self._crossed(seg, p, verdict):
                continue
            seqs = self.seq.get(p, [])
            if not suspect.intersection(seqs):
                continue
            if self._reopened.get(p, 0) >= _REOPEN_MAX:
                continue  # judged again often enough: its launches stand as they are
            kept = [(i, v) for i, v in zip(seqs, self.launches[p]) if i not in suspect]
            self.set_aside.setdefault(p, []).extend(
                v for i, v in zip(seqs, self.launches[p]) if i in suspect
            )
            self.seq[p] = [i for i, _ in kept]
            self.launches[p] = [v for _, v in kept]
            if not kept:
                del self.launches[p]
            del seg.verdicts[p]
            self._reopened[p] = self._reopened.get(p, 0) + 1
            reopened = True
        return reopened

    def _beyond(self, seg: _Segment, lo: int, hi: int, since: tuple[int, int]) -> bool:
        """Does a launch of this verification lie clearly beyond the segment's worse end?"""
        beyond = self._beyond_worse_end(seg)
        new = [*self.launches.get(lo, [])[since[0] :], *self.launches.get(hi, [])[since[1] :]]
        return beyond is not None and any(beyond(v) for v in new)

    def _split_beyond(self, seg: _Segment, position: int) -> tuple[list[float], list[float]]:
        """``position``'s launches clearly beyond the segment's worse end, and the others."""
        values = self.launches.get(position, [])
        beyond = self._beyond_worse_end(seg)
        if not values or beyond is None:
            return [], list(values)
        return [v for v in values if beyond(v)], [v for v in values if not beyond(v)]

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
            pending = bool(beyond) and not possible and hi != seg.hi
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
            self.verify_notes[(lo, hi)] = (
                f"the verification launches of position {hi} failed ({lead_with_error(failed)}); "
                f"its verdict rests on {measured} earlier launch(es). Re-run `bisect start` "
                "with the same endpoints to verify it (its search launches are reused; the "
                "endpoints and the verification run anew)"
            )
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
            if p in ends and seg is self._top and self._two_levels(self.launches[p]):
                # An endpoint whose launches now fall at two levels: its first launches ran
                # in a burst and set the threshold; it cannot be trusted (the session
                # measures the endpoints again).
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
    "_Batch",
    "_Segment",
    "midpoint",
]
