"""`perfbisect bisect explain` and the `why` section: running it from the CLI (progress on
stderr) and rendering an explanation's JSON as text. Layout only; the explanation is built by
perfbisect/explain."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape

from perfbisect.bisect.report.report_model import Report
from perfbisect.cli.render import console, render_rows
from perfbisect.explain.how_it_ran import comm_text, how_it_ran, nccl_version_text
from perfbisect.formatting import cfg, num, short_hashes

TOP_FINDINGS = 5


def say_stage(side: str, stage: str) -> None:
    print(f"perfbisect: explain: {side} side: {stage}", file=sys.stderr, flush=True)


def _share(share: float | None) -> str:
    return f"{share:6.0%}" if share is not None else "   n/a"


def render_why(why: Mapping[str, Any]) -> None:
    """The `why` section: the top findings, each one line with its share and its evidence,
    then the kernel groups of both sides, the NCCL table, what was not measured, the cost."""
    out = console()
    good, bad = why["good"], why["bad"]
    delta = why.get("delta")
    metric = why.get("metric", "metric")
    head = f"{delta:+.3f} {metric}" if delta is not None else "delta not measured"
    profiled = why.get("profiled_delta_ms")
    out.print(
        f"[bold]why[/] ({escape(head)} bad vs good, from {escape(why['delta_source'])}; "
        f"{len(good['values'])}+{len(bad['values'])} diagnostic launches"
        + (
            f"; {profiled:+.3f} ms per verify in the profiled cycles"
            if profiled is not None
            else ""
        )
        + ")",
        soft_wrap=True,
    )
    findings = why.get("findings", [])
    if not findings:
        out.print("  no difference found in the evidence collected", soft_wrap=True)
    for i, finding in enumerate(findings[:TOP_FINDINGS], 1):
        out.print(
            f"  {i}. [{_share(finding['share'])} of the delta] {escape(finding['title'])}"
            f"  ({escape(finding['evidence'])})",
            soft_wrap=True,
        )
    if len(findings) > TOP_FINDINGS:
        out.print(f"  ... {len(findings) - TOP_FINDINGS} more in --json", soft_wrap=True)
    stages = sorted(set(good["stage_ms"]) | set(bad["stage_ms"]))
    if stages:
        render_rows(
            "stages per cycle (ms, profiled cycles)",
            ["stage", "good", "bad"],
            [(s, num(good["stage_ms"].get(s)), num(bad["stage_ms"].get(s))) for s in stages],
        )
    groups = sorted(
        set(good["groups"]) | set(bad["groups"]),
        key=lambda g: -(bad["groups"].get(g, 0.0) - good["groups"].get(g, 0.0)),
    )
    if groups:
        render_rows(
            f"kernel groups (ms per verify; {good.get('device') or 'no'} trace)",
            ["group", "good", "bad", "delta"],
            [
                (
                    g,
                    num(good["groups"].get(g, 0.0)),
                    num(bad["groups"].get(g, 0.0)),
                    f"{bad['groups'].get(g, 0.0) - good['groups'].get(g, 0.0):+.3f}",
                )
                for g in groups
            ],
        )
    rows = how_it_ran(good, bad)
    if rows:
        render_rows("how the verify ran (per verify)", ["", "good", "bad"], rows)
    for side in (good, bad):
        for k in side.get("nccl_kernels") or []:
            out.print(
                f"  NCCL kernels ({side['label']}): {escape(k['call_site'])} {k['operation']} "
                f"{k['algorithm'] or '?'}/{k['protocol'] or '?'}, "
                f"{k['calls_per_verify']:.1f} per verify",
                soft_wrap=True,
            )
        if side["allreduce_paths"]:
            out.print(f"  all-reduce path ({side['label']}): {', '.join(side['allreduce_paths'])}")
    nccl = [(side["label"], p) for side in (good, bad) for p in side["nccl"]]
    if nccl:
        render_rows(
            "NCCL (per process)",
            ["side", "pid", "version", "communicators", "taken from the environment", "not taken"],
            [
                (
                    label,
                    p["pid"],
                    nccl_version_text(p),
                    ", ".join(comm_text(c) for c in p["communicators"]),
                    ", ".join(f"{k}={v}" for k, v in p["taken"].items()),
                    "?" if p["not_taken"] is None else ", ".join(p["not_taken"]),
                )
                for label, p in nccl
            ],
        )
    for line in why.get("not_measured", []):
        out.print(f"  not measured: {escape(line)}", soft_wrap=True)
    cost = why.get("cost") or {}
    if cost.get("extra_s_per_launch") is not None:
        overhead = cost.get("metric_overhead")
        out.print(
            f"  diagnostics cost: {cost['extra_s_per_launch']:+.1f} s per launch"
            + (f", {overhead:+.0%} on the metric" if overhead is not None else "")
            + f" ({escape(cost['note'])})",
            soft_wrap=True,
        )
    else:
        out.print(f"  diagnostics cost: {escape(cost.get('note', 'not measured'))}", soft_wrap=True)
    traces = [*good["traces"], *bad["traces"]]
    if traces:
        reader = good.get("trace_reader") or bad.get("trace_reader")
        out.print(
            f"  traces: {escape(traces[0])} (+{len(traces) - 1} more)"
            + (f", read by {escape(reader)}" if reader else ""),
            soft_wrap=True,
        )
    out.print(
        # short hashes: the report above names the culprit's whole hash once
        f"  good: {escape(short_hashes(cfg(good['config'])))}; "
        f"bad: {escape(short_hashes(cfg(bad['config'])))}",
        soft_wrap=True,
    )


def explain_after_start(store: Any, report: Report) -> Report:
    """The report with its `why`, when `bisect start` found a verified culprit; a failed
    explanation is said on stderr and leaves the report as it was."""
    from dataclasses import replace

    from perfbisect.errors import PerfbisectError
    from perfbisect.explain.run import explain_finished

    try:
        explanation = explain_finished(store, report, say_stage)
    except PerfbisectError as exc:
        print(f"perfbisect: explain: not run: {exc}", file=sys.stderr, flush=True)
        return report
    return report if explanation is None else replace(report, why=explanation.to_json())


def explain_command(
    store: Any,
    session: str | None,
    good: str | None,
    bad: str | None,
    config: Path,
    launches: int | None,
    as_json: bool,
) -> None:
    from perfbisect.cli.context import emit_json
    from perfbisect.errors import UsageError
    from perfbisect.explain.run import explain_pair, explain_session, store_why

    if (good is None) != (bad is None):
        raise UsageError("name both --good and --bad, or neither (then a session's culprit)")
    if good is not None and bad is not None:
        if session is not None:
            raise UsageError("give a session or --good/--bad, not both")
        result = explain_pair(
            store, experiment_path=config, good=good, bad=bad, on_stage=say_stage, launches=launches
        )
    else:
        result = explain_session(store, session, on_stage=say_stage, launches=launches)
        if result.session_id is not None:
            store_why(store, result.session_id, result)
    if as_json:
        emit_json(result.to_json())
    else:
        render_why(result.to_json())
