"""One side's diagnostic launches (good or bad) folded into the evidence the report shows:
means over launches and ranks of the per-verify trace summaries, NCCL per process, and the
rank processes' placement."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from perfbisect.bisect.stats import median
from perfbisect.explain import nccl_log
from perfbisect.explain.evidence import LaunchEvidence
from perfbisect.explain.model import Side

TOP_OPS = 12


def standard_error(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance / len(values))


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def op_means(launches: Sequence[LaunchEvidence]) -> dict[str, tuple[str, float, float]]:
    """Operator/kernel name -> (group, ms per verify, calls per verify), averaged over every
    trace of the side (a name missing from a trace counts as zero there)."""
    traces = [t for launch in launches for t in launch.traces]
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    groups: dict[str, str] = {}
    for trace in traces:
        for op in trace.ops:
            sums[op.name][0] += op.ms_per_verify
            sums[op.name][1] += op.calls_per_verify
            groups[op.name] = op.group
    n = len(traces) or 1
    return {name: (groups[name], ms / n, calls / n) for name, (ms, calls) in sums.items()}


def nccl_processes(launches: Sequence[LaunchEvidence]) -> list[dict[str, Any]]:
    out = []
    for launch in launches:
        env_by_pid = {int(p["pid"]): p.get("env", {}) for p in launch.processes if "pid" in p}
        libraries = {int(p["pid"]): p.get("nccl_library") for p in launch.processes if "pid" in p}
        for process in launch.nccl:
            env = env_by_pid.get(process.pid)
            out.append(
                {
                    "launch": launch.launch_id,
                    "host": process.host,
                    "pid": process.pid,
                    "version": process.version,
                    # from the rank's /proc/self/maps (None: not a profiled rank)
                    "library": libraries.get(process.pid),
                    "taken": dict(process.taken),
                    "communicators": [
                        {
                            "rank": c.rank,
                            "nranks": c.nranks,
                            "tid": c.tid,
                            "comm": c.comm,
                            "taken": dict(c.taken),
                        }
                        for c in process.communicators
                    ],
                    "uneven": [
                        {"name": n, "value": v, "without": w}
                        for n, v, w in nccl_log.uneven(process)
                    ],
                    "tuning": [list(t) for t in process.tuning],
                    # None: this process's environment was not recorded (not a profiled rank)
                    "not_taken": nccl_log.not_taken(process, env) if env is not None else None,
                    "untold": nccl_log.untold_at_one_rank(process, env) if env is not None else [],
                }
            )
    return out


HOST_FIELDS = (
    "launches",
    "graph_launches",
    "kernel_launches",
    "syncs",
    "sync_ms",
    "d2h_copies",
    "idle_before_replay_ms",
)


def host_means(launches: Sequence[LaunchEvidence]) -> dict[str, Any] | None:
    """Means over the side's GPU traces of the host's CUDA calls per verify."""
    calls = [t.host for launch in launches for t in launch.traces if t.host is not None]
    if not calls:
        return None
    out: dict[str, Any] = {}
    for name in HOST_FIELDS:
        values = [getattr(c, name) for c in calls if getattr(c, name) is not None]
        out[name] = _mean(values)
    sync_calls: dict[str, float] = defaultdict(float)
    for c in calls:
        for call, count in c.sync_calls:
            sync_calls[call] += count / len(calls)
    out["sync_calls"] = dict(sync_calls)
    return out


def batch_counts(launches: Sequence[LaunchEvidence]) -> dict[str, Any] | None:
    """Verifies per batch size (and how many of them replayed a CUDA graph), and the batch
    sizes the server captured graphs for, over the side's launches."""
    by_bs: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for launch in launches:
        for bs, graph in launch.verifies:
            by_bs[bs][0] += 1
            by_bs[bs][1] += int(graph)
    captured = sorted({size for launch in launches for size in (launch.captured or ())})
    if not by_bs and not captured:
        return None
    return {
        "verifies_by_bs": {str(bs): list(v) for bs, v in sorted(by_bs.items())},
        "captured": captured or None,
    }


def nccl_kernels(launches: Sequence[LaunchEvidence]) -> list[dict[str, Any]]:
    """NCCL kernels by (call site, operation, algorithm, protocol), calls per verify averaged
    over the side's traces (the algorithm and protocol are in the kernel's name)."""
    traces = [t for launch in launches for t in launch.traces]
    calls: dict[tuple[str, str, str | None, str | None], float] = defaultdict(float)
    for trace in traces:
        for use in trace.nccl:
            key = (use.call_site, use.operation, use.algorithm, use.protocol)
            calls[key] += use.calls_per_verify / len(traces)
    return [
        {"call_site": s, "operation": o, "algorithm": a, "protocol": p, "calls_per_verify": c}
        for (s, o, a, p), c in sorted(calls.items(), key=str)
    ]


def fold(label: str, config: Mapping[str, str], launches: Sequence[LaunchEvidence]) -> Side:
    traces = [t for launch in launches for t in launch.traces]
    ops = op_means(launches)
    stage_ms: dict[str, list[float]] = defaultdict(list)
    group_ms: dict[str, list[float]] = defaultdict(list)
    for trace in traces:
        for stage, ms in trace.stage_ms.items():
            stage_ms[stage].append(ms)
        for group, ms in trace.groups.items():
            group_ms[group].append(ms)
    n = len(traces) or 1
    idle = [t.gpu_idle_ms_per_verify for t in traces if t.gpu_idle_ms_per_verify is not None]
    graphs = [launch.graph_fraction for launch in launches if launch.graph_fraction is not None]
    top = sorted(ops.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]
    return Side(
        label=label,
        config=dict(config),
        launch_ids=tuple(launch.launch_id for launch in launches),
        values=tuple(launch.value for launch in launches if launch.value is not None),
        failures=tuple(p for launch in launches for p in launch.problems),
        verify_ms_profiled=_mean([t.verify_ms for t in traces]),
        stage_ms={k: sum(v) / len(v) for k, v in stage_ms.items()},
        groups={k: sum(v) / n for k, v in group_ms.items()},
        top_ops=tuple((name, g, ms, calls) for name, (g, ms, calls) in top),
        kernels_per_verify=_mean([t.kernels_per_verify for t in traces]),
        gpu_idle_ms_per_verify=_mean(idle),
        graph_fraction=_mean(graphs),
        device=traces[0].device if traces else None,
        allreduce_paths=tuple(dict.fromkeys(p for t in traces for p in t.allreduce_paths)),
        traces=tuple(t.path for t in traces),
        nccl=tuple(nccl_processes(launches)),
        host=host_means(launches),
        batches=batch_counts(launches),
        trace_reader=traces[0].reader if traces else None,
        nccl_kernels=tuple(nccl_kernels(launches)),
        verify_ms_error=standard_error([ms for t in traces for ms in t.verify_ms_each]),
        ranks=tuple(
            {
                "launch": launch.launch_id,
                "rank": p.get("rank"),
                "pid": p.get("pid"),
                "numa": p.get("numa"),
                "affinity": p.get("affinity"),
            }
            for launch in launches
            for p in launch.processes
        ),
    )


def side_median(side: Side) -> float | None:
    return median(list(side.values)) if side.values else None
