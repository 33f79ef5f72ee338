"""`perfbisect bisect ...`: start, resume, status, log, report, reset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from perfbisect.cli.context import ctx_store, emit_json

if TYPE_CHECKING:
    from perfbisect.bisect.report_model import Report

app = typer.Typer(
    rich_markup_mode=None,  # help texts hold [env], ssh://[user@]host: not markup
    help="Search for the first configuration that crosses the threshold.",
    no_args_is_help=True,
)

JSON = typer.Option(False, "--json", help="Print one JSON object instead of the report.")
SESSION = typer.Argument(None, help="Session id or name (default: the newest).")
NO_WAIT = typer.Option(
    False,
    "--no-wait",
    help="Refuse at once when another session is measuring on one of this session's hosts "
    "(default: wait for it, saying for which session).",
)


def _host_wait(no_wait: bool) -> Any:
    """Waiting for a busy host is said on stderr, once per blocking session."""
    import sys

    from perfbisect.store.records import HostWait

    def say(message: str) -> None:
        print(f"perfbisect: {message}", file=sys.stderr, flush=True)

    return HostWait(wait=not no_wait, on_wait=say)


def _finish(report: Report, as_json: bool, plot: str | None = None) -> None:
    from perfbisect.cli.plot import write_plot
    from perfbisect.cli.render import render_report

    if plot:
        write_plot(report, plot)
    if as_json:
        emit_json(report.to_json())
    else:
        render_report(report)
        if report.why:
            from perfbisect.cli.render_explain import render_why

            render_why(report.why)
    raise typer.Exit(report.exit_code)


def _run(as_json: bool, call: Callable[[Any], Report]) -> Report:
    """Run a session with live progress on stderr, closed whatever happens."""
    from perfbisect.cli.progress import ConsoleProgress

    progress = ConsoleProgress()
    try:
        return call(progress)
    finally:
        progress.close()


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
    all_steps: bool = typer.Option(
        False,
        "--all-steps",
        help="Map every level change (each step searched and verified), not only the "
        "configuration that crosses the threshold.",
    ),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Launch everything anew: no search launch reused from earlier sessions of this "
        "experiment on this host (default: reused when at most 7 days old).",
    ),
    name: str | None = typer.Option(None, "--name", help="A name for the session."),
    slots: int | None = typer.Option(
        None,
        "--slots",
        min=1,
        help="Launches at once (default: [executor] slots): the search proposes that many "
        "points per round (k-ary search).",
    ),
    no_wait: bool = NO_WAIT,
    as_json: bool = JSON,
    plot: str | None = typer.Option(None, "--plot", help="Also write a PNG plot here."),
    no_explain: bool = typer.Option(
        False,
        "--no-explain",
        help="Do not explain a verified culprit at the end (default: `bisect explain` runs, "
        "[explain] after_start).",
    ),
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
    store = ctx_store(ctx)
    report = _run(
        as_json,
        lambda progress: start_session(
            store,
            experiment_path=config,
            good=good,
            bad=bad,
            options=SearchOptions(
                threshold_ms,
                min_launches,
                max_launches,
                all_steps,
                0.0 if fresh else 7.0,
                slots,
            ),
            name=name,
            progress=progress,
            wait=_host_wait(no_wait),
        ),
    )
    if not no_explain:
        from perfbisect.cli.render_explain import explain_after_start

        report = explain_after_start(store, report)
    _finish(report, as_json, plot)


@app.command()
def resume(
    ctx: typer.Context,
    session: str | None = SESSION,
    no_wait: bool = NO_WAIT,
    as_json: bool = JSON,
) -> None:
    """Continue an interrupted session without re-measuring finished steps."""
    from perfbisect.bisect.session import resume as resume_session

    store = ctx_store(ctx)
    wait = _host_wait(no_wait)
    _finish(_run(as_json, lambda progress: resume_session(store, session, progress, wait)), as_json)


@app.command()
def status(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Where a session stands: whose it is, its status, launches and time, each verdict."""
    from perfbisect.bisect.status import session_status
    from perfbisect.cli.render import console, render_rows
    from perfbisect.formatting import cfg, clock, num

    data = session_status(ctx_store(ctx), session)
    if as_json:
        emit_json(data)
        return
    out = console()
    name = f" ({data['name']})" if data["name"] else ""
    outcome = f" -> {data['outcome']}" if data["outcome"] else ""
    owner = data["owner"]
    out.print(
        f"session {data['session']}{escape(name)}: {data['status']}{outcome}; started "
        f"{data['created_at'][:19]} by "
        + (f"{escape(str(owner['user']))}, " if owner.get("user") else "")
        + f"pid {owner['pid']} on {escape(str(owner['host']))}; "
        f"{data['launches']} launches ({data['failed_launches']} failed), "
        f"{clock(data['stage_seconds'])} in stages"
        + (f", about {clock(data['estimate_left_s'])} left" if data["estimate_left_s"] else ""),
        soft_wrap=True,
    )
    if data["message"]:
        out.print(escape(data["message"]), soft_wrap=True)
    render_rows(
        "verdicts (latest per configuration)",
        ["configuration", "verdict", "median", "launches", "reason"],
        [
            (cfg(v["config"]), v["verdict"], num(v["median"]), v["launches"], v["reason"] or "")
            for v in data["verdicts"]
        ],
    )


@app.command()
def log(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Every launch of a session, in order, with its value or failure and log location."""
    from perfbisect.cli.render import render_rows
    from perfbisect.errors import lead_with_error
    from perfbisect.formatting import cfg, num
    from perfbisect.store.history import find_session, session_launches

    store = ctx_store(ctx)
    row = find_session(store, session)
    launches = session_launches(store, row.id)
    if as_json:
        emit_json([v.as_json() for v in launches])
        return
    render_rows(
        f"session {row.id} launches",
        ["#", "id", "purpose", "config", "value", "log"],
        [
            (
                v.seq,
                v.id,
                v.purpose,
                cfg(v.axes),
                num(v.value)
                if v.value is not None
                else f"{v.stage}: {lead_with_error(v.reason or 'failed')}",
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
    html: Path | None = typer.Option(
        None, "--html", help="Also write a self-contained HTML report here (no network needed)."
    ),
) -> None:
    """The final report of a finished session."""
    from perfbisect.errors import StoreError
    from perfbisect.store.history import find_session

    row = find_session(ctx_store(ctx), session)
    if html is not None:
        from perfbisect.html_report import session_html

        html.write_text(session_html(ctx_store(ctx), str(row.id)))
        typer.echo(f"wrote {html}", err=True)
    if row.result is None:
        raise StoreError(
            f"session {row.id} has no report yet (status {row.status}); "
            f"`perfbisect bisect resume {row.id}` finishes it"
        )
    from perfbisect.bisect.report_model import Report

    _finish(Report.from_json(row.result), as_json, plot)


@app.command()
def explain(
    ctx: typer.Context,
    session: str | None = SESSION,
    good: str | None = typer.Option(
        None, "--good", help="Explain this pair instead of a session's culprit."
    ),
    bad: str | None = typer.Option(None, "--bad", help="... with this bad configuration."),
    config: Path = typer.Option(
        Path("perfbisect.toml"), "-c", "--config", help="Experiment file (with --good/--bad)."
    ),
    launches: int | None = typer.Option(
        None,
        "--launches",
        min=1,
        help="Diagnostic launches a side (default: [explain] launches, 2).",
    ),
    as_json: bool = JSON,
) -> None:
    """Launch the culprit's last good and first bad configuration again with diagnostics on
    (profiler, NCCL logs) and say what differs, ranked by its share of the delta."""
    from perfbisect.cli.render_explain import explain_command

    explain_command(ctx_store(ctx), session, good, bad, config, launches, as_json)


@app.command()
def reset(ctx: typer.Context, session: str | None = SESSION) -> None:
    """End a session for good; its measurements stay in the history."""
    from perfbisect.store.history import find_session
    from perfbisect.store.records import reset_session

    store = ctx_store(ctx)
    row = find_session(store, session)
    reset_session(store, row.id)
    typer.echo(f"session {row.id} reset")
