"""Where a session stands, for every kind of session (single-axis, multi-axis, stacked,
ambiguous, not reproduced, interrupted, running): what ``bisect status`` shows.

Multi-axis sessions store only their two endpoints as the path (the engine adds configurations
as it goes), so a verdict's configuration is looked up by its fingerprint in the session's own
launches, never by position in the stored path.
"""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.driver import stage_seconds
from perfbisect.bisect.report_model import Report
from perfbisect.bisect.session import expected_steps
from perfbisect.bisect.values import Purpose
from perfbisect.store.database import Store
from perfbisect.store.history import find_session, session_launches, session_steps


def session_status(store: Store, ref: str | None) -> dict[str, Any]:
    row = find_session(store, ref)
    every = session_launches(store, row.id)
    # `bisect explain`'s diagnostic launches are counted apart: the search's launches are
    # the ones the report's numbers rest on.
    launches = [v for v in every if v.purpose != Purpose.EXPLAIN.value]
    config_of = {v.fingerprint: v.axes for v in launches}
    steps = session_steps(store, row.id)
    latest: dict[str, Any] = {}  # the last verdict per configuration: one verdict each
    for s in steps:
        latest[s.fingerprint] = s
    report = Report.from_json(row.result) if row.result else None
    seconds = stage_seconds(launches)
    measured = [v for v in launches if v.timings]
    per_launch = seconds / len(measured) if measured else None
    expected = expected_steps(len(row.path)) if not row.params.get("plans") else None
    left = (
        max(0, expected - len(latest)) * per_launch
        if row.status == "running" and expected is not None and per_launch is not None
        else None
    )
    return {
        "session": row.id,
        "name": row.name,
        "status": row.status,
        "outcome": row.outcome,
        "owner": {
            "user": (row.params or {}).get("user"),
            "host": row.owner_host,
            "pid": row.owner_pid,
        },
        "hosts": (row.params or {}).get("hosts", []),  # where it measures (the host locks)
        "created_at": row.created_at.isoformat() + "Z",
        "good": row.good,
        "bad": row.bad,
        "path_length": report.path_length if report else len(row.path),
        "launches": len(launches),
        "explain_launches": len(every) - len(launches),
        "failed_launches": sum(1 for v in launches if v.value is None),
        "stage_seconds": round(seconds, 1),
        "seconds_per_launch": round(per_launch, 1) if per_launch is not None else None,
        # a rough estimate for a running single-axis session: configurations still expected
        # to be judged x the mean launch so far
        "estimate_left_s": round(left) if left is not None else None,
        "threshold_ms": report.threshold_ms if report else row.params.get("threshold"),
        "culprit": report.culprit.to_json() if report and report.culprit else None,
        "message": report.message if report else None,
        "verdicts": [
            {
                "config": config_of.get(s.fingerprint, {}),
                "verdict": s.verdict,
                "median": s.median,
                "ci": [s.ci_lo, s.ci_hi],
                "launches": s.n_launches,
                "reason": s.reason,
            }
            for s in latest.values()
        ],
    }
