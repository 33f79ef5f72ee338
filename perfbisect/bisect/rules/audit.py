"""The audit of a crossing before it is named: its posterior given every launch of the session
(posterior.py), and what to launch when the launches do not make it likely enough.

The search's verdicts each rest on one point's own launches; the audit reads them all at once,
in the order they ran. A point judged past the threshold on launches that ran in a burst (slow
neighbours in time, a level its path neighbours do not share) is judged again without them; a
point whose side the launches leave in doubt is launched again. Crossing first, on the whole path
(a level gap's search and a culprit axis's have their own rules).
"""

from __future__ import annotations

import itertools
from collections.abc import Generator

from perfbisect.bisect.engine_state import _Batch, _Posterior
from perfbisect.bisect.posterior import (
    CrossingPosterior,
    TimedLaunch,
    crossing_posterior,
    slow_launches,
)
from perfbisect.bisect.rules.verification import Verification
from perfbisect.bisect.stats import Verdict, launch_times
from perfbisect.bisect.values import LaunchResult, Purpose, _Segment

# The posterior a crossing needs before it is named without further launches.
AUDIT_TARGET = 0.99
# A verdict the posterior holds this unlikely is judged again (launches set aside or added).
_DOUBT = 0.5
# Launches the audit may add to one search, in units of --max-launches.
_AUDIT_BUDGET = 3
# A verdict past the threshold that every launch, read in order, makes less likely than this is
# judged again during the search (the audit's target is for the crossing named at the end). The
# posterior is overconfident mid-search (in 3000 benchmark searches, the bracket's upper end held
# 40-50% past was truly past in 58%, 90-100% in 95%), and a wrong one costs the whole search
# below it: at 40% instead of 20%, -0.07 launches on the given threshold (paired, 2000 worlds),
# -0.3 and +0.15 points correct on the real history, -0.08 on the drifting machine.
_EARLY_DOUBT = 0.4
# Redos of the search after an endpoint's slow launches were set aside, beyond the first one.
_END_REDOS = 1


class Audit(Verification):
    """The posterior check of a crossing (no launches but those it asks for)."""

    def _audit_wanted(self, seg: _Segment) -> bool:
        """May the audit still act on this segment's crossing (judge again, launch)?"""
        return self._audited(seg) and self._audit_spent < _AUDIT_BUDGET * self.policy.max_launches

    def crossing_posterior(self, seg: _Segment) -> _Posterior:
        """The posterior over the segment's measured points, those points (in path order), and
        the launches it read (their indices into the launch order, in the order they ran).
        Computed again only when a launch came in or was set aside (it reads nothing else)."""
        key = (
            id(seg),
            seg.threshold,
            len(self.in_order),
            sum(len(v) for v in self.set_aside_seq.values()),
        )
        if self._posterior_memo is not None and self._posterior_memo[0] == key:
            return self._posterior_memo[1]
        result = self._compute_posterior(seg)
        self._posterior_memo = (key, result)
        return result

    def _machine_busy(self, seg: _Segment) -> bool:
        """Two launches in a row that the posterior holds slow: the machine has busy periods,
        so the bracket is verified in back-to-back pairs (a busy period slows both launches of
        a pair; a lone re-launch of the first bad point inside one confirms a wrong verdict)."""
        if any(v <= 0 for vs in self.launches.values() for v in vs):
            return False
        post, _, order = self.crossing_posterior(seg)
        slow = [q >= 0.5 for _, q in sorted(zip(order, post.slow))]
        return any(a and b for a, b in itertools.pairwise(slow))

    def _compute_posterior(self, seg: _Segment) -> tuple[CrossingPosterior, list[int], list[int]]:
        launched: dict[int, tuple[int, float]] = {}
        for source, seqs in ((self.launches, self.seq), (self.set_aside, self.set_aside_seq)):
            for p, indices in seqs.items():
                for i, v in zip(indices, source.get(p, [])):
                    launched[i] = (p, v)
        measured = sorted(
            {p for p, _ in launched.values() if p in seg.index}, key=seg.index.__getitem__
        )
        k_of = {p: k for k, p in enumerate(measured)}
        order = sorted(i for i, (p, _) in launched.items() if p in k_of)
        values = [launched[i][1] for i in order]
        times = launch_times([*values, seg.threshold], self.policy.higher_is_better)
        assert times is not None  # an audit runs only on positive values (see _audit)
        launches = [TimedLaunch(k_of[launched[i][0]], t) for i, t in zip(order, times)]
        gaps = [0] + [seg.index[b] - seg.index[a] for a, b in itertools.pairwise(measured)]
        post = crossing_posterior(launches, len(measured), gaps, times[-1], self.rel_sd())
        return post, measured, order

    def _audit(
        self, seg: _Segment, lo: int, hi: int
    ) -> Generator[_Batch, list[LaunchResult], bool]:
        """Is the crossing at ``hi`` likely enough given every launch? A point between ``lo``
        and ``hi`` left unclear on its own launches takes the side the launches as a whole give
        it, when they give it one with the audit's confidence. If the crossing is not likely
        enough, the verdict the launches most doubt is judged again: its launches that ran slow
        are set aside (it is judged anew) or, with none, it is launched once more. True when
        something changed (the search goes on); False when the crossing stands (or the audit's
        launches are spent)."""
        if not self._audited(seg) or any(v <= 0 for vs in self.launches.values() for v in vs):
            return False
        post, measured, order = self.crossing_posterior(seg)
        if hi not in measured:
            return False
        j = measured.index(hi)
        self.audit_posterior[hi] = post.crossing[j]  # what the report shows, spent or not
        if not self._audit_wanted(seg):
            return False
        placed = False
        slow_at = {i for i, q in zip(order, post.slow) if q >= 0.5}
        for k in range(measured.index(lo) + 1, j) if lo in measured else ():
            p = measured[k]
            if seg.verdicts.get(p) is not Verdict.UNCLEAR or p in self.skip_reason:
                continue
            # A point whose launches split between levels (a flaky configuration) is not
            # placed: its slow ones are no machine's bursts, it stays unresolved.
            if 3 * len(slow_at.intersection(self.seq.get(p, []))) > len(self.seq.get(p, [])):
                continue
            past = post.past(k)
            if past >= AUDIT_TARGET or past <= 1 - AUDIT_TARGET:
                self._set_verdict(p, Verdict.BAD if past >= AUDIT_TARGET else Verdict.GOOD, seg)
                placed = True
        if placed:
            return True
        if post.crossing[j] >= AUDIT_TARGET:
            return False
        # How much each point's side as the crossing at ``hi`` has it (before it, below the
        # threshold; from it on, past it) is in doubt; also points whose launches were all set
        # aside and that have no verdict now.
        doubt = [
            (abs(float(k >= j) - post.past(k)), p)
            for k, p in enumerate(measured)
            if p not in (seg.lo, seg.hi) and p not in self.skip_reason and p not in self.gave_up
        ]
        if not doubt:
            return False
        # Among the points doubted nearly as much as the most doubted one, the one with the
        # fewest launches (a launch says most there), then the nearest to the crossing.
        top = max(d for d, _ in doubt)
        worst, point = min(
            (d for d in doubt if d[0] >= 0.8 * top),
            key=lambda d: (
                len(self.launches.get(d[1], [])),
                abs(seg.index[d[1]] - seg.index[hi]),
            ),
        )
        if worst >= _DOUBT and point in seg.verdicts:
            before = self.launch_count
            set_aside = yield from self._set_aside_slow(seg, point, post, order)
            # the launch a point left without launches gets counts against the audit's budget
            self._audit_spent += self.launch_count - before
            if set_aside:
                return True
        self._audit_spent += 1
        yield self._request([point], Purpose.VERIFY)
        if point in seg.verdicts:
            self._judge_again(seg, point)
        return True

    def _judge_again(self, seg: _Segment, point: int) -> None:
        """``point``'s verdict from the launches it has now, where they give one."""
        if point in self.skip_reason or not self.launches.get(point):
            return
        verdict = self._decide(point, seg)
        if verdict is not None and verdict is not seg.verdicts.get(point):
            self._set_verdict(point, verdict, seg)

    def _set_aside_slow(
        self, seg: _Segment, point: int, post: CrossingPosterior, order: list[int]
    ) -> Generator[_Batch, list[LaunchResult], bool]:
        """Set aside ``point``'s launches that the chain holds slow and judge it again at once
        (True): on the launches it keeps, or, with none kept, on one new launch (left to the
        search, a point without launches would wait while the search bisects the wider
        bracket its reopening leaves: five launches before it came back to it, in the
        benchmark). False when none of its launches is held slow."""
        slow_at = {i for i, q in zip(order, post.slow) if q >= 0.5}
        if not slow_at.intersection(self.seq.get(point, [])):
            return False
        kept = self._set_aside_launches(point, slow_at)
        self._reopen(point, seg)
        if not kept and point not in self.skip_reason and point not in self.gave_up:
            yield self._request([point], Purpose.VERIFY)
        self._judge_again(seg, point)
        return True

    def _set_aside_endpoint_bursts(self) -> bool:
        """The endpoints' launches read in the order they ran, when they did not differ: if
        both ends have launches the chain holds slow (a burst of the machine over the endpoint
        phase slows both alike; a flaky configuration slows only itself), those are set aside,
        provided two launches of each end stay and the ends then differ clearly. True when they
        were set aside."""
        ends = (0, self.bad_end)
        order = sorted(i for p in ends for i in self.seq.get(p, []))
        point_of = {i: k for k, p in enumerate(ends) for i in self.seq.get(p, [])}
        value_of = {
            i: v for p in ends for i, v in zip(self.seq.get(p, []), self.launches.get(p, []))
        }
        times = launch_times([value_of[i] for i in order], self.policy.higher_is_better)
        if times is None or len(order) < 4:
            return False
        timed = [TimedLaunch(point_of[i], t) for i, t in zip(order, times)]
        slow = slow_launches(timed, 2, [0, len(self.path) - 1], self.rel_sd())
        flagged = {i for i, q in zip(order, slow) if q >= 0.5}
        kept = {
            p: [v for i, v in zip(self.seq[p], self.launches[p]) if i not in flagged] for p in ends
        }
        if any(len(kept[p]) == len(self.launches[p]) for p in ends):
            return False  # one end alone ran slow: no burst of the machine shows
        better, worse = kept[ends[0]], kept[ends[1]]
        if min(len(better), len(worse)) < 2 or not self._clearly_worse(better, worse):
            return False
        for p in ends:
            self._set_aside_launches(p, flagged)
        return True

    def _set_aside_slow_end(self, end: int) -> bool:
        """An endpoint contradicted its verdict a second time: set aside its launches that the
        launches read in order hold slow (a burst that lasted over its first launches and its
        first re-measuring), keeping one at least. True when some were (the endpoints are then
        measured again); at most ``_END_REDOS`` times a search."""
        top = self._top
        if top is None or self._end_redos >= _END_REDOS or not self.launches.get(end):
            return False
        if any(v <= 0 for vs in self.launches.values() for v in vs):
            return False
        post, _, order = self.crossing_posterior(top)
        flagged = {i for i, q in zip(order, post.slow) if q >= 0.5}
        slow = flagged.intersection(self.seq[end])
        if not slow or len(slow) == len(self.seq[end]):
            return False
        self._set_aside_launches(end, slow)
        self._end_redos += 1
        return True

    def _recheck_doubted(self, seg: _Segment) -> Generator[_Batch, list[LaunchResult], bool]:
        """During the search, crossing first: a point judged past the threshold that every
        launch read in order makes less than ``_EARLY_DOUBT`` likely to be past it (its
        launches ran in a burst; or its one launch reads like a better point's slow launch now
        that the points below it came out good, so the crossing is likelier above it) is judged
        again before the search builds on it: its launches the chain holds slow set aside, or
        one more launch. Once per point. True when it did."""
        if not self._audit_wanted(seg) or any(v <= 0 for vs in self.launches.values() for v in vs):
            return False
        post, measured, order = self.crossing_posterior(seg)
        for k, p in enumerate(measured):
            if p in (seg.lo, seg.hi) or p not in seg.verdicts or p in self._rechecked:
                continue
            if not self._crossed(seg, p, seg.verdicts[p]) or post.past(k) >= _EARLY_DOUBT:
                continue
            self._rechecked.add(p)
            if (yield from self._set_aside_slow(seg, p, post, order)):
                return True
            if p in self.skip_reason or p in self.gave_up:
                continue
            yield self._request([p], Purpose.VERIFY)
            if p in seg.verdicts:
                self._judge_again(seg, p)
            return True
        return False
