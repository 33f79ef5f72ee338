"""The explanation's typed result: two sides' evidence, the findings ranked by their share of
the metric's delta, what could not be measured, and what the diagnostics cost. Its JSON is the
``why`` of the report contract (``EXPLANATION_VERSION`` changes when a field changes meaning)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

EXPLANATION_VERSION = 2


@dataclass(frozen=True)
class Finding:
    """One difference between the sides. ``share``: the fraction of the delta it accounts for
    (None where no measurement apportions it: an environment variable, a touched function)."""

    kind: str  # operator | graph | nccl | environment | machine | change
    title: str  # one line, names the thing
    share: float | None
    delta_ms: float | None  # per verify, where measured
    evidence: str  # where it was read


@dataclass(frozen=True)
class Side:
    label: str  # good | bad
    config: Mapping[str, str]
    launch_ids: tuple[int, ...]
    values: tuple[float, ...]  # the metric of each diagnostic launch
    failures: tuple[str, ...]  # launches that gave no value, and why
    verify_ms_profiled: float | None  # mean verify range in the traces
    stage_ms: Mapping[str, float]
    groups: Mapping[str, float]  # ms per verify by kernel group, host gaps included
    top_ops: tuple[tuple[str, str, float, float], ...]  # (name, group, ms/verify, calls/verify)
    kernels_per_verify: float | None
    gpu_idle_ms_per_verify: float | None
    graph_fraction: float | None  # verify cycles in CUDA graphs, from the verify timer
    device: str | None
    allreduce_paths: tuple[str, ...]  # gloo, custom all-reduce, NCCL via ... (from the traces)
    traces: tuple[str, ...]
    nccl: tuple[Mapping[str, Any], ...]  # per process: version, taken, communicators, not taken
    ranks: tuple[Mapping[str, Any], ...]  # per rank process: pid, NUMA node, CPU affinity
    # GPU traces: the host's CUDA calls per verify (launches, graph_launches, kernel_launches,
    # syncs, sync_ms, d2h_copies, idle_before_replay_ms); None without a GPU trace
    host: Mapping[str, Any] | None = None
    # the verify timer's records: verifies per batch size and how many replayed a graph, and
    # the CUDA-graph batch sizes the server captured (its log); None where neither was read
    batches: Mapping[str, Any] | None = None
    trace_reader: str | None = None  # HolisticTraceAnalysis, or perfbisect's JSON reader
    # standard error of verify_ms_profiled (over every profiled verify of the side)
    verify_ms_error: float | None = None
    # NCCL kernels per call site: call_site, operation, algorithm, protocol, calls_per_verify
    nccl_kernels: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Cost:
    extra_s_per_launch: float | None
    metric_overhead: float | None  # diagnostic launch's metric / an ordinary launch's, less 1
    note: str


@dataclass(frozen=True)
class Explanation:
    metric: str
    session_id: int | None
    delta: float | None  # bad - good: medians of ordinary launches, else of diagnostic ones
    delta_source: str  # which launches ``delta`` comes from
    profiled_delta_ms: float | None  # the same in the profiled verifies (shares divide this)
    good: Side
    bad: Side
    findings: tuple[Finding, ...]
    not_measured: tuple[str, ...]
    cost: Cost
    change: Mapping[str, Any] | None = None
    version: int = EXPLANATION_VERSION
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["explanation_version"] = data.pop("version")
        return data
