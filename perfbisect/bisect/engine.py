"""The search engine: a pure state machine fed with launch results.

It never touches git, hosts or the database. The driver asks ``next_batch()`` for launch
requests (several at once, so parallel hosts can serve them), runs them, and hands the results
back with ``feed()``. Because the engine is deterministic, a resumed session is rebuilt exactly
by replaying the stored launch results in order.

Plan (DESIGN.md sections 3-4): reproduce the endpoints and fix the threshold; binary search on
the path from good to bad, routing around SKIP/UNCLEAR points and never blaming them; verify the
adjacent pair with interleaved launches; if verification contradicts an earlier verdict (one
outlier launch can mislead a single-launch verdict), correct it and keep searching.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from enum import Enum

from perfbisect.bisect.stats import (
    Difference,
    Estimate,
    NoiseModel,
    Verdict,
    classify,
    difference,
    estimate,
    median,
    pooled_rel_sd,
)
from perfbisect.config import Configuration


class Purpose(str, Enum):
    ENDPOINT = "endpoint"
    SEARCH = "search"
    VERIFY = "verify"


class Status(str, Enum):
    FOUND = "found"
    NOT_REPRODUCED = "endpoints-not-reproduced"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Policy:
    min_launches: int = 1
    good_endpoint_launches: int = 1
    bad_endpoint_launches: int = 2
    endpoint_confirm_launches: int = 3  # launches before declaring the endpoints not reproduced
    max_launches: int = 5
    verify_min_pairs: int = 1
    verify_max_pairs: int = 3
    min_effect: float = 0.05  # endpoints must differ by at least this fraction of the good value
    higher_is_better: bool = False
    noise: NoiseModel = field(default_factory=NoiseModel)

    def __post_init__(self) -> None:
        lows = (self.min_launches, self.good_endpoint_launches, self.bad_endpoint_launches)
        if min(lows) < 1:
            raise ValueError("minimum launches must be at least 1")
        if self.max_launches < max(lows):
            raise ValueError("max launches must be >= min launches")


@dataclass(frozen=True)
class LaunchRequest:
    position: int
    config: Configuration
    purpose: Purpose


@dataclass(frozen=True)
class LaunchResult:
    """One launch's value (median of its samples), or why it produced none."""

    value: float | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class PointResult:
    position: int
    config: Configuration
    verdict: Verdict
    estimate: Estimate | None
    reason: str | None = None


@dataclass(frozen=True)
class Culprit:
    last_good: PointResult
    first_bad: PointResult
    effect: Difference
    verified: bool


@dataclass(frozen=True)
class Outcome:
    status: Status
    threshold: float | None
    message: str
    culprit: Culprit | None
    unresolved: tuple[tuple[int, int], ...]
    evaluations: int
    launches: int


def midpoint(good: float, bad: float) -> float:
    """The threshold between two levels: geometric, because launch noise is relative, so this
    point is equally many noise widths from both (18 and 29 ms give 22.9 ms)."""
    if good > 0 and bad > 0:
        return math.sqrt(good * bad)
    return (good + bad) / 2


_Batch = list[LaunchRequest]
_Search = Generator[_Batch, list[LaunchResult], None]


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
        self.skip_reason: dict[int, str] = {}
        self.verdicts: dict[int, Verdict] = {}
        self.evaluations = 0
        self.launch_count = 0
        self.outcome: Outcome | None = None
        self._new_verdicts: list[PointResult] = []
        self._endpoint_flipped: int | None = None
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
        for request, result in zip(self._pending, results):
            self.launch_count += 1
            if result.ok:
                assert result.value is not None
                self.launches.setdefault(request.position, []).append(result.value)
            else:
                self.skip_reason[request.position] = result.reason or "failed"
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
        return pooled_rel_sd(self.launches.values(), self.policy.noise)

    # ---- internals --------------------------------------------------------------------------

    def _advance(self, results: list[LaunchResult] | None) -> None:
        try:
            batch = next(self._search) if results is None else self._search.send(results)
        except StopIteration:
            batch = []
        self._pending = batch

    def _estimate(self, values: Sequence[float]) -> Estimate:
        return estimate(values, self.rel_sd(), self.policy.noise.z)

    def _set_verdict(self, position: int, verdict: Verdict) -> None:
        self.verdicts[position] = verdict
        self.evaluations += 1
        self._new_verdicts.append(self.point(position))

    def _finish(
        self,
        status: Status,
        message: str,
        culprit: Culprit | None = None,
        unresolved: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.outcome = Outcome(
            status,
            self.threshold,
            message,
            culprit,
            unresolved,
            self.evaluations,
            self.launch_count,
        )

    def _request(self, positions: Sequence[int], purpose: Purpose) -> _Batch:
        return [LaunchRequest(p, self.path[p], purpose) for p in positions]

    def _decide(self, position: int) -> Verdict | None:
        assert self.threshold is not None
        values = self.launches.get(position, [])
        if not values:
            return None
        return classify(self._estimate(values), self.threshold, self.policy.higher_is_better)

    def _run(self) -> _Search:
        if not (yield from self._endpoints()):
            return
        yield from self._bisect()

    def _worse_by(self, good: Sequence[float], bad: Sequence[float]) -> Difference:
        """How much worse bad is than good, positive = worse, in the metric's unit."""
        diff = difference(good, bad, self.rel_sd(), self.policy.noise.z)
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
            if self.fixed_threshold:
                vg, vb = self._decide(good), self._decide(bad)
                settled = vg is not None and vb is not None
            else:
                worse = self._worse_by(g, b)
                big_enough = worse.delta >= self.policy.min_effect * abs(median(g))
                if worse.lo > 0 and big_enough:
                    # Both endpoints must sit clearly on their side of the midpoint, so that
                    # one outlier launch cannot drag the threshold.
                    self.threshold = midpoint(median(g), median(b))
                    settled = self._decide(good) is not None and self._decide(bad) is not None
                    self.threshold = None
                else:
                    settled = worse.hi < 0 and n >= self.policy.endpoint_confirm_launches
            if settled or n >= self.policy.max_launches:
                break
            yield self._request([good, bad], Purpose.ENDPOINT)

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

    def _evaluate(self, position: int) -> Generator[_Batch, list[LaunchResult], None]:
        """Adaptive launches of one point until its interval leaves the threshold."""
        yield self._request([position] * self.policy.min_launches, Purpose.SEARCH)
        while True:
            if position in self.skip_reason:
                self._set_verdict(position, Verdict.SKIP)
                return
            verdict = self._decide(position)
            if verdict is not None:
                self._set_verdict(position, verdict)
                return
            if len(self.launches[position]) >= self.policy.max_launches:
                self._set_verdict(position, Verdict.UNCLEAR)
                return
            yield self._request([position], Purpose.SEARCH)

    def _bracket(self) -> tuple[int, int]:
        """(last GOOD before the first BAD, first BAD): the range that holds the first crossing."""
        hi = min(p for p, v in self.verdicts.items() if v is Verdict.BAD)
        lo = max(p for p, v in self.verdicts.items() if v is Verdict.GOOD and p < hi)
        return lo, hi

    def _bisect(self) -> Generator[_Batch, list[LaunchResult], None]:
        verified: set[tuple[int, int]] = set()
        last = len(self.path) - 1
        while True:
            # Endpoints keep their verdicts (a flip ends the search), so the bracket exists.
            lo, hi = self._bracket()
            open_points = [p for p in range(lo + 1, hi) if p not in self.verdicts]
            if open_points:
                mid = (lo + hi) / 2
                pick = min(open_points, key=lambda p: (abs(p - mid), p))
                yield from self._evaluate(pick)
                continue
            # The bracket is final: confirm both ends with interleaved launches before
            # reporting it, culprit or unresolved range alike. A contradiction (one outlier
            # launch misled a single-launch verdict) re-opens the search.
            if (lo, hi) not in verified:
                verified.add((lo, hi))
                yield from self._verify(lo, hi)
                if self._endpoint_flipped is not None:
                    which = "good" if self._endpoint_flipped == 0 else "bad"
                    self._finish(
                        Status.AMBIGUOUS,
                        f"re-measuring the {which} endpoint contradicted its first verdict (the "
                        "machine may have drifted); the regression is in this range",
                        unresolved=((lo, hi),),
                    )
                    return
                continue
            if hi - lo > 1:
                n_open = hi - lo - 1
                self._finish(
                    Status.AMBIGUOUS,
                    f"{n_open} configuration(s) between the last good and the first bad could "
                    "not be judged (skipped or unclear); the regression is in this range",
                    unresolved=((lo, hi),),
                )
                return
            break
        lo, hi = self._bracket()
        effect = difference(
            self.launches[lo], self.launches[hi], self.rel_sd(), self.policy.noise.z
        )
        self._finish(
            Status.FOUND,
            f"first bad configuration at position {hi} of {last}",
            Culprit(self.point(lo), self.point(hi), effect, verified=True),
        )

    def _verify(self, lo: int, hi: int) -> Generator[_Batch, list[LaunchResult], None]:
        """Interleaved A B A B launches of the adjacent pair, then re-judge both."""
        pairs = 0
        last = len(self.path) - 1
        while True:
            yield self._request([lo, hi], Purpose.VERIFY)
            pairs += 1
            if lo in self.skip_reason or hi in self.skip_reason:
                for p in (lo, hi):
                    if p in self.skip_reason and p not in (0, last):
                        self._set_verdict(p, Verdict.SKIP)
                return
            v_lo, v_hi = self._decide(lo), self._decide(hi)
            if pairs >= self.policy.verify_min_pairs and v_lo is not None and v_hi is not None:
                break
            if pairs >= self.policy.verify_max_pairs:
                break
        for p, v in ((lo, v_lo), (hi, v_hi)):
            new = v if v is not None else Verdict.UNCLEAR
            if p in (0, last) and new is not self.verdicts[p]:
                # An endpoint that flips means the machine drifted (or the endpoints were
                # misjudged): the threshold can no longer be trusted, so the search stops.
                self._endpoint_flipped = p
                continue
            self._set_verdict(p, new)
