"""Every launch's hardware snapshot: probed at every launch where a GPU's state can change, once
per process where the machine has no NVIDIA library at all."""

from __future__ import annotations

import json
from pathlib import Path

from perfbisect.hosts.local import LocalHost
from perfbisect.probes.hardware import hardware_snapshot


def _python_printing(tmp_path: Path, nvml: str) -> tuple[str, Path]:
    """An executable standing in for a host's Python: it prints one snapshot line saying
    ``nvml`` and counts its runs in a file (a real process, as the probe's is)."""
    runs = tmp_path / "runs"
    snapshot = json.dumps({"host": "h", "gpus": [], "nccl": None, "nvml": nvml})
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\necho run >> {runs}\necho '{snapshot}'\n")
    exe.chmod(0o755)
    return str(exe), runs


def _runs(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_a_machine_without_nvidias_library_is_probed_once(tmp_path: Path) -> None:
    exe, runs = _python_printing(tmp_path, "no NVIDIA driver: NVML Shared Library Not Found")
    first = hardware_snapshot(LocalHost(), python=exe)
    first["gpus"].append("changed by a caller")
    second = hardware_snapshot(LocalHost(), python=exe)
    assert _runs(runs) == 1
    assert second["nvml"] == first["nvml"] and second["gpus"] == []  # a copy, not shared


def test_a_driver_that_failed_is_probed_again_at_every_launch(tmp_path: Path) -> None:
    # DriverNotLoaded: a driver being reloaded may come back before the next launch.
    exe, runs = _python_printing(tmp_path, "no NVIDIA driver: Driver Not Loaded")
    for _ in range(3):
        hardware_snapshot(LocalHost(), python=exe)
    assert _runs(runs) == 3


def test_this_machines_snapshot_describes_it() -> None:
    snapshot = hardware_snapshot(LocalHost())
    assert snapshot["cpu"]["count"] >= 1 and isinstance(snapshot["gpus"], list)
    assert hardware_snapshot(LocalHost())["host"] == snapshot["host"]
