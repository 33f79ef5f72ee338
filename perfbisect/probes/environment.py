"""The basic environment snapshot stored with every launch (host, OS, Python, CPU, memory).

Later probes (NVML hardware, NCCL) add their sections; the snapshot is a plain JSON-able dict
so ``query compare`` can diff any two of them key by key.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfbisect import __version__
from perfbisect.redact import redact_env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_kib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def basic_snapshot(delivered_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What an engineer would check first when two measurements disagree. No secrets."""
    return {
        "host": socket.gethostname(),
        "os": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
        },
        "python": platform.python_version(),
        "perfbisect": __version__,
        "cpu": {"model": _cpu_model(), "count": os.cpu_count()},
        "mem_total_kib": _mem_total_kib(),
        "env": redact_env(dict(delivered_env or {})),
    }
