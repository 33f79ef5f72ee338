"""Real NCCL_DEBUG=INFO output of one-rank communicators on one GPU, for perfbisect's NCCL log
parser (tests/data) and the explain finding "a tuning variable in the process's environment,
not taken by its communicator".

    python nccl_capture.py MODE OUT_DIR

MODE:
  env       NCCL_PROTO / NCCL_ALGO are in this process's environment from its start (the caller
            sets them): the communicator takes them ("... set by environment to ...").
  late      the process starts without them; the first communicator is made and used, then
            they are put into os.environ and a second communicator is made: what NCCL takes
            for each one, read from its own log (the seed's failure: a variable set in the
            process after the communicator the verify used had been made).
  stripped  the caller has them; this process is started with them removed (a launcher that
            does not pass the environment on): none reaches NCCL.

Each process writes NCCL's log to OUT_DIR/nccl.MODE.<host>.<pid> (NCCL_DEBUG_FILE), its own
NCCL_* environment as NCCL saw it at the end to OUT_DIR/env.MODE.<pid>.json, and (env mode) a
profiler trace of its all-reduces to OUT_DIR/allreduce.MODE.json (the kernels' names).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

# NCCL_PROTO/NCCL_ALGO: read when NCCL tunes a collective (never at one rank, as the first run
# showed); NCCL_MAX_NCHANNELS: a parameter read at init, whatever the rank count
TUNING = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "4"}
SIZES = (1024, 262144, 4194304)  # elements of float32: 4 KiB, 1 MiB, 16 MiB


def nccl_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}


def all_reduces(dist, torch, group, label: str) -> None:  # type: ignore[no-untyped-def]
    for n in SIZES:
        x = torch.ones(n, device="cuda")
        dist.all_reduce(x, group=group)
        torch.cuda.synchronize()
        assert float(x[0]) == float(dist.get_world_size(group)), label
    print(f"{label}: {len(SIZES)} all-reduces of {SIZES} floats ok", flush=True)


def main(mode: str, out: Path) -> int:
    import torch
    import torch.distributed as dist

    out.mkdir(parents=True, exist_ok=True)
    if mode == "late":
        for name in TUNING:
            os.environ.pop(name, None)
    print(f"mode {mode}: pid {os.getpid()}, NCCL_* at start: {nccl_env()}", flush=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torch.cuda.set_device(0)
    # device_id: the communicator is made now (eagerly), not at the first collective
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        device_id=torch.device("cuda", 0),
    )
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}", flush=True)
    if mode == "env":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            all_reduces(dist, torch, None, "default group")
        prof.export_chrome_trace(str(out / f"allreduce.{mode}.json"))
    else:
        all_reduces(dist, torch, None, "default group")
    if mode == "late":
        os.environ.update(TUNING)  # after the first communicator: as a late os.environ write
        print(f"set after init: {TUNING}", flush=True)
        second = dist.new_group([0])
        all_reduces(dist, torch, second, "second group (made after the variables were set)")
    time.sleep(0.5)
    (out / f"env.{mode}.{os.getpid()}.json").write_text(json.dumps(nccl_env(), indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
