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
        [--quiet] [--seed 1] [--markdown] [--keep DIR] [--torch cuda] [--deadline-s S]

``--torch DEVICE``: the program is a chain of matrix products on DEVICE (PyTorch; ``cuda`` on a
GPU machine), 25% more of them from the culprit on, and the load is other processes running
matrix products on the same device in busy periods (``--busy-s``, after quiet periods of about
``--quiet-s``): another job sharing the GPU, time-sliced with it. ``--deadline-s``: no trial
starts after that many seconds (a device call has a limit), and the table holds those run.

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

# --torch: a sample is ROUNDS products of one SIZE x SIZE matrix, synchronised (about 5 ms at
# 4096 in bf16 on an H100 or H200); the load, another process's products on the same device.
TORCH_WORK = """\
import torch

ROUNDS = {rounds}
DEVICE = "{device}"
SIZE = {size}
_A = []


def work() -> int:
    if not _A:
        torch.manual_seed(0)
        dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
        _A.append(torch.randn(SIZE, SIZE, device=DEVICE, dtype=dtype) / SIZE**0.5)
    a = _A[0]
    x = a
    for _ in range(ROUNDS):
        x = x @ a
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return int(x.shape[0])
"""
TORCH_ROUNDS = {"cuda": 25, "cpu": 2}
TORCH_SIZE = {"cuda": 4096, "cpu": 512}
# Another job on the same device: bursts of products (about 2 ms on an H100) with a pause as
# long between them, so one such process slows the program about 1.5-2x and two about 2-3x
# (time-sliced with it), the busy factors of the simulated machine (search_bench.py --load).
TORCH_BURN = """\
import time

import torch

d = {device!r}
dtype = torch.bfloat16 if d == "cuda" else torch.float32
a = torch.randn({size}, {size}, device=d, dtype=dtype) / {size} ** 0.5
while True:
    for _ in range(10):
        b = a @ a
    if d == "cuda":
        torch.cuda.synchronize()
    time.sleep(0.002)
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def make_repo(where: Path, n: int, culprit: int, device: str | None = None) -> list[str]:
    """``n`` commits; from ``culprit`` on, work() runs SLOWER times the rounds (``device``:
    the torch program's)."""
    repo = where / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    (repo / "measure.py").write_text(MEASURE)
    shas = []
    for i in range(n):
        base = BASE_ROUNDS if device is None else TORCH_ROUNDS.get(device, 2)
        rounds = round(base * (SLOWER if i >= culprit else 1.0))
        if device is None:
            (repo / "work.py").write_text(WORK.format(rounds=rounds))
        else:
            size = TORCH_SIZE.get(device, 512)
            (repo / "work.py").write_text(
                TORCH_WORK.format(rounds=rounds, device=device, size=size)
            )
        (repo / "notes.txt").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    (where / "perfbisect.toml").write_text(EXPERIMENT.format(python=sys.executable))
    return shas


class Load:
    """Busy periods of CPU burners (real processes in their own process group), started and
    stopped on a seeded schedule until ``stop``; every burner is killed on the way out.
    ``device``: burners running matrix products on that torch device instead (1-2 of them)."""

    def __init__(
        self,
        seed: int,
        device: str | None = None,
        quiet_s: float = 15.0,
        busy_s: tuple[float, float] = (5.0, 15.0),
    ) -> None:
        self.rng = random.Random(seed)
        self.device = device
        self.quiet_s, self.busy_range = quiet_s, busy_s
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
        while not self.halt.wait(self.rng.expovariate(1 / self.quiet_s)):
            busy = self.rng.uniform(*self.busy_range)
            if self.device is None:
                k, code = self.rng.randint(2, 5), BURN
            else:
                size = TORCH_SIZE.get(self.device, 512)
                k, code = self.rng.randint(1, 2), TORCH_BURN.format(device=self.device, size=size)
            self.burners = [
                subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
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
    proc = subprocess.Popen(
        argv, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=1800)
    except BaseException:
        # SIGTERM, not SIGKILL: perfbisect then tears its launch down (a GPU program left
        # running would slow every later trial) and saves the session.
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    wall = time.monotonic() - start
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        sys.stderr.write(stderr[-2000:])
        return Outcome(engine, None, False, None, 0, wall, f"exit {proc.returncode}")
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
    parser.add_argument("--torch", metavar="DEVICE", help="the program and the load on DEVICE")
    parser.add_argument("--quiet-s", type=float, default=15.0, help="mean quiet period (s)")
    parser.add_argument("--busy-s", default="5,15", help="busy periods' length range (s)")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="start no trial after it")
    args = parser.parse_args(argv)
    # SIGTERM (`timeout`, a device call's limit) unwinds like Ctrl-C: the burners and the
    # running search are stopped. Killed outright, a GPU run left its burners running into the
    # next run (docs/examples/live_load_gpu/README.md).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    busy_lo, busy_hi = (float(x) for x in args.busy_s.split(","))
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rng = random.Random(args.seed)
    outcomes: list[Outcome] = []
    trials_run = 0
    print(f"load average before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pb-live-") as scratch:
        tmp = args.keep or scratch
        load = None if args.quiet else Load(args.seed, args.torch, args.quiet_s, (busy_lo, busy_hi))
        with load if load is not None else contextlib.nullcontext():
            for trial in range(args.trials):
                if args.deadline_s and time.monotonic() - start > args.deadline_s:
                    print(f"deadline: {trial} trials run", flush=True)
                    break
                trials_run = trial + 1
                culprit = rng.randint(args.n // 4, 3 * args.n // 4)
                where = Path(tmp) / f"t{trial}"
                shas = make_repo(where, args.n, culprit, args.torch)
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
        f"{trials_run} trials, n = {args.n} commits, +{SLOWER - 1:.0%} at a seeded commit, "
        f"{'torch on ' + args.torch + ', ' if args.torch else ''}"
        f"{'quiet (no load generator)' if args.quiet else 'load comes and goes'}, seed {args.seed}"
    )
    print()
    table(outcomes, engines, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
