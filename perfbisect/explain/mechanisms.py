"""Findings that name how the verify ran, not only where its time went: eager instead of a CUDA
graph replay (kernel launches per verify, from the host's CUDA calls), a host synchronisation
inside it (syncs, device-to-host copies, the GPU idle before the graph replay), and a running
batch above the batch sizes the server captured graphs for (the verify timer's records and the
server's log). Each is stated with its numbers on both sides and where they were read; a share
of the delta only where a measured part of the profiled verify apportions it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfbisect.explain.model import Finding, Side

MECHANISMS = ("batch", "synchronisation", "graph")
MIN_GROUP_SHARE = 0.05  # a kernel group below this share of the delta is not named
MAX_GROUPS = 3
MIN_LAUNCHES = 5


def _share(delta_ms: float, profiled: float | None) -> float | None:
    """A part's share of the profiled delta, which judge passes only where it goes the bad
    side's way (of either sign); a part that moved against it has no share."""
    share = delta_ms / profiled if profiled else 0.0
    return share if share > 0 else None


def _group_deltas(good: Side, bad: Side, profiled: float | None) -> list[tuple[str, float]]:
    """The kernel groups that moved most the way the profiled verify moved (a slow-down's
    growth, a speed-up's shrinkage)."""
    sign = -1.0 if profiled is not None and profiled < 0 else 1.0
    deltas = [
        (g, bad.groups.get(g, 0.0) - good.groups.get(g, 0.0))
        for g in set(good.groups) | set(bad.groups)
    ]
    deltas.sort(key=lambda kv: -kv[1] * sign)
    floor = MIN_GROUP_SHARE * abs(profiled) if profiled else 0.0
    named = [(g, d) for g, d in deltas[:MAX_GROUPS] if d * sign > floor]
    return named or [d for d in deltas[:1] if d[1] * sign > 0]


def graph_findings(good: Side, bad: Side, profiled: float | None) -> list[Finding]:
    """Verify eager (or back in a graph): graph replays and kernel launches per verify from
    the GPU traces, with the kernel groups that grew; without GPU traces, the verify timer's
    share of cycles in graphs."""
    gf, bf = good.graph_fraction, bad.graph_fraction
    timer = (
        f"verify in CUDA graphs {gf:.0%} -> {bf:.0%} of cycles"
        if gf is not None and bf is not None and abs(gf - bf) >= 0.1
        else None
    )
    gh, bh = good.host, bad.host
    if gh is None or bh is None:
        if timer is None:
            return []
        return [Finding("graph", timer, None, None, "the verify timer's per-cycle records")]
    g_launch, b_launch = gh["launches"] or 0.0, bh["launches"] or 0.0
    g_graph, b_graph = gh["graph_launches"] or 0.0, bh["graph_launches"] or 0.0
    left_graph = g_graph >= 0.5 and b_graph < 0.5 * g_graph
    # a few more launches (a sync's reduction kernel) is no change of how the verify ran
    big = (b_launch >= 1.5 * g_launch or g_launch >= 1.5 * b_launch) and abs(
        b_launch - g_launch
    ) >= MIN_LAUNCHES
    if not left_graph and not big and timer is None:
        return []
    named = _group_deltas(good, bad, profiled)
    moved = ", ".join(f"{d:+.3f} ms in {g}" for g, d in named)
    what = "verify eager" if left_graph else "verify launches"
    title = (
        f"{what}: kernels per verify {g_launch:.0f} -> {b_launch:.0f} "
        f"(CUDA graph replays {g_graph:.0f} -> {b_graph:.0f}, kernel launches "
        f"{gh['kernel_launches']:.0f} -> {bh['kernel_launches']:.0f})"
        + (f", {moved}" if moved else "")
        + (f"; {timer}" if timer else "")
    )
    delta = sum(d for _, d in named)
    return [
        Finding(
            "graph",
            title,
            _share(delta, profiled) if left_graph or big else None,
            delta if named else None,
            "profiler traces: cudaGraphLaunch / cudaLaunchKernel calls inside the verify range"
            + (", the verify timer's records" if timer else ""),
        )
    ]


def _calls(host: Mapping[str, Any]) -> str:
    calls = host.get("sync_calls") or {}
    return ", ".join(f"{name} {count:.1f}" for name, count in calls.items()) or "none"


def sync_findings(good: Side, bad: Side, profiled: float | None) -> list[Finding]:
    """A host synchronisation added to (or removed from) the verify: the host blocks until the
    GPU has drained its queue, and the GPU then waits for the host to launch the next work."""
    gh, bh = good.host, bad.host
    if gh is None or bh is None:
        return []
    more_syncs = (bh["syncs"] or 0.0) - (gh["syncs"] or 0.0)
    more_d2h = (bh["d2h_copies"] or 0.0) - (gh["d2h_copies"] or 0.0)
    blocked = (bh["sync_ms"] or 0.0) - (gh["sync_ms"] or 0.0)
    if more_syncs < 0.5 and more_d2h < 0.5:
        return []
    g_idle, b_idle = gh.get("idle_before_replay_ms"), bh.get("idle_before_replay_ms")
    idle = (
        f"; GPU idle before the graph replay {g_idle:.3f} -> {b_idle:.3f} ms"
        if g_idle is not None and b_idle is not None
        else ""
    )
    # The sync waits for the GPU to drain its queue; a GPU that already waited for the host
    # before the replay has nothing queued, so the sync costs little there (a host-bound verify)
    host_bound = (
        f"; host-bound already: the GPU waited {g_idle:.3f} ms for the replay without the sync, "
        "so the sync found its queue drained"
        if g_idle is not None and blocked < 0.5 * g_idle
        else ""
    )
    title = (
        f"host synchronisation in the verify: syncs per verify {gh['syncs']:.1f} -> "
        f"{bh['syncs']:.1f} ({_calls(bh)}), device-to-host copies {gh['d2h_copies']:.1f} -> "
        f"{bh['d2h_copies']:.1f}, host blocked {gh['sync_ms']:.3f} -> {bh['sync_ms']:.3f} ms"
        + idle
        + host_bound
    )
    return [
        Finding(
            "synchronisation",
            title,
            _share(blocked, profiled) if blocked > 0 else None,
            blocked,
            "profiler traces: cuda*Synchronize calls and DtoH copies inside the verify range, "
            "the GPU timeline before each cudaGraphLaunch's first kernel",
        )
    ]


def _above(side: Side) -> tuple[int, int, int, int | None, int]:
    """(verifies, above the largest captured size, of those in graphs, largest captured,
    largest running batch)."""
    batches = side.batches or {}
    counts = {int(bs): v for bs, v in (batches.get("verifies_by_bs") or {}).items()}
    captured = batches.get("captured")
    top = max(captured) if captured else None
    total = sum(v[0] for v in counts.values())
    above = [v for bs, v in counts.items() if top is not None and bs > top]
    return (
        total,
        sum(v[0] for v in above),
        sum(v[1] for v in above),
        top,
        max(counts, default=0),
    )


def batch_findings(good: Side, bad: Side) -> list[Finding]:
    """The running batch above the largest batch size the server captured a CUDA graph for:
    those verifies cannot replay a graph and run eagerly (SGLang's --cuda-graph-max-bs)."""
    g_total, g_above, _, g_top, g_max = _above(good)
    b_total, b_above, b_graphs, b_top, b_max = _above(bad)
    if not b_total or b_top is None or not b_above:
        return []
    b_frac = b_above / b_total
    g_frac = g_above / g_total if g_total else 0.0
    if b_frac - g_frac < 0.1:
        return []
    good_part = (
        f"; good side captured up to {g_top}, running batch up to {g_max}, {g_frac:.0%} above"
        if g_top is not None
        else ""
    )
    return [
        Finding(
            "batch",
            f"verify batch above the captured CUDA-graph sizes: running batch up to {b_max} "
            f"against captured sizes up to {b_top} on the bad side; {b_frac:.0%} of its "
            f"verifies above them, {b_graphs / b_above:.0%} of those in a graph (the rest "
            f"eager){good_part}",
            None,
            None,
            "the verify timer's records (batch size, graph replayed) and the server log's "
            "'Capture cuda graph bs [...]'",
        )
    ]
