"""History at team scale: build a database of 25,000 launches / 10^6 samples and time the
`perfbisect query history` commands a user runs, end to end (a new process each time, as a
user's shell would), on SQLite or on a PostgreSQL URL.

    python benchmarks/history_bench.py [--db URL] [--launches 25000] [--samples 40] [--repeats 3]

Without --db it builds a SQLite file in a temporary directory. Reports the median of
--repeats runs of each command, measured in this one run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from perfbisect.store.database import Store
from perfbisect.store.models import ConfigurationRow, EnvSnapshot, Host, Launch, Sample, SessionRow

CONFIGS = 1000


def build(url: str, launches: int, samples: int, seed: int = 1) -> dict[str, str]:
    """Fill the database; returns a commit prefix and a date to filter on."""
    rng = random.Random(seed)
    store = Store(url)
    start = datetime(2026, 1, 1)
    shas = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(CONFIGS)]
    with store.engine.begin() as db:
        db.execute(insert(Host), [{"id": 1, "name": "gpu-a", "address": "ssh://gpu-a"}])
        db.execute(
            insert(EnvSnapshot),
            [{"id": 1, "host_id": 1, "digest": "d" * 64, "data": {"address": "ssh://gpu-a"}}],
        )
        db.execute(
            insert(SessionRow),
            [
                {
                    "id": 1,
                    "status": "finished",
                    "good": {},
                    "bad": {},
                    "params": {},
                    "path": [],
                    "experiment_path": "bench",
                    "experiment_text": "",
                    "owner_host": "bench",
                    "owner_pid": 1,
                }
            ],
        )
        db.execute(
            insert(ConfigurationRow),
            [
                {"fingerprint": f"f{i:019d}", "axes": {"commit": sha}, "context": "bench"}
                for i, sha in enumerate(shas)
            ],
        )
    batch = 2000
    for first in range(0, launches, batch):
        ids = range(first + 1, min(launches, first + batch) + 1)
        rows = []
        for i in ids:
            c = rng.randrange(CONFIGS)
            rows.append(
                {
                    "id": i,
                    "session_id": 1,
                    "seq": i,
                    "fingerprint": f"f{c:019d}",
                    "position": c,
                    "purpose": "search",
                    "metric": "verify_ms",
                    "status": "ok",
                    "value": 18.0 + rng.random(),
                    "n_samples": samples,
                    "flags": [],
                    "timings": {"ready_s": 60.0, "measure_s": 5.0},
                    "started_at": start + timedelta(minutes=i),
                    "finished_at": start + timedelta(minutes=i, seconds=70),
                    "snapshot_id": 1,
                }
            )
        values = [
            {"launch_id": i, "idx": k, "value": 18.0 + rng.random()}
            for i in ids
            for k in range(samples)
        ]
        with store.engine.begin() as db:
            db.execute(insert(Launch), rows)
            db.execute(insert(Sample), values)
    store.engine.dispose()
    middle = start + timedelta(minutes=launches // 2)
    return {"commit": shas[7][:10], "since": middle.strftime("%Y-%m-%d")}


def timed(argv: list[str], env: dict[str, str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {out.stderr[-500:]}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="a database URL (default: a new SQLite file)")
    parser.add_argument("--launches", type=int, default=25_000)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    url = args.db or f"sqlite:///{Path(tempfile.mkdtemp(prefix='pb-hist-')) / 'history.db'}"
    t0 = time.perf_counter()
    where = build(url, args.launches, args.samples)
    built = time.perf_counter() - t0
    env = {**os.environ, "PERFBISECT_DB": url}
    pb = [sys.executable, "-m", "perfbisect"]
    baseline = timed([*pb, "--version"], env, args.repeats)
    commands = [
        ("query history (newest 200, the default)", ["query", "history"]),
        ("query history --json", ["query", "history", "--json"]),
        (
            f"query history --config commit={where['commit']}",
            ["query", "history", "--config", f"commit={where['commit']}"],
        ),
        (
            f"query history --since {where['since']}",
            ["query", "history", "--since", where["since"]],
        ),
        ("query history --limit 1000", ["query", "history", "--limit", "1000"]),
    ]
    dialect = url.split(":", 1)[0]
    print(
        f"{args.launches} launches, {args.launches * args.samples} samples, {dialect}; built in "
        f"{built:.1f} s; median of {args.repeats} runs, a new process each (`perfbisect "
        f"--version` alone: {baseline:.2f} s)\n"
    )
    print("| command | seconds | minus process start |")
    print("|---|---|---|")
    for label, extra in commands:
        seconds = timed([*pb, *extra], env, args.repeats)
        print(f"| `{label}` | {seconds:.2f} | {seconds - baseline:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
