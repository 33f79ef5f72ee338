"""The watcher: each round fetches the branch, measures its new commits into the series, finds
the series' change points, and (with auto-bisect) bisects a new one past the threshold."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfbisect.bisect.session.driver import _digest, slot_experiments
from perfbisect.bisect.session.specs import resolve_spec
from perfbisect.errors import UsageError
from perfbisect.experiment import Experiment, load_experiment
from perfbisect.store.database import Store
from perfbisect.store.watch import SeriesView, change_sessions, ensure_series, series_launches
from perfbisect.targets.gitrepo import GitRepo
from perfbisect.watch import commits as git_commits
from perfbisect.watch.analysis import ReportedChange, SeriesAnalysis, analyze
from perfbisect.watch.changes import TUNED
from perfbisect.watch.measure import Measured, Planned, measure


@dataclass(frozen=True)
class WatchOptions:
    branch: str = "main"
    every: int = 1
    commits: str | None = None  # a range (A..B) to measure instead of the new commits
    launches: int = 2
    host_class: str | None = None  # default: the hosts the experiment measures on
    threshold: float = 0.05  # relative change in the bad direction that matters
    remote: str | None = None  # default: the branch's tracked remote, if any
    auto_bisect: bool = False
    slots: int | None = None


@dataclass
class RoundResult:
    series: SeriesView
    measured: list[Measured]
    analysis: SeriesAnalysis
    bisections: list[dict[str, Any]] = field(default_factory=list)

    @property
    def new_regressions(self) -> list[ReportedChange]:
        return [c for c in self.analysis.changes if c.new and c.crosses]

    def as_json(self) -> dict[str, Any]:
        return {
            "series": self.series.as_json(),
            "measured": [
                {"commit": m.commit, "ordinal": m.ordinal, "value": m.value, "reason": m.reason}
                for m in self.measured
            ],
            "changes": [c.as_json() for c in self.analysis.changes],
            "new_regressions": [c.stored.id for c in self.new_regressions],
            "bisections": self.bisections,
        }


def default_host_class(experiment: Experiment) -> str:
    """The hosts the experiment measures on (a pool's hosts together): launches of one class
    are comparable. Machines that are alike are one class when named so (--host-class)."""
    if experiment.executor.kind == "slurm":
        return f"slurm:{experiment.executor.slurm.get('partition') or 'default'}"
    hosts = sorted({e.host.address for e in slot_experiments(experiment)})
    return "+".join(f"local:{socket.gethostname()}" if h == "local" else h for h in hosts)


def open_series(store: Store, experiment: Experiment, options: WatchOptions) -> SeriesView:
    return ensure_series(
        store,
        branch=options.branch,
        host_class=options.host_class or default_host_class(experiment),
        experiment_sha256=_digest(experiment.text),
        experiment_path=str(experiment.path),
        metric=experiment.metric.name,
        params={
            "threshold": options.threshold,
            "every": options.every,
            "launches": options.launches,
            "higher_is_better": experiment.metric.higher_is_better,
        },
    )


def _plan(
    store: Store, experiment: Experiment, series: SeriesView, options: WatchOptions
) -> list[Planned]:
    repo_path = experiment.target.repo
    assert repo_path is not None
    remote = options.remote or git_commits.branch_remote(repo_path, options.branch)
    if remote:
        git_commits.fetch(repo_path, remote)
    ref = git_commits.branch_ref(repo_path, options.branch, remote)
    chain = git_commits.chain(repo_path, ref)
    done = series_launches(store, series.id)
    measured = {la.commit for la in done}
    if options.commits:
        candidates = git_commits.to_measure(
            git_commits.in_range(repo_path, chain, options.commits), measured, options.every, None
        )
    else:
        # New commits: after the newest measured one; a new series starts at the newest.
        grid = [c for c in chain if c.ordinal % options.every == 0]
        since = max(la.ordinal for la in done) + 1 if done else (grid[-1].ordinal if grid else 0)
        candidates = git_commits.to_measure(chain, measured, options.every, since)
    repo = GitRepo(repo_path)
    planned: list[Planned] = []
    for commit in candidates:
        config = resolve_spec(commit.sha, experiment, repo, "branch")
        planned += [
            Planned(config, commit.sha, commit.ordinal, len(planned) + n)
            for n in range(options.launches)
        ]
    return planned


def watch_round(
    store: Store,
    experiment_path: Path,
    options: WatchOptions,
    on_measured: Callable[[Measured], None] | None = None,
    start_bisection: Callable[[ReportedChange, SeriesAnalysis], dict[str, Any]] | None = None,
) -> RoundResult:
    """One round: measure what is new, analyse, maybe bisect (``start_bisection``)."""
    experiment = load_experiment(experiment_path)
    if experiment.target.repo is None:
        raise UsageError(f"{experiment.path}: [target] repo is needed to watch a branch")
    series = open_series(store, experiment, options)
    planned = _plan(store, experiment, series, options)
    measured = measure(store, experiment, series.id, planned, options.slots, on_measured)
    analysis = analyze(store, series, TUNED, options.threshold)
    result = RoundResult(series, measured, analysis)
    if options.auto_bisect and start_bisection is not None:
        change = next_to_bisect(store, analysis)
        if change is not None:
            result.bisections.append(start_bisection(change, analysis))
    return result


NEAR = 2  # change points this close (in points) to one already bisected are that one moved


def next_to_bisect(store: Store, analysis: SeriesAnalysis) -> ReportedChange | None:
    """The oldest change point past the threshold not bisected yet, when no bisection of this
    series is running (at most one at a time per series)."""
    sessions = change_sessions(store, analysis.series.id)
    if any(s.status == "running" for s in sessions):
        return None
    bisected = {s.change_id for s in sessions}
    places = {p.commit: i for i, p in enumerate(analysis.points)}
    done_at = [places[c.stored.commit_after] for c in analysis.changes if c.stored.id in bisected]
    for change in analysis.changes:
        if not change.crosses or change.stored.id in bisected:
            continue
        at = places[change.stored.commit_after]
        if any(abs(at - d) <= NEAR for d in done_at):
            continue
        return change
    return None


def watch_loop(
    round_once: Callable[[], RoundResult],
    interval_s: float,
    on_round: Callable[[RoundResult], None],
    rounds: int | None = None,
) -> None:
    """Rounds every ``interval_s`` until interrupted (or ``rounds`` of them)."""
    done = 0
    while rounds is None or done < rounds:
        started = time.monotonic()
        on_round(round_once())
        done += 1
        if rounds is not None and done >= rounds:
            return
        time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
