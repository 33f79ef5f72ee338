"""Running an explanation: the diagnostic launches (good, bad, good, bad, ...), recorded in
the history with purpose ``explain`` (never replayed into a search, never a verdict), read
back as evidence, compared, ranked. ``explain_session`` takes the pair from a finished
session's culprit; ``explain_pair`` from two configurations the user names."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfbisect.bisect.report.report_model import Report, counted
from perfbisect.bisect.session.driver import measure_launch, session_log_root, slot_experiments
from perfbisect.bisect.session.specs import resolve_endpoints
from perfbisect.bisect.stats import history_value, median
from perfbisect.bisect.values import LaunchRequest, Purpose
from perfbisect.config import COMMIT_AXIS, PATCHES_AXIS, Configuration
from perfbisect.errors import UsageError
from perfbisect.executors.registry import make_target
from perfbisect.experiment import Experiment, ExplainSettings, load_experiment
from perfbisect.explain.change import Change, parse_diff
from perfbisect.explain.evidence import PROFILE_FOLDER, LaunchEvidence, read_launch
from perfbisect.explain.judge import judge, verify_direction
from perfbisect.explain.model import Cost, Explanation, Side
from perfbisect.explain.sides import fold, side_median
from perfbisect.paths import cache_dir
from perfbisect.remote import program
from perfbisect.store import records
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    find_session,
    history,
    launch_with_samples,
    session_launches,
)
from perfbisect.targets.command import CommandTarget
from perfbisect.targets.gitrepo import GitRepo

BOOT = program("verify_timer_boot.py")
NCCL_SUBSYS = "INIT,ENV,TUNING"
Stage = Callable[[str, str], None]  # (side, stage name)


def diagnostics(settings: ExplainSettings) -> dict[str, str]:
    """The variables a diagnostic launch's served processes get (only these launches)."""
    return {
        "PERFBISECT_PROFILE_DIR": f"{{logs}}/{PROFILE_FOLDER}",
        "PERFBISECT_PROFILE_BOOT": str(BOOT),
        "PERFBISECT_PROFILE_CYCLES": str(settings.cycles),
        "PERFBISECT_PROFILE_SKIP": str(settings.skip),
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": NCCL_SUBSYS,
        "NCCL_DEBUG_FILE": "{logs}/nccl.%h.%p",
    }


def explain_session(
    store: Store, ref: str | None, on_stage: Stage | None = None, launches: int | None = None
) -> Explanation:
    """Explain a finished session's culprit (its last good and first bad configuration); when
    the culprit is a merge with a commit inside it that crosses, that commit and its parent
    on the branch: the merge's diff holds the whole branch, the inside pair one change."""
    row = find_session(store, ref)
    report = Report.from_json(row.result) if row.result else None
    if report is None or report.culprit is None:
        raise UsageError(
            f"session {row.id} has no verified culprit to explain; name the pair with "
            "--good and --bad instead"
        )
    step = report.inside_culprit or report.culprit
    experiment = load_experiment(row.experiment_path)
    context = experiment.context()
    good = Configuration.of(step.last_good, context)
    bad = Configuration.of(step.first_bad, context)
    root = session_log_root(row.id, row.params.get("log_key")) / f"explain-{uuid.uuid4().hex[:8]}"
    first_seq = len(session_launches(store, row.id))
    return _explain(store, experiment, good, bad, row.id, first_seq, root, on_stage, launches)


def explain_pair(
    store: Store,
    *,
    experiment_path: Path,
    good: str,
    bad: str,
    on_stage: Stage | None = None,
    launches: int | None = None,
) -> Explanation:
    """Explain the difference between two configurations the user names (no session)."""
    experiment = load_experiment(experiment_path)
    endpoints = resolve_endpoints(good, bad, experiment)
    root = cache_dir() / "logs" / f"explain-{uuid.uuid4().hex[:12]}"
    return _explain(
        store, experiment, endpoints.good, endpoints.bad, None, 0, root, on_stage, launches
    )


def _explain(
    store: Store,
    experiment: Experiment,
    good: Configuration,
    bad: Configuration,
    session_id: int | None,
    first_seq: int,
    root: Path,
    on_stage: Stage | None,
    launches: int | None,
) -> Explanation:
    settings = experiment.explain
    if launches is not None:
        settings = replace(settings, launches=launches)
    # The first slot's host: where a session's deciding launches ran (a pool's first host).
    target = make_target(slot_experiments(experiment, 1)[0], cache_dir())
    try:
        if not isinstance(target, CommandTarget) or not target.host.is_local:
            raise UsageError(
                "bisect explain runs its diagnostic launches on the local host only (the "
                "traces and NCCL logs are read from the launch's log folder)"
            )
        target.diagnostics = diagnostics(settings)
        seq = first_seq
        for _ in range(settings.launches):
            for label, position, config in (("good", 0, good), ("bad", 1, bad)):
                measure_launch(
                    target,
                    store,
                    session_id,
                    seq,
                    LaunchRequest(position, config, Purpose.EXPLAIN),
                    experiment,
                    _stage_of(on_stage, label),
                    root,
                    set(),
                )
                seq += 1
    finally:
        target.close()
    views = [
        v
        for v in history(store, metric=experiment.metric.name)
        if v.purpose == Purpose.EXPLAIN.value and (v.log_path or "").startswith(str(root))
    ]
    return compare(store, experiment, good, bad, views, session_id)


def _stage_of(on_stage: Stage | None, side: str) -> Callable[[str], None]:
    def stage(name: str) -> None:
        if on_stage is not None:
            on_stage(side, name)

    return stage


def _evidence(store: Store, views: Sequence[LaunchView]) -> tuple[list[LaunchEvidence], list[Any]]:
    out, snapshots = [], []
    for view in views:
        _, _, snapshot = launch_with_samples(store, view.id)
        snapshots.append(snapshot)
        out.append(
            read_launch(
                view.id,
                view.value,
                Path(view.log_path or "."),
                [str(f) for f in view.flags],
                {k: float(v) for k, v in (view.timings or {}).items()},
            )
        )
    return out, snapshots


def compare(
    store: Store,
    experiment: Experiment,
    good: Configuration,
    bad: Configuration,
    views: Sequence[LaunchView],
    session_id: int | None,
) -> Explanation:
    good_views = [v for v in views if v.fingerprint == good.fingerprint]
    bad_views = [v for v in views if v.fingerprint == bad.fingerprint]
    good_ev, good_snaps = _evidence(store, good_views)
    bad_ev, bad_snaps = _evidence(store, bad_views)
    g_side = fold("good", good.as_dict(), good_ev)
    b_side = fold("bad", bad.as_dict(), bad_ev)
    delta, delta_source = metric_delta(store, experiment, good, bad, g_side, b_side)
    not_measured: list[str] = []
    for side, views_of in ((g_side, good_views), (b_side, bad_views)):
        failed = [v for v in views_of if v.value is None]
        for v in failed:
            not_measured.append(f"{side.label} launch {v.id} failed at {v.stage}: {v.reason}")
    differing = ", ".join(f"{a}: {good.get(a)} -> {bad.get(a)}" for a in good.differing_axes(bad))
    change = describe_change(experiment, good, bad)
    direction = verify_direction(experiment.metric.name, experiment.metric.higher_is_better)
    judged = judge(
        g_side, b_side, good_ev, bad_ev, differing, (good_snaps, bad_snaps), change, direction
    )
    not_measured += judged.not_measured
    return Explanation(
        metric=experiment.metric.name,
        session_id=session_id,
        delta=delta,
        delta_source=delta_source,
        profiled_delta_ms=judged.measured,
        good=g_side,
        bad=b_side,
        findings=judged.findings,
        not_measured=tuple(not_measured),
        cost=cost(store, experiment, good, bad, g_side, b_side, good_views + bad_views),
        change=_change_json(change),
    )


def describe_change(
    experiment: Experiment, good: Configuration, bad: Configuration
) -> Change | None:
    axes = good.differing_axes(bad)
    if not axes:
        return None
    axis = axes[0]
    g, b = good.get(axis) or "", bad.get(axis) or ""
    if axis == COMMIT_AXIS and experiment.target.repo:
        repo = GitRepo(experiment.target.repo)
        files = parse_diff(repo.diff(g, b), lambda path: repo.show(b, path))
        return Change(axis, g, b, files)
    if axis == PATCHES_AXIS:
        by_token = {p.token: p for p in experiment.patches}
        added = [t for t in b.split("+") if t and t not in g.split("+")]
        text = "\n".join(by_token[t].path.read_text() for t in added if t in by_token)
        return Change(axis, g or "(none)", b, parse_diff(text, lambda _path: None))
    return Change(axis, g, b)


def _change_json(change: Change | None) -> dict[str, Any] | None:
    if change is None:
        return None
    return {
        "axis": change.axis,
        "good": change.good,
        "bad": change.bad,
        "flags": list(change.flags),
        "files": [
            {
                "path": f.path,
                "added": f.added,
                "removed": f.removed,
                "functions": list(f.functions),
                "flags": list(f.flags),
            }
            for f in change.files
        ],
    }


def _ordinary(store: Store, experiment: Experiment, config: Configuration) -> list[LaunchView]:
    return [
        v
        for v in history(store, fingerprint=config.fingerprint, metric=experiment.metric.name)
        if v.purpose != Purpose.EXPLAIN.value and v.value is not None
    ]


def metric_delta(
    store: Store,
    experiment: Experiment,
    good: Configuration,
    bad: Configuration,
    g_side: Side,
    b_side: Side,
) -> tuple[float | None, str]:
    """The metric's delta from ordinary launches where the store has both sides (the profiler
    inflates the diagnostic launches' own values), else from the diagnostic launches."""
    g, b = _ordinary(store, experiment, good), _ordinary(store, experiment, bad)
    if g and b:
        # Outlier launches set aside as the session's report sets them aside, so the delta
        # here and the report's effect read the same launches.
        higher = experiment.metric.higher_is_better
        g_value, g_kept = history_value([v.value for v in g if v.value is not None], higher)
        b_value, b_kept = history_value([v.value for v in b if v.value is not None], higher)
        aside = len(g) + len(b) - g_kept - b_kept
        basis = f"{g_kept}+{b_kept} ordinary launches"
        if aside:
            basis += f" ({aside} outlier {'launch' if aside == 1 else 'launches'} set aside)"
        return b_value - g_value, basis
    g_med, b_med = side_median(g_side), side_median(b_side)
    if g_med is None or b_med is None:
        return None, "no launch gave a value on both sides"
    return b_med - g_med, (
        f"{len(g_side.values)}+{len(b_side.values)} diagnostic launches (profiler on: "
        "inflated, see the cost)"
    )


def _seconds(view: LaunchView) -> float:
    return sum(float(v) for k, v in (view.timings or {}).items() if k.endswith("_s"))


def cost(
    store: Store,
    experiment: Experiment,
    good: Configuration,
    bad: Configuration,
    g_side: Side,
    b_side: Side,
    explain_views: Sequence[LaunchView],
) -> Cost:
    """Diagnostic launches against ordinary launches of the same configurations in the store."""
    ordinary = [
        v for config in (good, bad) for v in _ordinary(store, experiment, config) if v.timings
    ]
    explained = [v for v in explain_views if v.value is not None]
    if not ordinary or not explained:
        return Cost(
            None,
            None,
            "not measured: no ordinary launch of these configurations in the store to compare "
            "with (run `bisect start` on them, or explain a session)",
        )
    extra = median([_seconds(v) for v in explained]) - median([_seconds(v) for v in ordinary])
    ratios = []
    for config, side in ((good, g_side), (bad, b_side)):
        plain = [v.value for v in ordinary if v.fingerprint == config.fingerprint and v.value]
        if plain and side.values:
            ratios.append(median(list(side.values)) / median(plain) - 1)
    overhead = sum(ratios) / len(ratios) if ratios else None
    return Cost(
        extra,
        overhead,
        f"{counted(len(explained), 'diagnostic launch')} against "
        f"{counted(len(ordinary), 'ordinary launch')} of the same configurations "
        "(stage seconds; median metric)",
    )


def explain_finished(
    store: Store, report: Report, on_stage: Stage | None = None
) -> Explanation | None:
    """At the end of ``bisect start``: explain a verified culprit unless the experiment's
    ``[explain] after_start`` is false; None when there is nothing to explain."""
    from perfbisect.bisect.report.report_model import ReportStatus

    culprit = report.culprit
    if report.status is not ReportStatus.FOUND or culprit is None or not culprit.verified:
        return None
    row = find_session(store, str(report.session))
    if not load_experiment(row.experiment_path).explain.after_start:
        return None
    explanation = explain_session(store, str(report.session), on_stage)
    store_why(store, report.session, explanation)
    return explanation


def store_why(store: Store, session_id: int, explanation: Explanation) -> None:
    """Keep the explanation in the session's report (``why``), so every view shows it."""
    row = find_session(store, str(session_id))
    if not row.result:
        return
    report = Report.from_json(row.result)
    updated = replace(report, why=explanation.to_json())
    records.set_session_status(store, session_id, row.status, result=updated.to_json())
