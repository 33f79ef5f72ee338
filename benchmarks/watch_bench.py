"""Continuous-mode benchmark: change points found by Apache Otava (perfbisect's guards on top)
in seeded synthetic series with a shared machine's noise, and the bisection that follows.

Every commit of a simulated branch has a level; the watcher measures every ``--every``-th
commit with 2 launches, a point's value is ``point_value`` of them (as `perfbisect watch`
does), and the series is analysed again after each new point (as a watcher does each round).
The machine: launch-to-launch sigma 4%, outlier launches (3%, 1.3-2x slower), and bursts of
slow launches (a burst starts at 2% of launches and slows the next 2-4 launches 1.3-2x).

Measured per tuning:
- *delay*: points measured from the first point at the new level (counted) until a change
  point within one point of it, past the 5% threshold, is reported; a 10% step somewhere in
  the middle of a 200-point series; the share found within 5 points is the target (>= 95%);
- *false change points per 100 points*: distinct change points ever reported (the watcher
  would have acted on each) on a flat series, and on a slow creep (+0.1% per point: +20% over 200 points);
- *bisection*: of the detected steps, the share whose bisection between the last point before
  and the first after the change point names the commit of the step (perfbisect's engine on the
  same simulated machine, from one series point before the change point's to one after, as
  `bisect start --from-change` does; beside it `git bisect run` with one launch per commit,
  and with a fixed 5 launches per commit, over the same range).

    python benchmarks/watch_bench.py [--series 40] [--points 200] [--every 8] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_bench import Result, World, run_plain

from perfbisect.bisect.rules.engine import Engine, LaunchResult, Policy, Purpose, Status
from perfbisect.config import Configuration
from perfbisect.watch.changes import (
    OTAVA_DEFAULTS,
    TUNED,
    Change,
    Tuning,
    find_changes,
    is_regression,
    point_value,
)
from perfbisect.watch.from_change import FROM_CHANGE_MAX_LAUNCHES

THRESHOLD = 0.05
STEP = 0.10
BASE_MS = 18.0
LAUNCHES = 2
# What `--auto-bisect` (and `bisect start --from-change` with its defaults) runs: up to 10
# launches a point, since the step it bisects is small next to the noise.
POLICY = Policy(max_launches=FROM_CHANGE_MAX_LAUNCHES)


@dataclass
class Machine:
    """A shared machine's launches: what multiplies a commit's level at each launch."""

    rng: random.Random
    shift_sd: float = 0.04
    outlier_p: float = 0.03
    outlier: tuple[float, float] = (1.3, 2.0)
    burst_p: float = 0.02
    burst: tuple[float, float] = (1.3, 2.0)
    burst_left: list[int] = field(default_factory=lambda: [0])

    def factor(self) -> float:
        shift = self.rng.gauss(1.0, self.shift_sd)
        if self.rng.random() < self.outlier_p:
            shift *= self.rng.uniform(*self.outlier)
        if self.burst_left[0] == 0 and self.rng.random() < self.burst_p:
            self.burst_left[0] = self.rng.randint(2, 4)
        if self.burst_left[0] > 0:
            self.burst_left[0] -= 1
            shift *= self.rng.uniform(*self.burst)
        return shift


def measure(levels: list[float], machine: Machine) -> list[float]:
    return [point_value([lv * machine.factor() for _ in range(LAUNCHES)]) for lv in levels]


def reported(values: list[float], tuning: Tuning, start: int) -> list[list[Change]]:
    """What the watcher reports after each new point from ``start`` on."""
    return [find_changes(values[:t], tuning) for t in range(start, len(values) + 1)]


def distinct(rounds: list[list[Change]]) -> int:
    """Change points ever reported, one count for one that moved by a point between rounds."""
    seen: list[int] = []
    for changes in rounds:
        for c in changes:
            if not any(abs(c.index - s) <= 1 for s in seen):
                seen.append(c.index)
    return len(seen)


def step_trial(
    rng: random.Random, points: int, every: int, tuning: Tuning
) -> tuple[int | None, tuple[int, int, float] | None, int]:
    """A 10% step at a random commit: (delay, (the change point's index, the points measured
    when it was found, the midpoint of its levels), the commit of the step)."""
    commits = points * every
    culprit = rng.randint(commits // 3, 2 * commits // 3)
    levels = [BASE_MS * (1 + STEP if c >= culprit else 1.0) for c in range(commits)]
    measured = [levels[(i + 1) * every - 1] for i in range(points)]  # each point: its commit
    first = next(i for i in range(points) if (i + 1) * every - 1 >= culprit)
    values = measure(measured, Machine(rng))
    for t in range(first + 1, min(points, first + 21) + 1):
        for c in find_changes(values[:t], tuning):
            if abs(c.index - first) <= 1 and is_regression(c, THRESHOLD, False):
                # `bisect start --from-change` gives the engine the midpoint of the change
                # point's two levels as its threshold
                mid = (c.before.mean + c.after.mean) / 2
                return t - first, (c.index, t, mid), culprit
    return None, None, culprit


def bisect_range(
    rng: random.Random,
    found: tuple[int, int, float],
    culprit: int,
    every: int,
    margin: int,
    run: Callable[[World, set[int]], Result],
) -> Result:
    """The bisection `--from-change` starts: from the point ``margin`` points before the last
    one before the change point to the point ``margin`` after the first one after it; the
    series' points inside are ``series`` positions (their launches re-used)."""
    index, measured, threshold = found
    first = max(0, index - 1 - margin)
    last = min(measured - 1, index + margin)
    lo, hi = (first + 1) * every - 1, (last + 1) * every - 1
    levels = [BASE_MS * (1 + STEP if c >= culprit else 1.0) for c in range(lo, hi + 1)]
    world = World(
        levels,
        frozenset(),
        culprit - lo,  # out of the range when the change point was misplaced: never correct
        rng,
        shift_sd=0.04,
        outlier_p=0.03,
        outlier_range=(1.3, 2.0),
        burst_p=0.02,
        burst=(1.3, 2.0),
        threshold=threshold,
    )
    series = {(p + 1) * every - 1 - lo for p in range(first + 1, last)}
    return run(world, series)


def run_engine(world: World, series: set[int]) -> Result:
    """perfbisect's engine as `search_bench.run_perfbisect` runs it, where a search launch of a
    series point re-uses one of the series' launches (``LAUNCHES`` each) and costs nothing."""
    n = len(world.levels) - 1
    engine = Engine(
        [Configuration.of({"commit": str(i)}) for i in range(n + 1)], POLICY, world.threshold
    )
    left = dict.fromkeys(series, LAUNCHES)
    launched = 0
    while batch := engine.next_batch():
        results = []
        for request in batch:
            value = world.launch(request.position)
            if request.purpose is Purpose.SEARCH and left.get(request.position, 0) > 0:
                left[request.position] -= 1
            else:
                launched += 1
            results.append(LaunchResult(value) if value is not None else LaunchResult("build"))
        engine.feed(results)
    outcome = engine.outcome
    assert outcome is not None
    found = (
        outcome.culprit.first_bad.position
        if outcome.status is Status.FOUND and outcome.culprit
        else None
    )
    return Result(world.acceptable(found, None), len(engine.verdicts), launched)


STRATEGIES: list[tuple[str, int, Callable[[World, set[int]], Result]]] = [
    ("perfbisect --from-change (1 point of margin, the default)", 1, run_engine),
    ("perfbisect, no margin", 0, run_engine),
    ("git bisect run (1 launch), same range", 1, lambda w, _s: run_plain(w, 0, 1)),
    ("git bisect run, fixed 5 launches, same range", 1, lambda w, _s: run_plain(w, 0, 5)),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=40, help="series per row")
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--every", type=int, default=8, help="commits per point")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--creep", type=float, default=0.001, help="creep per point (relative)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(
        f"{args.series} series per row, {args.points} points of {LAUNCHES} launches, a point "
        f"every {args.every} commits, seed {args.seed}; noise: 4% launch-to-launch, 3% outlier "
        "launches 1.3-2x, bursts of 2-4 slow launches 1.3-2x starting at 2% of launches\n"
    )
    print(
        "| tuning | 10% step found | within 5 points (target >= 95%) | median delay | "
        "false per 100 points, flat (target <= 0.5) | "
        f"false per 100 points, creep {args.creep:.1%}/point |"
    )
    print("|---|---|---|---|---|---|")
    brackets: dict[str, list[tuple[int, tuple[int, int, float], int]]] = {}
    for name, tuning in (("otava defaults", OTAVA_DEFAULTS), ("tuned", TUNED)):
        delays: list[int | None] = []
        brackets[name] = []
        for trial in range(args.series):
            rng = random.Random(args.seed * 1_000_003 + trial)
            delay, bracket, culprit = step_trial(rng, args.points, args.every, tuning)
            delays.append(delay)
            if bracket is not None:
                brackets[name].append((trial, bracket, culprit))
        false_flat = false_creep = 0
        for trial in range(args.series):
            rng = random.Random(args.seed * 2_000_003 + trial)
            flat = measure([BASE_MS] * args.points, Machine(rng))
            false_flat += distinct(reported(flat, tuning, 10))
            creep_levels = [BASE_MS * (1 + args.creep * i) for i in range(args.points)]
            creep = measure(creep_levels, Machine(rng))
            false_creep += distinct(reported(creep, tuning, 10))
        found = [d for d in delays if d is not None]
        per100 = 100 / (args.series * args.points)
        print(
            f"| {name} | {len(found) / len(delays):.0%} | "
            f"{sum(d <= 5 for d in found) / len(delays):.0%} | "
            f"{statistics.median(found) if found else '-'} | "
            f"{false_flat * per100:.2f} | {false_creep * per100:.2f} |"
        )
        tuning_json = tuning.as_json()
        print(f"|  | {tuning_json} |||||", file=sys.stderr)
    print(
        "\n| tuning | strategy | detected steps bisected | right commit named | "
        "launches per bisection (not counting re-used ones) |"
    )
    print("|---|---|---|---|---|")
    for name, found_brackets in brackets.items():
        for strategy, margin, run in STRATEGIES:
            results = [
                bisect_range(
                    random.Random(args.seed * 3_000_017 + t), b, c, args.every, margin, run
                )
                for t, b, c in found_brackets
            ]
            if not results:
                continue
            print(
                f"| {name} | {strategy} | {len(results)} | "
                f"{sum(r.correct for r in results) / len(results):.0%} | "
                f"{statistics.fmean(r.launches for r in results):.1f} |"
            )
    print(f"\n({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
