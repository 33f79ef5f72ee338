"""`perfbisect demo`: build a throwaway repository with a planted regression and bisect it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from perfbisect.cli.context import Context, emit_json

if TYPE_CHECKING:
    from perfbisect.demo.builder import DemoRepo


def demo(
    ctx: typer.Context,
    directory: Path | None = typer.Option(
        None, "--dir", metavar="<dir>", help="Where to create it (default: a new temp dir)."
    ),
    gpu: bool = typer.Option(
        False, "--gpu", help="Run on GPUs: the planted commit takes verify out of CUDA graphs."
    ),
    tp: int | None = typer.Option(
        None,
        "--tp",
        metavar="<ranks>",
        help="Tensor-parallel ranks (default 2; with --gpu, up to 2 GPUs).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Create a copy of the reference server with ~30 commits and one planted regression,
    then bisect it (about a minute on 2 CPU cores, after a one-time build of its
    environment)."""
    from perfbisect.cli.progress import ConsoleProgress
    from perfbisect.cli.render import render_report
    from perfbisect.demo.run import run_demo

    obj = ctx.find_root().obj
    assert isinstance(obj, Context)
    progress = ConsoleProgress()

    def created(made: DemoRepo) -> None:
        progress.console.print(
            f"demo repository: {made.repo} (planted regression: {made.planted[:12]})"
        )

    try:
        run = run_demo(directory, gpu, tp, obj.db_url, progress, on_created=created)
    finally:
        progress.close()
    report = run.report
    if as_json:
        emit_json(report.to_json())
    else:
        render_report(report)
        verdict = "named the planted commit" if run.named else "did NOT name the planted commit"
        lines = [
            f"demo: perfbisect {verdict} {run.made.planted[:12]}",
            # (the report above ends with its `logs:` line: not said twice)
            f"history: {run.db_url} (session {report.session})",
            "next:",
            *(f"  {line}" for line in run.next_steps),
        ]
        for line in lines:
            typer.echo(line)
    raise typer.Exit(report.exit_code if run.named else 1)
