"""Building the session report (``report_model.Report``) from the engine's final state, plus
drift evidence from the history."""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.audit import AUDIT_TARGET
from perfbisect.bisect.engine import Culprit, Engine, Outcome, PointResult
from perfbisect.bisect.report_model import (
    AttributionRow,
    Interval,
    PathPoint,
    Report,
    ReportStatus,
    Step,
    Unresolved,
)
from perfbisect.bisect.stats import Verdict, difference, median
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.errors import lead_with_error
from perfbisect.experiment import Experiment
from perfbisect.store.database import Store
from perfbisect.store.history import diff_snapshots, history, launch_with_samples
from perfbisect.targets.gitrepo import CommitInfo

DRIFT_MIN_EFFECT = 0.05


def _interval(point: PointResult) -> Interval | None:
    est = point.estimate
    return Interval(est.median, est.lo, est.hi, est.n) if est is not None else None


def _commit_info(experiment: Experiment, sha: str | None) -> CommitInfo | None:
    if sha is None or experiment.target.repo is None:
        return None
    from perfbisect.targets.gitrepo import GitRepo

    try:
        return GitRepo(experiment.target.repo).info(sha)
    except Exception:  # the repository may have moved since the session ran
        return None


def _drift(
    store: Store, session_id: int, experiment: Experiment, engine: Engine, position: int, role: str
) -> dict[str, Any] | None:
    """Compare today's launches of an endpoint with the history of the same configuration."""
    config = engine.path[position]
    now = engine.launches.get(position, [])
    earlier = [
        v
        for v in history(
            store,
            fingerprint=config.fingerprint,
            exclude_session=session_id,
            metric=experiment.metric.name,
        )
        if v.value is not None
    ]
    if not now or not earlier:
        return None
    before = [v.value for v in earlier if v.value is not None]
    diff = difference(before, now, engine.rel_sd(), engine.policy.noise.z)
    significant = (diff.lo > 0 or diff.hi < 0) and abs(diff.delta) >= DRIFT_MIN_EFFECT * abs(
        median(before)
    )
    if not significant:
        return None
    current = [
        v
        for v in history(store, fingerprint=config.fingerprint, metric=experiment.metric.name)
        if v.session_id == session_id and v.snapshot_id is not None
    ]
    env_diff: list[dict[str, Any]] = []
    with_snapshot = [v for v in earlier if v.snapshot_id is not None]
    if current and with_snapshot:
        _, _, snap_now = launch_with_samples(store, current[-1].id)
        _, _, snap_then = launch_with_samples(store, with_snapshot[-1].id)
        env_diff = [
            {"key": k, "before": a, "now": b} for k, a, b in diff_snapshots(snap_then, snap_now)
        ]
    return {
        "endpoint": role,
        "config": config.as_dict(),
        "before": {
            "median": median(before),
            "launches": len(before),
            "first": earlier[0].started_at.isoformat() + "Z",
            "last": earlier[-1].started_at.isoformat() + "Z",
            "sessions": sorted({v.session_id for v in earlier if v.session_id is not None}),
        },
        "now": {"median": median(now), "launches": len(now)},
        "change": diff.as_json(),
        "env_diff": env_diff,
    }


def _axis_of_step(a: Configuration, b: Configuration) -> str:
    differing = a.differing_axes(b)
    return differing[0] if differing else COMMIT_AXIS


def _step(experiment: Experiment, engine: Engine, threshold: float | None, c: Culprit) -> Step:
    # Numbers from the engine's final state, not from when the step was found: every view of
    # a configuration shows the same median and launch count.
    lo, hi = engine.point(c.last_good.position), engine.point(c.first_bad.position)
    axis = _axis_of_step(lo.config, hi.config)
    return Step(
        axis=axis,
        position=hi.position,
        last_good=lo.config.as_dict(),
        first_bad=hi.config.as_dict(),
        last_good_ms=_interval(lo),
        first_bad_ms=_interval(hi),
        effect_ms=c.effect,
        verified=c.verified,
        verify_note=c.note,
        crosses_threshold=engine.straddles(c, threshold),
        commit=_commit_info(experiment, hi.config.get(COMMIT_AXIS))
        if axis == COMMIT_AXIS
        else None,
        confidence=c.confidence,
    )


def _unresolved(engine: Engine, a: int, b: int) -> Unresolved:
    inside = [engine.point(p) for p in sorted(engine.verdicts) if a < p < b]
    reasons = [
        f"position {p.position} {p.verdict.value}"
        + (f" ({lead_with_error(p.reason)})" if p.reason else "")
        for p in inside
        if p.verdict in (Verdict.SKIP, Verdict.UNCLEAR)
    ]
    why = "; ".join(
        [*([engine.unresolved_why[(a, b)]] if (a, b) in engine.unresolved_why else []), *reasons]
    )
    why = why or "not searched to the end"
    return Unresolved(engine.path[a].as_dict(), engine.path[b].as_dict(), why)


def build_report(
    store: Store,
    session_id: int,
    experiment: Experiment,
    engine: Engine,
    outcome: Outcome,
    log_dir: str | None = None,
) -> Report:
    threshold = outcome.threshold
    chosen = outcome.culprit
    steps = tuple(_step(experiment, engine, threshold, c) for c in outcome.steps)
    culprit = _step(experiment, engine, threshold, chosen) if chosen else None
    attribution = tuple(
        AttributionRow(
            tuple(row.axes), engine.path[row.position].as_dict(), row.verdict, row.effect
        )
        for row in getattr(engine, "attribution", [])
    )
    last = engine.bad_end
    drift = tuple(
        d
        for d in (
            _drift(store, session_id, experiment, engine, 0, "good"),
            _drift(store, session_id, experiment, engine, last, "bad"),
        )
        if d
    )
    path = tuple(
        PathPoint(
            position=p.position,
            config=p.config.as_dict(),
            verdict=p.verdict,
            ms=_interval(p),
            reason=lead_with_error(p.reason) if p.reason and p.verdict is Verdict.SKIP else None,
            launch_values=tuple(engine.launches.get(p.position, [])),
            failures=tuple(lead_with_error(r) for r in engine.failures.get(p.position, [])),
        )
        for p in engine.evaluated_points()
    )
    if engine.fixed_threshold:
        basis = "given (--threshold-ms)"
    else:
        basis = (
            f"the endpoints' geometric midpoint, from {len(engine.launches.get(0, []))} launch(es) "
            f"of the good and {len(engine.launches.get(engine.bad_end, []))} of the bad endpoint"
        )
    return Report(
        session=session_id,
        status=ReportStatus(outcome.status.value),
        message=outcome.message,
        metric=experiment.metric.name,
        higher_is_better=experiment.metric.higher_is_better,
        threshold_ms=threshold,
        culprit=culprit,
        steps=steps,
        path=path,
        evaluations=outcome.evaluations,
        launches=outcome.launches,
        failed_launches=sum(len(v) for v in engine.failures.values()),
        noise_rel_sd=engine.rel_sd(),
        path_length=len(engine.path),
        attribution=attribution,
        culprit_axes=tuple(tuple(axes) for axes in getattr(engine, "culprit_sets", [])),
        unresolved=tuple(_unresolved(engine, a, b) for a, b in outcome.unresolved),
        drift=drift,
        log_dir=log_dir,
        threshold_interval=outcome.threshold_interval,
        threshold_basis=basis if threshold is not None else "",
        warnings=tuple(
            [
                *_overlap_warnings(path, steps, threshold),
                *_burst_warnings(engine),
                *_taken_back(engine, outcome, experiment.metric.name),
                *_low_confidence(outcome),
            ]
        ),
        search="all steps" if engine.policy.all_steps else "crossing first",
        seen=tuple(_seen(engine, a, b) for a, b in outcome.seen),
        creep=tuple(_creep(engine, a, b) for a, b in engine.creep(outcome.steps, outcome.seen)),
    )


def _taken_back(engine: Engine, outcome: Outcome, unit: str) -> list[str]:
    """The first bad configuration measured clearly worse than the bad endpoint: a change
    after it took back part of the regression, so the endpoints' difference understates what
    the culprit did (its own effect is the step's). Said only when the launches show it."""
    step = outcome.culprit
    end = engine.bad_end
    if step is None or step.first_bad.position == end:
        return []
    a, b = engine.launches.get(end), engine.launches.get(step.first_bad.position)
    if not a or not b or not engine.measured_worse(a, b):
        return []
    return [
        f"position {step.first_bad.position} measured worse than the bad endpoint "
        f"({median(b):.4g} vs {median(a):.4g} {unit}, {len(b)} and {len(a)} launch(es)): a "
        f"change between it and position {end} took back part of the regression (not "
        "searched); the culprit's own effect is its step's (last good to first bad), not the "
        "endpoints' difference"
    ]


def _low_confidence(outcome: Outcome) -> list[str]:
    """The crossing named although the launches as a whole leave it below the audit's target
    (its extra launches were spent): said, with what would add evidence."""
    step = outcome.culprit
    if step is None or step.confidence is None or step.confidence >= AUDIT_TARGET:
        return []
    return [
        f"the launches as a whole give position {step.first_bad.position} "
        f"{step.confidence:.0%} of being the first configuration past the threshold (the "
        f"search asks for {AUDIT_TARGET:.0%}; the launches it may add for that, three times "
        "`--max-launches`, were spent): a larger `--max-launches` buys more"
    ]


def _burst_warnings(engine: Engine) -> list[str]:
    """Launches the engine took out of the evidence because the machine had a burst. A point
    whose launches all sit beyond the bad endpoint, more of them than a burst lasts, was slower
    than it on every launch: a level of its own as likely as a burst, and the warning says so
    instead of blaming the machine."""
    aside = {p: v for p, v in engine.set_aside.items() if v}
    if not aside:
        return []
    # Against the bad endpoint's own level, by the engine's margin (not against a level worse
    # than it that the engine may have found: these launches were set aside before it showed).
    past_end = engine.beyond_bad_end()

    def beyond(values: list[float]) -> bool:
        return past_end is not None and bool(values) and all(past_end(v) for v in values)

    # Five launches or more, every one beyond: longer than a burst lasts (2-4 launches in a row).
    steady = {
        p: v
        for p, v in aside.items()
        if len(v) + len(engine.launches.get(p, [])) >= 5
        and beyond([*v, *engine.launches.get(p, [])])
    }
    bursty = {p: v for p, v in aside.items() if p not in steady}
    out = []
    if bursty:
        count = sum(len(v) for v in bursty.values())
        where = ", ".join(str(p) for p in sorted(bursty))
        out.append(
            f"bursts of slow launches, by the look of it: {count} launch(es) of position(s) {where} "
            "ran slower than any level between the endpoints, or next to such a launch, and were "
            "set aside and measured again (they stay in `bisect log`)"
        )
    if steady:
        count = sum(len(v) for v in steady.values())
        where = ", ".join(str(p) for p in sorted(steady))
        out.append(
            f"position(s) {where} measured worse than the bad endpoint on every launch: "
            f"{count} of those launches were taken for a burst, set aside and measured again; "
            "the configuration may simply be slower than the bad endpoint (they stay in "
            "`bisect log`)"
        )
    return out


def _seen(engine: Engine, a: int, b: int) -> Unresolved:
    """A level change the crossing-first search saw between two measured points."""
    pa, pb = engine.point(a), engine.point(b)
    levels = " -> ".join(f"{p.estimate.median:.4g}" if p.estimate else "-" for p in (pa, pb))
    return Unresolved(
        pa.config.as_dict(),
        pb.config.as_dict(),
        f"the level moves {levels} between positions {a} and {b}; not searched "
        "(`--all-steps` searches it)",
    )


def _creep(engine: Engine, a: int, b: int) -> Unresolved:
    pa, pb = engine.point(a), engine.point(b)
    assert pa.estimate is not None and pb.estimate is not None
    rise = pb.estimate.median - pa.estimate.median
    share = rise / pa.estimate.median if pa.estimate.median else 0.0
    searched = (
        "no single step above the minimum effect was found there"
        if engine.policy.all_steps
        else "no step was searched there (`--all-steps` searches it)"
    )
    return Unresolved(
        pa.config.as_dict(),
        pb.config.as_dict(),
        f"the level moved by {rise:+.4g} ({share:+.1%}) between positions {a} and {b} outside "
        f"the steps reported; {searched}: a gradual creep, or steps below the minimum effect",
    )


def _overlap_warnings(
    path: tuple[PathPoint, ...], steps: tuple[Step, ...], threshold: float | None
) -> list[str]:
    """A level between the endpoints that sits on the threshold makes "which step crosses it"
    a coin toss: say so, name the steps on each side, and what to do about it."""
    if threshold is None:
        return []
    out = []
    for p in path:
        if p.ms is None or p.verdict not in (Verdict.UNCLEAR, Verdict.INTERMEDIATE):
            continue
        if not p.ms.lo <= threshold <= p.ms.hi:
            continue
        before = [s for s in steps if s.position <= p.position]
        after = [s for s in steps if s.position > p.position]
        sides = ", ".join(
            f"{side} the step at position {s.position}"
            for side, s in (
                ("after", before[-1] if before else None),
                ("before", after[0] if after else None),
            )
            if s is not None
        )
        out.append(
            f"position {p.position} ({p.verdict.value}, {p.ms.median:.4g} [{p.ms.lo:.4g}, "
            f"{p.ms.hi:.4g}]) sits on the threshold {threshold:.4g}: a level between the "
            f"endpoints overlaps it{' (' + sides + ')' if sides else ''}; pass --threshold-ms "
            "to say which crossing you mean, or --all-steps to map every level change"
        )
    return out
