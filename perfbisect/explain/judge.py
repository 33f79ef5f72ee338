"""From two sides' evidence to the ranked findings and what could not be measured; no store,
no launch. ``bisect explain`` calls it on the launches it just made; it also reads launches
again from their log folders (tests, and docs/examples/explain_gpu/reread.py on the logs a GPU
run brought back), so a finding rule changed later can be checked on real evidence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfbisect.explain import findings as rules
from perfbisect.explain import mechanisms
from perfbisect.explain.change import Change
from perfbisect.explain.evidence import LaunchEvidence, read_launch
from perfbisect.explain.model import Finding, Side
from perfbisect.explain.sides import fold
from perfbisect.explain.trace import summarise

NOISE_ERRORS = 2.0  # a profiled delta within this many standard errors apportions nothing


@dataclass(frozen=True)
class Judged:
    findings: tuple[Finding, ...]  # ranked
    not_measured: tuple[str, ...]
    measured: float | None  # the profiled verifies' delta (bad - good), ms


def within_noise(profiled: float, good: Side, bad: Side, direction: int = 1) -> str | None:
    """Why the profiled verifies' delta apportions nothing (None when it does): it does not go
    the way the bad side went (``direction``: +1 where the bad side's verify is expected slower,
    -1 where faster, as in a search for a speed-up), or the verifies' own spread covers it (one
    launch a side, a noisy machine)."""
    if profiled * direction <= 0:
        return f"shares of the delta: the profiled verifies do not show it ({profiled:+.3f} ms)"
    g, b = good.verify_ms_error, bad.verify_ms_error
    if g is None or b is None:
        return None
    error = (g**2 + b**2) ** 0.5
    if abs(profiled) < NOISE_ERRORS * error:
        return (
            f"shares of the delta: the profiled verifies' delta ({profiled:+.3f} ms) is within "
            f"{NOISE_ERRORS:.0f} standard errors of their spread (+-{error:.3f} ms)"
        )
    return None


def judge(
    good: Side,
    bad: Side,
    good_ev: Sequence[LaunchEvidence],
    bad_ev: Sequence[LaunchEvidence],
    differing: str,
    snapshots: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]] = ((), ()),
    change: Change | None = None,
    direction: int = 1,
) -> Judged:
    """``differing``: the axes that differ, as the environment findings name them;
    ``direction``: the sign the bad side's verify-time delta is expected to have
    (``verify_direction``). Shares divide the profiled delta in that direction: a finding's
    part of a speed-up is as much a share as its part of a slow-down."""
    not_measured: list[str] = []
    for side in (good, bad):
        if not side.traces:
            not_measured.append(
                f"kernel/operator profile of the {side.label} side: no trace with a verify range "
                "(the server does not load perfbisect's profiler, or the profiler failed"
                + (f": {side.failures[0]}" if side.failures else "")
                + ")"
            )
    profiled = None  # the profiled delta, where it apportions the findings' shares
    measured = None
    found: list[Finding] = []
    if good.verify_ms_profiled is not None and bad.verify_ms_profiled is not None:
        measured = bad.verify_ms_profiled - good.verify_ms_profiled
        noise = within_noise(measured, good, bad, direction)
        if noise is not None:
            not_measured.append(noise)  # no share against a delta the verifies' spread covers
        else:
            profiled = measured
            found += rules.operator_findings(good_ev, bad_ev, profiled)
    if not any(p["communicators"] for s in (good, bad) for p in s.nccl):
        not_measured.append(
            "NCCL: no communicator in the NCCL logs (no GPU collective ran, e.g. CPU/gloo)"
        )
    if good.device != "cuda" or bad.device != "cuda":
        not_measured.append(
            "GPU kernels, GPU idle time and CUDA graph replays: the traces hold no GPU activity "
            "(CPU operators are reported instead)"
        )
    found += mechanisms.batch_findings(good, bad)
    found += mechanisms.sync_findings(good, bad, profiled)
    found += mechanisms.graph_findings(good, bad, profiled)
    found += rules.nccl_findings(good, bad)
    found += rules.allreduce_findings(good, bad)
    found += rules.nccl_kernel_findings(good, bad)
    found += rules.environment_findings(good_ev, bad_ev, differing)
    found += rules.machine_findings(*snapshots)
    found += rules.placement_findings(good, bad)
    found += rules.change_findings(change)
    return Judged(rules.rank(found), tuple(not_measured), measured)


def verify_direction(metric: str, higher_is_better: bool) -> int:
    """The sign of the bad side's verify-time delta: +1 (slower) unless the metric is itself a
    time (a name ending in a time unit, as the targets' ``verify_ms``) that the experiment calls
    better when higher, i.e. a search for the commit that made the verify faster. A rate
    (tokens/s) that got worse means a slower verify either way."""
    is_time = metric.endswith(("_ms", "_us", "_ns")) or metric in ("ms", "seconds", "latency")
    return -1 if is_time and higher_is_better else 1


def reread(
    launches: Sequence[Path], traces: Sequence[Path], direction: int = 1
) -> tuple[Side, Side, Judged]:
    """Two launches' log folders (good, bad) read again with one trace each, as a GPU run
    brings them back (its traces apart from its logs); no store, so no snapshots or change."""
    sides, evidence = [], []
    for label, folder, trace in zip(("good", "bad"), launches, traces, strict=True):
        launch = read_launch(int(folder.name[:4]), None, folder, [], {})
        summary = summarise(trace)
        graphs = [graph for _, graph in launch.verifies]
        launch = replace(
            launch,
            traces=(summary,) if summary is not None else (),
            graph_fraction=sum(graphs) / len(graphs) if graphs else None,
        )
        evidence.append([launch])
        sides.append(fold(label, {}, [launch]))
    good, bad = sides
    return (
        good,
        bad,
        judge(good, bad, evidence[0], evidence[1], "read again from the logs", direction=direction),
    )
