"""`perfbisect watch`: measure a branch's new commits as a series, report its change points,
bisect a new one past the threshold (--auto-bisect). Exit 1 when a round found a new change
point past the threshold (for CI and cron), else 0."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from perfbisect.cli.context import ctx_store, emit_json

if TYPE_CHECKING:
    from perfbisect.watch.analysis import ReportedChange, SeriesAnalysis
    from perfbisect.watch.watcher import RoundResult


def _say(message: str) -> None:
    print(f"perfbisect: {message}", file=sys.stderr, flush=True)


def change_line(change: ReportedChange, unit: str = "") -> str:
    """One change point in words: id, commits, levels with intervals, change, p-value."""
    c, s = change.change, change.stored
    marks = ("past the threshold" if change.crosses else "below the threshold") + (
        ", new" if change.new else ""
    )
    return (
        f"change {s.id}: {s.commit_before[:10]} -> {s.commit_after[:10]}: "
        f"{c.before.mean:.4g} [{c.before.lo:.4g}, {c.before.hi:.4g}] ({c.before.n} points) -> "
        f"{c.after.mean:.4g} [{c.after.lo:.4g}, {c.after.hi:.4g}] ({c.after.n} points){unit}, "
        f"{c.rel_change:+.1%}, p={c.pvalue:.2g}; {marks}"
    )


def watch(
    ctx: typer.Context,
    branch: str = typer.Option("main", "--branch", help="The branch to watch."),
    every: int = typer.Option(
        1, "--every", min=1, help="Measure every Nth commit of the branch (the gaps are bisected)."
    ),
    commits: str | None = typer.Option(
        None,
        "--commits",
        help="Measure this range of the branch (A..B) instead of its new commits (a new series "
        "starts at the branch's newest commit otherwise).",
    ),
    once: bool = typer.Option(False, "--once", help="Measure what is new and exit (cron, CI)."),
    interval_s: float = typer.Option(
        600.0, "--interval", min=1.0, help="Seconds between rounds (without --once)."
    ),
    launches: int = typer.Option(2, "--launches", min=1, help="Launches per commit."),
    threshold_pct: float = typer.Option(
        5.0,
        "--threshold-pct",
        min=0.0,
        help="A change point past this relative change (in the bad direction) is a regression.",
    ),
    host_class: str | None = typer.Option(
        None,
        "--host-class",
        help="Name of the machines' class (default: the hosts the experiment measures on); "
        "a series is per branch and host class.",
    ),
    remote: str | None = typer.Option(
        None, "--remote", help="Fetch this remote each round (default: the branch's own, if any)."
    ),
    auto_bisect: bool = typer.Option(
        False,
        "--auto-bisect",
        help="Bisect a new change point past the threshold (one bisection at a time per series).",
    ),
    slots: int | None = typer.Option(
        None, "--slots", min=1, help="Launches at once (default: [executor] slots)."
    ),
    config: Path = typer.Option(Path("perfbisect.toml"), "-c", "--config", help="Experiment file."),
    as_json: bool = typer.Option(False, "--json", help="Print each round as one JSON object."),
) -> None:
    """Measure a branch's new commits, find change points in the series (Apache Otava)."""
    from perfbisect.watch.watcher import WatchOptions, watch_loop, watch_round

    store = ctx_store(ctx)
    options = WatchOptions(
        branch=branch,
        every=every,
        commits=commits,
        launches=launches,
        host_class=host_class,
        threshold=threshold_pct / 100.0,
        remote=remote,
        auto_bisect=auto_bisect,
        slots=slots,
    )

    def bisect(change: ReportedChange, analysis: SeriesAnalysis) -> dict[str, Any]:
        from perfbisect.bisect.session.driver import SearchOptions
        from perfbisect.cli.progress import ConsoleProgress
        from perfbisect.store.records import HostWait
        from perfbisect.watch.from_change import FROM_CHANGE_MAX_LAUNCHES, bisect_change

        _say(f"bisecting change {change.stored.id} ({analysis.series.label})")
        progress = ConsoleProgress()
        try:
            report = bisect_change(
                store,
                change_id=change.stored.id,
                experiment_path=config,
                options=SearchOptions(max_launches=FROM_CHANGE_MAX_LAUNCHES),
                progress=progress,
                wait=HostWait(wait=True, on_wait=_say),
            )
        finally:
            progress.close()
        first_bad = report.culprit.first_bad if report.culprit else {}
        return {
            "change": change.stored.id,
            "session": report.session,
            "status": report.status.value,
            "first_bad": first_bad.get("commit"),
            "message": report.message,
        }

    def one_round() -> RoundResult:
        return watch_round(
            store,
            config,
            options,
            on_measured=lambda m: _say(
                f"{m.commit[:10]} (#{m.ordinal}): "
                + (f"{m.value:.4g}" if m.value is not None else f"failed: {m.reason}")
            ),
            start_bisection=bisect,
        )

    def show(result: RoundResult) -> None:
        if as_json:
            emit_json(result.as_json())
            return
        commits_measured = len({m.commit for m in result.measured})
        typer.echo(
            f"series {result.series.id} ({result.series.label}): measured {commits_measured} "
            f"commit(s), {len(result.measured)} launch(es); "
            f"{len(result.analysis.points)} points, {len(result.analysis.changes)} change point(s)"
        )
        for change in result.analysis.changes:
            typer.echo("  " + change_line(change))
        for b in result.bisections:
            typer.echo(
                f"  change {b['change']}: bisection session {b['session']}: {b['status']}"
                + (f", first bad {b['first_bad']}" if b["first_bad"] else "")
            )

    from perfbisect.bisect.session.driver import Interrupted

    try:
        if once:
            result = one_round()
            show(result)
            raise typer.Exit(1 if result.new_regressions else 0)
        _say(f"watching {branch} every {interval_s:.0f}s (Ctrl-C stops)")
        watch_loop(one_round, interval_s, show)
    except KeyboardInterrupt as stop:
        from perfbisect import interrupts

        what, code = interrupts.stopped_by(stop)
        raise Interrupted(
            f"{what}; every finished launch is in the series: the next `perfbisect watch` "
            "goes on from there",
            code,
        ) from None


def endpoints_from_change(
    ctx: typer.Context,
    change_id: int | None,
    good: str | None,
    bad: str | None,
    config: Path,
    threshold: float | None,
) -> tuple[str, str, float | None]:
    """`bisect start`'s endpoints: --good/--bad, or the commits around a change point (with
    the midpoint of its levels as the threshold unless --threshold-ms is given)."""
    from perfbisect.errors import UsageError

    if change_id is None:
        raise UsageError("give --good and --bad, or --from-change ID (see `query changes`)")
    if good is not None or bad is not None:
        raise UsageError("--from-change names both endpoints: leave out --good and --bad")
    from perfbisect.watch.from_change import endpoints_of

    ends = endpoints_of(ctx_store(ctx), change_id, config)
    return ends.good, ends.bad, threshold if threshold is not None else ends.threshold
