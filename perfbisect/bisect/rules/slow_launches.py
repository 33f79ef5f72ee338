"""Launches slower than any level can explain: the worse end's level (or a level worse than it
that configurations between the ends show, when a later change took part of the regression
back), which launches lie clearly beyond it, and whether the machine has shown a burst.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from perfbisect.bisect.engine_state import (
    _BURST_REACH,
    EngineState,
)
from perfbisect.bisect.stats import (
    median,
    own_rel_sd,
)
from perfbisect.bisect.values import _Segment

# A level beyond the worse end: its launches spread at most this times the session's noise (a
# burst's, 1.5-2x each, spread about twice the noise: stats.BURST_SPREAD).
_LEVEL_SPREAD = 1.2


class SlowLaunches(EngineState):
    """The worse end's level and the launches beyond it (no launches requested here)."""

    def _beyond_worse_end(
        self, seg: _Segment, at_least: float = 0.1, own_noise: bool = False
    ) -> Callable[[float], bool] | None:
        """Whether a launch value lies clearly beyond the segment's worse end's level (or the
        level worse than it that points between the ends have shown, see ``_level_beyond``), by
        ``at_least`` of it or the noise's interval, or None before that end has launched.
        ``own_noise``: the interval also holds the noise of the end's level itself (known from
        its few launches), as a comparison of one launch with it does."""
        worse_end = self.launches.get(seg.hi)
        if not worse_end:
            return None
        level = self._level_of(worse_end)
        worse_still = self._level_beyond(seg, level)
        widen = math.sqrt(1 + 1 / len(worse_end)) if own_noise else 1.0
        return self._past_end(level if worse_still is None else worse_still, at_least, widen)

    def beyond_bad_end(self) -> Callable[[float], bool] | None:
        """For the report: whether a launch value lies clearly beyond the bad endpoint's own
        level, by the engine's margin (the noise's interval, 10% at least), or None before the
        bad endpoint has launched."""
        bad = self.launches.get(self.bad_end)
        return self._past_end(self._level_of(bad)) if bad else None

    def _level_beyond(self, seg: _Segment, end_level: float) -> float | None:
        """A level worse than the segment's worse end that configurations between the ends
        have (a later change took back part of the regression), or None. Slow launches of
        bursts and outliers are not one: it is claimed only for points next to each other
        among the measured ones in path order (levels change only at steps; bursts hit any
        point), every launch beyond the end, three launches or more (four of one point alone,
        two of them outside its longest run that one burst could cover) agreeing as launches
        of one level do (a burst's are spread: 1.5-2x each), one of the
        points measured again after a burst could have passed (its launches further apart than
        a burst lasts).
        Bursts come and go; a level stays."""
        if self._level_beyond_at != self.launch_count:
            self._level_beyond_memo.clear()
            self._level_beyond_at = self.launch_count
        key = (id(seg), end_level)
        if key not in self._level_beyond_memo:
            self._level_beyond_memo[key] = (seg, self._find_level_beyond(seg, end_level))
        return self._level_beyond_memo[key][1]

    def _find_level_beyond(self, seg: _Segment, end_level: float) -> float | None:
        sign = -1.0 if self.policy.higher_is_better else 1.0
        best: float | None = None
        for run in self._runs_beyond(seg, self._past_end(end_level), 1):
            if not any(self._measured_apart(p) for p in run):
                continue
            values = self._core([v for p in run for v in self._every_launch(p)[0]])
            # One point alone needs a launch more: an outlier and a burst at its verification
            # are three agreeing launches, measured apart. And two of them outside its longest
            # run of launches that one burst could cover: a slow launch and a burst of three
            # after it agree as often as not.
            if len(values) < (3 if len(run) > 1 else 4):
                continue
            if len(run) == 1 and self._outside_longest_burst(run[0]) < 2:
                continue
            if own_rel_sd(values) > _LEVEL_SPREAD * self.rel_sd():
                continue
            level = median(values)
            if best is None or sign * (level - best) > 0:
                best = level
        return best

    def _beyond_candidates(self, seg: _Segment) -> list[int]:
        """Points that would show a level worse than the worse end (see ``_level_beyond``) if
        measured again after a burst could have passed: of a run of two or more whose every
        launch lies beyond it, none measured so yet. The one launched longest ago first."""
        beyond = self._beyond_worse_end(seg)
        if beyond is None:
            return []
        now = len(self.in_order)
        out: list[int] = []
        for run in self._runs_beyond(seg, beyond):
            if any(self._measured_apart(p) for p in run):
                continue
            out.extend(
                p
                for p in run
                if p not in self.level_checked
                and now - max(self._every_launch(p)[1]) > _BURST_REACH
            )
        return sorted(out, key=lambda p: max(self._every_launch(p)[1]))

    def _runs_beyond(
        self, seg: _Segment, beyond: Callable[[float], bool], shortest: int = 2
    ) -> list[list[int]]:
        """Runs of ``shortest`` or more points next to each other among the measured ones in
        path order (ends excluded) whose every launch (also those set aside) is ``beyond``."""
        measured = sorted(
            (self.launches.keys() | self.set_aside.keys()) & seg.index.keys() - {seg.lo, seg.hi},
            key=seg.index.__getitem__,
        )
        runs: list[list[int]] = [[]]
        for p in measured:
            values = self._every_launch(p)[0]
            if not values:
                continue
            if all(beyond(v) for v in values):
                runs[-1].append(p)
            elif runs[-1]:
                runs.append([])
        return [run for run in runs if len(run) >= shortest]

    def _outside_longest_burst(self, position: int) -> int:
        """How many of a point's launches lie outside its longest run of launches each within
        a burst's reach of the one before (what one burst could have slowed)."""
        seqs = sorted(self._every_launch(position)[1])
        runs = [1]
        for a, b in itertools.pairwise(seqs):
            if b - a > _BURST_REACH:
                runs.append(0)
            runs[-1] += 1
        return len(seqs) - max(runs)

    def _measured_apart(self, position: int) -> bool:
        """Launched at least twice, further apart than a burst lasts."""
        seqs = self._every_launch(position)[1]
        return len(seqs) >= 2 and max(seqs) - min(seqs) > _BURST_REACH

    def _past_end(
        self, end_level: float, at_least: float = 0.1, widen: float = 1.0
    ) -> Callable[[float], bool]:
        """Beyond ``end_level`` by the noise's interval (times ``widen``), ``at_least`` of it."""
        margin = 1 + max(at_least, self.policy.noise.z * self.rel_sd() * widen)
        if self.policy.higher_is_better:
            return lambda v: v * margin < end_level
        return lambda v: v > end_level * margin

    def _every_launch(self, position: int) -> tuple[list[float], list[int]]:
        """All of a point's launch values and their indices into in_order, also those set aside
        as a burst's (measured again at the same level, a point shows the level is its own)."""
        values = [*self.launches.get(position, []), *self.set_aside.get(position, [])]
        seqs = [*self.seq.get(position, []), *self.set_aside_seq.get(position, [])]
        return values, seqs

    def _slow_launches_seen(self, seg: _Segment) -> bool:
        """Has this machine shown a burst: two launches in a row slower than any level can
        explain (beyond the segment's worse end)? Then a bracket is verified in back-to-back
        pairs; a machine with at most sporadic outliers verifies with one launch. The end's
        own noise counts: one low launch of it must not make ordinary launches of its level
        look like a burst (every verification would then cost pairs)."""
        beyond = self._beyond_worse_end(seg, own_noise=True)
        if beyond is None:
            return False
        slow = [beyond(v) for v in self.in_order]
        return any(a and b for a, b in itertools.pairwise(slow))

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
