"""How much another process's matrix products slow the live-load program on this GPU: the
program's sample (benchmarks/live_load_bench.py's torch work) timed alone, beside one burner and
beside two, each for a few seconds. Prints the medians and their ratios to the quiet one."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import live_load_bench as bench

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"
ns: dict[str, object] = {}
exec(  # the program exactly as the benchmark's repository holds it
    bench.TORCH_WORK.format(
        rounds=bench.TORCH_ROUNDS[DEVICE], device=DEVICE, size=bench.TORCH_SIZE[DEVICE]
    ),
    ns,
)
work = ns["work"]


def samples(seconds: float) -> list[float]:
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        work()  # type: ignore[operator]
        out.append((time.perf_counter() - t) * 1000)
    return out


work()  # type: ignore[operator]
quiet = statistics.median(samples(3))
print(f"quiet: {quiet:.2f} ms")
for k in (1, 2):
    code = bench.TORCH_BURN.format(device=DEVICE, size=bench.TORCH_SIZE[DEVICE])
    burners = [
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(k)
    ]
    try:
        time.sleep(8)  # the burners' imports and first products
        busy = samples(4)
        print(
            f"{k} burner(s): median {statistics.median(busy):.2f} ms "
            f"({statistics.median(busy) / quiet:.2f}x), p10 {sorted(busy)[len(busy) // 10] / quiet:.2f}x, "
            f"p90 {sorted(busy)[9 * len(busy) // 10] / quiet:.2f}x, {len(busy)} samples"
        )
    finally:
        for p in burners:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
after = statistics.median(samples(3))
print(f"quiet again: {after:.2f} ms")
