"""`perfbisect demo`: build a throwaway repository with a planted regression and bisect it."""

from __future__ import annotations

from pathlib import Path

import typer

from perfbisect.cli.context import Context, emit_json


def demo(
    ctx: typer.Context,
    directory: Path | None = typer.Option(
        None, "--dir", help="Where to create it (default: a new temp dir)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Create a demo repository with ~30 commits and one planted regression, then bisect it."""
    import tempfile

    from perfbisect.bisect.session import SearchOptions, outcome_exit_code, start
    from perfbisect.cli.render import ConsoleProgress, render_report
    from perfbisect.demo.builder import create_demo
    from perfbisect.store.database import open_store

    root = directory or Path(tempfile.mkdtemp(prefix="perfbisect-demo-"))
    made = create_demo(root.resolve())
    obj = ctx.find_root().obj
    assert isinstance(obj, Context)
    # The demo keeps its own history next to the repository unless --db names one.
    store = open_store(obj.db_url or f"sqlite:///{made.root / 'history.db'}")
    progress = ConsoleProgress()
    progress.console.print(
        f"demo repository: {made.repo} (planted regression: {made.planted[:12]})"
    )
    report = start(
        store,
        experiment_path=made.experiment,
        good=made.good,
        bad=made.bad,
        options=SearchOptions(),
        name=None,
        progress=progress,
    )
    report["demo"] = {
        "dir": str(made.root),
        "planted": made.planted,
        "named_planted": bool(report.get("culprit"))
        and report["culprit"]["first_bad"].get("commit") == made.planted,
    }
    if as_json:
        emit_json(report)
    else:
        render_report(report)
        verdict = (
            "named the planted commit"
            if report["demo"]["named_planted"]
            else "did NOT name the planted commit"
        )
        progress.console.print(f"demo: perfbisect {verdict} {made.planted[:12]}")
    raise typer.Exit(outcome_exit_code(report) if report["demo"]["named_planted"] else 1)
