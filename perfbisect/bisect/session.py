"""The session driver: the only place where the engine meets targets and the store.

It feeds the engine's launch requests to the target one after another, records every launch
(samples, timings, log, snapshot) in its own transaction, and on resume replays the stored
launches into a fresh engine, so finished steps are never re-measured.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from perfbisect.bisect.engine import (
    Engine,
    LaunchRequest,
    LaunchResult,
    Outcome,
    PointResult,
    Policy,
    Purpose,
)
from perfbisect.bisect.multiaxis import AxisPlan, MultiAxisEngine
from perfbisect.bisect.report import build_report
from perfbisect.bisect.report_model import Report
from perfbisect.bisect.specs import resolve_endpoints
from perfbisect.bisect.stats import instability_flags, median
from perfbisect.config import Configuration
from perfbisect.errors import ExperimentError, PerfbisectError, StepFailed, lead_with_error
from perfbisect.experiment import Experiment, load_experiment
from perfbisect.paths import cache_dir
from perfbisect.redact import redact_toml
from perfbisect.store import records
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    Reusable,
    find_session,
    reusable_launches,
    session_launches,
    session_steps,
)
from perfbisect.targets.base import Target
from perfbisect.targets.registry import make_target


class Interrupted(PerfbisectError):
    """Raised when the user pressed Ctrl-C; the session is left resumable."""

    exit_code = 130


class Progress(Protocol):
    def started(self, session_id: int, path_length: int, expected_steps: int) -> None: ...
    def stage(self, request: LaunchRequest, stage: str) -> None: ...
    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None: ...
    def verdict(self, point: PointResult) -> None: ...


class NoProgress:
    def started(self, session_id: int, path_length: int, expected_steps: int) -> None:
        pass

    def stage(self, request: LaunchRequest, stage: str) -> None:
        pass

    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None:
        pass

    def verdict(self, point: PointResult) -> None:
        pass


@dataclass(frozen=True)
class SearchOptions:
    threshold: float | None = None
    min_launches: int = 1
    max_launches: int = 5
    all_steps: bool = False  # map every level change, not only the crossing
    # Search launches of earlier sessions of the same experiment on the same host, at most this
    # old, stand in for new ones (endpoints and verification are always launched anew, which
    # is also the drift check); 0 = never (--fresh).
    reuse_days: float = 7.0

    def policy(self, experiment: Experiment) -> Policy:
        return Policy(
            all_steps=self.all_steps,
            min_launches=self.min_launches,
            good_endpoint_launches=self.min_launches,
            bad_endpoint_launches=max(2, self.min_launches),
            max_launches=max(self.max_launches, self.min_launches, 2),
            higher_is_better=experiment.metric.higher_is_better,
        )


def expected_steps(path_length: int) -> int:
    """Endpoints + binary search + the verified pair, for the progress display."""
    return 2 + max(0, math.ceil(math.log2(max(path_length - 1, 1)))) + 2


def start(
    store: Store,
    *,
    experiment_path: Path,
    good: str,
    bad: str,
    options: SearchOptions,
    name: str | None = None,
    progress: Progress | None = None,
) -> Report:
    """Validate everything, create the session, run it. Bad input stores nothing."""
    experiment = load_experiment(experiment_path)
    endpoints = resolve_endpoints(good, bad, experiment)
    params: dict[str, Any] = {
        "threshold": options.threshold,
        "min_launches": options.min_launches,
        "max_launches": options.max_launches,
        "all_steps": options.all_steps,
        "reuse_days": options.reuse_days,
        "plans": [p.as_json() for p in endpoints.plans] if endpoints.multi_axis else None,
        # Log directories are keyed by this, not by the per-database session number: two
        # databases (the demo's and the default) both have a session 1.
        "log_key": uuid.uuid4().hex[:12],
    }
    session_id = records.claim_new_session(
        store,
        name=name,
        good=endpoints.good.as_dict(),
        bad=endpoints.bad.as_dict(),
        params={**params, "experiment_sha256": _digest(experiment.text)},
        path=[c.as_dict() for c in endpoints.path],
        experiment_path=str(experiment.path),
        experiment_text=redact_toml(experiment.text),
    )
    return _drive(
        store,
        session_id,
        experiment,
        endpoints.path,
        params["plans"],
        options,
        progress or NoProgress(),
        log_key=params["log_key"],
    )


def dry_run(*, experiment_path: Path, good: str, bad: str) -> dict[str, Any]:
    """What the first launch would run on the host (checks everything, stores nothing)."""
    experiment = load_experiment(experiment_path)
    endpoints = resolve_endpoints(good, bad, experiment)
    target = make_target(experiment, cache_dir())
    try:
        first = endpoints.path[0]
        return {
            "configuration": first.as_dict(),
            "path_length": len(endpoints.path),
            "axes": [p.name for p in endpoints.plans],
            "commands": target.describe(first),
        }
    finally:
        target.close()


def resume(store: Store, ref: str | None, progress: Progress | None = None) -> Report:
    row = find_session(store, ref)
    records.claim_existing_session(store, row.id)
    experiment = load_experiment(row.experiment_path)
    if _digest(experiment.text) != row.params.get("experiment_sha256"):
        raise ExperimentError(
            f"{experiment.path}: the experiment file changed since session {row.id} started; "
            "restore it, or start a new session"
        )
    context = experiment.context()
    configs = [Configuration.of(c, context) for c in row.path]
    p = row.params
    options = SearchOptions(
        p.get("threshold"),
        int(p["min_launches"]),
        int(p["max_launches"]),
        bool(p.get("all_steps", True)),  # sessions from before crossing-first mapped every step
        float(p.get("reuse_days", 0.0)),
    )
    return _drive(
        store,
        row.id,
        experiment,
        configs,
        p.get("plans"),
        options,
        progress or NoProgress(),
        log_key=p.get("log_key"),
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def session_log_root(session_id: int, log_key: str | None) -> Path:
    """Where a session's launch logs go: unique across databases (sessions of before the key
    existed keep their old place)."""
    name = f"session-{log_key}" if log_key else f"session-{session_id}"
    return cache_dir() / "logs" / name


def _log_dir(root: Path, seq: int, config: Configuration) -> Path:
    return root / f"{seq:04d}-{config.fingerprint[:8]}"


def _replayed(view: LaunchView) -> LaunchResult:
    if view.value is not None:
        return LaunchResult(view.value)
    reason = lead_with_error(view.reason or "failed")
    return LaunchResult(reason=f"{view.stage}: {reason}" if view.stage else reason)


def _measure(
    target: Target,
    store: Store,
    session_id: int,
    seq: int,
    request: LaunchRequest,
    experiment: Experiment,
    on_stage: Callable[[str], None],
    log_root: Path,
    hosts_seen: set[str],
) -> LaunchResult:
    config = request.config
    log_dir = _log_dir(log_root, seq, config)
    base = replace(_record(session_id, seq, request, experiment), log_path=str(log_dir))
    try:
        m = target.launch(config, str(log_dir), on_stage)
    except StepFailed as failure:
        records.record_launch(
            store,
            replace(
                base,
                stage=failure.stage,
                reason=failure.reason,
                build_status="failed" if failure.stage == "build" else None,
            ),
        )
        return LaunchResult(reason=f"{failure.stage}: {lead_with_error(failure.reason)}")
    value = median(m.samples)
    build = m.build
    hosts_seen.add(str(m.snapshot.get("host", "local")))
    records.record_launch(
        store,
        replace(
            base,
            host_name=str(m.snapshot.get("host", "local")),
            host_address=str(m.snapshot.get("address", "local")),
            samples=m.samples,
            value=value,
            flags=m.flags or instability_flags(m.samples),
            timings=m.timings,
            snapshot=m.snapshot,
            build_status=build.status if build else None,
            build_cached=bool(build and build.cached),
            build_s=build.duration_s if build else 0.0,
            build_log_tail=build.log_tail if build else "",
        ),
    )
    return LaunchResult(value)


def stage_seconds(launches: list[LaunchView]) -> float:
    """What the session's launches cost: the sum of their stage times (build, ready, measure,
    teardown), across resumes."""
    return round(
        sum(
            float(v)
            for launch in launches
            for k, v in (launch.timings or {}).items()
            if k.endswith("_s") and isinstance(v, (int, float))
        ),
        1,
    )


def _reuse_pool(
    store: Store, session_id: int, experiment: Experiment, options: SearchOptions
) -> dict[str, list[Reusable]]:
    if options.reuse_days <= 0:
        return {}
    since = datetime.utcnow() - timedelta(days=options.reuse_days)
    return reusable_launches(
        store,
        exclude_session=session_id,
        experiment_sha256=_digest(experiment.text),
        metric=experiment.metric.name,
        since=since,
    )


def _reuse(
    pool: dict[str, list[Reusable]], request: LaunchRequest, hosts_seen: set[str]
) -> Reusable | None:
    """An earlier launch that stands in for this one: search launches only, and only from a
    host this session has itself launched on (its endpoints ran there first)."""
    if request.purpose is not Purpose.SEARCH:
        return None
    stored = pool.get(request.config.fingerprint)
    while stored:
        candidate = stored.pop(0)
        if candidate.host in hosts_seen:
            return candidate
    return None


def _record_reused(
    store: Store,
    session_id: int,
    seq: int,
    request: LaunchRequest,
    experiment: Experiment,
    reused: Reusable,
) -> LaunchResult:
    records.record_launch(
        store,
        replace(
            _record(session_id, seq, request, experiment),
            samples=reused.samples,
            value=reused.value,
            flags=[
                f"reused from launch {reused.launch_id} (session {reused.session_id}, "
                f"{reused.started_at.isoformat(timespec='seconds')}Z, host {reused.host})"
            ],
        ),
    )
    return LaunchResult(reused.value)


def _record(
    session_id: int, seq: int, request: LaunchRequest, experiment: Experiment
) -> records.LaunchRecord:
    """The part of a launch's record that its request alone decides."""
    config = request.config
    return records.LaunchRecord(
        session_id=session_id,
        seq=seq,
        fingerprint=config.fingerprint,
        axes=config.as_dict(),
        context=config.context,
        position=request.position,
        purpose=request.purpose.value,
        metric=experiment.metric.name,
        samples=[],
        value=None,
    )


def _close(target: Target | None) -> None:
    if target is not None:
        target.close()


def _engine(
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    policy: Policy,
    threshold: float | None,
) -> Engine:
    """One path: the binary search; several axes (or a patch set): the multi-axis search."""
    if plans:
        axis_plans = [AxisPlan.from_json(p) for p in plans]
        return MultiAxisEngine(path[0], path[-1], axis_plans, policy, threshold)
    return Engine(path, policy, threshold)


def _drive(
    store: Store,
    session_id: int,
    experiment: Experiment,
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    options: SearchOptions,
    progress: Progress,
    log_key: str | None,
) -> Report:
    engine = _engine(path, plans, options.policy(experiment), options.threshold)
    log_root = session_log_root(session_id, log_key)
    pool = _reuse_pool(store, session_id, experiment, options)
    hosts_seen: set[str] = set()  # where this session's own launches ran
    stored = session_launches(store, session_id)
    recorded_steps = {
        (s.position, s.verdict, s.n_launches) for s in session_steps(store, session_id)
    }
    progress.started(session_id, len(path), expected_steps(len(path)))
    target: Target | None = None
    seq = 0
    try:
        while batch := engine.next_batch():
            results: list[LaunchResult] = []
            for request in batch:
                if seq < len(stored) and stored[seq].fingerprint == request.config.fingerprint:
                    result = _replayed(stored[seq])
                    progress.launched(request, result, replayed=True)
                else:
                    reused = _reuse(pool, request, hosts_seen)
                    if reused is not None:
                        result = _record_reused(store, session_id, seq, request, experiment, reused)
                        progress.launched(request, result, replayed=True)
                    else:
                        if target is None:
                            target = make_target(experiment, cache_dir())

                        def on_stage(name: str, request: LaunchRequest = request) -> None:
                            progress.stage(request, name)

                        result = _measure(
                            target,
                            store,
                            session_id,
                            seq,
                            request,
                            experiment,
                            on_stage,
                            log_root,
                            hosts_seen,
                        )
                        progress.launched(request, result, replayed=False)
                results.append(result)
                seq += 1
            engine.feed(results)
            for point in engine.take_verdicts():
                progress.verdict(point)
                n = point.estimate.n if point.estimate else 0
                key = (point.position, point.verdict.value, n)
                if key in recorded_steps:
                    continue
                recorded_steps.add(key)
                est = point.estimate
                records.record_step(
                    store,
                    session_id,
                    point.config.fingerprint,
                    point.position,
                    point.verdict.value,
                    est.median if est else None,
                    (est.lo, est.hi) if est else None,
                    n,
                    point.reason,
                )
    except KeyboardInterrupt:
        _close(target)
        records.set_session_status(store, session_id, records.INTERRUPTED)
        raise Interrupted(
            f"interrupted; the session is saved: `perfbisect bisect resume "
            f"{session_id}` continues it"
        ) from None
    except BaseException:
        _close(target)
        records.set_session_status(store, session_id, records.INTERRUPTED)
        raise
    _close(target)
    outcome = engine.outcome
    assert outcome is not None
    report = build_report(store, session_id, experiment, engine, outcome, str(log_root))
    launches = session_launches(store, session_id)
    reused_ids = [v.id for v in launches if any(str(f).startswith("reused from") for f in v.flags)]
    warnings = list(report.warnings)
    if reused_ids and report.drift:
        warnings.append(
            f"{len(reused_ids)} search launch(es) were reused from earlier sessions, and an endpoint "
            "drifted since then: re-run with --fresh to measure everything anew"
        )
    report = replace(
        report,
        time_spent_s=stage_seconds(launches),
        reused_launches=tuple(reused_ids),
        warnings=tuple(warnings),
    )
    records.set_session_status(
        store,
        session_id,
        records.FINISHED,
        result=report.to_json(),
        params={"derived_threshold": outcome.threshold},
    )
    return report


__all__ = [
    "Interrupted",
    "NoProgress",
    "Outcome",
    "Progress",
    "SearchOptions",
    "resume",
    "start",
]
