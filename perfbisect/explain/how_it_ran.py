"""How each side's verify ran, as rows for the text and HTML views: kernels per verify (one
per graph replay), syncs, device-to-host copies, GPU idle, the verify timer's share in graphs,
the captured CUDA-graph batch sizes and the running batch; and one NCCL communicator as a cell.
Read from an explanation's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOW_IT_RAN = (
    ("kernels per verify (a graph replay is one)", "host", "launches", "{:.0f}"),
    ("CUDA graph replays", "host", "graph_launches", "{:.1f}"),
    ("kernel launches", "host", "kernel_launches", "{:.0f}"),
    ("host syncs", "host", "syncs", "{:.1f}"),
    ("device-to-host copies", "host", "d2h_copies", "{:.1f}"),
    ("host blocked in syncs (ms)", "host", "sync_ms", "{:.3f}"),
    ("GPU idle before the graph replay (ms)", "host", "idle_before_replay_ms", "{:.3f}"),
    ("GPU idle inside the verify (ms)", None, "gpu_idle_ms_per_verify", "{:.3f}"),
    ("verify in CUDA graphs (timer)", None, "graph_fraction", "{:.0%}"),
)


def _batches(side: Mapping[str, Any]) -> tuple[str, str]:
    batches = side.get("batches") or {}
    captured = batches.get("captured")
    sizes = [int(bs) for bs in batches.get("verifies_by_bs") or {}]
    return (
        f"up to {max(captured)}" if captured else "-",
        f"{min(sizes)}-{max(sizes)}" if sizes else "-",
    )


def how_it_ran(good: Mapping[str, Any], bad: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Rows of what the traces, the verify timer and the server log say about how each side's
    verify ran; rows neither side measured are left out."""
    rows = []
    for label, part, key, fmt in HOW_IT_RAN:
        values = []
        for side in (good, bad):
            source = side.get(part) or {} if part else side
            value = source.get(key)
            values.append(fmt.format(value) if value is not None else "-")
        if values != ["-", "-"]:
            rows.append((label, values[0], values[1]))
    g_captured, g_bs = _batches(good)
    b_captured, b_bs = _batches(bad)
    if (g_captured, b_captured) != ("-", "-"):
        rows.append(("CUDA-graph batch sizes captured", g_captured, b_captured))
    if (g_bs, b_bs) != ("-", "-"):
        rows.append(("running batch of the verifies", g_bs, b_bs))
    return rows


def comm_text(comm: Mapping[str, Any]) -> str:
    """One NCCL communicator: its rank, the thread that made it, what it took."""
    took = ", ".join(f"{k}={v}" for k, v in (comm.get("taken") or {}).items())
    return f"rank {comm['rank']}/{comm['nranks']} tid {comm['tid']}" + (
        f" ({took})" if took else ""
    )


def nccl_version_text(process: Mapping[str, Any]) -> str:
    """NCCL's version as its log says it, and the library the process had mapped."""
    library = process.get("library")
    return (process.get("version") or "?") + (f" ({', '.join(library)})" if library else "")
