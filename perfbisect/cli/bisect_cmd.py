"""`perfbisect bisect ...`: start, resume, status, log, report, reset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from perfbisect.cli.context import ctx_store, emit_json

app = typer.Typer(
    help="Search for the first configuration that crosses the threshold.", no_args_is_help=True
)

JSON = typer.Option(False, "--json", help="Print one JSON object instead of the report.")
SESSION = typer.Argument(None, help="Session id or name (default: the newest).")


def _finish(report: dict[str, Any], as_json: bool, plot: str | None = None) -> None:
    from perfbisect.bisect.session import outcome_exit_code
    from perfbisect.cli.render import render_report, write_plot

    if plot:
        write_plot(report, plot)
    if as_json:
        emit_json(report)
    else:
        render_report(report)
    raise typer.Exit(outcome_exit_code(report))


def _progress(as_json: bool) -> Any:
    from perfbisect.cli.render import ConsoleProgress

    return ConsoleProgress()


@app.command()
def start(
    ctx: typer.Context,
    good: str = typer.Option(
        ..., "--good", help="Good configuration: 'v1.2' or 'commit=v1.2,flag=a'."
    ),
    bad: str = typer.Option(..., "--bad", help="Bad configuration, same syntax."),
    config: Path = typer.Option(Path("perfbisect.toml"), "-c", "--config", help="Experiment file."),
    threshold_ms: float | None = typer.Option(
        None, "--threshold-ms", help="Fixed threshold (default: midpoint of endpoints)."
    ),
    min_launches: int = typer.Option(
        1, "--min-launches", min=1, help="Launches per point to start with."
    ),
    max_launches: int = typer.Option(5, "--max-launches", min=1, help="Most launches per point."),
    name: str | None = typer.Option(None, "--name", help="A name for the session."),
    as_json: bool = JSON,
    plot: str | None = typer.Option(None, "--plot", help="Also write a PNG plot here."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print what the first launch would run on the host; run nothing."
    ),
) -> None:
    """Reproduce the endpoints, bisect between them, verify the culprit."""
    if dry_run:
        from perfbisect.bisect.session import dry_run as plan
        from perfbisect.cli.render import render_dry_run

        result = plan(experiment_path=config, good=good, bad=bad)
        emit_json(result) if as_json else render_dry_run(result)
        return
    from perfbisect.bisect.session import SearchOptions
    from perfbisect.bisect.session import start as start_session
    from perfbisect.errors import UsageError

    if max_launches < min_launches:
        raise UsageError(
            f"--max-launches ({max_launches}) is below --min-launches ({min_launches})"
        )
    report = start_session(
        ctx_store(ctx),
        experiment_path=config,
        good=good,
        bad=bad,
        options=SearchOptions(threshold_ms, min_launches, max_launches),
        name=name,
        progress=_progress(as_json),
    )
    _finish(report, as_json, plot)


@app.command()
def resume(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Continue an interrupted session without re-measuring finished steps."""
    from perfbisect.bisect.session import resume as resume_session

    _finish(resume_session(ctx_store(ctx), session, progress=_progress(as_json)), as_json)


@app.command()
def status(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Where a session stands: status, steps done, the current bracket."""
    from perfbisect.cli.render import render_rows
    from perfbisect.store.history import find_session, session_steps

    store = ctx_store(ctx)
    row = find_session(store, session)
    steps = session_steps(store, row.id)
    data = {
        "session": row.id,
        "name": row.name,
        "status": row.status,
        "outcome": row.outcome,
        "created_at": row.created_at.isoformat() + "Z",
        "good": row.good,
        "bad": row.bad,
        "path_length": len(row.path),
        "steps": [
            {
                "position": s.position,
                "config": row.path[s.position],
                "verdict": s.verdict,
                "median": s.median,
                "ci": [s.ci_lo, s.ci_hi],
                "launches": s.n_launches,
                "reason": s.reason,
            }
            for s in steps
        ],
    }
    if as_json:
        emit_json(data)
        return
    typer.echo(
        f"session {row.id}{' (' + row.name + ')' if row.name else ''}: {row.status}"
        f"{' -> ' + row.outcome if row.outcome else ''}; {len(steps)} verdicts on a path of "
        f"{len(row.path)} configurations"
    )
    render_rows(
        "verdicts",
        ["pos", "verdict", "median", "launches", "reason"],
        [
            (
                s.position,
                s.verdict,
                f"{s.median:.4g}" if s.median is not None else "-",
                s.n_launches,
                (s.reason or "")[:60],
            )
            for s in steps
        ],
    )


@app.command()
def log(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Every launch of a session, in order, with its value or failure and log location."""
    from perfbisect.cli.render import render_rows
    from perfbisect.store.history import find_session, session_launches

    store = ctx_store(ctx)
    row = find_session(store, session)
    launches = session_launches(store, row.id)
    if as_json:
        emit_json([v.as_json() for v in launches])
        return
    render_rows(
        f"session {row.id} launches",
        ["#", "id", "pos", "purpose", "config", "value", "log"],
        [
            (
                v.seq,
                v.id,
                v.position,
                v.purpose,
                ",".join(f"{k}={str(x)[:10]}" for k, x in v.axes.items()),
                f"{v.value:.4g}" if v.value is not None else f"{v.stage}: {(v.reason or '')[:50]}",
                v.log_path,
            )
            for v in launches
        ],
    )


@app.command()
def report(
    ctx: typer.Context,
    session: str | None = SESSION,
    as_json: bool = JSON,
    plot: str | None = typer.Option(None, "--plot", help="Write a PNG plot here."),
) -> None:
    """The final report of a finished session."""
    from perfbisect.errors import StoreError
    from perfbisect.store.history import find_session

    row = find_session(ctx_store(ctx), session)
    if row.result is None:
        raise StoreError(
            f"session {row.id} has no report yet (status {row.status}); "
            f"`perfbisect bisect resume {row.id}` finishes it"
        )
    _finish(dict(row.result), as_json, plot)


@app.command()
def reset(ctx: typer.Context, session: str | None = SESSION) -> None:
    """End a session for good; its measurements stay in the history."""
    from perfbisect.store.history import find_session
    from perfbisect.store.records import reset_session

    store = ctx_store(ctx)
    row = find_session(store, session)
    reset_session(store, row.id)
    typer.echo(f"session {row.id} reset")
