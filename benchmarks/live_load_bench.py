"""Live load benchmark: perfbisect's engines on THIS machine, real processes, while its load
comes and goes.

search_bench.py's busy-machine row is a model of a shared node (periods of launches 1.5-3x
slower). This benchmark is the thing itself: a real git repository whose program got 25% slower
at one commit, measured by real processes through the real CLI (`perfbisect bisect start`,
worktrees, the store), while a load generator starts CPU burners for busy periods of 5-15 s
(2-5 burners: on 2 cores a CPU-bound launch then runs about 1.5-3x slower) after quiet periods
of about 15 s. Each trial plants the culprit at its own seeded position and runs every engine
on it, one after the other, each with its own history database; both engines meet the same
load process, not the same load moments (which is the point: a load that comes and goes).

    python benchmarks/live_load_bench.py [--trials 6] [--n 40] [--engines rules,model]
        [--quiet] [--seed 1] [--markdown] [--keep DIR]

Counted per search: named right / named wrong / no culprit named, launches, wall time, and the
confidence claimed when the name was wrong. ``--quiet`` runs without the load generator (the
machine's own load only), for the launches on a quiet machine. The machine's load average is
printed before and after: other work on a shared machine counts in as well.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

WORK = """\
ROUNDS = {rounds}


def work() -> int:
    x = 1
    for _ in range(ROUNDS):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x
"""

MEASURE = """\
import time

from work import work

work()  # warm
for _ in range(12):
    t = time.perf_counter()
    work()
    print(f"verify_ms={(time.perf_counter() - t) * 1000:.4f}", flush=True)
"""

EXPERIMENT = """\
[target]
kind = "command"
repo = "repo"
measure = "{python} measure.py"
timeout_s = 120

[metric]
name = "verify_ms"
pattern = 'verify_ms=([0-9.]+)'
"""

BASE_ROUNDS = 60_000  # about 5 ms per sample on the development machine
SLOWER = 1.25
BURN = "while True: pass"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def make_repo(where: Path, n: int, culprit: int) -> list[str]:
    """``n`` commits; from ``culprit`` on, work() runs SLOWER times the rounds."""
    repo = where / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    (repo / "measure.py").write_text(MEASURE)
    shas = []
    for i in range(n):
        rounds = int(BASE_ROUNDS * (SLOWER if i >= culprit else 1.0))
        (repo / "work.py").write_text(WORK.format(rounds=rounds))
        (repo / "notes.txt").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    (where / "perfbisect.toml").write_text(EXPERIMENT.format(python=sys.executable))
    return shas


class Load:
    """Busy periods of CPU burners (real processes in their own process group), started and
    stopped on a seeded schedule until ``stop``; every burner is killed on the way out."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.burners: list[subprocess.Popen[bytes]] = []
        self.busy_s = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.thread.join(timeout=30)
        self._stop_burners()

    def _stop_burners(self) -> None:
        for p in self.burners:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
        self.burners = []

    def _run(self) -> None:
        while not self.halt.wait(self.rng.expovariate(1 / 15)):
            busy = self.rng.uniform(5, 15)
            k = self.rng.randint(2, 5)
            self.burners = [
                subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True)
                for _ in range(k)
            ]
            start = time.monotonic()
            self.halt.wait(busy)
            self._stop_burners()
            self.busy_s += time.monotonic() - start


@dataclass
class Outcome:
    engine: str
    named: str | None  # the first bad commit named
    right: bool
    confidence: float | None
    launches: int
    wall_s: float
    status: str


def bisect(where: Path, good: str, bad: str, engine: str) -> Outcome:
    env = dict(os.environ)
    env["PERFBISECT_DB"] = f"sqlite:///{where / f'history-{engine}.db'}"
    env["PERFBISECT_CACHE"] = str(where / f"cache-{engine}")
    argv = [sys.executable, "-m", "perfbisect", "bisect", "start", "--good", good, "--bad", bad]
    argv += ["--engine", engine, "--no-explain", "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - start
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(done.stderr[-2000:])
        return Outcome(engine, None, False, None, 0, wall, f"exit {done.returncode}")
    culprit = report.get("culprit") or {}
    named = (culprit.get("first_bad") or {}).get("commit")
    return Outcome(
        engine,
        named,
        False,
        culprit.get("confidence"),
        int(report.get("launches") or 0),
        wall,
        str(report.get("status")),
    )


def table(outcomes: list[Outcome], engines: list[str], markdown: bool) -> None:
    head = (
        "| engine | searches | named right | named wrong | none named | wrong at >= 99% "
        "| launches mean | launches max | wall s median |"
    )
    print(head)
    print("|---" * 9 + "|")
    for engine in engines:
        rows = [o for o in outcomes if o.engine == engine]
        if not rows:
            continue
        right = sum(o.right for o in rows)
        wrong = [o for o in rows if o.named is not None and not o.right]
        sure = sum(1 for o in wrong if (o.confidence or 0) >= 0.99)
        launches = [o.launches for o in rows]
        print(
            f"| {engine} | {len(rows)} | {right} | {len(wrong)} | "
            f"{sum(1 for o in rows if o.named is None)} | {sure} | "
            f"{statistics.mean(launches):.1f} | {max(launches)} | "
            f"{statistics.median(o.wall_s for o in rows):.0f} |"
        )
    if not markdown:
        for o in outcomes:
            print(f"  {o.engine}: {o.status} right={o.right} conf={o.confidence} n={o.launches}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--n", type=int, default=40, help="commits in the repository")
    parser.add_argument("--engines", default="rules,model")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quiet", action="store_true", help="no load generator")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--keep", help="keep every trial's repository and histories here")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rng = random.Random(args.seed)
    outcomes: list[Outcome] = []
    print(f"load average before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pb-live-") as scratch:
        tmp = args.keep or scratch
        load = None if args.quiet else Load(args.seed)
        with load if load is not None else contextlib.nullcontext():
            for trial in range(args.trials):
                culprit = rng.randint(args.n // 4, 3 * args.n // 4)
                where = Path(tmp) / f"t{trial}"
                shas = make_repo(where, args.n, culprit)
                order = engines if trial % 2 == 0 else engines[::-1]
                for engine in order:
                    o = bisect(where, shas[0], shas[-1], engine)
                    o.right = o.named == shas[culprit]
                    outcomes.append(o)
                    print(
                        f"trial {trial} culprit {culprit} {engine}: {o.status}, "
                        f"{'right' if o.right else 'WRONG' if o.named else 'none'}, "
                        f"confidence {o.confidence}, {o.launches} launches, {o.wall_s:.0f} s",
                        flush=True,
                    )
    wall = time.monotonic() - start
    busy = f", busy {load.busy_s / wall:.0%} of it" if load is not None else ""
    print(f"load average after: {os.getloadavg()[0]:.2f}; {wall:.0f} s in all{busy}")
    print()
    print(
        f"{args.trials} trials, n = {args.n} commits, +{SLOWER - 1:.0%} at a seeded commit, "
        f"{'quiet (no load generator)' if args.quiet else 'load comes and goes'}, seed {args.seed}"
    )
    print()
    table(outcomes, engines, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
