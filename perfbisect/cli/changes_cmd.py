"""`perfbisect query changes`: the change points of watched series (Apache Otava), as a table,
JSON or an HTML trend page. Exit 1 when a change point past the threshold is new (first found
by this analysis, or with --since found since then), else 0."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer

from perfbisect.cli.context import ctx_store, emit_json


def changes(
    ctx: typer.Context,
    series: str | None = typer.Option(
        None, "--series", help="Series id, branch, or branch@host-class (default: every series)."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only change points first found since this date."
    ),
    threshold_pct: float | None = typer.Option(
        None, "--threshold-pct", min=0.0, help="Threshold (default: the series' watcher's)."
    ),
    html: Path | None = typer.Option(None, "--html", help="Also write an HTML trend page."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Change points of watched series: commits around each, levels, change, significance."""
    from perfbisect.cli.render import render_rows
    from perfbisect.errors import UsageError
    from perfbisect.store.watch import change_sessions, find_series
    from perfbisect.watch.analysis import analyze
    from perfbisect.watch.changes import TUNED

    start: datetime | None = None
    if since is not None:
        try:
            start = datetime.fromisoformat(since)
        except ValueError:
            raise UsageError(
                f"--since {since!r}: expected a date like 2026-11-30 or 2026-11-30T12:00"
            ) from None
    store = ctx_store(ctx)
    threshold = threshold_pct / 100.0 if threshold_pct is not None else None
    analyses = [analyze(store, s, TUNED, threshold) for s in find_series(store, series)]
    sessions = {a.series.id: change_sessions(store, a.series.id) for a in analyses}
    if html is not None:
        from perfbisect.watch.trend_html import write_trend

        for written in write_trend(store, analyses, sessions, html):
            typer.echo(f"wrote {written}", err=True)
    listed = [
        (a, c)
        for a in analyses
        for c in a.changes
        if start is None or c.stored.detected_at >= start
    ]
    alarm = any(c.crosses and (c.new or start is not None) for _, c in listed)
    by_change = {s.change_id: s for group in sessions.values() for s in group}
    if as_json:
        data = []
        for a, c in listed:
            item = {**c.as_json(), "branch": a.series.branch, "host_class": a.series.host_class}
            s = by_change.get(c.stored.id)
            item["bisection"] = (
                {"session": s.session_id, "status": s.status, "first_bad": s.first_bad}
                if s
                else None
            )
            data.append(item)
        emit_json(data)
    else:
        render_rows(
            "change points",
            [
                "id",
                "series",
                "before",
                "after",
                "level before",
                "level after",
                "change",
                "p",
                "past threshold",
                "bisection",
            ],
            [
                (
                    c.stored.id,
                    a.series.label,
                    c.stored.commit_before[:12],
                    c.stored.commit_after[:12],
                    f"{c.change.before.mean:.4g} [{c.change.before.lo:.4g}, "
                    f"{c.change.before.hi:.4g}]",
                    f"{c.change.after.mean:.4g} [{c.change.after.lo:.4g}, {c.change.after.hi:.4g}]",
                    f"{c.change.rel_change:+.1%}",
                    f"{c.change.pvalue:.2g}",
                    ("yes" if c.crosses else "no") + (" (new)" if c.new else ""),
                    _bisection(by_change.get(c.stored.id)),
                )
                for a, c in listed
            ],
        )
    raise typer.Exit(1 if alarm else 0)


def _bisection(session: object) -> str:
    from perfbisect.store.watch import ChangeSession

    if not isinstance(session, ChangeSession):
        return "-"
    found = f", first bad {session.first_bad[:12]}" if session.first_bad else ""
    return f"session {session.session_id} ({session.status}{found})"
