"""What the host asked of the GPU inside the verify, from a GPU trace's CUDA runtime/driver
calls: kernel launches and CUDA graph launches per verify (one graph replay is one launch for
hundreds of kernels; an eager verify launches each), host synchronisations (a ``.item()`` is a
device-to-host copy and a stream synchronize) with the time the host spent blocked in them, and
how long the GPU sat idle right before each graph replay's first kernel (the host, released by
a sync, had not launched the graph yet)."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})
KERNEL_LAUNCHES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
    }
)


class TraceEvent(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def ts(self) -> float: ...
    @property
    def dur(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def correlation(self) -> Any: ...


@dataclass(frozen=True)
class HostCalls:
    """Per verify (means over the summarised verifies)."""

    launches: float  # kernel launches + graph launches: what the host issued
    graph_launches: float
    kernel_launches: float
    syncs: float  # cuda*Synchronize calls
    sync_ms: float  # host time blocked in them
    sync_calls: tuple[tuple[str, float], ...]  # (call, per verify), most frequent first
    d2h_copies: float  # device-to-host copies launched from the verify (a .item() is one)
    idle_before_replay_ms: float | None  # None: no graph replay in the verify


def is_sync(name: str) -> bool:
    return "Synchronize" in name


def host_calls(
    runtime: Sequence[TraceEvent],
    gpu: Sequence[TraceEvent],
    windows: Sequence[TraceEvent],
    window_of: Callable[[TraceEvent], TraceEvent | None],
) -> HostCalls:
    n = len(windows) or 1
    calls = [e for e in runtime if window_of(e) is not None]
    graphs = [e for e in calls if e.name in GRAPH_LAUNCHES]
    kernels = sum(1 for e in calls if e.name in KERNEL_LAUNCHES)
    syncs = [e for e in calls if is_sync(e.name)]
    by_correlation: dict[Any, list[TraceEvent]] = {}
    for event in gpu:
        by_correlation.setdefault(event.correlation, []).append(event)
    ends = sorted(e.end for e in gpu)
    idle: list[float] = []
    for launch in graphs:
        replayed = by_correlation.get(launch.correlation)
        if not replayed:
            continue
        first = min(k.ts for k in replayed)
        window = window_of(launch)
        assert window is not None
        # idle from the GPU's last work before the replay, or from the verify's start when the
        # GPU had nothing from it yet (host and GPU events share one clock in the trace)
        before = bisect.bisect_right(ends, first) - 1
        since = max(window.ts, ends[before]) if before >= 0 else window.ts
        idle.append(max(0.0, first - since))
    d2h = sum(1 for e in calls for k in by_correlation.get(e.correlation, ()) if "DtoH" in k.name)
    counts = Counter(e.name for e in syncs)
    return HostCalls(
        launches=(len(graphs) + kernels) / n,
        graph_launches=len(graphs) / n,
        kernel_launches=kernels / n,
        syncs=len(syncs) / n,
        sync_ms=sum(e.dur for e in syncs) / n / 1000.0,
        sync_calls=tuple((name, count / n) for name, count in counts.most_common()),
        d2h_copies=d2h / n,
        idle_before_replay_ms=sum(idle) / n / 1000.0 if graphs else None,
    )
