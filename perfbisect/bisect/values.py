"""The search's value types: what the engine is asked and answers (requests, results,
verdicts, culprits, outcomes), its policy, and the segment it searches. No behaviour beyond
their own bookkeeping, so the session driver, the report and both engines share them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from perfbisect.bisect.stats import Difference, Estimate, NoiseModel, Verdict
from perfbisect.config import Configuration


class Purpose(str, Enum):
    ENDPOINT = "endpoint"
    SEARCH = "search"
    VERIFY = "verify"
    CONFIRM = "confirm"  # a full-model launch confirming a proxy search's culprit
    BASELINE = "baseline"  # an endpoint with and without speculative decoding
    WATCH = "watch"  # a commit of a watched branch (perfbisect watch), not a bisection's
    EXPLAIN = "explain"  # a diagnostic launch of `bisect explain`: never counts toward a verdict


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
    verify_both: bool = False  # re-measure both sides of the bracket, not only the worse one
    # The bracket's two sides launched back to back in pairs, judged by each pair's ratio: a
    # shared machine's burst (several slow launches in a row) slows both launches of a pair,
    # so it cannot fake a step the way it fakes a single launch's verdict.
    paired_verify: bool = True
    paired_min: int = 2  # pairs that must agree before a step is believed
    paired_max: int = 4
    min_effect: float = 0.05  # endpoints must differ by at least this fraction of the good value
    higher_is_better: bool = False
    # A launch that fails at a configuration that has measured before is flaky (a server that
    # died once), not a property of the configuration: it is retried this many times in a row.
    launch_retries: int = 2
    # Crossing first: the search answers which configuration crosses the threshold and reports
    # the other level changes it saw as "seen, not searched"; True maps every step too.
    all_steps: bool = False
    # Launches at once (the executor's slots): the search proposes up to this many points per
    # round, splitting the bracket into slots + 1 parts (k-ary search; the model leaves a slot
    # idle where its point would tell next to nothing); 1 is binary search.
    slots: int = 1
    # The posterior the crossing must reach to be named (the model engine's stop rule).
    confidence: float = 0.99
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
    # What the launch cost: its stage seconds (build, start, measure, teardown); None where
    # unknown (a simulated launch, a launch reused from an earlier session).
    seconds: float | None = None

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
    verified: bool  # the verification launches ran, agreed, and the effect excludes zero
    note: str | None = None  # why it is not verified, and what would settle it
    # Crossing first: the posterior that this is the first configuration past the threshold,
    # given every launch of the session in the order they ran (audit.py); None where no audit
    # ran (every step mapped, a level gap's step, a culprit axis).
    confidence: float | None = None


@dataclass(frozen=True)
class Outcome:
    status: Status
    threshold: float | None
    message: str
    culprit: Culprit | None
    unresolved: tuple[tuple[int, int], ...]
    evaluations: int  # distinct configurations judged
    launches: int  # launches attempted, failed ones included
    # Every step found, in path order; more than one when the regression came in stages
    # (19 -> 23 -> 29 ms). ``culprit`` is the one that crosses the threshold.
    steps: tuple[Culprit, ...] = ()
    # A derived threshold's interval (from the endpoints' intervals); None when it was given.
    threshold_interval: tuple[float, float] | None = None
    # Level changes seen on the way to the crossing but not searched (crossing first): brackets
    # (a, b) where b is clearly worse than a, from the launches the search already made.
    seen: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Unfinished:
    """A search of one segment that ended without a step: why, and the range it leaves open.
    ``flipped_end``: the segment end that cannot be trusted (the verification contradicted its
    verdict, or a point measured clearly better than the good end); ``redo_why``: what the
    report says about it when the endpoints are measured again (default: the contradiction)."""

    status: Status
    message: str
    unresolved: tuple[tuple[int, int], ...] = ()
    flipped_end: int | None = None
    redo_why: str | None = None


# A derived threshold must be known to within this fraction of the endpoints' gap: otherwise
# the endpoints get more interleaved launches (a noisy good endpoint's single launch once moved
# the threshold between 50.5 and 57.3 ms from run to run).
THRESHOLD_TIGHTNESS = 0.5


def midpoint(good: float, bad: float) -> float:
    """The threshold between two levels: geometric, because launch noise is relative, so this
    point is equally many noise widths from both (18 and 29 ms give 22.9 ms)."""
    if good > 0 and bad > 0:
        return math.sqrt(good * bad)
    return (good + bad) / 2


@dataclass
class _Segment:
    """One stretch of configurations searched for a step, in search order: ``order[0]`` is at
    the lower level, ``order[-1]`` at the higher one, and the threshold lies between their
    levels. The whole path is the first segment; a step that leaves a level gap on either side
    opens a segment there; the multi-axis search makes one per culprit axis."""

    order: list[int]
    threshold: float
    verdicts: dict[int, Verdict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {p: i for i, p in enumerate(self.order)}
        self.verdicts.setdefault(self.lo, Verdict.GOOD)
        self.verdicts.setdefault(self.hi, Verdict.BAD)

    @property
    def lo(self) -> int:
        return self.order[0]

    @property
    def hi(self) -> int:
        return self.order[-1]

    def slice(self, a: int, b: int, threshold: float) -> _Segment:
        """The part from position ``a`` to position ``b`` (inclusive) as a new segment."""
        return _Segment(self.order[self.index[a] : self.index[b] + 1], threshold)
