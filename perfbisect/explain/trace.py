"""One rank's PyTorch profiler trace (Chrome trace JSON), summarised per verify.

The verify timer's boot hook marks every profiled stage with a ``record_function`` range
(``perfbisect.verify``, ``perfbisect.draft``, ``perfbisect.draft_extend``). Inside the verify
ranges this module adds up, per verify: on GPU, every kernel launched from the range (found by
the launch's correlation id, so a graph replay's kernels count as the verify's too), the GPU's
idle time between the verify's first and last kernel, and NCCL kernels' algorithm and protocol
per call site; on CPU, each operator's self time and the host time no operator covers. The
first profiled verify is left out: it carries the profiler's own start-up.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from perfbisect.explain.groups import HOST_GAP, group_of, nccl_kernel
from perfbisect.explain.host_calls import HostCalls, TraceEvent, host_calls
from perfbisect.explain.trace_read import Event, read_events

STAGES = {
    "perfbisect.verify": "verify",
    "perfbisect.draft": "draft",
    "perfbisect.draft_extend": "draft_extend",
}
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class OpStat:
    name: str
    group: str
    ms_per_verify: float
    calls_per_verify: float


@dataclass(frozen=True)
class NcclUse:
    call_site: str  # the CPU operator that launched it (cudaGraphLaunch for a graph replay)
    operation: str
    algorithm: str | None
    protocol: str | None
    calls_per_verify: float


@dataclass(frozen=True)
class TraceSummary:
    path: str
    device: str  # "cuda" when the trace holds GPU kernels, else "cpu"
    verifies: int  # verify ranges summarised (the first profiled one left out)
    verify_ms: float  # mean wall time of a verify range
    stage_ms: Mapping[str, float]  # mean per cycle of each marked stage
    ops: tuple[OpStat, ...]  # kernels (GPU) or operators' self time (CPU), per verify
    groups: Mapping[str, float]  # ms per verify by group, host gaps included
    kernels_per_verify: float
    gpu_idle_ms_per_verify: float | None  # None on CPU
    nccl: tuple[NcclUse, ...] = field(default_factory=tuple)
    allreduce_paths: tuple[str, ...] = ()  # which all-reduce implementations the trace shows
    host: HostCalls | None = None  # GPU only: the host's CUDA calls inside the verify
    reader: str = ""  # which parser read the trace (HolisticTraceAnalysis, or the JSON reader)
    verify_ms_each: tuple[float, ...] = ()  # each summarised verify range, in order


def allreduce_paths(names: set[str], nccl_sites: set[str]) -> tuple[str, ...]:
    """The all-reduce implementations seen: gloo (its record_function ranges), SGLang's custom
    all-reduce (its kernels), NCCL through torch.distributed (kernels launched under a c10d
    operator) or otherwise (pynccl, or replayed in a CUDA graph)."""
    paths = []
    if any(n.startswith("gloo:") for n in names):
        paths.append("gloo")
    if any("cross_device_reduce" in n for n in names):
        paths.append("custom all-reduce")
    if any(s.startswith(("c10d", "nccl:")) for s in nccl_sites):
        paths.append("NCCL via torch.distributed")
    if any(not s.startswith(("c10d", "nccl:")) for s in nccl_sites):
        paths.append("NCCL via pynccl or a CUDA graph replay")
    return tuple(paths)


def _self_times(ops: Sequence[Event]) -> list[tuple[Event, float, bool]]:
    """Each operator with its self time (its duration less its children's) and whether it is
    top-level (no enclosing operator) on its thread."""
    result: list[tuple[Event, float, bool]] = []
    by_tid: dict[Any, list[Event]] = defaultdict(list)
    for op in ops:
        by_tid[op.tid].append(op)
    for events in by_tid.values():
        events.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[list[Any]] = []  # [event, children's time, top-level]
        for event in events:
            while stack and stack[-1][0].end <= event.ts:
                done = stack.pop()
                result.append((done[0], max(0.0, done[0].dur - done[1]), done[2]))
            if stack:
                stack[-1][1] += event.dur
            stack.append([event, 0.0, not stack])
        for done in stack:
            result.append((done[0], max(0.0, done[0].dur - done[1]), done[2]))
    return result


def _inside(event: Event, windows: Sequence[Event]) -> Event | None:
    for window in windows:
        if window.tid == event.tid and window.ts <= event.ts and event.end <= window.end + 1e-3:
            return window
    return None


def _union_us(spans: Iterable[tuple[float, float]]) -> float:
    total, current = 0.0, None
    for start, end in sorted(spans):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    if current is not None:
        total += current[1] - current[0]
    return total


def summarise(path: Path) -> TraceSummary | None:
    """The per-verify summary of one trace (``.json``, or ``.json.gz`` as kept in the docs);
    None when it holds no verify range."""
    events, reader = read_events(path)
    # The host's ranges only: the profiler also draws each range on the GPU's timeline
    # (``gpu_user_annotation``), which would count every verify twice.
    marks = [e for e in events if e.name in STAGES and e.cat != "gpu_user_annotation"]
    windows = sorted((e for e in marks if STAGES[e.name] == "verify"), key=lambda e: e.ts)
    if not windows:
        return None
    skipped = windows[0] if len(windows) > 1 else None
    kept = [w for w in windows if w is not skipped]
    n = len(kept)
    stage_ms: dict[str, float] = {}
    for mark_name, stage in STAGES.items():
        spans = [e.dur for e in marks if e.name == mark_name and e is not skipped]
        if spans:
            stage_ms[stage] = sum(spans) / len(spans) / 1000.0 * (len(spans) / n)
    verify_ms = sum(w.dur for w in kept) / n / 1000.0
    gpu = [e for e in events if e.cat in _GPU_CATS]
    cpu_ops = [e for e in events if e.cat == "cpu_op"]
    if gpu:
        summary = _gpu_summary(path, events, gpu, cpu_ops, kept, verify_ms, stage_ms)
    else:
        summary = _cpu_summary(path, cpu_ops, kept, verify_ms, stage_ms)
    names = {e.name for e in events}
    sites = {n.call_site for n in summary.nccl}
    return replace(
        summary,
        allreduce_paths=allreduce_paths(names, sites),
        reader=reader,
        verify_ms_each=tuple(w.dur / 1000.0 for w in kept),
    )


def _cpu_summary(
    path: Path,
    cpu_ops: Sequence[Event],
    kept: Sequence[Event],
    verify_ms: float,
    stage_ms: dict[str, float],
) -> TraceSummary:
    n = len(kept)
    inside = [op for op in cpu_ops if _inside(op, kept) is not None]
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    covered = 0.0
    for op, self_us, top in _self_times(inside):
        totals[op.name][0] += self_us
        totals[op.name][1] += 1
        covered += op.dur if top else 0.0
    gap_ms = max(0.0, sum(w.dur for w in kept) - covered) / n / 1000.0
    ops = _op_stats(totals, n)
    groups = _group_totals(ops)
    groups[HOST_GAP] = gap_ms
    ops = (*ops, OpStat(HOST_GAP, HOST_GAP, gap_ms, 0.0))
    leaves = sum(1 for op, self_us, _ in _self_times(inside) if self_us >= op.dur)
    return TraceSummary(str(path), "cpu", n, verify_ms, stage_ms, ops, groups, leaves / n, None)


def _gpu_summary(
    path: Path,
    events: Sequence[Event],
    gpu: Sequence[Event],
    cpu_ops: Sequence[Event],
    kept: Sequence[Event],
    verify_ms: float,
    stage_ms: dict[str, float],
) -> TraceSummary:
    n = len(kept)
    launches = {
        e.correlation: e
        for e in events
        if e.cat in ("cuda_runtime", "cuda_driver") and e.correlation is not None
    }
    per_window: dict[int, list[Event]] = defaultdict(list)
    sites: dict[int, str] = {}
    for kernel in gpu:
        launch = launches.get(kernel.correlation)
        window = _inside(launch, kept) if launch is not None else None
        if launch is None or window is None:
            continue
        per_window[id(window)].append(kernel)
        sites[id(kernel)] = _call_site(launch, cpu_ops)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    idle_us = 0.0
    nccl_counts: dict[tuple[str, str, str | None, str | None], int] = defaultdict(int)
    for kernels in per_window.values():
        for kernel in kernels:
            totals[kernel.name][0] += kernel.dur
            totals[kernel.name][1] += 1
            parsed = nccl_kernel(kernel.name)
            if parsed is not None:
                key = (sites[id(kernel)], parsed.operation, parsed.algorithm, parsed.protocol)
                nccl_counts[key] += 1
        span = max(k.end for k in kernels) - min(k.ts for k in kernels)
        idle_us += max(0.0, span - _union_us((k.ts, k.end) for k in kernels))
    ops = _op_stats(totals, n)
    groups = _group_totals(ops)
    idle_ms = idle_us / n / 1000.0
    groups[HOST_GAP] = idle_ms  # GPU idle inside the verify: the host kept it waiting
    ops = (*ops, OpStat(HOST_GAP, HOST_GAP, idle_ms, 0.0))
    nccl = tuple(
        NcclUse(site, op, algo, proto, count / n)
        for (site, op, algo, proto), count in sorted(nccl_counts.items(), key=str)
    )
    kernels_per_verify = sum(len(k) for k in per_window.values()) / n
    runtime = [e for e in events if e.cat in ("cuda_runtime", "cuda_driver")]

    def window_of(event: TraceEvent) -> Event | None:
        return _inside(cast(Event, event), kept)  # host_calls hands back this trace's events

    calls = host_calls(runtime, gpu, kept, window_of)
    return TraceSummary(
        str(path),
        "cuda",
        n,
        verify_ms,
        stage_ms,
        ops,
        groups,
        kernels_per_verify,
        idle_ms,
        nccl,
        host=calls,
    )


def _call_site(launch: Event, cpu_ops: Sequence[Event]) -> str:
    """The innermost operator around a kernel's launch (the launch's name when none)."""
    best: Event | None = None
    for op in cpu_ops:
        around = op.tid == launch.tid and op.ts <= launch.ts and launch.end <= op.end + 1e-3
        if around and (best is None or op.dur < best.dur):
            best = op
    return best.name if best is not None else launch.name


def _op_stats(totals: Mapping[str, list[float]], n: int) -> tuple[OpStat, ...]:
    stats = [
        OpStat(name, group_of(name), us / n / 1000.0, calls / n)
        for name, (us, calls) in totals.items()
    ]
    return tuple(sorted(stats, key=lambda s: -s.ms_per_verify))


def _group_totals(ops: Iterable[OpStat]) -> dict[str, float]:
    groups: dict[str, float] = defaultdict(float)
    for op in ops:
        groups[op.group] += op.ms_per_verify
    return dict(groups)
