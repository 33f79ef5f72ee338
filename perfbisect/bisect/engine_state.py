"""The engine's state and its driver interface: launches per configuration, verdicts, the
session's noise, and the level arithmetic every layer above uses (how worse one set of launches
is than another, a level from few launches, the derived threshold's interval).

The engine is built in layers, each a class on the one below (no module imports one above it):
``EngineState`` (here) -> ``Levels`` (levels.py: verdicts, plateaus, bursts) -> ``Verification``
(verification.py: interleaved and paired launches) -> ``Endpoints`` (endpoints.py) -> ``Engine``
(engine.py: the search plan).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, ClassVar

from perfbisect.bisect.stats import (
    OUTLIER_RATIO,
    Difference,
    Estimate,
    Verdict,
    core_launches,
    difference,
    estimate,
    fastest_rel_sd,
    launch_times,
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

if TYPE_CHECKING:  # numpy, a tenth of a second of every `bisect status`, only where it runs
    from perfbisect.bisect.posterior import CrossingPosterior
_Batch = list[LaunchRequest]
# A segment's crossing posterior, its measured points and the launches it read (audit.py).
_Posterior = tuple["CrossingPosterior", list[int], list[int]]
_Search = Generator[_Batch, list[LaunchResult], None]
_MAX_STEPS = 4  # steps reported at most: each further one costs a whole binary search
_CORRECTED = -1  # from _verify: a verdict was corrected, the bracket moved (search on)
# A burst of a shared machine slows a few launches in a row (2-4 seen); launches this close in
# time to one no level can explain are suspect.
_BURST_REACH = 3
_REOPEN_MAX = 2  # a point judged again after bursts at most this often
_POOL_TOLERANCE = 0.1  # core_launches' rel_sd for pooling: it keeps launches within 1.4x
BURST_MARGIN = 0.25  # "no level explains it": 25% beyond the worse end (bursts are 1.5-2x)


def verification_failed(position: int, failure: str, earlier: int) -> str:
    """Why a bracket is not verified when a side's verification launches failed past their
    retries, and what settles it."""
    return (
        f"the verification launches of position {position} failed ({lead_with_error(failure)}); "
        f"its verdict rests on {earlier} earlier launch(es). Re-run `bisect start` with the "
        "same endpoints to verify it (its search launches are reused; the endpoints and the "
        "verification run anew)"
    )


class EngineState:
    """Launch values and verdicts; ``_run`` (the search plan) comes from the top layer."""

    # Positions are a path's order (a multi-axis search appends configurations as it measures
    # them, so "the last good before the first bad" means nothing there).
    in_path_order: ClassVar[bool] = True

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
        self.crossing_checked: set[int] = set()  # first bad points launched to be placed
        self.level_checked: set[int] = set()  # points beyond the worse end measured again
        self.unresolved_why: dict[tuple[int, int], str] = {}  # why a range was left open
        self.seen_gaps: list[tuple[int, int]] = []  # level changes seen, not searched
        self.creep_gaps: list[tuple[int, int]] = []  # level gaps searched, with no one step
        self.in_order: list[float] = []  # every launch value, in launch order
        # why each of them was launched (endpoint, search, verify), by the same index: the
        # verification's launches are the VERIFY ones (crossing first, the bracket's two sides
        # back to back)
        self.launch_purposes: list[Purpose] = []
        # What launches cost, where known: (the position's first launch?, stage seconds). A
        # first launch builds; a launch again reuses the build (launch_costs()).
        self.launch_seconds: list[tuple[bool, float]] = []
        self.seq: dict[int, list[int]] = {}  # each launch's index into in_order, per position
        # Launches taken out of a point's evidence because they ran in a burst of the machine
        # (next to a launch no level can explain); they stay in the store and the log.
        self.set_aside: dict[int, list[float]] = {}
        self.set_aside_seq: dict[int, list[int]] = {}  # their indices into in_order
        # Of those, the launches (indices into in_order) the model's posterior holds slow
        # (a busy period of the machine or a lone outlier); the rule engine sets none.
        self.held_slow: set[int] = set()
        # Each launch's probability (by its index into in_order) of having run slow, as the
        # model's final posterior reads it; every view shows it per launch (the rules: none).
        self.slow_probability: dict[int, float] = {}
        self._rel_sd_at = -1
        self._rel_sd = 0.0
        # SlowLaunches._level_beyond per (segment, end level), for the current launch count: it
        # reads every launch, set aside or not, so nothing but a new launch changes it (the
        # segment is held so that its id is not reused while the entry lives).
        self._level_beyond_at = -1
        self._level_beyond_memo: dict[tuple[int, float], tuple[object, float | None]] = {}
        self._redone = False  # the endpoints were measured again and the search redone
        self._audit_spent = 0  # launches the crossing's audit asked for (audit.py)
        self._end_redos = 0  # redos after an endpoint's slow launches were set aside
        self._rechecked: set[int] = set()  # crossed points the audit judged again mid-search
        # audit.py's last posterior and what it was computed from (launches, set-asides)
        self._posterior_memo: tuple[object, _Posterior] | None = None
        self.audit_posterior: dict[int, float] = {}  # a crossing's last audited posterior
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
            if result.seconds is not None:
                first = position not in self.launches and position not in self.failures
                self.launch_seconds.append((first, result.seconds))
            if result.ok:
                assert result.value is not None
                self.launches.setdefault(position, []).append(result.value)
                self.seq.setdefault(position, []).append(len(self.in_order))
                self.in_order.append(result.value)
                self.launch_purposes.append(request.purpose)
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

    def launch_costs(self) -> tuple[float, float]:
        """What a position's first launch and a launch again cost, relative to a first
        launch (1.0): the median stage seconds of each kind this session has seen; (1, 1)
        until it has seen both."""
        first = [s for is_first, s in self.launch_seconds if is_first]
        again = [s for is_first, s in self.launch_seconds if not is_first]
        if not first or not again or median(first) <= 0:
            return 1.0, 1.0
        # within reason: a relaunch that found a warm cache, a first launch that found a build
        return 1.0, min(2.0, max(0.2, median(again) / median(first)))

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

    # The model's path search reads the noise from launches within 1.4x of each point's best
    # alone: core_launches keeps slow launches as many as the others (the rule engine's flaky
    # configurations), and a point launched mostly in busy periods pooled its 2.9x launches
    # with its quiet ones (the noise read 40-70%). Not the multi-axis search: two more wrong
    # steps at >= 99% in 2100 busy worlds there (docs/benchmarks.md, "A step is worth ...").
    noise_from_fastest = False
    # The model's path search weighs a machine busy most of the time too (search/machine.py's
    # third chain); the multi-axis search only the two whose load comes in periods.
    busy_most_weighed = False

    def rel_sd(self) -> float:
        # Launch values change only in feed(): one computation per batch, not per question.
        if self._rel_sd_at != self.launch_count:
            # Without each point's outlier launches (1.4x its best and slower, set aside anyway):
            # they must not inflate the noise every interval is built from. A wide tolerance
            # keeps the ordinary spread.
            hib, noise = self.policy.higher_is_better, self.policy.noise
            if self.noise_from_fastest:
                self._rel_sd = fastest_rel_sd(self.launches.values(), noise, hib)
            else:
                groups = [core_launches(v, _POOL_TOLERANCE, hib) for v in self.launches.values()]
                self._rel_sd = pooled_rel_sd(groups, noise)
            self._rel_sd_at = self.launch_count
        return self._rel_sd

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

    def _set_aside_launches(self, position: int, indices: set[int]) -> list[float]:
        """Take ``position``'s launches whose index into the launch order is in ``indices``
        out of its evidence (they stay on record in ``set_aside``, and in the store and the
        log); returns the launches it keeps. With none kept, it has no launches to judge."""
        seqs, values = self.seq.get(position, []), self.launches.get(position, [])
        kept = [(i, v) for i, v in zip(seqs, values) if i not in indices]
        self.set_aside.setdefault(position, []).extend(
            v for i, v in zip(seqs, values) if i in indices
        )
        self.set_aside_seq.setdefault(position, []).extend(i for i in seqs if i in indices)
        self.seq[position] = [i for i, _ in kept]
        self.launches[position] = [v for _, v in kept]
        if not kept:
            del self.launches[position]
        return self.launches.get(position, [])

    def _reopen(self, position: int, seg: _Segment) -> None:
        """Drop ``position``'s verdict in ``seg`` (its launches were set aside): the search
        judges it again. On the whole path the reported verdict is UNCLEAR until then, so that
        no report shows a verdict its launches no longer back."""
        del seg.verdicts[position]
        if seg is self._top:
            self._set_verdict(position, Verdict.UNCLEAR)

    def _request(self, positions: Sequence[int], purpose: Purpose) -> _Batch:
        return [LaunchRequest(p, self.path[p], purpose) for p in positions]

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

    def measured_worse(self, better: Sequence[float], worse: Sequence[float]) -> bool:
        """For the report: ``worse`` clearly worse than ``better``, as the engine judges it."""
        return self._clearly_worse(better, worse)

    def steps_headline(
        self, crossing: Culprit, steps: Sequence[Culprit], n: int, otherwise: str
    ) -> str:
        """The outcome's first words for the steps found on a path of positions 0..n: the one
        step, or every step and the crossing's place among them; ``otherwise``: what the
        crossing is when no step's medians straddle the threshold (each engine names it as it
        chose it)."""
        if len(steps) == 1:
            return f"first bad configuration at position {crossing.first_bad.position} of {n}"
        where = ", ".join(str(c.first_bad.position) for c in steps)
        # Only what the numbers show: "crosses" when the two medians straddle the threshold.
        which = "crosses the threshold" if self.straddles(crossing) else otherwise
        return (
            f"the regression came in {len(steps)} steps (at positions {where} of {n}); "
            f"position {crossing.first_bad.position} {which}"
        )

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

    @property
    def bad_end(self) -> int:
        """The bad endpoint's position: the path's last. (A multi-axis search appends the
        configurations it measures after both endpoints.)"""
        return len(self.path) - 1

    def threshold_interval(self) -> tuple[float, float] | None:
        """Where the derived threshold could lie, given the endpoints' intervals."""
        g, b = self.launches.get(0), self.launches.get(self.bad_end)
        if not g or not b:
            return None
        eg, eb = self._estimate(g), self._estimate(b)
        ends = sorted((midpoint(eg.lo, eb.lo), midpoint(eg.hi, eb.hi)))
        return ends[0], ends[1]

    def _threshold_tight(self) -> bool:
        interval = self.threshold_interval()
        g, b = self.launches[0], self.launches[self.bad_end]
        gap = abs(self._estimate(b).median - self._estimate(g).median)
        return interval is not None and interval[1] - interval[0] <= THRESHOLD_TIGHTNESS * gap

    def _worse_by(self, good: Sequence[float], bad: Sequence[float]) -> Difference:
        """How much worse bad is than good, positive = worse, in the metric's unit."""
        diff = difference(self._core(good), self._core(bad), self.rel_sd(), self.policy.noise.z)
        if self.policy.higher_is_better:
            return Difference(-diff.delta, -diff.hi, -diff.lo)
        return diff

    def _two_levels(self, values: Sequence[float]) -> bool:
        """Launches at two levels, as many slow as fast: none of them set aside as outliers
        although some are 1.4x the best one (a burst, or a flaky configuration)."""
        if len(values) < 3:
            return False
        times = launch_times(values, self.policy.higher_is_better)
        if times is None:
            return False
        core = self._core(values)
        return len(core) == len(values) and max(times) >= OUTLIER_RATIO * min(times)

    def _pair_ratios(self, lo: int, hi: int, since: tuple[int, int]) -> list[float]:
        """hi/lo per back-to-back pair launched since ``since`` (worse over better)."""
        a = self.launches.get(lo, [])[since[0] :]
        b = self.launches.get(hi, [])[since[1] :]
        pairs = list(zip(a, b))
        if self.policy.higher_is_better:
            return [x / y for x, y in pairs if y > 0]
        return [y / x for x, y in pairs if x > 0]

    # --- what the report asks of every engine (the rule engine's layers refine both) -------
    def creep(
        self, steps: Sequence[Culprit], seen: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """Ranges where the level moved with no one step found inside: the level gaps a
        search (``--all-steps``) searched without pinning one step."""
        return list(self.creep_gaps)

    @property
    def confidence_target(self) -> float:
        """The posterior a named step is meant to hold (the report warns below it)."""
        return self.policy.confidence

    def beyond_bad_end(self) -> Callable[[float], bool] | None:
        """For the report: whether a launch value lies clearly beyond the bad endpoint's own
        level, or None where the engine does not judge it (the model holds such launches
        slow in its own posterior instead)."""
        return None

    def _run(self) -> _Search:
        """The search plan, a generator of launch batches (each engine defines it)."""
        raise NotImplementedError
