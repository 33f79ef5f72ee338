"""Searching across several axes at once: which axes carry the regression, then where.

With D the axes on which good and bad differ, the search first measures the configurations that
take the bad value on one axis of D each (the others good). Axes that turn the configuration BAD
on their own are culprit axes (two stacked regressions show up as two). When none does, the
regression needs several axes together: delta debugging (ddmin) over D finds a 1-minimal set
("commit >= X *and* launch=ssh"). Then each culprit axis is searched with the rest of its set
held at bad values and everything else good: a binary search along an ordered axis (commits,
versions), a single step for a categorical one, ddmin over a set axis (patches) to a minimal
failure-inducing subset. Every measured configuration is one point of the engine's growing
path, so the session driver stores, replays and reports it like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

from perfbisect.bisect.axis_sets import (
    AxisPlan,
    MeasuredConfigurations,
    ddmin,
    join_set,
    mixed,
    split_set,
    summary,
)
from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.rules.engine import (
    Culprit,
    Engine,
    LaunchResult,
    Policy,
    Purpose,
    Status,
    Unfinished,
    _Batch,
    _Segment,
    midpoint,
)
from perfbisect.bisect.stats import OUTLIER_RATIO, Verdict
from perfbisect.config import Configuration

DDMIN_ATTEMPTS = 2  # a ddmin run whose result does not hold up is run once more
ANCHOR_LAUNCHES = 3  # launches of a level that a later threshold or comparison is derived from
# Slow outlier launches reach 1.3-2x a configuration's level, and a shared machine's busy periods
# 3x (a CPU-bound launch given a third of a core); a launch this many times slower than the
# better end's level is no outlier of it: one such launch decides a subset (verify made eager:
# 8x) without a second one. At 3x, one launch of a good subset in a busy period named an axis
# that was not a culprit (the launch method, in the suite's end-to-end run under CI's load).
BEYOND_OUTLIERS = 4.0


_Gen = Generator[_Batch, list[LaunchResult], Verdict]


_GenBool = Generator[_Batch, list[LaunchResult], bool]
_GenList = Generator[_Batch, list[LaunchResult], list[str]]


class MultiAxisEngine(MeasuredConfigurations, Engine):
    def __init__(
        self,
        good: Configuration,
        bad: Configuration,
        plans: Sequence[AxisPlan],
        policy: Policy | None = None,
        threshold: float | None = None,
    ) -> None:
        self._start_axes(good, bad, plans)
        super().__init__([good, bad], policy, threshold)

    # ---- configurations ---------------------------------------------------------------------

    def _position(self, config: Configuration) -> int:
        return self._position_of(config)

    def _config(self, bad_axes: Sequence[str], **override: str) -> Configuration:
        return mixed(self.good, self.bad, bad_axes, **override)

    def _judge(self, config: Configuration, seg: _Segment | None = None) -> _Gen:
        seg = seg or self._top
        assert seg is not None
        position = self._position(config)
        if position not in seg.verdicts:
            yield from self._evaluate(seg, position)
        return seg.verdicts[position]

    def _fails(
        self,
        bad_axes: Sequence[str],
        override: dict[str, str] | None = None,
        seg: _Segment | None = None,
    ) -> _GenBool:
        """Does this configuration regress (against ``seg``'s threshold, the session's by
        default)? Every answer steers what is measured next (an axis searched for nothing, a
        ddmin step down the wrong half), and one slow outlier launch can make a good
        configuration look bad: a BAD verdict on one launch is re-measured, and launches
        continue while they disagree (up to the policy's maximum)."""
        seg = seg or self._top
        assert seg is not None
        config = self._config(bad_axes, **(override or {}))
        verdict = yield from self._judge(config, seg)
        worse = (Verdict.BAD, Verdict.INTERMEDIATE)
        position = self._position(config)
        values = self.launches.get(position, [])
        if verdict in worse and len(values) == 1 and not self._beyond_outliers(values, seg):
            yield self._request([position], Purpose.VERIFY)
            decided = self._decide(position, seg)
            while decided is None and len(self.launches[position]) < self.policy.max_launches:
                yield self._request([position], Purpose.VERIFY)
                decided = self._decide(position, seg)
            verdict = decided or Verdict.UNCLEAR
            self._set_verdict(position, verdict, seg)
        return verdict in worse

    def _beyond_outliers(self, values: Sequence[float], seg: _Segment) -> bool:
        """Every launch in ``values`` is worse than any outlier of ``seg``'s better end."""
        better = self.launches.get(seg.lo)
        if not better or not values:
            return False
        level = self._level_of(better)
        if self.policy.higher_is_better:
            return max(values) * BEYOND_OUTLIERS < level
        return min(values) > level * BEYOND_OUTLIERS

    def _record(self, axes: Sequence[str], config: Configuration) -> None:
        position = self._position(config)
        verdict = (
            self._top.verdicts.get(position, Verdict.UNCLEAR) if self._top else Verdict.UNCLEAR
        )
        self._add_row(axes, position, verdict)

    # ---- the search -------------------------------------------------------------------------

    def _run(self):  # type: ignore[no-untyped-def]
        if not (yield from self._endpoints()):
            return
        assert self.threshold is not None
        self._top = _Segment([0, 1], self.threshold)
        differing = [a for a in self.good.differing_axes(self.bad) if a in self.plans]
        sets = yield from self._attribute(differing)
        self._record(differing, self.bad)
        culprits: list[Culprit] = []
        unresolved: list[tuple[int, int]] = []
        for axes in sets:
            self.culprit_sets.append(tuple(axes))
            for axis in axes:
                held = [a for a in axes if a != axis]
                found = yield from self._inner(axis, held)
                if found is None:
                    continue
                if isinstance(found, Unfinished):
                    if found.flipped_end is None:  # an open range; not ends of one level
                        unresolved.extend(found.unresolved)
                    continue
                culprits.extend(found[1])
                unresolved.extend(found[0])
        if not culprits:
            self._finish(
                Status.AMBIGUOUS,
                "no culprit axis could be pinned down (skipped or unclear configurations)",
                unresolved=tuple(unresolved),
            )
            return
        message = summary(self.culprit_sets, len(culprits))
        self._finish(
            Status.FOUND,
            message,
            culprits[0],
            tuple(unresolved),
            tuple(culprits),
            tuple(self.seen_gaps),
        )

    def _attribute(
        self, differing: list[str]
    ) -> Generator[_Batch, list[LaunchResult], list[list[str]]]:
        """The culprit axis sets: single axes that are BAD alone, else a ddmin-minimal set."""
        if len(differing) == 1:
            return [differing]
        bad_alone = []
        for axis in differing:
            failing = yield from self._fails([axis])
            self._record([axis], self._config([axis]))
            if failing:
                bad_alone.append(axis)
        if bad_alone:
            # Stacked regressions: an axis that does not cross the threshold alone may still
            # make things clearly worse (10 -> 20 ms while another axis makes it 60): its own,
            # smaller step is searched against its own level. The good endpoint is the level
            # every such axis is compared with: one outlier launch there would hide them all.
            if len(bad_alone) < len(differing):
                yield from self._anchor([0])
            for axis in differing:
                if axis in bad_alone:
                    continue
                position = self._position(self._config([axis]))
                if position in self.launches and (yield from self._level_gap(0, position, True)):
                    bad_alone.append(axis)
            return [[a] for a in differing if a in bad_alone]

        def fails(subset: list[str]) -> _GenBool:
            result = yield from self._fails(subset)
            self._record(subset, self._config(subset))
            return result

        minimal = yield from ddmin(differing, fails)
        return [minimal]

    def _anchor(self, positions: Sequence[int]) -> _GenBool:
        """Top up ``positions`` (levels that thresholds are derived from) to ANCHOR_LAUNCHES
        launches, and further while their launches tell no one level (two slow outliers among
        three), up to the policy's maximum; False if one of them cannot be measured."""
        top_up = [
            p for p in positions for _ in range(ANCHOR_LAUNCHES - len(self.launches.get(p, [])))
        ]
        while top_up:
            yield self._request(top_up, Purpose.VERIFY)
            if any(p in self.skip_reason or p in self.gave_up for p in positions):
                return False
            top_up = [
                p
                for p in positions
                if len(self.launches[p]) < self.policy.max_launches
                and not self._one_level(self.launches[p])
            ]
        return not any(p in self.skip_reason for p in positions)

    def _one_level(self, values: Sequence[float]) -> bool:
        core = self._core(values)
        return max(core) < min(core) * OUTLIER_RATIO

    def _set_steps(
        self, axis: str, held: list[str]
    ) -> Generator[_Batch, list[LaunchResult], tuple[list[tuple[int, int]], list[Culprit]]]:
        """The failure-inducing subsets of a set axis (patches), one after another. ddmin finds
        a 1-minimal subset that crosses the threshold. A stack can hold a second, smaller
        regression that the first hides or outweighs (one patch makes verify eager, another
        syncs inside the CUDA-graph replay): with ``--all-steps`` the members left over are
        applied without the subset found, and while they still sit clearly above the base
        level, ddmin searches them against the threshold between those two levels. Without it,
        a measured subset that shows such a level is reported as seen, not searched."""
        plan = self.plans[axis]
        base = split_set(self.good.get(axis) or "")
        members = split_set(self.bad.get(axis) or "")

        def value(subset: Sequence[str]) -> str:
            return join_set([*base, *subset], members)

        def at(subset: Sequence[str]) -> int:
            return self._position(self._config(held, **{axis: value(subset)}))

        assert self._top is not None
        seg, remaining, base_position = self._top, list(plan.items), at([])
        culprits: list[Culprit] = []
        while True:
            found = yield from self._ddmin_step(axis, held, remaining, seg, value)
            if isinstance(found, tuple):
                return [found], culprits  # an end that could not be measured
            culprits.append(found)
            minimal = [
                m for m in split_set(found.first_bad.config.get(axis) or "") if m in remaining
            ]
            remaining = [m for m in remaining if m not in minimal]
            if not remaining:
                break
            if not self.policy.all_steps:
                self.seen_gaps.extend(self._seen_subsets(axis, base_position, minimal))
                break
            rest = at(remaining)
            if rest not in self.launches:
                yield self._request([rest], Purpose.VERIFY)
            # Launches are slowed, never sped up, by the machine: one at the base level shows
            # that nothing is left to find; a level for a threshold needs more.
            if rest not in self.launches:
                break
            if not self._looks_worse(self.launches.get(base_position, []), self.launches[rest]):
                self._set_verdict(rest, self._decide(rest, seg) or Verdict.UNCLEAR, seg)
                break
            if not (yield from self._anchor([base_position, rest])):
                break
            if not (yield from self._level_gap(base_position, rest, True)):
                break  # what is left sits at the base level: no further regression in it
            threshold = midpoint(self._level(base_position), self._level(rest))
            seg = _Segment([base_position, rest], threshold)
        return [], culprits

    def _ddmin_step(
        self,
        axis: str,
        held: list[str],
        items: list[str],
        seg: _Segment,
        value: Callable[[Sequence[str]], str],
    ) -> Generator[_Batch, list[LaunchResult], Culprit | tuple[int, int]]:
        """The culprit pair of one minimal failure-inducing subset of ``items`` against
        ``seg``'s threshold (the subset without its last member against it), or the pair
        when one of them could not be measured."""

        def at(subset: Sequence[str]) -> int:
            return self._position(self._config(held, **{axis: value(subset)}))

        def fails(subset: list[str]) -> _GenBool:
            return (yield from self._fails(held, {axis: value(subset)}, seg))

        minimal = list(items)
        for _ in range(DDMIN_ATTEMPTS):
            minimal = yield from ddmin(items, fails)
            # Every ddmin step trusted a verdict; the result is trusted only once its own
            # launches agree on one level. Two slow outlier launches can make a good subset
            # "fail"; then its corrected verdict steers a second ddmin run elsewhere.
            position = at(minimal)
            if not self._beyond_outliers(self.launches.get(position, []), seg):
                yield from self._anchor([position])
            verdict = self._decide(position, seg) or Verdict.UNCLEAR
            self._set_verdict(position, verdict, seg)
            if verdict in (Verdict.BAD, Verdict.INTERMEDIATE):
                break
        lo, hi = at(minimal[:-1]), at(minimal)
        yield from self._judge(self.path[lo], seg)
        yield from self._judge(self.path[hi], seg)
        # Like the end of a binary search: the culprit against its predecessor, re-measured.
        pair = _Segment([lo, hi], seg.threshold)
        flipped = yield from self._verify(pair, lo, hi)
        if lo not in self.launches or hi not in self.launches:
            return lo, hi
        effect = self._worse_by(self.launches[lo], self.launches[hi])
        verified, note = self._verification(lo, hi)
        if flipped is not None:
            verified, note = False, "re-measuring contradicted the ddmin result's verdict"
        return Culprit(self.point(lo), self.point(hi), effect, verified, note)

    def _seen_subsets(
        self, axis: str, base_position: int, minimal: Sequence[str]
    ) -> list[tuple[int, int]]:
        """Measured subsets without any member of ``minimal`` whose launches already show a
        level clearly above the base one (two launches a side, the whole interval beyond the
        minimum effect): a further regression among the other members."""
        start = self.launches.get(base_position, [])
        if len(start) < 2:
            return []
        found = []
        for position, config in enumerate(self.path):
            values = self.launches.get(position, [])
            if position == base_position or len(values) < 2:
                continue
            if config.differing_axes(self.path[base_position]) != [axis]:
                continue
            if set(split_set(config.get(axis) or "")) & set(minimal):
                continue
            if self._clearly_worse(start, values, strict=True):
                found.append((base_position, position))
        return found[-1:]  # one level change is one finding, however many subsets show it

    def creep(
        self, steps: Sequence[Culprit], seen: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """Positions here are configurations in the order they were first measured, not a
        path: only level gaps searched along a path axis without one step are creep."""
        return EngineState.creep(self, steps, seen)

    def _inner(
        self, axis: str, held: list[str]
    ) -> Generator[
        _Batch,
        list[LaunchResult],
        tuple[list[tuple[int, int]], list[Culprit]] | Unfinished | None,
    ]:
        """The step(s) along ``axis`` with ``held`` axes at their bad values; why not, or None
        when its ends could not be anchored."""
        plan = self.plans[axis]
        assert self.threshold is not None
        if plan.kind == "set":
            return (yield from self._set_steps(axis, held))
        order = [self._position(self._config(held, **{axis: v})) for v in plan.values]
        for end in (order[0], order[-1]):  # the ends anchor the levels: measured first
            yield from self._judge(self.path[end])
        # The step searched is the one between this segment's own ends: with stacked or
        # interacting axes their levels are not the session's endpoints' (18 -> 24 ms under a
        # 1.6x launch regression), so the threshold is their midpoint, not the session's. A
        # small step leaves little room around it: each end gets ANCHOR_LAUNCHES launches.
        if not (yield from self._anchor([order[0], order[-1]])):
            return None
        seg = _Segment(order, midpoint(self._level(order[0]), self._level(order[-1])))
        return (yield from self._steps(seg))
