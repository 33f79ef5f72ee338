"""Where a session stands, for every kind of session (single-axis, multi-axis, stacked,
ambiguous, not reproduced, interrupted, running): what ``bisect status`` shows.

Multi-axis sessions store only their two endpoints as the path (the engine adds configurations
as it goes), so a verdict's configuration is looked up by its fingerprint in the session's own
launches, never by position in the stored path.
"""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.report_model import Report
from perfbisect.store.database import Store
from perfbisect.store.history import find_session, session_launches, session_steps


def session_status(store: Store, ref: str | None) -> dict[str, Any]:
    row = find_session(store, ref)
    launches = session_launches(store, row.id)
    config_of = {v.fingerprint: v.axes for v in launches}
    steps = session_steps(store, row.id)
    latest: dict[str, Any] = {}  # the last verdict per configuration: one verdict each
    for s in steps:
        latest[s.fingerprint] = s
    report = Report.from_json(row.result) if row.result else None
    seconds = sum(
        float(v)
        for launch in launches
        for k, v in (launch.timings or {}).items()
        if k.endswith("_s") and isinstance(v, (int, float))
    )
    return {
        "session": row.id,
        "name": row.name,
        "status": row.status,
        "outcome": row.outcome,
        "owner": {"host": row.owner_host, "pid": row.owner_pid},
        "created_at": row.created_at.isoformat() + "Z",
        "good": row.good,
        "bad": row.bad,
        "path_length": report.path_length if report else len(row.path),
        "launches": len(launches),
        "failed_launches": sum(1 for v in launches if v.value is None),
        "stage_seconds": round(seconds, 1),
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
