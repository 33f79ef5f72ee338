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
from dataclasses import dataclass

from perfbisect.bisect.engine import (
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
from perfbisect.bisect.stats import OUTLIER_RATIO, Verdict, median
from perfbisect.config import Configuration

SET_SEPARATOR = "+"
DDMIN_ATTEMPTS = 2  # a ddmin run whose result does not hold up is run once more
ANCHOR_LAUNCHES = 3  # launches of a level that a later threshold or comparison is derived from


@dataclass(frozen=True)
class AxisPlan:
    """How one differing axis is walked from its good to its bad value.

    ``path`` axes list every value from good to bad inclusive (two values for a categorical
    axis). ``set`` axes (patches) hold a ``+``-joined subset: ``items`` are the members that the
    bad value adds to the good one, searched by ddmin."""

    name: str
    kind: str  # "path" | "set"
    values: tuple[str, ...] = ()
    items: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "values": list(self.values),
            "items": list(self.items),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> AxisPlan:
        return cls(
            str(data["name"]),
            str(data["kind"]),
            tuple(str(v) for v in data.get("values", [])),  # type: ignore[attr-defined]
            tuple(str(v) for v in data.get("items", [])),  # type: ignore[attr-defined]
        )


def join_set(members: Sequence[str], order: Sequence[str]) -> str:
    """A set axis value: members in the experiment's order (patches apply in list order)."""
    wanted = set(members)
    return SET_SEPARATOR.join(m for m in order if m in wanted)


def split_set(value: str) -> list[str]:
    return [m for m in value.split(SET_SEPARATOR) if m]


@dataclass(frozen=True)
class AttributionRow:
    axes: tuple[str, ...]
    position: int
    verdict: Verdict
    effect: float | None  # median of this configuration minus the good endpoint's


_Gen = Generator[_Batch, list[LaunchResult], Verdict]


def ddmin(items: Sequence[str], fails: Callable[[list[str]], _GenBool]) -> _GenList:
    """Zeller's delta debugging: a 1-minimal subset of ``items`` for which ``fails`` holds
    (``items`` itself is known to fail). ``fails`` is a generator (it measures)."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        size = len(current)
        chunks = [current[i * size // n : (i + 1) * size // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for chunk in chunks:
            if (yield from fails(chunk)):
                current, n, reduced = chunk, 2, True
                break
        if not reduced and n > 2:
            for chunk in chunks:
                complement = [x for x in current if x not in chunk]
                if (yield from fails(complement)):
                    current, n, reduced = complement, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current


_GenBool = Generator[_Batch, list[LaunchResult], bool]
_GenList = Generator[_Batch, list[LaunchResult], list[str]]


class MultiAxisEngine(Engine):
    def __init__(
        self,
        good: Configuration,
        bad: Configuration,
        plans: Sequence[AxisPlan],
        policy: Policy | None = None,
        threshold: float | None = None,
    ) -> None:
        self.good, self.bad = good, bad
        self.plans = {p.name: p for p in plans}
        self.attribution: list[AttributionRow] = []
        self.culprit_sets: list[tuple[str, ...]] = []
        self._positions = {good.fingerprint: 0, bad.fingerprint: 1}
        super().__init__([good, bad], policy, threshold)

    # ---- configurations ---------------------------------------------------------------------

    def _position(self, config: Configuration) -> int:
        known = self._positions.get(config.fingerprint)
        if known is not None:
            return known
        self.path.append(config)
        self._positions[config.fingerprint] = len(self.path) - 1
        return len(self.path) - 1

    def _config(self, bad_axes: Sequence[str], **override: str) -> Configuration:
        values = {}
        for axis, good_value in self.good.values:
            value = self.bad.get(axis) if axis in bad_axes else good_value
            values[axis] = override.get(axis, value or "")
        return Configuration.of(values, self.good.context)

    def _judge(self, config: Configuration) -> _Gen:
        assert self._top is not None
        position = self._position(config)
        if position not in self._top.verdicts:
            yield from self._evaluate(self._top, position)
        return self._top.verdicts[position]

    def _fails(self, bad_axes: Sequence[str], **override: str) -> _GenBool:
        """Does this configuration regress? Every answer steers what is measured next (an axis
        searched for nothing, a ddmin step down the wrong half), and one slow outlier launch
        can make a good configuration look bad: a BAD verdict on one launch is re-measured,
        and launches continue while they disagree (up to the policy's maximum)."""
        config = self._config(bad_axes, **override)
        verdict = yield from self._judge(config)
        worse = (Verdict.BAD, Verdict.INTERMEDIATE)
        position = self._position(config)
        if verdict in worse and len(self.launches.get(position, [])) == 1:
            assert self._top is not None
            yield self._request([position], Purpose.VERIFY)
            decided = self._decide(position, self._top)
            while decided is None and len(self.launches[position]) < self.policy.max_launches:
                yield self._request([position], Purpose.VERIFY)
                decided = self._decide(position, self._top)
            verdict = decided or Verdict.UNCLEAR
            self._set_verdict(position, verdict, self._top)
        return verdict in worse

    def _record(self, axes: Sequence[str], config: Configuration) -> None:
        position = self._position(config)
        if any(row.position == position for row in self.attribution):
            return  # ddmin tests some subsets again; one row each
        values = self.launches.get(position)
        effect = median(values) - median(self.launches[0]) if values else None
        verdict = (
            self._top.verdicts.get(position, Verdict.UNCLEAR) if self._top else Verdict.UNCLEAR
        )
        self.attribution.append(AttributionRow(tuple(axes), position, verdict, effect))

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
        names = " and ".join("+".join(s) for s in self.culprit_sets)
        message = (
            f"the regression needs {names}"
            if any(len(s) > 1 for s in self.culprit_sets)
            else f"culprit axis: {names}"
        )
        if len(self.culprit_sets) > 1:
            message = f"{len(self.culprit_sets)} independent regressions: {names}"
        self._finish(Status.FOUND, message, culprits[0], tuple(unresolved), tuple(culprits))

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
            base = split_set(self.good.get(axis) or "")
            members = split_set(self.bad.get(axis) or "")

            def fails(subset: list[str]) -> _GenBool:
                value = join_set([*base, *subset], members)
                return (yield from self._fails(held, **{axis: value}))

            for _ in range(DDMIN_ATTEMPTS):
                minimal = yield from ddmin(list(plan.items), fails)
                # Every ddmin step trusted a verdict; the result is trusted only once its own
                # launches agree on one level. Two slow outlier launches can make a good subset
                # "fail"; then its corrected verdict steers a second ddmin run elsewhere.
                with_all = self._config(held, **{axis: join_set([*base, *minimal], members)})
                position = self._position(with_all)
                yield from self._anchor([position])
                assert self._top is not None
                verdict = self._decide(position, self._top) or Verdict.UNCLEAR
                self._set_verdict(position, verdict, self._top)
                if verdict in (Verdict.BAD, Verdict.INTERMEDIATE):
                    break
            without = self._config(held, **{axis: join_set([*base, *minimal[:-1]], members)})
            yield from self._judge(without)
            yield from self._judge(with_all)
            lo, hi = self._position(without), self._position(with_all)
            # Like the end of a binary search: the culprit against its predecessor, re-measured.
            pair = _Segment([lo, hi], self.threshold)
            flipped = yield from self._verify(pair, lo, hi)
            if lo not in self.launches or hi not in self.launches:
                return [(lo, hi)], []
            effect = self._worse_by(self.launches[lo], self.launches[hi])
            verified, note = self._verification(lo, hi)
            if flipped is not None:
                verified, note = False, "re-measuring contradicted the ddmin result's verdict"
            culprit = Culprit(self.point(lo), self.point(hi), effect, verified, note)
            return [], [culprit]
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
