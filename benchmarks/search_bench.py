"""Search benchmark: perfbisect's engine against `git bisect run` and fixed-repeat strategies.

Simulated histories with a known culprit and a noise model taken from the case we serve:
good ~18 ms, bad ~29 ms verify per cycle; per-cycle jitter 1 ms (40 cycles per launch, the launch
value is their median); a launch-to-launch shift with sigma 4% (so ~95% of launches fall within
+-8%, the 89 -> 82 tok/s move seen across restarts); outlier launches (3%, 1.5-2x slower); build
failures near the culprit (each commit within 6 of it fails with probability 0.25); a
two-step case 19 -> 23 -> 29 ms; and a culprit slower than the bad endpoint (a later commit
took back part of the regression).

Counted per search: *evaluations* = distinct configurations measured to a verdict (endpoints
included); *launches* = every launch attempt (build failures included). A search is correct when
it names the true first bad commit, or, when the culprit's neighbours cannot be built, reports an
unresolved range that contains the culprit and nothing it could have judged.

A shared machine whose load comes and goes (busy periods of 5-20 launches in a row, each 1.5-3x
slower, starting after about one launch in twenty) is one more scenario; `--load` shows it next
to the quiet machine with how searches ended and a calibration table (the confidence claimed for
the configuration named against how often it was the right one).

    python benchmarks/search_bench.py [--trials 200] [--n 1024] [--markdown] [--only TEXT]
    python benchmarks/search_bench.py --load [--trials 300] [--seed 1 | --seeds 1,2,3]
                                      [--strategy model] [--confidence 0.99]
    python benchmarks/search_bench.py --prior [--trials 200]
    python benchmarks/search_bench.py --cost [--trials 200]

`--prior` runs the model with a flat prior, a right and a wrong `--prior-path` (3% of the
commits touch the named paths; the culprit among them, or not) on the same worlds. `--cost`
runs the model told what each launch cost (a launch again reuses its build: 52.5 s against
75 s for a new commit, as on the GPU run of real SGLang history) against the model told nothing.

`perfbisect --engine model` is the search as one model (perfbisect/bisect/search/), next to
today's rule engine on the same worlds (each trial's world is drawn from its own seed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfbisect.bisect.rules.engine import Engine, LaunchResult, Policy, Status
from perfbisect.bisect.search.searcher import ModelEngine
from perfbisect.bisect.session.prior import PathPrior
from perfbisect.config import Configuration

GOOD_MS, BAD_MS = 18.0, 29.0


@dataclass(frozen=True)
class World:
    """One simulated history: the level of every commit and which ones do not build."""

    levels: list[float]
    unbuildable: frozenset[int]
    culprit: int  # first position at or above the threshold crossing we must find
    rng: random.Random
    shift_sd: float = 0.04
    outlier_p: float = 0.03
    steps: tuple[int, ...] = ()  # every level change; defaults to (culprit,)
    threshold: float | None = None  # given by the user (--threshold-ms); None: derived
    outlier_range: tuple[float, float] = (1.5, 2.0)
    drift_after: int | None = None  # from this launch on the machine is `drift` slower
    drift: float = 1.0
    burst_p: float = 0.0  # chance that a burst of a shared machine starts at a launch
    burst: tuple[float, float] = (1.5, 2.0)
    burst_len: tuple[int, int] = (2, 4)  # launches in a row that one burst slows
    # One slow-down for a whole burst (another job's share of the machine), with the launch's
    # own shift on top; False: each launch of a burst drawn anew.
    burst_steady: bool = False
    launches: list[int] = field(default_factory=lambda: [0])  # launches so far (mutable)
    burst_left: list[int] = field(default_factory=lambda: [0])
    burst_factor: list[float] = field(default_factory=lambda: [1.0])
    # --prior-path's weights over the positions (0..n), for the model; None: a flat prior
    prior: tuple[float, ...] | None = None

    def all_steps(self) -> tuple[int, ...]:
        return self.steps or (self.culprit,)

    def launch(self, position: int) -> float | None:
        self.launches[0] += 1
        if position in self.unbuildable:
            return None
        shift = self.rng.gauss(1.0, self.shift_sd)
        if self.rng.random() < self.outlier_p:
            shift *= self.rng.uniform(*self.outlier_range)
        if self.drift_after is not None and self.launches[0] > self.drift_after:
            shift *= self.drift
        if self.burst_p and self.burst_left[0] == 0 and self.rng.random() < self.burst_p:
            self.burst_left[0] = self.rng.randint(*self.burst_len)
            self.burst_factor[0] = self.rng.uniform(*self.burst)
        if self.burst_left[0] > 0:
            self.burst_left[0] -= 1
            shift *= self.burst_factor[0] if self.burst_steady else self.rng.uniform(*self.burst)
        level = self.levels[position] * shift
        cycles = sorted(self.rng.gauss(level, 1.0) for _ in range(40))
        return (cycles[19] + cycles[20]) / 2

    def acceptable(self, found: int | None, unresolved: tuple[int, int] | None) -> bool:
        if found is not None:
            return found == self.culprit
        if unresolved is None:
            return False
        lo, hi = unresolved
        return lo < self.culprit <= hi and all(p in self.unbuildable for p in range(lo + 1, hi))


def single_step(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    culprit = rng.randint(1, n)
    levels = [GOOD_MS if i < culprit else BAD_MS for i in range(n + 1)]
    broken = set()
    if build_failures:
        for p in range(max(1, culprit - 6), min(n, culprit + 7)):
            if p != culprit and rng.random() < 0.25:
                broken.add(p)
    return World(levels, frozenset(broken), culprit, rng, shift_sd, outlier_p)


def two_step(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    first = rng.randint(1, n - 1)
    second = rng.randint(first + 1, n)
    levels = [19.0 if i < first else 23.0 if i < second else 29.0 for i in range(n + 1)]
    # The threshold is the endpoints' geometric midpoint (23.5): the crossing is 23 -> 29.
    return World(levels, frozenset(), second, rng, shift_sd, outlier_p, (first, second))


GIVEN_THRESHOLD = math.sqrt(GOOD_MS * BAD_MS)  # what a user who knows 18 / 29 would pass


def given_threshold_slow_outliers(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """The case's noise with a given threshold, and outliers from 1.3x (not only 1.5-2x)."""
    world = single_step(n, rng, shift_sd, outlier_p, build_failures)
    return replace(world, threshold=GIVEN_THRESHOLD, outlier_range=(1.3, 2.0))


def plateau_below_threshold(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """18 -> 22.2 -> 29 ms with --threshold-ms 23: a plateau 3.5% below the threshold before
    the crossing; the crossing (22.2 -> 29) is what the user asked for."""
    first = rng.randint(1, n - 1)
    second = rng.randint(first + 1, n)
    levels = [GOOD_MS if i < first else 22.2 if i < second else BAD_MS for i in range(n + 1)]
    return World(
        levels,
        frozenset(),
        second,
        rng,
        shift_sd,
        outlier_p,
        (first, second),
        threshold=23.0,
        outlier_range=(1.3, 2.0),
    )


def drifting_machine(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """A single step on a machine that gets 4% slower partway through the search."""
    world = single_step(n, rng, shift_sd, outlier_p, build_failures)
    return replace(world, drift_after=rng.randint(4, 10), drift=1.04, outlier_range=(1.3, 2.0))


def partial_recovery(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """18 -> 34.8 -> 29 ms: a later commit takes back a third of the regression (a common real
    history: the culprit measures 20% slower than the bad endpoint, as in `perfbisect demo`).
    The threshold is derived; the crossing is the first step."""
    first = rng.randint(1, n - 1)
    second = rng.randint(first + 1, n)
    hump = BAD_MS * 1.2
    levels = [GOOD_MS if i < first else hump if i < second else BAD_MS for i in range(n + 1)]
    return World(levels, frozenset(), first, rng, shift_sd, outlier_p, (first, second))


def real_history(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """Modelled on a real import-time regression's history (366 first-parent commits): two real
    steps (+15%, +26%), about +8% of creep over ~300 commits in small increments, one commit that
    cannot run, and a shared machine's bursts of +50-100% over a few launches in a row. The
    crossing of the derived threshold is the +26% step (worlds where creep crosses first are
    redrawn)."""
    n = 366
    while True:
        a = rng.randint(20, 200)
        b = rng.randint(a + 20, 340)
        levels = []
        level = 50.0
        creepers = set(rng.sample(range(1, n + 1), 40))
        for i in range(n + 1):
            if i == a:
                level *= 1.15
            if i == b:
                level *= 1.26
            if i in creepers:
                level *= 1.002
            levels.append(level)
        threshold = math.sqrt(levels[0] * levels[-1])
        crossing = next(i for i, v in enumerate(levels) if v >= threshold)
        if crossing == b and levels[b - 1] < threshold * 0.95:
            break
    broken = frozenset({rng.choice([p for p in range(1, n) if p not in (a, b, b - 1)])})
    return World(
        levels,
        broken,
        b,
        rng,
        shift_sd,
        outlier_p,
        (a, b),
        outlier_range=(1.3, 2.0),
        burst_p=0.03,
    )


def load_comes_and_goes(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """A single step on a shared machine whose load comes and goes (another job, a compile,
    thermal or power capping): after about one launch in twenty a busy period starts, during
    which 5-20 launches in a row run 1.5-3x slower (one slow-down for the period, the launch's
    own shift on top)."""
    world = single_step(n, rng, shift_sd, outlier_p, build_failures)
    return replace(world, burst_p=0.05, burst=(1.5, 3.0), burst_len=(5, 20), burst_steady=True)


def load_comes_and_goes_per_launch(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """The same busy periods, each launch in one slowed by a factor of its own (1.5-3x)."""
    return replace(
        load_comes_and_goes(n, rng, shift_sd, outlier_p, build_failures), burst_steady=False
    )


def busy_most_of_the_time(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """A machine busy most of the time: busy periods of 5-20 launches (one slow-down of
    1.5-3x each) start after about three quiet launches, so about four launches in five run
    slow and the quiet level is the exception."""
    return replace(load_comes_and_goes(n, rng, shift_sd, outlier_p, build_failures), burst_p=0.3)


def busy_launch_by_launch(
    n: int, rng: random.Random, shift_sd: float, outlier_p: float, build_failures: bool
) -> World:
    """Another job's load on and off between launches: two launches in three run slow, each
    by a factor of its own (1.5-2.5x, about the step's own 1.6x), independently of the one
    before. The hardest load here: a slow good launch reads at the bad level."""
    world = single_step(n, rng, shift_sd, outlier_p, build_failures)
    return replace(world, burst_p=0.67, burst=(1.5, 2.5), burst_len=(1, 1))


PRIOR_KINDS = ("flat", "right", "wrong")
PRIOR_TOUCHED = 0.03  # the share of commits that touch the named paths


def prior_world(n: int, rng: random.Random, kind: str) -> World:
    """A single step (the case's noise) where about 3% of the commits touch the paths a
    ``--prior-path`` names: the culprit among them (``right``), not among them (``wrong``),
    or no prior given (``flat``)."""
    world = single_step(n, rng, 0.04, 0.03, False)
    others = [p for p in range(1, n + 1) if p != world.culprit]
    touched = set(rng.sample(others, max(1, round(PRIOR_TOUCHED * n)) - (kind == "right")))
    if kind == "right":
        touched.add(world.culprit)
    if kind == "flat":
        return world
    return replace(world, prior=tuple(PathPrior(("x",), tuple(sorted(touched)), n).weights()))


REAL_RANGE = Path(__file__).parent / "data" / "sglang_range2_areas.json"


def real_range_world(rng: random.Random, area: str | None) -> World:
    """The real SGLang range bisected on the H200 (129 commits; upstream #25464 at position
    123): a single step there with the case's noise, and the prior ``--prior-area`` reads from
    the range's real files (``area``: an area's label; None: a flat prior)."""
    data = json.loads(REAL_RANGE.read_text())
    n, culprit = int(data["n"]), int(data["culprit"]["position"])
    levels = [GOOD_MS if i < culprit else BAD_MS for i in range(n + 1)]
    world = World(levels, frozenset(), culprit, rng, 0.04, 0.03)
    if area is None:
        return world
    touched = tuple(int(x) for x in data["areas"][area])
    return replace(world, prior=tuple(PathPrior((area,), touched, n).weights()))


def prior_table(trials: int, n: int, seed: int) -> None:
    """The model with a flat prior, a right and a wrong ``--prior-path`` on the same worlds."""
    print(
        f"N = {n} commits, {trials} trials per row, seed {seed}; {PRIOR_TOUCHED:.0%} of the "
        "commits touch the named paths (they hold half of the prior)\n"
    )
    print("| prior | accuracy | launches mean | launches max | wrong named at >= 99% |")
    print("|---|---|---|---|---|")
    for kind in PRIOR_KINDS:
        results = []
        for trial in range(trials):
            world = prior_world(n, random.Random(seed * 1_000_003 + trial), kind)
            results.append(run_perfbisect(world, n, Policy(), model=True, prior=world.prior))
        launches = [r.launches for r in results]
        wrong = sum(1 for r in results if not r.correct and (r.confidence or 0) >= 0.99)
        print(
            f"| {kind} | {sum(r.correct for r in results) / trials:.1%} "
            f"| {statistics.fmean(launches):.2f} | {max(launches)} | {wrong} |"
        )
    data = json.loads(REAL_RANGE.read_text())
    print(
        f"\nThe real SGLang range {data['good'][:10]}..{data['bad'][:10]} ({data['n']} commits; "
        f"the culprit {data['culprit']['commit'][:10]} at {data['culprit']['position']}), a step "
        "there with the same noise, and --prior-area from the range's real files:\n"
    )
    print("| prior | commits on it | culprit on it | accuracy | launches mean | launches max |")
    print("|---|---|---|---|---|---|")
    for area in (None, "speculative/verify", "CUDA graph", "distributed"):
        results = []
        for trial in range(trials):
            world = real_range_world(random.Random(seed * 1_000_003 + trial), area)
            results.append(run_perfbisect(world, 0, Policy(), model=True, prior=world.prior))
        on = data["areas"].get(area, []) if area else []
        launches = [r.launches for r in results]
        print(
            f"| {'flat' if area is None else area} | {len(on) if area else '-'} "
            f"| {('yes' if data['culprit']['position'] in on else 'no') if area else '-'} "
            f"| {sum(r.correct for r in results) / trials:.1%} "
            f"| {statistics.fmean(launches):.2f} | {max(launches)} |"
        )


# What a new commit's launch and a launch again cost on the GPU run of real SGLang history
# (docs/examples/sglang_real, run 2): ready in 48-57 s for a new commit, 32.5 s again, plus
# about 20 s of measuring and teardown either way.
COST_SECONDS = (75.0, 52.5)
COST_SCENARIOS = (
    ("single step, shift 4%, outliers 3%", single_step),
    ("single step, given threshold, outliers 1.3-2x", given_threshold_slow_outliers),
    ("load comes and goes: busy periods of 5-20 launches 1.5-3x slower", load_comes_and_goes),
)


def cost_table(trials: int, n: int, seed: int) -> None:
    """The model told what launches cost (a launch again reuses the build) against the model
    told nothing, on the same worlds: accuracy, launches, and the launches' seconds."""
    print(
        f"N = {n} commits, {trials} trials per row, seed {seed}; a new commit's launch "
        f"{COST_SECONDS[0]:g} s, a launch again {COST_SECONDS[1]:g} s\n"
    )
    print("| scenario | the model | accuracy | launches mean | launch time mean (min) |")
    print("|---|---|---|---|---|")
    for (scenario, make), told in itertools.product(COST_SCENARIOS, (False, True)):
        results = []
        for trial in range(trials):
            world = make(n, random.Random(seed * 1_000_003 + trial), 0.04, 0.03, False)
            results.append(
                run_perfbisect(world, n, Policy(), model=True, seconds=COST_SECONDS, tell_cost=told)
            )
        cost = statistics.fmean(r.cost for r in results)
        print(
            f"| {scenario} | {'told the cost' if told else 'launches alike'} "
            f"| {sum(r.correct for r in results) / trials:.1%} "
            f"| {statistics.fmean(r.launches for r in results):.2f} | {cost / 60:.1f} |"
        )


@dataclass(frozen=True)
class Result:
    correct: bool
    evaluations: int
    launches: int
    all_steps: bool = False  # every level change named (only perfbisect reports several)
    phantom: bool = False  # a step was claimed where the level does not change
    rounds: int = 0  # batches of launches (launched at once with several slots)
    status: Status | None = None  # how perfbisect's search ended
    named: int | None = None  # the first bad position it named (FOUND only)
    confidence: float | None = None  # the posterior it claimed for it (crossing first)
    cost: float = 0.0  # the launches' cost in run_perfbisect's ``seconds`` (launches if None)


def run_perfbisect(
    world: World,
    n: int,
    policy: Policy,
    model: bool = False,
    prior: Sequence[float] | None = None,
    seconds: tuple[float, float] | None = None,
    tell_cost: bool = True,
) -> Result:
    """One search on ``world``. ``seconds``: what a position's first launch and a launch again
    cost (counted in ``Result.cost``; (1, 1) when None), told to the engine with each result
    where ``tell_cost``."""
    n = len(world.levels) - 1
    path = [Configuration.of({"commit": str(i)}) for i in range(n + 1)]
    engine = (
        ModelEngine(path, policy, world.threshold, prior)
        if model
        else Engine(path, policy, world.threshold)
    )
    first_s, again_s = seconds or (1.0, 1.0)
    launched: set[int] = set()
    cost = 0.0
    while batch := engine.next_batch():
        results = []
        for request in batch:
            value = world.launch(request.position)
            spent = again_s if request.position in launched else first_s
            launched.add(request.position)
            cost += spent
            told = spent if seconds and tell_cost else None
            results.append(
                LaunchResult(value, seconds=told)
                if value is not None
                else LaunchResult(reason="build", seconds=told)
            )
        engine.feed(results)
    outcome = engine.outcome
    assert outcome is not None
    found = (
        outcome.culprit.first_bad.position
        if outcome.status is Status.FOUND and outcome.culprit
        else None
    )
    unresolved = outcome.unresolved[0] if outcome.unresolved else None
    named = tuple(c.first_bad.position for c in outcome.steps)
    real = set(world.all_steps())
    return Result(
        world.acceptable(found, unresolved),
        len(engine.verdicts),
        outcome.launches,
        named == world.all_steps(),
        any(p not in real for p in named),
        engine.rounds,
        outcome.status,
        found,
        outcome.culprit.confidence if outcome.culprit else None,
        cost,
    )


def run_plain(world: World, n: int, repeats: int) -> Result:
    """`git bisect run` with a threshold script (repeats=1), or a fixed number of repeats."""
    n = len(world.levels) - 1
    launches = 0
    evaluated: set[int] = set()

    def value(position: int) -> float | None:
        nonlocal launches
        evaluated.add(position)
        values = []
        for _ in range(repeats):
            launches += 1
            v = world.launch(position)
            if v is None:
                return None
            values.append(v)
        return statistics.median(values)

    good_v, bad_v = value(0), value(n)
    if good_v is None or bad_v is None:
        return Result(False, len(evaluated), launches)
    threshold = world.threshold or (good_v + bad_v) / 2
    lo, hi = 0, n
    skipped: set[int] = set()
    while True:
        candidates = [p for p in range(lo + 1, hi) if p not in skipped]
        if not candidates:
            break
        mid = (lo + hi) / 2
        pick = min(candidates, key=lambda p: (abs(p - mid), p))
        v = value(pick)
        if v is None:
            skipped.add(pick)
        elif v > threshold:
            hi = pick
        else:
            lo = pick
    if hi - lo == 1:
        ok = world.acceptable(hi, None)
        return Result(
            ok,
            len(evaluated),
            launches,
            ok and world.all_steps() == (hi,),
            hi not in world.all_steps(),
        )
    return Result(world.acceptable(None, (lo, hi)), len(evaluated), launches)


Scenario = Callable[[int, random.Random, float, float, bool], World]
SCENARIOS: list[tuple[str, Scenario, float, float, bool]] = [
    ("single step, shift 4%, outliers 3%, build failures", single_step, 0.04, 0.03, True),
    ("single step, shift 4%, outliers 3%", single_step, 0.04, 0.03, False),
    ("single step, shift 8% (harsher), outliers 3%", single_step, 0.08, 0.03, False),
    ("two steps 19 -> 23 -> 29, shift 4%", two_step, 0.04, 0.03, False),
    (
        "single step, given threshold, outliers 1.3-2x",
        given_threshold_slow_outliers,
        0.04,
        0.03,
        False,
    ),
    (
        "plateau 3.5% below a given threshold, then the crossing",
        plateau_below_threshold,
        0.04,
        0.03,
        False,
    ),
    ("machine drifts 4% slower partway, outliers 1.3-2x", drifting_machine, 0.04, 0.03, False),
    (
        "a later commit takes back a third of it: 18 -> 34.8 -> 29 ms",
        partial_recovery,
        0.04,
        0.03,
        False,
    ),
    (
        "real history: 2 steps, creep, bursts, 1 commit cannot run (N=366)",
        real_history,
        0.04,
        0.03,
        False,
    ),
    (
        "load comes and goes: busy periods of 5-20 launches 1.5-3x slower",
        load_comes_and_goes,
        0.04,
        0.03,
        False,
    ),
]


def strategies() -> list[tuple[str, Callable[[World, int], Result]]]:
    return [
        ("perfbisect", lambda w, n: run_perfbisect(w, n, Policy())),
        ("perfbisect --engine model", lambda w, n: run_perfbisect(w, n, Policy(), model=True)),
        ("perfbisect --all-steps", lambda w, n: run_perfbisect(w, n, Policy(all_steps=True))),
        (
            "perfbisect --all-steps --engine model",
            lambda w, n: run_perfbisect(w, n, Policy(all_steps=True), model=True),
        ),
        (
            "perfbisect, 2 launches per endpoint",
            lambda w, n: run_perfbisect(w, n, Policy(good_endpoint_launches=2)),
        ),
        ("git bisect run (1 launch)", lambda w, n: run_plain(w, n, 1)),
        ("fixed 10 launches", lambda w, n: run_plain(w, n, 10)),
    ]


SLOTS = (1, 2, 4, 8)
SLOT_SCENARIOS = (
    ("single step, shift 4%, outliers 3%", single_step),
    ("single step, given threshold, outliers 1.3-2x", given_threshold_slow_outliers),
)


def rounds_table(trials: int, n: int, seed: int, engine: str = "") -> None:
    """Rounds of concurrent launches and launches for S slots (k-ary search), one run, per
    engine (``engine``: "rules" or "model" for one of them)."""
    print(
        f"N = {n} commits, {trials} trials per row, seed {seed}; target: rounds <= "
        "ceil(log_(S+1) N) + 4, accuracy unchanged\n"
    )
    print("| scenario | engine | slots | accuracy | rounds | target rounds | launches |")
    print("|---|---|---|---|---|---|---|")
    for (scenario, make), (name, model), slots in itertools.product(
        SLOT_SCENARIOS, LOAD_ENGINES, SLOTS
    ):
        if engine not in name:
            continue
        results = []
        for trial in range(trials):
            rng = random.Random(seed * 1_000_003 + trial)
            world = make(n, rng, 0.04, 0.03, False)
            results.append(run_perfbisect(world, n, Policy(slots=slots), model=model))
        accuracy = sum(r.correct for r in results) / len(results)
        rounds = statistics.fmean(r.rounds for r in results)
        launches = statistics.fmean(r.launches for r in results)
        target = math.ceil(math.log(n, slots + 1) - 1e-9) + 4
        print(
            f"| {scenario} | {name} | {slots} | {accuracy:.1%} | {rounds:.2f} | {target} "
            f"| {launches:.2f} |"
        )


LOAD_SCENARIOS = (
    ("quiet machine: single step, shift 4%, outliers 3%", single_step),
    ("load comes and goes: busy periods of 5-20 launches 1.5-3x slower", load_comes_and_goes),
    (
        "load comes and goes, each busy launch slowed by its own factor",
        load_comes_and_goes_per_launch,
    ),
    (
        "busy most of the time: periods of 5-20 launches, ~80% of launches slow",
        busy_most_of_the_time,
    ),
    (
        "busy launch by launch: 2 launches in 3 slow, each by its own 1.5-2.5x",
        busy_launch_by_launch,
    ),
)
# Claimed confidence bins of the calibration table: [lo, hi) (the last one holds 1.0). Above
# 99% in decades, since a claim of 99.0% and one of 99.99% promise ten times apart.
CONFIDENCE_BINS = (
    (0.0, 0.5),
    (0.5, 0.9),
    (0.9, 0.99),
    (0.99, 0.999),
    (0.999, 0.9999),
    (0.9999, 1.01),
)


def _percent(p: float) -> str:
    """A bin edge with as many decimals as it needs (99%, 99.9%, 99.99%)."""
    return f"{100 * p:.2f}".rstrip("0").rstrip(".") + "%" if p < 1 else "100%"


LOAD_ENGINES = (("rules", False), ("model", True))


def load_table(
    trials: int,
    n: int,
    seeds: list[int],
    only: str = "",
    engine: str = "",
    confidence: float = Policy().confidence,
) -> None:
    """The shared machine whose load comes and goes next to the quiet one: how searches end,
    launches, and a calibration table (the confidence claimed for a named configuration
    against how often it was the right one). Several ``seeds`` are pooled into one table;
    ``confidence`` is the model's target (``--confidence``; the rules claim none)."""
    shown_seeds = ", ".join(map(str, seeds))
    print(
        f"N = {n} commits, {trials} trials per row and seed, seed(s) {shown_seeds}, "
        f"perfbisect's default policy, the model's --confidence {confidence}\n"
    )
    print(
        "| scenario | engine | named right | named wrong | not reproduced | ambiguous | launches mean "
        "| launches max | wrong named at >= 99% |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    tables = []
    policy = Policy(confidence=confidence)
    for (scenario, make), (name, model) in itertools.product(LOAD_SCENARIOS, LOAD_ENGINES):
        if only not in scenario or engine not in name:
            continue
        results = []
        for seed, trial in itertools.product(seeds, range(trials)):
            rng = random.Random(seed * 1_000_003 + trial)
            world = make(n, rng, 0.04, 0.03, False)
            results.append(run_perfbisect(world, n, policy, model=model))
        runs = len(results)
        found = [r for r in results if r.status is Status.FOUND]
        right = sum(r.correct for r in found)
        wrong = [r for r in found if not r.correct]
        sure_wrong = sum(1 for r in wrong if r.confidence is None or r.confidence >= 0.99)
        not_rep = sum(r.status is Status.NOT_REPRODUCED for r in results)
        ambiguous = sum(r.status is Status.AMBIGUOUS for r in results)
        launches = [r.launches for r in results]
        print(
            f"| {scenario} | {name} | {right / runs:.1%} | {len(wrong) / runs:.1%} "
            f"| {not_rep / runs:.1%} | {ambiguous / runs:.1%} "
            f"| {statistics.fmean(launches):.2f} | {max(launches)} | {sure_wrong} |"
        )
        tables.append((f"{scenario}, {name}", found))
    for scenario, found in tables:
        print(f"\nCalibration, {scenario} ({len(found)} searches that named a configuration):\n")
        print("| claimed confidence | named | right | observed accuracy |")
        print("|---|---|---|---|")
        for lo, hi in CONFIDENCE_BINS:
            cell = [r for r in found if r.confidence is not None and lo <= r.confidence < hi]
            shown = f"[{_percent(lo)}, {_percent(hi)}{']' if hi > 1 else ')'}"
            observed = f"{sum(r.correct for r in cell) / len(cell):.1%}" if cell else "-"
            print(f"| {shown} | {len(cell)} | {sum(r.correct for r in cell)} | {observed} |")
        none = [r for r in found if r.confidence is None]
        if none:
            print(f"| none stated | {len(none)} | {sum(r.correct for r in none)} | - |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--n", type=int, default=1024, help="commits between good and bad")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--seeds",
        default="",
        help="with --load: several seeds (comma-separated) pooled into one table",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=Policy().confidence,
        help="with --load: the model's --confidence (the target its stop rule holds a margin to)",
    )
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--only", default="", help="scenarios whose name contains this")
    parser.add_argument("--perfbisect-only", action="store_true", help="skip the baselines")
    parser.add_argument(
        "--strategy",
        default="",
        help="only the strategies of exactly these names (comma-separated); with --load or "
        "--rounds, the engine: rules or model",
    )
    parser.add_argument(
        "--rounds", action="store_true", help="rounds vs slots (k-ary search) instead"
    )
    parser.add_argument(
        "--cost",
        action="store_true",
        help="the model told what a launch costs (a launch again reuses the build) or not",
    )
    parser.add_argument(
        "--prior",
        action="store_true",
        help="the model with a right, a wrong and no --prior-path on the same worlds",
    )
    parser.add_argument(
        "--load",
        action="store_true",
        help="the machine whose load comes and goes next to a quiet one, with calibration",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.cost:
        cost_table(args.trials, args.n, args.seed)
        print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        return 0
    if args.prior:
        prior_table(args.trials, args.n, args.seed)
        print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        return 0
    if args.load:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
        load_table(args.trials, args.n, seeds, args.only, args.strategy, args.confidence)
        print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        return 0
    if args.rounds:
        rounds_table(args.trials, args.n, args.seed, args.strategy)
        print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        return 0
    rows = []
    for scenario, make, shift, outliers, failures in SCENARIOS:
        if args.only not in scenario:
            continue
        for name, strategy in strategies():
            if args.perfbisect_only and not name.startswith("perfbisect"):
                continue
            if args.strategy and name not in args.strategy.split(","):
                continue
            results = []
            for trial in range(args.trials):
                rng = random.Random(args.seed * 1_000_003 + trial)
                results.append(strategy(make(args.n, rng, shift, outliers, failures), args.n))
            accuracy = sum(r.correct for r in results) / len(results)
            evals = statistics.fmean(r.evaluations for r in results)
            launches = statistics.fmean(r.launches for r in results)
            every = sum(r.all_steps for r in results) / len(results)
            clean = sum(not r.phantom for r in results) / len(results)
            rows.append((scenario, name, accuracy, every, clean, evals, launches, launches / evals))
    budget = math.log2(args.n) + 4
    header = (
        "scenario",
        "strategy",
        "accuracy",
        "every step named",
        "no phantom step",
        "evaluations",
        "launches",
        "launches/eval",
    )
    if args.markdown:
        print(
            f"N = {args.n} commits, {args.trials} trials per row, seed {args.seed}; "
            f"target: accuracy >= 99%, evaluations <= log2(N)+4 = {budget:.0f}, "
            "launches/evaluation <= 1.3\n"
        )
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for s, name, acc, every, clean, ev, la, ratio in rows:
            print(
                f"| {s} | {name} | {acc:.1%} | {every:.1%} | {clean:.1%} | {ev:.2f} | {la:.2f} "
                f"| {ratio:.2f} |"
            )
    else:
        for s, name, acc, every, clean, ev, la, ratio in rows:
            print(
                f"{s[:56]:56s} {name[:36]:36s} acc {acc:6.1%}  steps {every:6.1%}  "
                f"clean {clean:6.1%}  evals {ev:6.2f}  launches {la:6.2f}  per eval {ratio:4.2f}"
            )
    print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
