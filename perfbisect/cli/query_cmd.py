"""`perfbisect query ...`: history, sessions, show, compare."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import typer

from perfbisect.cli.context import ctx_store, emit_json, output_file, write_output

app = typer.Typer(
    rich_markup_mode=None,  # help texts hold [env], ssh://[user@]host: not markup
    help="Ask the history database what was measured, when, and on what.",
    no_args_is_help=True,
)
JSON = typer.Option(False, "--json", help="Print JSON.")
FULL_HASHES = typer.Option(
    False, "--full-hashes", help="Whole 40-digit commit hashes in the table (JSON has them)."
)


def _since(text: str | None, option: str = "--since") -> datetime | None:
    if text is None:
        return None
    from perfbisect.errors import UsageError

    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: expected a date like 2026-11-30 or 2026-11-30T12:00"
        ) from None


@app.command("history")
def history_cmd(
    ctx: typer.Context,
    config: str | None = typer.Option(
        None,
        "--config",
        metavar="<axis=value,...>",
        help="Filter: axis=value pairs (commit prefix ok).",
    ),
    metric: str | None = typer.Option(
        None, "--metric", metavar="<name>", help="Filter by metric name."
    ),
    since: str | None = typer.Option(
        None, "--since", metavar="<date>", help="Only launches since this date (UTC)."
    ),
    until: str | None = typer.Option(
        None, "--until", metavar="<date>", help="Only launches until this date (UTC)."
    ),
    limit: int = typer.Option(
        200, "--limit", min=0, metavar="<n>", help="Only the newest N launches (0: all of them)."
    ),
    as_json: bool = JSON,
    full_hashes: bool = FULL_HASHES,
) -> None:
    """The stored launches matching the filters (the newest --limit of them), oldest first."""
    from perfbisect.cli.render import render_rows
    from perfbisect.config import BUILTIN_AXES, parse_spec
    from perfbisect.errors import UsageError, lead_with_error
    from perfbisect.formatting import cfg, num, stage_times
    from perfbisect.store.history import history, known_axes

    store = ctx_store(ctx, create=False)
    axes = parse_spec(config) if config else None
    if axes:
        known = known_axes(store) | set(BUILTIN_AXES)
        unknown = sorted(set(axes) - known)
        if unknown:  # a misspelt axis would match nothing: an empty table that looks like news
            raise UsageError(
                f"--config: unknown axis {unknown[0]!r} (known: {', '.join(sorted(known))})"
            )
    end = _since(until, "--until")
    if end is not None and until is not None and len(until) == 10:  # a date: the whole day
        end += timedelta(days=1, microseconds=-1)
    views = history(
        store,
        axes=axes,
        metric=metric,
        since=_since(since, "--since"),
        until=end,
        limit=limit or None,
    )
    if as_json:
        emit_json([v.as_json() for v in views])
        return
    render_rows(
        "history",
        ["id", "when", "session", "config", "metric", "value", "samples", "stages", "status"],
        [
            (
                v.id,
                v.started_at.isoformat(sep=" ", timespec="seconds") + "Z",  # wraps at the space
                v.session_id,
                cfg(v.axes),
                v.metric,
                num(v.value),
                v.n_samples,
                stage_times(v.timings),
                v.status
                if v.status == "ok"
                else f"{v.stage}: {lead_with_error(v.reason or 'failed')}",
            )
            for v in views
        ],
        full_hashes=full_hashes,
    )


@app.command()
def sessions(ctx: typer.Context, as_json: bool = JSON, full_hashes: bool = FULL_HASHES) -> None:
    """All bisect sessions and what they found."""
    from perfbisect.cli.render import render_rows
    from perfbisect.formatting import cfg
    from perfbisect.store.history import list_sessions

    rows = list_sessions(ctx_store(ctx, create=False))
    data: list[dict[str, Any]] = []
    for row in rows:
        culprit = (row.result or {}).get("culprit") or {}
        data.append(
            {
                "session": row.id,
                "name": row.name,
                "status": row.status,
                "outcome": row.outcome,
                "created_at": row.created_at.isoformat() + "Z",
                "good": row.good,
                "bad": row.bad,
                "first_bad": culprit.get("first_bad"),
            }
        )
    if as_json:
        emit_json(data)
        return
    render_rows(
        "sessions",
        ["id", "name", "created", "status", "outcome", "first bad"],
        [
            (
                d["session"],
                d["name"],
                d["created_at"][:19] + "Z",
                d["status"],
                d["outcome"],
                cfg(d["first_bad"] or {}),
            )
            for d in data
        ],
        full_hashes=full_hashes,
    )


def _launch_summary(store: Any, launch_id: int) -> dict[str, Any]:
    from perfbisect.samples import sample_stats
    from perfbisect.store.history import launch_with_samples

    view, samples, snapshot = launch_with_samples(store, launch_id)
    # What the target noted at the time (graph fraction, accept length, ...) and the
    # instability warnings recomputed from the samples.
    stats = sample_stats(samples, view.flags)
    return {"launch": view.as_json(), "stats": stats, "samples": samples, "snapshot": snapshot}


@app.command()
def show(
    ctx: typer.Context,
    launch_id: int = typer.Argument(..., help="Launch id (see history)."),
    as_json: bool = JSON,
) -> None:
    """One launch: its samples' statistics, timings, log location and environment snapshot."""
    import json

    from perfbisect.formatting import cfg, stage_times
    from perfbisect.store.history import flatten

    data = _launch_summary(ctx_store(ctx, create=False), launch_id)
    if as_json:
        emit_json(data)
        return
    launch, stats = data["launch"], data["stats"]
    typer.echo(
        f"launch {launch['id']} (session {launch['session']}, {launch['purpose']}) "
        f"{launch['started_at']}"
    )
    typer.echo(f"config: {cfg(launch['config'])}")
    typer.echo(
        f"status: {launch['status']}"
        + (f" ({launch['stage']}: {launch['reason']})" if launch["status"] != "ok" else "")
    )
    if stats["n"]:
        typer.echo(
            f"{launch['metric']}: median {stats['median']:.4g}, p10 {stats['p10']:.4g}, "
            f"p90 {stats['p90']:.4g}, n={stats['n']}"
        )
        for flag in stats["flags"]:
            typer.echo(f"warning: {flag}")
    typer.echo(f"timings: {stage_times(launch['timings'] or {})}")
    typer.echo(f"log: {launch['log']}")
    for key, value in flatten(data["snapshot"]).items():
        # JSON for what is not text (lists, None, booleans), never a Python repr
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        typer.echo(f"  {key} = {shown}")


@app.command()
def compare(
    ctx: typer.Context,
    launch_a: int = typer.Argument(..., help="The first launch's id (see history): a."),
    launch_b: int = typer.Argument(
        ..., help="The second launch's id: b, compared with a (ratio b/a)."
    ),
    as_json: bool = JSON,
    html: Path | None = typer.Option(
        None, "--html", metavar="<file.html>", help="Also write a self-contained HTML page."
    ),
    full_hashes: bool = FULL_HASHES,
) -> None:
    """Two launches side by side, and the differences of their environment snapshots."""
    from perfbisect.cli.render import render_rows
    from perfbisect.store.history import diff_snapshots

    html = output_file(html, "--html")
    store = ctx_store(ctx, create=False)
    if html is not None:
        from perfbisect.html_report import compare_html

        write_output(html, compare_html(store, launch_a, launch_b), "--html")
    a, b = _launch_summary(store, launch_a), _launch_summary(store, launch_b)
    env = [{"key": k, "a": x, "b": y} for k, x, y in diff_snapshots(a["snapshot"], b["snapshot"])]
    keys = ["n", "median", "p10", "p90", "min", "max"]
    data = {
        "a": {"launch": a["launch"], "stats": a["stats"]},
        "b": {"launch": b["launch"], "stats": b["stats"]},
        "env_diff": env,
    }
    sa, sb = a["stats"], b["stats"]
    if sa.get("median") and sb.get("median") is not None:
        data["ratio"] = sb["median"] / sa["median"]
    if as_json:
        emit_json(data)
        return
    render_rows(
        f"launch {launch_a} vs {launch_b}",
        ["", str(launch_a), str(launch_b)],
        [("config", a["launch"]["config"], b["launch"]["config"])]
        + [(k, sa.get(k), sb.get(k)) for k in keys],
        full_hashes=full_hashes,
    )
    if "ratio" in data:
        typer.echo(f"ratio b/a: {data['ratio']:.3f}")
    if env:
        render_rows(
            "environment differences",
            ["key", str(launch_a), str(launch_b)],
            [(e["key"], e["a"], e["b"]) for e in env],
            full_hashes=full_hashes,
        )
    else:
        typer.echo("environment snapshots: identical")


from perfbisect.cli.changes_cmd import changes  # noqa: E402  (its own module: continuous mode)

app.command("changes")(changes)
