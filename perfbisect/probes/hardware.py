"""``probe hardware`` and the hardware section of every launch's snapshot.

The NVML work happens in ``remote/hardware_probe.py``, run by the host's own Python (copied there
first for a remote host), so the snapshot describes the machine that runs the server.
"""

from __future__ import annotations

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


def hardware_snapshot(
    host: Host, python: str | None = None, full: bool = False, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Machine, driver, GPUs (clocks, PCIe link, power, temperature, throttle reasons, ECC,
    memory), the NCCL library that would load; ``full`` adds topology and torch."""
    exe = python or default_python(host)
    argv = [exe, _script_on(host), *(["--full"] if full else [])]
    result = host.run(argv, timeout_s=timeout_s)
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    if not result.ok or not lines:
        return {"error": f"hardware probe failed on {host.address}: {result.tail(5)}", "gpus": []}
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def gpu_memory_used(snapshot: dict[str, Any]) -> list[int]:
    return [int(g.get("memory_used_mib") or 0) for g in snapshot.get("gpus", [])]
