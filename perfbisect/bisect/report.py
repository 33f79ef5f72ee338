"""The session report: the JSON contract of `bisect start/resume/report`, plus drift evidence."""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.engine import Culprit, Engine, Outcome, PointResult
from perfbisect.bisect.stats import difference, median
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.experiment import Experiment
from perfbisect.store.database import Store
from perfbisect.store.history import diff_snapshots, history, launch_with_samples

DRIFT_MIN_EFFECT = 0.05


def _ms(point: PointResult) -> dict[str, Any] | None:
    est = point.estimate
    if est is None:
        return None
    return {"median": est.median, "ci": [est.lo, est.hi], "launches": est.n}


def _commit_info(experiment: Experiment, sha: str | None) -> dict[str, str] | None:
    if sha is None or experiment.target.repo is None:
        return None
    from perfbisect.targets.gitrepo import GitRepo

    try:
        info = GitRepo(experiment.target.repo).info(sha)
    except Exception:  # the repository may have moved since the session ran
        return None
    return {"sha": info.sha, "subject": info.subject, "author": info.author, "date": info.date}


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


def _step_json(experiment: Experiment, c: Culprit) -> dict[str, Any]:
    axis = _axis_of_step(c.last_good.config, c.first_bad.config)
    step: dict[str, Any] = {
        "axis": axis,
        "last_good": c.last_good.config.as_dict(),
        "first_bad": c.first_bad.config.as_dict(),
        "last_good_ms": _ms(c.last_good),
        "first_bad_ms": _ms(c.first_bad),
        "effect_ms": c.effect.as_json(),
        "verified": c.verified,
        "position": c.first_bad.position,
    }
    if axis == COMMIT_AXIS:
        step["commit"] = _commit_info(experiment, c.first_bad.config.get(COMMIT_AXIS))
    return step


def build_report(
    store: Store, session_id: int, experiment: Experiment, engine: Engine, outcome: Outcome
) -> dict[str, Any]:
    culprit = _step_json(experiment, outcome.culprit) if outcome.culprit else None
    steps = [_step_json(experiment, c) for c in outcome.steps]
    attribution = [
        {
            "axes": list(row.axes),
            "config": engine.path[row.position].as_dict(),
            "verdict": row.verdict.value,
            "effect_ms": row.effect,
        }
        for row in getattr(engine, "attribution", [])
    ]
    last = len(engine.path) - 1
    drift = [
        d
        for d in (
            _drift(store, session_id, experiment, engine, 0, "good"),
            _drift(store, session_id, experiment, engine, last, "bad"),
        )
        if d
    ]
    return {
        "session": session_id,
        "status": outcome.status.value,
        "message": outcome.message,
        "metric": experiment.metric.name,
        "higher_is_better": experiment.metric.higher_is_better,
        "threshold_ms": outcome.threshold,
        "culprit": culprit,
        "steps": steps,
        # Multi-axis searches: which axis sets were switched, and the culprit of each axis.
        "attribution": attribution,
        "culprit_axes": [list(axes) for axes in getattr(engine, "culprit_sets", [])],
        "culprits": steps,
        "unresolved": [
            [engine.path[a].as_dict(), engine.path[b].as_dict()] for a, b in outcome.unresolved
        ],
        "evaluations": outcome.evaluations,
        "launches": outcome.launches,
        "noise_rel_sd": engine.rel_sd(),
        "path_length": len(engine.path),
        "path": [
            {
                "position": p.position,
                "config": p.config.as_dict(),
                "verdict": p.verdict.value,
                "ms": _ms(p),
                "reason": p.reason,
                "launch_values": engine.launches.get(p.position, []),
            }
            for p in engine.evaluated_points()
        ],
        "drift": drift,
    }
