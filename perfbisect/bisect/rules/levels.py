"""Verdicts against a threshold and the levels behind them: plateaus whose points share launches,
launches no level explains (bursts of a shared machine) and the verdicts they are set aside
from, the bracket that holds a step, level changes seen and creep.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from perfbisect.bisect.engine_state import (
    _BURST_REACH,
    _REOPEN_MAX,
    BURST_MARGIN,
)
from perfbisect.bisect.rules.slow_launches import SlowLaunches
from perfbisect.bisect.stats import (
    Verdict,
    classify,
    median,
    own_rel_sd,
)
from perfbisect.bisect.values import (
    Culprit,
    PointResult,
    _Segment,
)

# Crossing first, the most points of one plateau whose launches are pooled for a point that its
# own launches leave undecided (each costs up to --max-launches).
_PLATEAU_POINTS = 4


class Levels(SlowLaunches):
    """Verdicts and levels (no launches requested here)."""

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
            pooled = self._plateau(position, seg, values)
            if len(pooled) > len(values):
                side = classify(self._estimate(pooled), threshold, self.policy.higher_is_better)
        if seg is not None and len(values) >= 2 and self._between(seg, values):
            if crossing_first and side is None:
                return None  # a level of its own must still be placed on one side
            return Verdict.INTERMEDIATE
        return side

    def _between(self, seg: _Segment, values: Sequence[float]) -> bool:
        """Near the threshold but clearly apart from both levels: a level of its own."""
        lo, hi = self.launches[seg.lo], self.launches[seg.hi]
        return self._clearly_worse(lo, values) and self._clearly_worse(values, hi)

    def _plateau_peers(
        self, position: int, seg: _Segment, own: Sequence[float] | None = None
    ) -> list[int]:
        """The other measured points of the segment on ``position``'s level (clearly apart
        from it neither way); none when its own launches disagree (bimodal: it has no one
        level to share). ``own``: the launches of ``position`` that count (default: all)."""
        own = self.launches[position] if own is None else own
        if own_rel_sd(own) > 2.5 * self.rel_sd():
            return []
        return [
            other
            for other, values in self.launches.items()
            if other != position
            and other in seg.index
            and not self._clearly_worse(own, values)
            and not self._clearly_worse(values, own)
        ]

    def _plateau(self, position: int, seg: _Segment, own: Sequence[float]) -> list[float]:
        """``own`` (the launches of ``position`` that count: not those set aside beyond the
        worse end) and the launches of every other point of the segment that sits on the same
        intermediate level, for a side decision."""
        peers = self._plateau_peers(position, seg, own)
        sides = {seg.verdicts.get(p) for p in peers} & {Verdict.GOOD, Verdict.BAD}
        if len(sides) == 2:
            # Alike both points judged good and points judged bad: its launches are too few
            # to tell which plateau it is on, and the pool would mix the two.
            return list(own)
        return [*own, *(v for p in peers for v in self.launches[p])]

    def _plateau_mates(self, seg: _Segment, i_lo: int, i_hi: int) -> list[int]:
        """Crossing first: for the first UNCLEAR point inside the bracket, up to two other
        points of its plateau (nearest first) that have launches left."""
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
        peers = [p for p in self._plateau_peers(u, seg) if p not in (seg.lo, seg.hi)]
        candidates = [
            p
            for p in peers
            if p not in self.gave_up and p not in self.skip_reason and not self._spent(seg, p)
        ]
        candidates.sort(key=lambda p: abs(seg.index[p] - seg.index[u]))
        if candidates or len(peers) >= _PLATEAU_POINTS:
            return candidates[:2]
        # Its measured mates are spent: a point between it and the nearest of them that has
        # one (on the same plateau, as levels only change at steps) joins the pool.
        for near in sorted(peers, key=lambda p: abs(seg.index[p] - seg.index[u])):
            a, b = sorted((seg.index[near], seg.index[u]))
            between = [
                seg.order[i]
                for i in range(a + 1, b)
                if seg.order[i] not in self.launches and seg.order[i] not in self.skip_reason
            ]
            if between:
                return [min(between, key=lambda p: abs(seg.index[p] - seg.index[u]))]
        return []

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
        pooled = self._plateau(position, seg, self._possible(seg, position))
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

    def _possible(self, seg: _Segment, position: int) -> list[float]:
        """The launches that say ``position``'s level: those at a possible level when some
        lie beyond the segment's worse end (as ``_decide`` judges it)."""
        if position in (seg.lo, seg.hi):
            return self.launches[position]
        beyond, possible = self._split_beyond(seg, position)
        return possible if beyond and possible else self.launches[position]

    def _good_end_outdone(self, seg: _Segment) -> bool:
        """Derived threshold, before any redo: does a point between the ends measure clearly
        better than the good end? Outlier launches are slow, so the good end's launches ran
        slow (a burst over the first launches of a session sets the threshold far too high,
        and every verdict after it is judged against that): the endpoints are measured again."""
        if self.fixed_threshold or self._redone:
            return False
        good = self.launches[seg.lo]
        level = self._level_of(good)
        sign = -1.0 if self.policy.higher_is_better else 1.0
        inner = [
            (p, values)
            for p, values in self.launches.items()
            if p in seg.index and p not in (seg.lo, seg.hi)
        ]
        # One point beyond the noise by the margin that no level explains (outliers are
        # 1.3-2x), or the points judged good all together (significantly, by the minimum
        # effect: several points between the ends all better than the good end's launches say
        # more than any one of them; a burst over the first three launches of a session had
        # put every level below the good end by 10-15% and the threshold above them all).
        if any(
            sign * (level - self._level_of(values) * (1 + sign * BURST_MARGIN)) > 0
            and self._clearly_worse(values, good)
            for _, values in inner
        ):
            return True
        judged_good = [
            v for p, values in inner if seg.verdicts.get(p) is Verdict.GOOD for v in values
        ]
        return len(judged_good) >= 3 and self._clearly_worse(judged_good, good)

    def _spent(self, seg: _Segment, position: int) -> bool:
        """Has ``position`` had its launches? Launches set aside as beyond the segment's worse
        end (a burst of a shared machine slowed them) do not count: a burst of four launches
        in a row must not leave a point unjudged. Twice the launches at most, whatever they
        measured."""
        values = self.launches.get(position, [])
        return (
            len(self._possible(seg, position)) >= self.policy.max_launches
            or len(values) >= 2 * self.policy.max_launches
        )

    def _big_enough(self, step: Culprit) -> bool:
        lo, hi = step.last_good.position, step.first_bad.position
        worse = self._worse_by(self.launches[lo], self.launches[hi])
        return worse.delta >= self.policy.min_effect * abs(median(self.launches[lo]))

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
            self._set_aside_launches(p, suspect)
            self._reopen(p, seg)
            self._reopened[p] = self._reopened.get(p, 0) + 1
            reopened = True
        return reopened

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
