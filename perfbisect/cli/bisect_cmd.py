"""`perfbisect bisect ...`: start, resume, status, log, report, reset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from perfbisect.cli.context import ctx_store, emit_json, output_file, write_output

if TYPE_CHECKING:
    from perfbisect.bisect.report.report_model import Report

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


def _finish(report: Report, as_json: bool, plot: Path | None = None) -> None:
    from perfbisect.cli.plot import write_plot
    from perfbisect.cli.render import render_report

    if plot is not None:
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
    good: str | None = typer.Option(
        None,
        "--good",
        metavar="<spec>",
        help="Good configuration: 'v1.2' or 'commit=v1.2,flag=a'.",
    ),
    bad: str | None = typer.Option(
        None, "--bad", metavar="<spec>", help="Bad configuration, same syntax."
    ),
    from_change: int | None = typer.Option(
        None,
        "--from-change",
        metavar="<id>",
        help="Bisect a change point of a watched series (see `query changes`) instead of "
        "--good/--bad: from the last commit before it to the first after it.",
    ),
    config: Path = typer.Option(
        Path("perfbisect.toml"), "-c", "--config", metavar="<file>", help="Experiment file."
    ),
    threshold_ms: float | None = typer.Option(
        None,
        "--threshold-ms",
        metavar="<ms>",
        help="Fixed threshold, above 0 (default: the endpoints' geometric midpoint).",
    ),
    min_launches: int = typer.Option(
        1, "--min-launches", min=1, metavar="<n>", help="Launches per point to start with."
    ),
    max_launches: int = typer.Option(
        5, "--max-launches", min=1, metavar="<n>", help="Most launches per point."
    ),
    all_steps: bool = typer.Option(
        False,
        "--all-steps",
        help="Map every level change (each step searched and verified), not only the "
        "configuration that crosses the threshold.",
    ),
    no_descend_merges: bool = typer.Option(
        False,
        "--no-descend-merges",
        help="When the crossing is a merge commit, stop there instead of searching the commits "
        "its branch brought in (merge base to the merge's second parent).",
    ),
    engine: str = typer.Option(
        "model",
        "--engine",
        metavar="rules|model",
        help="The search engine: 'model' (default: one posterior decides every launch and the "
        "stop: crossing first, --all-steps and several axes) or 'rules' (the earlier rule "
        "engine, kept for comparison).",
    ),
    confidence: float = typer.Option(
        0.99,
        "--confidence",
        min=0.5,
        max=0.9999,
        metavar="<p>",
        help="With --engine model: the confidence a named step must hold. The stop rule asks "
        "the posterior for ten times these odds (0.99: 99.9%), since claims stopped at the "
        "target itself were right less often than they said.",
    ),
    prior_path: list[str] = typer.Option(
        [],
        "--prior-path",
        metavar="<repo-path>",
        help="With --engine model: commits that touch this path (repeatable; relative to the "
        "repository's top, e.g. the verify's code) hold half of the search's prior, so it "
        "looks there first; a wrong guess costs about one launch.",
    ),
    prior_area: list[str] = typer.Option(
        [],
        "--prior-area",
        metavar="verify|cuda-graph|distributed",
        help="With --engine model: commits that change a file on this area of the server's "
        "code (verify: the speculative/verify path; by the file names `bisect explain` flags) "
        "hold half of the search's prior, with --prior-path's.",
    ),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Launch everything anew: no search launch reused from earlier sessions of this "
        "experiment on this host (default: reused when at most 7 days old).",
    ),
    name: str | None = typer.Option(
        None, "--name", metavar="<name>", help="A name for the session."
    ),
    slots: int | None = typer.Option(
        None,
        "--slots",
        min=1,
        metavar="<n>",
        help="Launches at once (default: [executor] slots): the search proposes up to that "
        "many points per round (k-ary search).",
    ),
    no_wait: bool = NO_WAIT,
    ssh_config: str | None = typer.Option(
        None,
        "--ssh-config",
        metavar="<file>",
        help="ssh config file for the hosts instead of ~/.ssh/config (overrides [host] "
        "ssh_config).",
    ),
    accept_new_host_key: bool = typer.Option(
        False,
        "--accept-new-host-key",
        help="Trust (and save) a host's unknown key, saying so (as [host] accept_new_host_key "
        "= true); a changed key is always refused.",
    ),
    as_json: bool = JSON,
    plot: Path | None = typer.Option(
        None, "--plot", metavar="<file.png>", help="Also write a PNG plot here."
    ),
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
    from perfbisect.bisect.session.session import HostOptions
    from perfbisect.errors import UsageError

    if threshold_ms is not None and not threshold_ms > 0:
        raise UsageError(f"--threshold-ms {threshold_ms:g}: must be above 0 ms")
    if engine not in ("rules", "model"):
        raise UsageError(f"--engine {engine}: must be 'rules' or 'model'")
    host = HostOptions(ssh_config, accept_new_host_key)
    if from_change is not None or good is None or bad is None:
        from perfbisect.cli.watch_cmd import endpoints_from_change

        good, bad, threshold_ms = endpoints_from_change(
            ctx, from_change, good, bad, config, threshold_ms
        )
    if dry_run:
        from perfbisect.bisect.session.session import dry_run as plan
        from perfbisect.cli.render import render_dry_run

        result = plan(experiment_path=config, good=good, bad=bad, host=host)
        emit_json(result) if as_json else render_dry_run(result)
        return
    from perfbisect.bisect.session.session import SearchOptions
    from perfbisect.bisect.session.session import start as start_session

    if max_launches < min_launches:
        raise UsageError(
            f"--max-launches ({max_launches}) is below --min-launches ({min_launches})"
        )
    plot = output_file(plot, "--plot")  # checked before the session, not after its hours
    store = ctx_store(ctx)
    from perfbisect.cli.render_explain import explain_after_start

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
                engine,
                confidence,
                descend_merges=not no_descend_merges,
                prior_paths=tuple(prior_path),
                prior_areas=tuple(prior_area),
            ),
            name=name,
            progress=progress,
            wait=_host_wait(no_wait),
            host=host,
            from_change=from_change,
            after=None if no_explain else lambda found: explain_after_start(store, found),
        ),
    )
    _finish(report, as_json, plot)


@app.command()
def resume(
    ctx: typer.Context,
    session: str | None = SESSION,
    no_wait: bool = NO_WAIT,
    as_json: bool = JSON,
) -> None:
    """Continue an interrupted session without re-measuring finished steps (not a finished
    or a reset one)."""
    from perfbisect.bisect.session.session import resume as resume_session

    store = ctx_store(ctx, create=False)
    wait = _host_wait(no_wait)
    _finish(_run(as_json, lambda progress: resume_session(store, session, progress, wait)), as_json)


@app.command()
def status(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Where a session stands: whose it is, its status, launches and time, each verdict."""
    from perfbisect.bisect.session.session import resume_command
    from perfbisect.bisect.session.status import session_status
    from perfbisect.cli.render import render_status

    store = ctx_store(ctx, create=False)
    data = session_status(store, session)
    if as_json:
        emit_json(data)
        return
    resume = resume_command(store, data["session"]) if data["status"] == "interrupted" else None
    render_status(data, resume)


@app.command()
def log(ctx: typer.Context, session: str | None = SESSION, as_json: bool = JSON) -> None:
    """Every launch of a session, in order: its value or failure, whether it counts in its
    configuration's numbers or was set aside (and why), the verdict, the log location."""
    from perfbisect.bisect.session.status import session_log
    from perfbisect.cli.render import render_log

    session_id, entries, descent = session_log(ctx_store(ctx, create=False), session)
    if as_json:
        emit_json(entries)
        return
    render_log(session_id, entries, descent)


@app.command()
def report(
    ctx: typer.Context,
    session: str | None = SESSION,
    as_json: bool = JSON,
    plot: Path | None = typer.Option(
        None, "--plot", metavar="<file.png>", help="Write a PNG plot here."
    ),
    html: Path | None = typer.Option(
        None,
        "--html",
        metavar="<file.html>",
        help="Also write a self-contained HTML report here (no network needed).",
    ),
) -> None:
    """The report of a session: the final one of a finished session, else a provisional one
    (what its launches show so far; exit code 5)."""
    from perfbisect.bisect.session.status import session_report
    from perfbisect.errors import StoreError
    from perfbisect.store.history import find_session

    html, plot = output_file(html, "--html"), output_file(plot, "--plot")
    store = ctx_store(ctx, create=False)
    row = find_session(store, session)
    if html is not None:
        from perfbisect.html_report import session_html

        write_output(html, session_html(store, str(row.id)), "--html")
    if row.result is None and row.status == "reset":
        raise StoreError(f"session {row.id} was reset before it finished: it has no report")
    _finish(session_report(store, row), as_json, plot)


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
    """End a session for good: `bisect resume` refuses it afterwards (start a new one). Its
    measurements stay in the history."""
    from perfbisect.store.history import find_session
    from perfbisect.store.records import reset_session

    store = ctx_store(ctx, create=False)
    row = find_session(store, session)
    reset_session(store, row.id)
    typer.echo(f"session {row.id} reset: ended for good (`bisect resume` refuses it)")
