"""`perfbisect demo`: build a throwaway repository with a planted regression and bisect it."""

from __future__ import annotations

from pathlib import Path

import typer

from perfbisect.cli.context import Context, emit_json


def _gpu_count() -> int:
    from perfbisect.hosts.local import LocalHost
    from perfbisect.probes.hardware import hardware_snapshot

    return len(hardware_snapshot(LocalHost()).get("gpus", []))


def demo(
    ctx: typer.Context,
    directory: Path | None = typer.Option(
        None, "--dir", help="Where to create it (default: a new temp dir)."
    ),
    gpu: bool = typer.Option(
        False, "--gpu", help="Run on GPUs: the planted commit takes verify out of CUDA graphs."
    ),
    tp: int | None = typer.Option(
        None, "--tp", help="Tensor-parallel ranks (default 2; with --gpu, up to 2 GPUs)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Create a copy of the reference server with ~30 commits and one planted regression,
    then bisect it (about 2 minutes on 2 CPU cores)."""
    import dataclasses
    import shlex
    import tempfile

    from perfbisect.bisect.session import SearchOptions, start
    from perfbisect.cli.progress import ConsoleProgress
    from perfbisect.cli.render import render_report
    from perfbisect.demo.builder import create_demo
    from perfbisect.store.database import open_store

    root = directory or Path(tempfile.mkdtemp(prefix="perfbisect-demo-"))
    if tp is None:
        tp = min(2, _gpu_count()) if gpu else 2
    if tp < 1:
        from perfbisect.errors import UsageError

        raise UsageError("--gpu: no NVIDIA GPU found" if gpu else "--tp must be at least 1")
    made = create_demo(root.resolve(), gpu=gpu, tp=tp)
    obj = ctx.find_root().obj
    assert isinstance(obj, Context)
    # The demo keeps its own history next to the repository unless --db names one.
    db_url = obj.db_url or f"sqlite:///{made.root / 'history.db'}"
    store = open_store(db_url)
    progress = ConsoleProgress()
    progress.console.print(
        f"demo repository: {made.repo} (planted regression: {made.planted[:12]})"
    )
    try:
        report = start(
            store,
            experiment_path=made.experiment,
            good=made.good,
            bad=made.bad,
            options=SearchOptions(),
            name=None,
            progress=progress,
        )
    finally:
        progress.close()
    named = report.culprit is not None and report.culprit.first_bad.get("commit") == made.planted
    db = shlex.quote(db_url)
    next_steps = [
        f"perfbisect --db {db} bisect report {report.session} --plot demo.png",
        f"perfbisect --db {db} bisect log {report.session}",
        f"perfbisect --db {db} query history",
    ]
    report = dataclasses.replace(
        report,
        extra={
            **report.extra,
            "demo": {
                "dir": str(made.root),
                "planted": made.planted,
                "named_planted": named,
                "history": db_url,
                "next": next_steps,
            },
        },
    )
    if as_json:
        emit_json(report.to_json())
    else:
        render_report(report)
        verdict = "named the planted commit" if named else "did NOT name the planted commit"
        lines = [
            f"demo: perfbisect {verdict} {made.planted[:12]}",
            f"history: {db_url} (session {report.session}); logs: {report.log_dir}",
            "next:",
            *(f"  {line}" for line in next_steps),
        ]
        for line in lines:
            typer.echo(line)
    raise typer.Exit(report.exit_code if named else 1)
