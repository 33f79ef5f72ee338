"""Multi-axis benchmark: attribution and inner searches with known ground truth.

Same noise model as ``search_bench.py`` (good ~18 ms, bad ~29 ms, launch shift sigma 4%, 3%
outlier launches 1.5-2x). Scenarios: one bad patch among 8; two patches that regress only
together; a regression in one NCCL version among 6 (an ordered axis); a launch-method-only
regression; commit x launch interaction; two stacked regressions on two axes. A search is
correct when it names exactly the culprit axes and, on each, the true first bad value.
``--load``: the same scenarios on a machine whose load comes and goes (search_bench.py's
scenario: after about one launch in twenty, 5-20 launches in a row run 1.5-3x slower), with the
wrong names and the wrong steps claimed at >= 99% (a true step missed is wrong, not claimed).

    python benchmarks/multiaxis_bench.py [--trials 200] [--markdown] [--load]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from perfbisect.bisect.axis_sets import AxisPlan, join_set, split_set
from perfbisect.bisect.rules.multiaxis import MultiAxisEngine
from perfbisect.bisect.search.attribution import ModelMultiAxis
from perfbisect.bisect.values import LaunchRequest, LaunchResult, Policy, Status
from perfbisect.config import Configuration

GOOD_MS, BAD_MS = 18.0, 29.0
PATCHES = tuple(f"p{i}.patch@{i:08x}" for i in range(8))
COMMITS = tuple(f"{i:040x}" for i in range(257))
NCCL = ("2.18.5", "2.19.3", "2.20.5", "2.21.5", "2.23.4", "2.26.2")
METHODS = ("tmux", "ssh")


@dataclass
class Scenario:
    name: str
    good: dict[str, str]
    bad: dict[str, str]
    plans: list[AxisPlan]
    level: Callable[[dict[str, str]], float]
    truth: dict[str, str]  # culprit axis -> first bad value (patches: the minimal set)
    all_steps: bool = False  # --all-steps: every regression, not only the crossing one


def scenarios(rng: random.Random) -> list[Scenario]:
    out = []
    culprit = rng.choice(PATCHES)
    out.append(
        Scenario(
            "one bad patch among 8 (+ commit, launch)",
            {"commit": COMMITS[0], "patches": "", "launch": "tmux"},
            {"commit": COMMITS[-1], "patches": join_set(PATCHES, PATCHES), "launch": "ssh"},
            [
                AxisPlan("commit", "path", COMMITS),
                AxisPlan("patches", "set", ("", join_set(PATCHES, PATCHES)), PATCHES),
                AxisPlan("launch", "path", METHODS),
            ],
            lambda c, p=culprit: BAD_MS if p in split_set(c["patches"]) else GOOD_MS,
            {"patches": culprit},
        )
    )
    pair = sorted(rng.sample(PATCHES, 2), key=PATCHES.index)
    out.append(
        Scenario(
            "two patches that regress only together",
            {"patches": ""},
            {"patches": join_set(PATCHES, PATCHES)},
            [AxisPlan("patches", "set", ("", join_set(PATCHES, PATCHES)), PATCHES)],
            lambda c, p=pair: BAD_MS if set(p) <= set(split_set(c["patches"])) else GOOD_MS,
            {"patches": "+".join(pair)},
        )
    )
    version = rng.randrange(1, len(NCCL))
    out.append(
        Scenario(
            "one NCCL version among 6 (+ commit)",
            {"commit": COMMITS[0], "nccl": NCCL[0]},
            {"commit": COMMITS[-1], "nccl": NCCL[-1]},
            [AxisPlan("commit", "path", COMMITS), AxisPlan("nccl", "path", NCCL)],
            lambda c, v=version: BAD_MS if NCCL.index(c["nccl"]) >= v else GOOD_MS,
            {"nccl": NCCL[version]},
        )
    )
    out.append(
        Scenario(
            "launch-method-only (+ commit, NCCL)",
            {"commit": COMMITS[0], "nccl": NCCL[0], "launch": "tmux"},
            {"commit": COMMITS[-1], "nccl": NCCL[-1], "launch": "ssh"},
            [
                AxisPlan("commit", "path", COMMITS),
                AxisPlan("nccl", "path", NCCL),
                AxisPlan("launch", "path", METHODS),
            ],
            lambda c: BAD_MS if c["launch"] == "ssh" else GOOD_MS,
            {"launch": "ssh"},
        )
    )
    at = rng.randrange(1, len(COMMITS))
    out.append(
        Scenario(
            "commit x launch interaction",
            {"commit": COMMITS[0], "launch": "tmux"},
            {"commit": COMMITS[-1], "launch": "ssh"},
            [AxisPlan("commit", "path", COMMITS), AxisPlan("launch", "path", METHODS)],
            lambda c, a=at: (
                BAD_MS if c["launch"] == "ssh" and COMMITS.index(c["commit"]) >= a else GOOD_MS
            ),
            {"commit": COMMITS[at], "launch": "ssh"},
        )
    )
    at2 = rng.randrange(1, len(COMMITS))
    out.append(
        Scenario(
            "two stacked regressions (commit 18->24, launch x1.6)",
            {"commit": COMMITS[0], "launch": "tmux"},
            {"commit": COMMITS[-1], "launch": "ssh"},
            [AxisPlan("commit", "path", COMMITS), AxisPlan("launch", "path", METHODS)],
            lambda c, a=at2: (
                (24.0 if COMMITS.index(c["commit"]) >= a else GOOD_MS)
                * (1.6 if c["launch"] == "ssh" else 1.0)
            ),
            {"commit": COMMITS[at2], "launch": "ssh"},
        )
    )
    big, small = rng.sample(PATCHES, 2)
    out.append(
        Scenario(
            "two regressions in one patch stack, one hiding the other (--all-steps)",
            {"patches": ""},
            {"patches": join_set(PATCHES, PATCHES)},
            [AxisPlan("patches", "set", ("", join_set(PATCHES, PATCHES)), PATCHES)],
            lambda c, b=big, s=small: (
                BAD_MS
                if b in split_set(c["patches"])
                else GOOD_MS * (1.3 if s in split_set(c["patches"]) else 1.0)
            ),
            {"patches": ",".join(sorted((big, small), key=PATCHES.index))},
            all_steps=True,
        )
    )
    return out


def launch(
    level: float, rng: random.Random, shift_sd: float = 0.04, outliers: float = 0.03
) -> float:
    shift = rng.gauss(1.0, shift_sd)
    if rng.random() < outliers:
        shift *= rng.uniform(1.5, 2.0)
    cycles = sorted(rng.gauss(level * shift, 1.0) for _ in range(40))
    return (cycles[19] + cycles[20]) / 2


@dataclass
class Machine:
    """The machine's load over the launch order: quiet (``busy_p`` 0), or busy periods of
    5-20 launches 1.5-3x slower, one slow-down per period, starting after about one launch in
    twenty (search_bench.py's ``load_comes_and_goes``)."""

    rng: random.Random
    busy_p: float = 0.0
    left: int = 0
    factor: float = 1.0

    def slowdown(self) -> float:
        if self.busy_p and self.left == 0 and self.rng.random() < self.busy_p:
            self.left = self.rng.randint(5, 20)
            self.factor = self.rng.uniform(1.5, 3.0)
        if self.left == 0:
            return 1.0
        self.left -= 1
        return self.factor


@dataclass(frozen=True)
class Run:
    correct: bool
    evaluations: int
    launches: int
    attribution_evals: int
    wrong: bool = False  # named culprits, not exactly the right ones (a step missed counts)
    # A named step that is not a true one, claimed at >= 99% (the model's confidence; the rule
    # engine claims none, so any wrong step of its counts): a confident wrong answer, where a
    # true step left out (--all-steps' smaller one on a busy machine) is only an incomplete one.
    sure_wrong: bool = False


def _order(value: str) -> int:
    return PATCHES.index(value) if value in PATCHES else -1


def worlds(seed: int, trial: int) -> list[tuple[Scenario, random.Random]]:
    """A trial's scenarios, each with the stream its launches draw from: one per scenario, so
    that an engine which launches more in one scenario leaves the others' worlds as they were
    (with one stream per trial, a change to one row drew different worlds for every row after
    it), and every engine meets the same culprits and the same stream of noise."""
    made = scenarios(random.Random(seed * 1_000_003 + trial))
    return [(s, random.Random(f"{seed}:{trial}:{s.name}")) for s in made]


# What a driven search's caller sees of each launch: the engine, the request, the world's true
# level, the machine's slow-down at that launch and the value (multiaxis_trace.py prints it).
Seen = Callable[[MultiAxisEngine | ModelMultiAxis, LaunchRequest, float, float, float], None]


def drive(
    s: Scenario,
    rng: random.Random,
    engine_kind: str = "rules",
    busy_p: float = 0.0,
    seen: Seen | None = None,
) -> MultiAxisEngine | ModelMultiAxis:
    """One search of scenario ``s`` to its end: each launch draws the machine's state, then
    its value, from ``rng`` (the order every table, trace and test relies on)."""
    good, bad = Configuration.of(s.good), Configuration.of(s.bad)
    kind = ModelMultiAxis if engine_kind == "model" else MultiAxisEngine
    engine = kind(good, bad, s.plans, Policy(all_steps=s.all_steps))
    machine = Machine(rng, busy_p)
    while batch := engine.next_batch():
        results = []
        for request in batch:
            level = s.level(request.config.as_dict())
            slow = machine.slowdown()
            value = launch(level * slow, rng)
            if seen is not None:
                seen(engine, request, level, slow, value)
            results.append(LaunchResult(value))
        engine.feed(results)
    return engine


def run(s: Scenario, rng: random.Random, engine_kind: str = "rules", busy_p: float = 0.0) -> Run:
    engine = drive(s, rng, engine_kind, busy_p)
    outcome = engine.outcome
    assert outcome is not None
    attribution_evals = len({row.position for row in engine.attribution}) + 2
    if outcome.status is not Status.FOUND:
        return Run(False, len(engine.verdicts), outcome.launches, attribution_evals)
    found: dict[str, list[str]] = {}
    sure_wrong = False
    for step in outcome.steps:
        axis = step.last_good.config.differing_axes(step.first_bad.config)[0]
        value = step.first_bad.config.get(axis) or ""
        if s.plans and any(p.name == axis and p.kind == "set" for p in s.plans):
            members = split_set(value)
            value = "+".join(members) if len(members) > 1 else (members[-1] if members else "")
        found.setdefault(axis, []).append(value)
        true_step = value in s.truth.get(axis, "").split(",")
        sure_wrong |= not true_step and (step.confidence is None or step.confidence >= 0.99)
    named = {axis: ",".join(sorted(v, key=_order)) for axis, v in found.items()}
    right = named == s.truth
    return Run(
        right, len(engine.verdicts), outcome.launches, attribution_evals, not right, sure_wrong
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--engine",
        default="rules",
        help="rules, model, or both side by side (rules,model): the same worlds for each",
    )
    parser.add_argument(
        "--load",
        action="store_true",
        help="on a machine whose load comes and goes (busy periods 1.5-3x, 5-20 launches)",
    )
    args = parser.parse_args(argv)
    busy_p = 0.05 if args.load else 0.0
    engines = args.engine.split(",")
    started = time.perf_counter()
    results: dict[tuple[str, str], list[Run]] = {}
    k_of: dict[str, int] = {}
    for trial in range(args.trials):
        for kind in engines:
            for s, rng in worlds(args.seed, trial):
                results.setdefault((s.name, kind), []).append(run(s, rng, kind, busy_p))
                k_of[s.name] = len(s.plans)
    rows = []
    for (name, kind), rs in sorted(results.items(), key=lambda kv: list(k_of).index(kv[0][0])):
        k = k_of[name]
        rows.append(
            (
                name,
                kind,
                k,
                sum(r.correct for r in rs) / len(rs),
                statistics.fmean(r.attribution_evals for r in rs),
                2 * k + 2,
                statistics.fmean(r.evaluations for r in rs),
                statistics.fmean(r.launches for r in rs),
                sum(r.wrong for r in rs),
                sum(r.sure_wrong for r in rs),
            )
        )
    header = (
        "| scenario | engine | k | accuracy | attribution evals | 2k+2 | evaluations | launches "
        "| named wrong | a wrong step at >= 99% |"
    )
    if args.markdown:
        machine = "a machine whose load comes and goes" if args.load else "a quiet machine"
        print(
            f"{args.trials} trials per scenario, seed {args.seed}; commit axis: 256 commits; "
            f"{machine}\n"
        )
        print(header)
        print("|---|---|---|---|---|---|---|---|---|---|")
    for name, kind, k, acc, attr, bound, ev, la, wrong, sure in rows:
        if args.markdown:
            print(
                f"| {name} | {kind} | {k} | {acc:.1%} | {attr:.2f} | {bound} | {ev:.2f} "
                f"| {la:.2f} | {wrong} | {sure} |"
            )
        else:
            print(
                f"{name[:52]:52s} {kind:5s} k={k} acc {acc:6.1%} attribution {attr:5.2f} "
                f"(<= {bound}) evals {ev:6.2f} launches {la:6.2f} wrong {wrong} (>= 99%: {sure})"
            )
    print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    _ = math
    return 0


if __name__ == "__main__":
    sys.exit(main())
