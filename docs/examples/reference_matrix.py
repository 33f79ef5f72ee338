"""Verify ms of the reference server on GPUs: TP x verify mode x NCCL tuning variables.

Runs every cell through perfbisect's own pipeline (ReferenceTarget: serve, readiness, the
bench workload, per-rank verify timing, teardown checks) and prints a table plus JSON.

    python3 docs/examples/reference_matrix.py --tp 1 2 --out matrix.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from perfbisect.config import Configuration
from perfbisect.experiment import load_experiment
from perfbisect.targets.reference.target import ReferenceTarget

TUNING = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MIN_NCHANNELS": "4"}


def cell(work: Path, tp: int, mode: str, tuned: bool, args: argparse.Namespace) -> dict:
    env = "".join(f'{k} = "{v}"\n' for k, v in TUNING.items()) if tuned else ""
    path = work / f"tp{tp}-{mode}-{'tuned' if tuned else 'plain'}.toml"
    path.write_text(
        f'[target]\nkind = "reference"\ntp = {tp}\ndevice = "cuda"\nlayers = {args.layers}\n'
        f"hidden = {args.hidden}\nheads = {args.heads}\ncycles = {args.cycles}\nwarmup = 5\n"
        f'timeout_s = 600\nserver_args = ["--verify-mode", "{mode}"]\n'
        + (f"[env]\n{env}" if env else "")
    )
    target = ReferenceTarget(load_experiment(path), work / "cache")
    m = target.launch(Configuration.of({}), str(work / path.stem))
    return {
        "tp": tp,
        "verify_mode": mode,
        "nccl_tuning": TUNING if tuned else {},
        "verify_ms_median": statistics.median(m.samples),
        "verify_ms_p10": sorted(m.samples)[len(m.samples) // 10],
        "verify_ms_p90": sorted(m.samples)[(9 * len(m.samples)) // 10],
        "cycles": len(m.samples),
        "notes": m.flags,
        "gpus": [g["name"] for g in m.snapshot.get("gpus", [])],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in args.tp:
            for tuned in (False, True):
                for mode in ("graph", "eager"):
                    rows.append(cell(Path(tmp), tp, mode, tuned, args))
                    r = rows[-1]
                    print(
                        f"tp={tp} verify={mode:5s} nccl_tuning={'set' if tuned else 'unset':5s} "
                        f"verify_ms median {r['verify_ms_median']:.2f} "
                        f"(p10 {r['verify_ms_p10']:.2f}, p90 {r['verify_ms_p90']:.2f}) "
                        f"{'; '.join(r['notes'])}",
                        flush=True,
                    )
    print(f"model: {args.layers} layers, hidden {args.hidden}, 3 draft tokens (4-token verify)")
    print(f"environment: NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
