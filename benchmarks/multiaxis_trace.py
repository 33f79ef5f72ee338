"""One world of multiaxis_bench.py, launch by launch: how a wrong (or right) answer came about.

Runs the model's multi-axis search on one seeded world through the benchmark's own driver
(``multiaxis_bench.drive``: the same streams, so the outcome is the table's), and prints every launch: its configuration's position
in the search, why it was launched, the world's true level, the machine's slow-down at that
launch (busy periods; a lone outlier shows as a value far off its level at 1.00) and the value;
then the outcome and each named step with its posterior. The docs' "read launch by launch"
findings (trials 756, 77, 36, 68) come from this.

    python benchmarks/multiaxis_trace.py TRIAL "one NCCL" [--seed 1] [--load]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import multiaxis_bench as bench

from perfbisect.bisect.values import LaunchRequest
from perfbisect.config import Configuration


def trace(trial: int, scenario: str, seed: int, busy_p: float) -> int:
    worlds = [(s, rng) for s, rng in bench.worlds(seed, trial) if s.name.startswith(scenario)]
    if not worlds:
        print(f"no scenario of multiaxis_bench.py starts with {scenario!r}", file=sys.stderr)
        return 2
    s, rng = worlds[0]
    print(f"{s.name}; the truth: {s.truth}")
    good = Configuration.of(s.good)
    count = 0

    def seen(
        engine: bench.MultiAxisEngine | bench.ModelMultiAxis,
        request: LaunchRequest,
        level: float,
        slow: float,
        value: float,
    ) -> None:
        nonlocal count
        count += 1
        changed = {k: v for k, v in request.config.as_dict().items() if v != good.get(k)}
        print(
            f"{count:4d} position {engine.path.index(request.config):4d} "
            f"{request.purpose.name:8s} level {level:5.1f} machine x{slow:.2f} "
            f"value {value:7.2f}  {changed}"
        )

    outcome = bench.drive(s, rng, "model", busy_p, seen).outcome
    assert outcome is not None
    print(f"{outcome.status.name}: {outcome.message} ({outcome.launches} launches)")
    for step in outcome.steps:
        lo, hi = step.last_good.config.as_dict(), step.first_bad.config.as_dict()
        moved = {k: f"{lo.get(k)} -> {v}" for k, v in hi.items() if lo.get(k) != v}
        print(f"  step {moved} at {step.confidence}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trial", type=int)
    parser.add_argument("scenario", help="the start of the scenario's name")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", action="store_true", help="the machine whose load comes and goes")
    args = parser.parse_args(argv)
    return trace(args.trial, args.scenario, args.seed, 0.05 if args.load else 0.0)


if __name__ == "__main__":
    raise SystemExit(main())
