"""Running the demo: a throwaway repository with a planted regression, bisected for real into
its own history (or the one ``--db`` names). The CLI renders what this returns."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfbisect.bisect.report.report_model import Report
from perfbisect.bisect.session.session import Progress, SearchOptions, start
from perfbisect.demo.builder import DemoRepo, create_demo
from perfbisect.errors import UsageError
from perfbisect.hosts.local import LocalHost
from perfbisect.invocation import command_line
from perfbisect.probes.hardware import hardware_snapshot
from perfbisect.store.database import open_store


@dataclass(frozen=True)
class DemoRun:
    made: DemoRepo
    report: Report  # with ``extra["demo"]``: where things are, and the next commands
    db_url: str
    named: bool  # the planted commit was named
    next_steps: tuple[str, ...]


def _gpu_count() -> int:
    return len(hardware_snapshot(LocalHost()).get("gpus", []))


def run_demo(
    directory: Path | None,
    gpu: bool,
    tp: int | None,
    db_url: str | None,
    progress: Progress,
    on_created: Callable[[DemoRepo], None] | None = None,
) -> DemoRun:
    root = directory or Path(tempfile.mkdtemp(prefix="perfbisect-demo-"))
    if tp is None:
        tp = min(2, _gpu_count()) if gpu else 2
    if tp < 1:
        raise UsageError("--gpu: no NVIDIA GPU found" if gpu else "--tp must be at least 1")
    made = create_demo(root.resolve(), gpu=gpu, tp=tp)
    # The demo keeps its own history next to the repository unless --db names one.
    url = db_url or f"sqlite:///{made.root / 'history.db'}"
    store = open_store(url)
    if on_created is not None:
        on_created(made)
    report = start(
        store,
        experiment_path=made.experiment,
        good=made.good,
        bad=made.bad,
        options=SearchOptions(),
        name=None,
        progress=progress,
    )
    named = report.culprit is not None and report.culprit.first_bad.get("commit") == made.planted
    session = str(report.session)
    next_steps = (  # as they run when pasted: this executable, this history
        command_line("bisect", "report", session, "--plot", "demo.png", db_url=url),
        command_line("bisect", "log", session, db_url=url),
        command_line("query", "history", db_url=url),
    )
    demo = {
        "dir": str(made.root),
        "planted": made.planted,
        "named_planted": named,
        "history": url,
        "next": list(next_steps),
    }
    report = dataclasses.replace(report, extra={**report.extra, "demo": demo})
    return DemoRun(made, report, url, named, next_steps)
