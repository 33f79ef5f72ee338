"""The endpoints: reproduce the good and the bad configuration and fix the threshold (given, or
the geometric midpoint of their levels once both are known tightly enough).
"""

from __future__ import annotations

from collections.abc import Generator

from perfbisect.bisect.engine_state import (
    _Batch,
)
from perfbisect.bisect.rules.audit import Audit
from perfbisect.bisect.stats import (
    OUTLIER_RATIO,
    Verdict,
    launch_times,
    median,
)
from perfbisect.bisect.values import (
    LaunchResult,
    Purpose,
    Status,
    _Segment,
    midpoint,
)


class Endpoints(Audit):
    """The endpoint phase: launches of the good and bad configuration, the threshold."""

    def _endpoints(self) -> Generator[_Batch, list[LaunchResult], bool]:
        good, bad = 0, self.bad_end
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
        if not (worse.lo > 0 and big_enough) and self._set_aside_endpoint_bursts():
            # A burst of the machine slowed both ends alike: judged on their other launches.
            g, b = self.launches[good], self.launches[bad]
            est_g, est_b = self._estimate(g), self._estimate(b)
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
        two_levels = [
            note
            for p, name in ((good, "good"), (bad, "bad"))
            if (note := self._two_levels_note(self.launches[p], name))
        ]
        self._finish(Status.NOT_REPRODUCED, "; ".join([f"{why} {unit}", *two_levels]))
        return False

    def _two_levels_note(self, values: list[float], name: str) -> str | None:
        """What an endpoint's launches at two levels mean for the verdict above: its median
        mixes them, so the endpoints' difference says nothing yet."""
        if not self._two_levels(values):
            return None
        times = launch_times(values, self.policy.higher_is_better)
        assert times is not None  # _two_levels needs them
        best = min(times)
        slow = [v for v, t in zip(values, times, strict=True) if t >= OUTLIER_RATIO * best]
        fastest = values[times.index(best)]
        return (
            f"the {name} endpoint's {len(values)} launches fall at two levels ({len(slow)} of "
            f"them {OUTLIER_RATIO:g}x or more slower than the fastest, {fastest:.4g}): the slow "
            "launches of a busy machine, or a flaky configuration, so its median is no level; "
            "run again when the machine is quieter, or look at `bisect log`"
        )

    def _refine_threshold(self, seg: _Segment) -> Generator[_Batch, list[LaunchResult], bool]:
        """Crossing first with a derived threshold: a point left UNCLEAR whose level lies where
        the threshold could lie (a plateau just below or above it, the endpoints known from two
        or three launches) cannot be decided until the threshold is known better. One more
        interleaved launch of each endpoint, the threshold derived again from them, and every
        verdict of the search judged again against it. True when it ran."""
        if self.fixed_threshold or self.policy.all_steps or seg is not self._top:
            return False
        good, bad = 0, self.bad_end
        stuck = [
            p
            for p in seg.order[1:-1]
            if seg.verdicts.get(p) is Verdict.UNCLEAR
            and p not in self.skip_reason
            and self.launches.get(p)
        ]
        interval = self.threshold_interval()
        cap = 2 * self.policy.max_launches
        if not stuck or interval is None or {good, bad} & self.gave_up:
            return False
        if min(len(self.launches[good]), len(self.launches[bad])) >= cap:
            return False
        u = stuck[0]
        est = self._estimate(self._plateau(u, seg, self._possible(seg, u)))
        if est.hi < interval[0] or est.lo > interval[1]:
            return False  # the threshold's own uncertainty is not what keeps it open
        yield self._request([bad, good], Purpose.ENDPOINT)
        if {good, bad} & (self.skip_reason.keys() | self.gave_up):
            return False
        g, b = self.launches[good], self.launches[bad]
        if self._two_levels(g) or self._two_levels(b) or not self._clearly_worse(g, b):
            # An endpoint whose launches now disagree (slow launches among them) says no
            # level to derive from: the threshold stays until more launches settle it.
            return True
        self.threshold = seg.threshold = midpoint(
            self._estimate(g).median, self._estimate(b).median
        )
        for p, old in list(seg.verdicts.items()):
            if p in (seg.lo, seg.hi) or old is Verdict.SKIP:
                continue
            new = self._decide(p, seg) or Verdict.UNCLEAR
            if new is not old:
                self._set_verdict(p, new, seg)
        return True
