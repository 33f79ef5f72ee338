"""Building the session report (``report_model.Report``) from the engine's final state, plus
drift evidence from the history."""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.report.evidence import Evidence, engine_views, evidence_of
from perfbisect.bisect.report.report_model import (
    AttributionRow,
    Interval,
    PathPoint,
    Report,
    ReportStatus,
    Step,
    Unresolved,
    counted,
    times,
)
from perfbisect.bisect.report.report_warnings import warnings
from perfbisect.bisect.stats import (
    Difference,
    Verdict,
    classify,
    core_launches,
    difference_with_spread,
    median,
)
from perfbisect.bisect.values import Culprit, Outcome, PointResult
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.errors import lead_with_error
from perfbisect.experiment import Experiment
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    diff_snapshots,
    history,
    launch_with_samples,
    session_launches,
)
from perfbisect.targets.gitrepo import CommitInfo
from perfbisect.targets.sglang.startup import session_startup

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
    store: Store,
    session_id: int,
    experiment: Experiment,
    engine: EngineState,
    position: int,
    role: str,
    now: list[float],
) -> dict[str, Any] | None:
    """Compare today's kept launches of an endpoint with the history of the same
    configuration (its slow launches set aside on both sides: a burst is no drift)."""
    config = engine.path[position]
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
    hib = engine.policy.higher_is_better
    before = core_launches([v.value for v in earlier if v.value is not None], engine.rel_sd(), hib)
    diff = difference_with_spread(before, now, engine.rel_sd(), engine.policy.noise.z)
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
        # One launch now cannot tell a drift from one slow launch: said, not acted on.
        "firm": len(now) >= 2,
    }


def _axis_of_step(a: Configuration, b: Configuration) -> str:
    differing = a.differing_axes(b)
    return differing[0] if differing else COMMIT_AXIS


def _verification(
    engine: EngineState, views: list[LaunchView], lo: int, hi: int, kept_lo: int
) -> str:
    """What the verification launched, from the session's own launches: which side was
    launched again and how often, so that "verified" never claims more than ran."""

    def count(position: int) -> tuple[int, int]:
        fp = engine.path[position].fingerprint
        mine = [v for v in views if v.fingerprint == fp and v.purpose == "verify"]
        return sum(v.value is not None for v in mine), sum(v.value is None for v in mine)

    (good, good_failed), (bad, bad_failed) = count(lo), count(hi)
    failed = good_failed + bad_failed
    tail = f" ({counted(failed, 'verification launch')} failed)" if failed else ""
    if not good and not bad:
        return "no verification launches ran" + tail
    if not good:
        return (
            f"first bad launched again {times(bad)}; last good not re-launched: its earlier "
            f"{'launch' if kept_lo == 1 else counted(kept_lo, 'launch')} used{tail}"
        )
    if not bad:
        return f"last good launched again {times(good)}; first bad not re-launched{tail}"
    if good == bad:
        return (
            f"last good and first bad launched again in {counted(good, 'back-to-back pair')}{tail}"
        )
    return f"last good launched again {times(good)}, first bad {times(bad)}, interleaved{tail}"


def _step(
    experiment: Experiment,
    engine: EngineState,
    threshold: float | None,
    c: Culprit,
    evidence: dict[int, Evidence],
    views: list[LaunchView],
) -> Step:
    # Numbers from the engine's final state, not from when the step was found: every view of
    # a configuration shows the same median and launch count, and the effect comes from the
    # same kept launches as the two medians beside it.
    lo, hi = engine.point(c.last_good.position), engine.point(c.first_bad.position)
    axis = _axis_of_step(lo.config, hi.config)
    kept_lo = evidence[lo.position].kept if lo.position in evidence else []
    kept_hi = evidence[hi.position].kept if hi.position in evidence else []
    effect: Difference | None = c.effect
    basis = ""
    verified, note = c.verified, c.note
    if kept_lo and kept_hi:
        effect = difference_with_spread(kept_lo, kept_hi, engine.rel_sd(), engine.policy.noise.z)
        basis = (
            f"the launches behind the medians shown ({counted(len(kept_lo), 'launch')} of the "
            f"last good, {len(kept_hi)} of the first bad), each side's own launch-to-launch "
            "spread counted"
        )
        worse_lo = -effect.hi if engine.policy.higher_is_better else effect.lo
        if verified and worse_lo <= 0:
            verified = False
            note = (
                f"the effect's interval [{effect.lo:+.4g}, {effect.hi:+.4g}] reaches zero once "
                "each side's own launch-to-launch spread is counted; more interleaved launches "
                f"of positions {lo.position} and {hi.position} would settle it"
            )
    return Step(
        axis=axis,
        position=hi.position,
        last_good=lo.config.as_dict(),
        first_bad=hi.config.as_dict(),
        last_good_ms=_interval(lo),
        first_bad_ms=_interval(hi),
        effect_ms=effect,
        verified=verified,
        verify_note=note,
        crosses_threshold=engine.straddles(c, threshold),
        commit=_commit_info(experiment, hi.config.get(COMMIT_AXIS))
        if axis == COMMIT_AXIS
        else None,
        confidence=c.confidence,
        verification=_verification(engine, views, lo.position, hi.position, len(kept_lo)),
        effect_basis=basis,
    )


def _unresolved(engine: EngineState, a: int, b: int) -> Unresolved:
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


def _judged(
    engine: EngineState, p: PointResult, threshold: float | None, named: set[int]
) -> tuple[Verdict, str | None]:
    """The verdict a row shows, against the threshold the report shows. A verdict reached
    mid-search (on fewer launches, against a threshold that later moved) that the launches
    shown now put on the other side is re-stated, with what it was; one the report's answer
    rests on (the named step's two sides) keeps its word and says the same."""
    verdict = p.verdict
    ends = (0, engine.bad_end)
    if threshold is None or p.estimate is None or verdict not in (Verdict.GOOD, Verdict.BAD):
        return verdict, None
    if p.position in ends:
        return verdict, None
    side = classify(p.estimate, threshold, engine.policy.higher_is_better)
    if side is verdict:
        return verdict, None
    if side is None:
        return verdict, (
            f"judged {verdict.value} during the search; on the launches and the noise shown its "
            f"interval reaches the threshold {threshold:.4g}"
        )
    if engine.policy.all_steps:
        return verdict, (
            f"judged {verdict.value} against the threshold of the level change searched there, "
            f"not the session's {threshold:.4g}"
        )
    if p.position in named:
        return verdict, (
            f"judged {verdict.value} during the search; its launches shown put it "
            f"{side.value} against the final threshold {threshold:.4g}"
        )
    return side, (
        f"judged {verdict.value} during the search (fewer launches, or a threshold that "
        f"moved); {side.value} against the final threshold {threshold:.4g}"
    )


def _path(
    engine: EngineState, threshold: float | None, evidence: dict[int, Evidence], named: set[int]
) -> tuple[PathPoint, ...]:
    points = []
    for p in engine.evaluated_points():
        verdict, judged = _judged(engine, p, threshold, named)
        ev = evidence.get(p.position)
        points.append(
            PathPoint(
                position=p.position,
                config=p.config.as_dict(),
                verdict=verdict,
                ms=_interval(p),
                reason=lead_with_error(p.reason)
                if p.reason and p.verdict is Verdict.SKIP
                else None,
                launch_values=tuple(engine.launches.get(p.position, [])),
                failures=tuple(lead_with_error(r) for r in engine.failures.get(p.position, [])),
                launches=ev.uses if ev else (),
                judged=judged,
            )
        )
    return tuple(points)


def build_report(
    store: Store,
    session_id: int,
    experiment: Experiment,
    engine: EngineState,
    outcome: Outcome,
    log_dir: str | None = None,
    seqs: tuple[int, int] | None = None,
) -> Report:
    """``seqs``: the session's launches [first, end) this engine ran (a session that searched
    inside a merge ran several engines; each one's report reads its own launches)."""
    threshold = outcome.threshold
    views = [
        v for v in session_launches(store, session_id) if seqs is None or seqs[0] <= v.seq < seqs[1]
    ]
    evidence = evidence_of(engine, engine_views(views, engine))
    chosen = outcome.culprit
    steps = tuple(_step(experiment, engine, threshold, c, evidence, views) for c in outcome.steps)
    culprit = _step(experiment, engine, threshold, chosen, evidence, views) if chosen else None
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
            _drift(store, session_id, experiment, engine, p, role, evidence[p].kept)
            for p, role in ((0, "good"), (last, "bad"))
            if p in evidence
        )
        if d
    )
    named = {p for c in outcome.steps for p in (c.last_good.position, c.first_bad.position)}
    path = _path(engine, threshold, evidence, named)
    if engine.fixed_threshold:
        basis = "given (--threshold-ms)"
    else:
        good_n = len(evidence[0].kept) if 0 in evidence else 0
        bad_n = len(evidence[last].kept) if last in evidence else 0
        basis = (
            f"the endpoints' geometric midpoint, from {counted(good_n, 'launch')} of the good "
            f"and {bad_n} of the bad endpoint"
        )
    by_id = {v.id: v for v in views}
    threshold_basis = basis if threshold is not None else ""
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
        threshold_basis=threshold_basis,
        # the search's own launches: `bisect explain`'s run with a profiler on
        startup=session_startup(
            [(v.flags, v.timings) for v in views if v.status == "ok" and v.purpose != "explain"]
        ),
        warnings=warnings(
            engine,
            outcome,
            experiment.metric.name,
            path,
            steps,
            evidence,
            by_id,
        ),
        search=("all steps" if engine.policy.all_steps else "crossing first")
        + (f"; {note}" if (note := getattr(engine, "prior_note", "")) else ""),
        seen=tuple(_seen(engine, a, b) for a, b in outcome.seen),
        creep=tuple(_creep(engine, a, b) for a, b in engine.creep(outcome.steps, outcome.seen)),
    )


def _seen(engine: EngineState, a: int, b: int) -> Unresolved:
    """A level change the crossing-first search saw between two measured points."""
    pa, pb = engine.point(a), engine.point(b)
    levels = " -> ".join(f"{p.estimate.median:.4g}" if p.estimate else "-" for p in (pa, pb))
    return Unresolved(
        pa.config.as_dict(),
        pb.config.as_dict(),
        f"the level moves {levels} between positions {a} and {b}; not searched "
        "(`--all-steps` searches it)",
    )


def _creep(engine: EngineState, a: int, b: int) -> Unresolved:
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
