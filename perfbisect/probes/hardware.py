"""``probe hardware`` and the hardware section of every launch's snapshot.

The NVML work happens in ``remote/hardware_probe.py``, run by the host's own Python (copied there
first for a remote host), so the snapshot describes the machine that runs the server.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from perfbisect.hosts.base import Host, default_python
from perfbisect.remote import program

SCRIPT = program("hardware_probe.py")


def _script_on(host: Host) -> str:
    if host.is_local:
        return str(SCRIPT)
    path = f"{host.cache_dir()}/probes/hardware_script.py"
    host.write_file(path, SCRIPT.read_bytes())
    return path


# Snapshots of machines without NVIDIA's library, by (host, python): nothing in them changes
# from one launch to the next, and probing again cost a Python start-up (0.25 s on a 2-core
# machine) at every launch, as much as a small measure script.
_WITHOUT_NVML: dict[tuple[str, str], dict[str, Any]] = {}
_NO_NVML = ("pynvml is not importable", "NVML Shared Library Not Found")


def hardware_snapshot(
    host: Host, python: str | None = None, full: bool = False, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Machine, driver, GPUs (clocks, PCIe link, power, temperature, throttle reasons, ECC,
    memory), the NCCL library that would load; ``full`` adds topology and torch."""
    exe = python or default_python(host)
    known = _WITHOUT_NVML.get((host.address, exe))
    if known is not None and not full:
        return copy.deepcopy(known)
    argv = [exe, _script_on(host), *(["--full"] if full else [])]
    result = host.run(argv, timeout_s=timeout_s)
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    if not result.ok or not lines:
        return {"error": f"hardware probe failed on {host.address}: {result.tail(5)}", "gpus": []}
    data: dict[str, Any] = json.loads(lines[-1])
    if not full and any(reason in str(data.get("nvml", "")) for reason in _NO_NVML):
        # Not a driver that failed (it may come back): no NVIDIA library at all.
        _WITHOUT_NVML[(host.address, exe)] = copy.deepcopy(data)
    return data


def gpu_memory_used(snapshot: dict[str, Any]) -> list[int]:
    return [int(g.get("memory_used_mib") or 0) for g in snapshot.get("gpus", [])]
