"""What differs between the sides, ranked by how much of the delta each difference accounts
for. Kernel/operator time is apportioned against the verify delta of the profiled cycles (the
same metric, measured under the profiler); a difference no measurement apportions (an
environment variable, NCCL's settings, the machine, the change's files) is stated with its
evidence and no share, after those that have one. Nothing is stated without evidence."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from perfbisect.explain.change import Change
from perfbisect.explain.evidence import LaunchEvidence
from perfbisect.explain.groups import HOST_GAP
from perfbisect.explain.mechanisms import MECHANISMS
from perfbisect.explain.model import Finding, Side
from perfbisect.explain.nccl_log import DIAGNOSTIC_VARIABLES
from perfbisect.explain.sides import op_means

MIN_SHARE = 0.05  # an operator below this share of the delta is not a finding
MAX_OPERATORS = 3
# Shells, terminals and perfbisect's own per-launch values differ between any two launches.
ENV_NOISE_PREFIXES = ("PERFBISECT_", "TMUX", "TERM", "SSH_", "LC_", "XDG_", "HIST", "LS_COLORS")
ENV_NOISE = frozenset(
    {"SHLVL", "PWD", "OLDPWD", "_", "PS1", "COLUMNS", "LINES", "MAIL", "SHELL", "SGLANG_RUN_ID"}
)
# Each configuration runs from its own worktree (a patch set is one): paths into it differ by
# construction, so they are compared with the worktree's folder left out.
WORKTREE = re.compile(r"/worktrees/[^/:]+/[^/:]+")
TUNING_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "SGLANG_", "OMP_", "NVSHMEM_")
MOMENTARY = frozenset(
    {
        "power_w",
        "temperature_c",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "memory_used_mib",
        "throttle_reasons",
        "utilization",
    }
)
SNAPSHOT_IGNORE = ("env", "launch", "address", "perfbisect", "taken_at", "host")


def operator_findings(
    good: Sequence[LaunchEvidence], bad: Sequence[LaunchEvidence], profiled_delta: float
) -> list[Finding]:
    g, b = op_means(good), op_means(bad)
    rows = []
    for name in set(g) | set(b):
        group = (g.get(name) or b[name])[0]  # an operator may run on one side only
        _, g_ms, g_calls = g.get(name, (group, 0.0, 0.0))
        _, b_ms, b_calls = b.get(name, (group, 0.0, 0.0))
        rows.append((b_ms - g_ms, name, group, g_ms, b_ms, g_calls, b_calls))
    # the operators that moved most the way the verify moved (a speed-up apportions too)
    rows.sort(key=lambda row: row[0] * (1 if profiled_delta > 0 else -1), reverse=True)
    traces = ", ".join(sorted({t.path for launch in bad for t in launch.traces})[:2])
    out = []
    for delta, name, group, g_ms, b_ms, g_calls, b_calls in rows[:MAX_OPERATORS]:
        share = delta / profiled_delta
        if share < MIN_SHARE:
            break
        if name == HOST_GAP:
            what = "time in the verify that no operator covers (host-bound work, waits)"
            calls = ""
        else:
            what = f"{name} ({group})"
            calls = f", {g_calls:.1f} -> {b_calls:.1f} calls per verify"
        out.append(
            Finding(
                "operator",
                f"{what}: {g_ms:.3f} -> {b_ms:.3f} ms per verify{calls}",
                share,
                delta,
                f"profiler traces ({traces})",
            )
        )
    return out


def _values_by_name(launches: Sequence[LaunchEvidence]) -> dict[str, set[str | None]]:
    processes = [p for launch in launches for p in launch.processes]
    names = {n for p in processes for n in p.get("env", {})}
    return {n: {_unplaced(p.get("env", {}).get(n)) for p in processes} for n in names}


def _unplaced(value: str | None) -> str | None:
    return WORKTREE.sub("/worktrees/{worktree}", value) if value is not None else None


def _said(name: str, value: str | None) -> str:
    return f"{name}={value}" if value is not None else f"no {name}"


def _noise(name: str) -> bool:
    return name in ENV_NOISE or name in DIAGNOSTIC_VARIABLES or name.startswith(ENV_NOISE_PREFIXES)


def environment_findings(
    good: Sequence[LaunchEvidence], bad: Sequence[LaunchEvidence], axes: str
) -> list[Finding]:
    """Variables whose value in every rank of one side differs from every rank of the other."""
    if not any(e.processes for e in good) or not any(e.processes for e in bad):
        return []
    g, b = _values_by_name(good), _values_by_name(bad)
    out = []
    # the libraries' own tuning variables first, then the rest by name
    for name in sorted(set(g) | set(b), key=lambda n: (not n.startswith(TUNING_PREFIXES), n)):
        if _noise(name):
            continue
        gv, bv = g.get(name, {None}), b.get(name, {None})
        if len(gv) != 1 or len(bv) != 1 or gv == bv:
            continue
        (good_value,), (bad_value,) = gv, bv
        ranks = sorted({str(p.get("rank")) for launch in bad for p in launch.processes})
        where = f"rank process(es) {', '.join(ranks)}"

        out.append(
            Finding(
                "environment",
                f"{_said(name, bad_value)} in the bad side's {where}; "
                f"{_said(name, good_value)} in the good "
                f"side's ({axes})",
                None,
                None,
                "the environment each rank process saw (profile/process.rank*.json)",
            )
        )
    return out


def _env_claim(
    side: Side, process: Mapping[str, Any], names: list[str], claim: str, evidence: str
) -> Finding:
    """A finding about tuning variables in one NCCL process's environment."""
    return Finding(
        "nccl",
        f"{', '.join(names)} in the environment of pid {process['pid']} ({side.label} side){claim}",
        None,
        None,
        evidence,
    )


def nccl_findings(good: Side, bad: Side) -> list[Finding]:
    out = []
    for side in (bad, good):
        for process in side.nccl:
            missing = process.get("not_taken") or []
            if missing:
                out.append(
                    _env_claim(
                        side,
                        process,
                        missing,
                        " but not taken by its NCCL communicator(s)",
                        "NCCL_DEBUG=INFO 'set by environment' lines vs the rank's environment",
                    )
                )
    for side in (bad, good):
        for process in side.nccl:
            untold = process.get("untold") or []
            if untold:
                out.append(
                    _env_claim(
                        side,
                        process,
                        untold,
                        ": its NCCL communicators have one rank, which NCCL does not tune, so "
                        "its log cannot say whether they were taken",
                        "NCCL_DEBUG=INFO communicator lines (nranks 1) and the rank's environment",
                    )
                )
            for row in process.get("uneven") or []:
                out.append(
                    Finding(
                        "nccl",
                        f"{row['name']}={row['value']} taken by some NCCL communicators of pid "
                        f"{process['pid']} ({side.label} side) but not by "
                        f"{', '.join(row['without'])} (made before it reached the process, "
                        "or on another path)",
                        None,
                        None,
                        "NCCL_DEBUG=INFO 'set by environment' lines between each "
                        "communicator's Init START and COMPLETE",
                    )
                )
    g_taken = _taken(good)
    b_taken = _taken(bad)
    for name in sorted(set(g_taken) | set(b_taken)):
        if g_taken.get(name) != b_taken.get(name):
            out.append(
                Finding(
                    "nccl",
                    f"NCCL took {name}={b_taken.get(name, '(unset)')} on the bad side, "
                    f"{g_taken.get(name, '(unset)')} on the good side",
                    None,
                    None,
                    "NCCL_DEBUG=INFO 'set by environment' lines",
                )
            )
    g_versions = {str(p["version"]) for p in good.nccl if p.get("version")}
    b_versions = {str(p["version"]) for p in bad.nccl if p.get("version")}
    if g_versions and b_versions and g_versions != b_versions:
        out.append(
            Finding(
                "nccl",
                f"NCCL version {', '.join(sorted(g_versions))} -> {', '.join(sorted(b_versions))}",
                None,
                None,
                "NCCL_DEBUG=INFO 'NCCL version' lines",
            )
        )
    return out


def _algorithms(side: Side) -> dict[tuple[str, str], str]:
    by_site: dict[tuple[str, str], set[str]] = defaultdict(set)
    for k in side.nccl_kernels:
        by_site[(k["call_site"], k["operation"])].add(f"{k['algorithm']}/{k['protocol']}")
    return {site: ", ".join(sorted(v)) for site, v in by_site.items()}


def nccl_kernel_findings(good: Side, bad: Side) -> list[Finding]:
    """An NCCL collective whose algorithm or protocol changed at the same call site."""
    g, b = _algorithms(good), _algorithms(bad)
    return [
        Finding(
            "nccl",
            f"NCCL {op} at {site}: {g[(site, op)]} -> {b[(site, op)]} (algorithm/protocol)",
            None,
            None,
            "profiler traces (NCCL kernel names, e.g. ncclDevKernel_AllReduce_Sum_bf16_RING_LL)",
        )
        for site, op in sorted(set(g) & set(b))
        if g[(site, op)] != b[(site, op)]
    ]


def allreduce_findings(good: Side, bad: Side) -> list[Finding]:
    if not good.traces or not bad.traces or good.allreduce_paths == bad.allreduce_paths:
        return []
    return [
        Finding(
            "nccl",
            f"all-reduce path: {', '.join(good.allreduce_paths) or 'none'} -> "
            f"{', '.join(bad.allreduce_paths) or 'none'}",
            None,
            None,
            "profiler traces (all-reduce operators and kernels, their call sites)",
        )
    ]


def _taken(side: Side) -> dict[str, str]:
    values: dict[str, set[str]] = defaultdict(set)
    for process in side.nccl:
        for name, value in process.get("taken", {}).items():
            values[name].add(value)
    return {n: ", ".join(sorted(v)) for n, v in values.items()}


def machine_findings(
    good: Sequence[Mapping[str, Any]], bad: Sequence[Mapping[str, Any]]
) -> list[Finding]:
    """Hardware snapshot keys on which every good launch agrees, every bad launch agrees, and
    the two differ (maximum clocks, power limit, PCIe link, driver, persistence mode); not the
    readings of a moment (one launch a side on the H200 gave 'power_w: 78 -> 125',
    'sm_clock_mhz: 345 -> 1980': when the snapshot was taken, not how the machine was set)."""
    from perfbisect.store.history import flatten

    def consistent(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        flat = [flatten(s) for s in snapshots if s]
        if not flat:
            return {}
        keys = set.intersection(*(set(f) for f in flat))
        return {k: flat[0][k] for k in keys if all(f[k] == flat[0][k] for f in flat)}

    g, b = consistent(good), consistent(bad)
    out = []
    for key in sorted(set(g) & set(b)):
        last = key.rsplit(".", 1)[-1]
        if key.split(".")[0] in SNAPSHOT_IGNORE or last in MOMENTARY or g[key] == b[key]:
            continue
        out.append(
            Finding("machine", f"{key}: {g[key]} -> {b[key]}", None, None, "hardware snapshots")
        )
    return out


def placement_findings(good: Side, bad: Side) -> list[Finding]:
    def placement(side: Side) -> dict[Any, tuple[Any, Any]]:
        return {r["rank"]: (r["numa"], tuple(r["affinity"] or ())) for r in side.ranks}

    g, b = placement(good), placement(bad)
    out = []
    for rank in sorted(set(g) & set(b), key=str):
        if g[rank] != b[rank]:
            out.append(
                Finding(
                    "machine",
                    f"rank {rank}: NUMA node {g[rank][0]} CPUs {list(g[rank][1])} -> "
                    f"NUMA node {b[rank][0]} CPUs {list(b[rank][1])}",
                    None,
                    None,
                    "each rank process's CPU affinity",
                )
            )
    return out


def change_findings(change: Change | None) -> list[Finding]:
    if change is None:
        return []
    if not change.files:
        return [
            Finding(
                "change",
                f"{change.axis}: {change.good} -> {change.bad}",
                None,
                None,
                "the configurations",
            )
        ]
    out = []
    for touched in change.files:
        funcs = f": {', '.join(touched.functions[:6])}" if touched.functions else ""
        flags = f" [on the {', '.join(touched.flags)} path]" if touched.flags else ""
        out.append(
            Finding(
                "change",
                f"{change.axis} {change.good[:12]} -> {change.bad[:12]} touched "
                f"{touched.path} (+{touched.added}/-{touched.removed}){funcs}{flags}",
                None,
                None,
                "git diff" if change.axis == "commit" else "the patch text",
            )
        )
    return out


# Unapportioned findings, most telling first: how verify ran, what NCCL did, what reached the
# processes, the machine, then the change's files.
KIND_ORDER = ("batch", "synchronisation", "graph", "nccl", "environment", "machine", "change")


def rank(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """How the verify ran first (a mechanism, with its share where measured), then the
    operators by share, then the rest by kind."""

    def order(f: Finding) -> int:
        return KIND_ORDER.index(f.kind) if f.kind in KIND_ORDER else len(KIND_ORDER)

    mechanisms = sorted(
        (f for f in findings if f.kind in MECHANISMS), key=lambda f: (order(f), -(f.share or 0))
    )
    measured = sorted(
        (f for f in findings if f.share is not None and f.kind not in MECHANISMS),
        key=lambda f: -(f.share or 0),
    )
    others = sorted(
        (f for f in findings if f.share is None and f.kind not in MECHANISMS), key=order
    )
    return (*mechanisms, *measured, *others)
