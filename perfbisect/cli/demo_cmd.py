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
    import tempfile

    from perfbisect.bisect.session import SearchOptions, outcome_exit_code, start
    from perfbisect.cli.render import ConsoleProgress, render_report
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
