"""From a change point to a culprit: a bisection between the last commit before the change
point and the first after it, widened by ``MARGIN`` series points each side, with the midpoint
of the two levels the series measured as its threshold (a series has many points each side: a
better threshold than two endpoints give). The series' launches of the commits in between
stand in for the search's (the driver's reuse); the endpoints are measured anew, which is also
the check that the change is still there."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from perfbisect.bisect.report.report_model import Report
from perfbisect.bisect.session.driver import Progress, SearchOptions, _digest
from perfbisect.bisect.session.session import start
from perfbisect.errors import UsageError
from perfbisect.experiment import load_experiment
from perfbisect.store.database import Store
from perfbisect.store.records import HostWait
from perfbisect.store.watch import StoredChange, get_change, series_launches
from perfbisect.watch.analysis import points_of

# A change point's step is often small next to a shared machine's noise (10% against 4% per
# launch, with bursts): `bisect start`'s default of 5 launches a point left one endpoint in 4
# unclear in benchmarks/watch_bench.py; 10 did not.
FROM_CHANGE_MAX_LAUNCHES = 10
# Otava places a change point one point off now and then: its bisection then starts between two
# commits of one level and finds nothing. One more series point each side (their launches are
# re-used) named the right commit in 92% of detected 10% steps against 84% without
# (benchmarks/watch_bench.py, 38 steps), for about 10 more launches.
MARGIN = 1


@dataclass(frozen=True)
class ChangeEndpoints:
    change: StoredChange
    good: str
    bad: str
    threshold: float | None  # the levels' midpoint (the series' metric units)


def endpoints_of(store: Store, change_id: int, experiment_path: Path) -> ChangeEndpoints:
    """The change point's two commits; refuses an experiment file other than the series'."""
    change, series = get_change(store, change_id)
    experiment = load_experiment(experiment_path)
    if _digest(experiment.text) != series.experiment_sha256:
        raise UsageError(
            f"--from-change {change_id}: {experiment.path} is not the experiment file the series "
            f"{series.label} was measured with ({series.experiment_path}); use -c with that one"
        )
    before = change.stats.get("before", {}).get("mean")
    after = change.stats.get("after", {}).get("mean")
    threshold = (float(before) + float(after)) / 2 if before and after else None
    higher = bool(series.params.get("higher_is_better", False))
    commits = [p.commit for p in points_of(series_launches(store, series.id), higher)]
    if change.commit_after not in commits:  # its launches are gone: the change point's own
        return ChangeEndpoints(change, change.commit_before, change.commit_after, threshold)
    at = commits.index(change.commit_after)
    good = commits[max(0, at - 1 - MARGIN)]
    bad = commits[min(len(commits) - 1, at + MARGIN)]
    return ChangeEndpoints(change, good, bad, threshold)


def bisect_change(
    store: Store,
    *,
    change_id: int,
    experiment_path: Path,
    options: SearchOptions,
    name: str | None = None,
    progress: Progress | None = None,
    wait: HostWait | None = None,
) -> Report:
    """Bisect the change point: a session like `bisect start`'s, recording which change point
    it came from (``from_change``). A threshold given in ``options`` wins over the levels'."""
    ends = endpoints_of(store, change_id, experiment_path)
    if options.threshold is None:
        options = replace(options, threshold=ends.threshold)
    return start(
        store,
        experiment_path=experiment_path,
        good=ends.good,
        bad=ends.bad,
        options=options,
        name=name,
        progress=progress,
        wait=wait,
        from_change=change_id,
    )
