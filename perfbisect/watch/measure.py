"""Measuring a series' commits with the session driver's own launch pipeline (``measure_launch``:
target launch, record with samples and snapshot), a few launches each, on the executor's slots
at once (a pool's hosts, local slots, or a Slurm job each)."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from perfbisect.bisect.session.driver import launch_log_dir, measure_launch, slot_experiments
from perfbisect.bisect.values import LaunchRequest, LaunchResult, Purpose
from perfbisect.config import Configuration
from perfbisect.executors.registry import make_target
from perfbisect.experiment import Experiment
from perfbisect.paths import cache_dir
from perfbisect.store.database import Store
from perfbisect.store.watch import link_launch
from perfbisect.targets.base import Target


@dataclass(frozen=True)
class Planned:
    """One launch to make: a commit of the series and which of its launches this is."""

    config: Configuration
    commit: str
    ordinal: int
    seq: int  # unique in one call: its log directory names the launch


@dataclass(frozen=True)
class Measured:
    commit: str
    ordinal: int
    value: float | None
    reason: str | None


def log_root(series_id: int) -> Path:
    """One folder per call: two watchers of one series (two machines) never share a name."""
    return cache_dir() / "logs" / f"watch-{series_id}" / uuid.uuid4().hex[:12]


def measure(
    store: Store,
    experiment: Experiment,
    series_id: int,
    planned: Sequence[Planned],
    slots: int | None = None,
    on_done: Callable[[Measured], None] | None = None,
) -> list[Measured]:
    """Make the planned launches, one commit per slot at a time (its launches one after
    another: two launches of one commit at once would share its worktree); each is recorded
    (kind ``watch``, no session) and linked to the series as it ends."""
    experiments = slot_experiments(experiment, slots)
    free: queue.Queue[int] = queue.Queue()
    for slot in range(len(experiments)):
        free.put(slot)
    targets: dict[int, Target] = {}
    lock = threading.Lock()
    root = log_root(series_id)

    def target(slot: int) -> Target:
        with lock:
            if slot not in targets:
                targets[slot] = make_target(experiments[slot], cache_dir())
            return targets[slot]

    def launch(slot: int, plan: Planned) -> Measured:
        request = LaunchRequest(plan.ordinal, plan.config, Purpose.WATCH)
        result: LaunchResult = measure_launch(
            target(slot),
            store,
            None,
            plan.seq,
            request,
            experiments[slot],
            lambda _stage: None,
            root,
            set(),
        )
        log_dir = str(launch_log_dir(root, plan.seq, plan.config))
        link_launch(store, series_id, log_dir, plan.commit, plan.ordinal)
        done = Measured(plan.commit, plan.ordinal, result.value, result.reason)
        if on_done is not None:
            on_done(done)
        return done

    def work(plans: list[Planned]) -> list[Measured]:
        slot = free.get()
        try:
            return [launch(slot, plan) for plan in plans]
        finally:
            free.put(slot)

    by_commit: dict[str, list[Planned]] = {}
    for plan in planned:
        by_commit.setdefault(plan.commit, []).append(plan)
    units = list(by_commit.values())
    # The first commit alone: a target's first launch makes perfbisect's clone of the
    # repository, which two first launches at once would both make (as a session's endpoints,
    # launched one at a time, do before its parallel search).
    first: list[Measured] = []
    if units:
        try:
            first = work(units.pop(0))
        except BaseException:
            for t in targets.values():
                t.close()
            raise
    pool = ThreadPoolExecutor(max_workers=len(experiments), thread_name_prefix="watch")
    futures = [pool.submit(work, plans) for plans in units]
    try:
        return first + [m for f in futures for m in f.result()]
    except BaseException:
        for f in futures:
            f.cancel()
        for t in list(targets.values()):
            t.abort()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for t in targets.values():
            t.close()
