"""Hardware snapshot of the machine it runs on, printed as one JSON object.

Standalone on purpose (standard library, plus pynvml from nvidia-ml-py when present): perfbisect
copies it to a GPU host and runs it with the Python there, so it needs nothing installed.
``--full`` adds what is slower to gather (``nvidia-smi topo -m``, torch's CUDA/NCCL versions).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem = next(
        (
            int(line.split()[1])
            for line in _read("/proc/meminfo").splitlines()
            if line.startswith("MemTotal:")
        ),
        None,
    )
    return {
        "host": socket.gethostname(),
        "os": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
        },
        "python": platform.python_version(),
        "cpu": {"model": cpu, "count": os.cpu_count()},
        "mem_total_kib": mem,
    }


def _call(fn: Any, *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception:  # a field the GPU or driver does not support
        return None
    return value.decode() if isinstance(value, bytes) else value


def gpus(nvml: Any) -> list[dict[str, Any]]:
    out = []
    for index in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        reasons_fn = getattr(
            nvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
        )
        mask = _call(reasons_fn, h) if reasons_fn else None
        mem = _call(nvml.nvmlDeviceGetMemoryInfo, h)
        power = _call(nvml.nvmlDeviceGetPowerUsage, h)
        limit = _call(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
        ecc = {}
        for kind, const in (
            ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
            ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
        ):
            ecc[kind] = _call(
                nvml.nvmlDeviceGetTotalEccErrors, h, getattr(nvml, const), nvml.NVML_VOLATILE_ECC
            )
        out.append(
            {
                "index": index,
                "name": _call(nvml.nvmlDeviceGetName, h),
                "uuid": _call(nvml.nvmlDeviceGetUUID, h),
                "sm_clock_mhz": _call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": _call(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
                "mem_clock_mhz": _call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
                "mem_clock_max_mhz": _call(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
                "pcie_gen": _call(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_gen_max": _call(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_width": _call(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pcie_width_max": _call(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                "power_w": None if power is None else power / 1000,
                "power_limit_w": None if limit is None else limit / 1000,
                "temperature_c": _call(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
                "throttle_reasons": None
                if mask is None
                else [name for bit, name in THROTTLE_REASONS.items() if mask & bit],
                "persistence_mode": _call(nvml.nvmlDeviceGetPersistenceMode, h),
                "ecc_errors": ecc,
                "memory_used_mib": None if mem is None else mem.used // 2**20,
                "memory_total_mib": None if mem is None else mem.total // 2**20,
            }
        )
    return out


def nccl_version() -> dict[str, Any] | None:
    """The libnccl this process would load (LD_PRELOAD / LD_LIBRARY_PATH first, then the
    nvidia-nccl wheel of this Python), with its own version report."""
    candidates = ["libnccl.so.2"]
    for entry in sys.path:
        candidates += sorted(glob.glob(os.path.join(entry, "nvidia", "nccl", "lib", "libnccl.so*")))
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        code = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            continue
        v = code.value
        major, minor, patch = (
            (v // 10000, v // 100 % 100, v % 100)
            if v >= 10000
            else (
                v // 1000,
                v // 100 % 10,
                v % 100,
            )
        )
        return {"version": f"{major}.{minor}.{patch}", "library": name}
    return None


def snapshot(full: bool) -> dict[str, Any]:
    out: dict[str, Any] = machine()
    out["gpus"] = []
    out["nccl"] = nccl_version()
    try:
        import pynvml as nvml
    except ImportError:
        out["nvml"] = "pynvml is not importable here (pip install nvidia-ml-py)"
        return out
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded...
        out["nvml"] = f"no NVIDIA driver: {exc}"
        return out
    try:
        out["driver"] = _call(nvml.nvmlSystemGetDriverVersion)
        cuda = _call(nvml.nvmlSystemGetCudaDriverVersion_v2) or _call(
            nvml.nvmlSystemGetCudaDriverVersion
        )
        out["cuda_driver"] = None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
        out["gpus"] = gpus(nvml)
    finally:
        nvml.nvmlShutdown()
    if full:
        smi = shutil.which("nvidia-smi")
        if smi:
            topo = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=60)
            out["topology"] = topo.stdout if topo.returncode == 0 else topo.stderr
        try:
            import torch

            out["torch"] = {
                "version": torch.__version__,
                "cuda": torch.version.cuda,
                "nccl": ".".join(map(str, torch.cuda.nccl.version()))
                if torch.cuda.is_available()
                else None,
            }
        except Exception as exc:  # no torch here, or a broken one
            out["torch"] = {"error": str(exc)}
    return out


if __name__ == "__main__":
    print(json.dumps(snapshot("--full" in sys.argv[1:])))
