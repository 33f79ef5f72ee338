"""Where a session stands, for every kind of session (single-axis, multi-axis, stacked,
ambiguous, not reproduced, interrupted, running): what ``bisect status`` and ``bisect log``
show.

Both read the session's report: the stored one of a finished session, else the provisional
one (its stored launches replayed into the engine). So a configuration shows the same
verdict, median, launch count and launches set aside in status, log, report and HTML.
"""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.report.report_model import MergeDescent, Report
from perfbisect.bisect.session.driver import stage_seconds
from perfbisect.bisect.session.session import expected_steps
from perfbisect.bisect.values import Purpose
from perfbisect.errors import PerfbisectError
from perfbisect.store.database import Store
from perfbisect.store.history import find_session, session_launches
from perfbisect.store.models import SessionRow


def session_report(store: Store, row: SessionRow) -> Report:
    """The finished session's stored report, or an unfinished one's provisional report."""
    if row.result is not None:
        return Report.from_json(row.result)
    from perfbisect.bisect.session.provisional import provisional_report

    return provisional_report(store, row)


def _report_or_why(store: Store, row: SessionRow) -> tuple[Report | None, str | None]:
    try:
        return session_report(store, row), None
    except PerfbisectError as exc:  # e.g. the experiment can no longer be read
        return None, f"no provisional report: {exc}"


def session_status(store: Store, ref: str | None) -> dict[str, Any]:
    row = find_session(store, ref)
    every = session_launches(store, row.id)
    # `bisect explain`'s diagnostic launches are counted apart: the search's launches are
    # the ones the report's numbers rest on.
    launches = [v for v in every if v.purpose != Purpose.EXPLAIN.value]
    report, why = _report_or_why(store, row)
    seconds = stage_seconds(launches)
    measured = [v for v in launches if v.timings]
    per_launch = seconds / len(measured) if measured else None
    judged = len(report.path) if report else 0
    expected = expected_steps(len(row.path)) if not row.params.get("plans") else None
    left = (
        max(0, expected - judged) * per_launch
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
        # the culprit is a merge: the commit inside it that crosses, and each branch searched
        "inside_culprit": report.inside_culprit.to_json()
        if report and report.inside_culprit
        else None,
        "descent": [d.to_json() for d in report.descent] if report else [],
        "provisional": report is not None and report.remaining is not None,
        "remaining": report.remaining if report else why,
        "message": report.message if report else None,
        # one row per configuration, the report's: verdict, median, launches kept and set aside
        "verdicts": [
            {
                "position": p.position,
                "config": p.config,
                "verdict": p.verdict.value,
                "median": p.ms.median if p.ms else None,
                "ci": [p.ms.lo, p.ms.hi] if p.ms else None,
                "launches": p.ms.launches if p.ms else 0,
                "set_aside": len(p.set_aside),
                "note": p.note,
                "reason": p.reason,
            }
            for p in (report.path if report else ())
        ],
        "legend": report.legend if report else {},
    }


def session_log(
    store: Store, ref: str | None
) -> tuple[int, list[dict[str, Any]], tuple[MergeDescent, ...]]:
    """Every launch of a session, in order, each with its configuration's verdict and whether
    it counts in that configuration's numbers (kept) or was set aside, and why; and the
    searches inside a merge, whose launches are among them (the report's ``descent``)."""
    row = find_session(store, ref)
    launches = session_launches(store, row.id)
    report, _ = _report_or_why(store, row)
    use_of: dict[int, tuple[str, bool, str | None, float | None]] = {}
    verdict_of: dict[str, str] = {}
    for p in report.path if report else ():
        verdict_of[_key(p.config)] = p.verdict.value
        for u in p.launches:
            if u.launch_id is not None:
                use_of[u.launch_id] = (p.verdict.value, u.kept, u.why, u.slow)
    out = []
    for v in launches:
        verdict, kept, why, slow = use_of.get(
            v.id, (verdict_of.get(_key(v.axes)), None, None, None)
        )
        out.append(
            {
                **v.as_json(),
                "seq": v.seq,
                "verdict": verdict,
                "kept": kept,
                "set_aside": why,
                # the model's posterior probability that this launch ran slow (None: rules)
                "slow": slow,
            }
        )
    return row.id, out, report.descent if report else ()


def _key(config: dict[str, Any]) -> str:
    return repr(sorted(config.items()))
