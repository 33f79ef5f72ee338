"""The driver: feeds a searcher's launch requests to targets and records every result.

It replays stored launches on resume, reuses earlier sessions' search launches of the same
fingerprint, runs a batch's launches at once on the executor's slots (one target per
slot, in threads), and records each launch in its own transaction. ``session.py`` decides
which searchers run (the phases); this module only drives one.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from perfbisect import interrupts
from perfbisect.bisect.session.prior import PathPrior
from perfbisect.bisect.stats import median
from perfbisect.bisect.values import (
    LaunchRequest,
    LaunchResult,
    PointResult,
    Policy,
    Purpose,
)
from perfbisect.config import Configuration
from perfbisect.errors import PerfbisectError, StepFailed, lead_with_error
from perfbisect.executors.registry import make_target
from perfbisect.experiment import Experiment
from perfbisect.paths import cache_dir
from perfbisect.samples import instability_flags
from perfbisect.store import records
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    Reusable,
    launch_with_samples,
    reusable_launches,
    session_launches,
    session_steps,
)
from perfbisect.store.models import utcnow
from perfbisect.store.watch import watch_reusable
from perfbisect.targets.base import Target

# The flag of a launch that took the value of one of its own session's earlier launches (told
# apart from "reused from launch N (session M ...)": earlier sessions' launches).
OWN_REUSE = "the value of this session's launch"
T = TypeVar("T")


class Interrupted(PerfbisectError):
    """Raised when the user pressed Ctrl-C (or SIGTERM / SIGHUP came); the session is left
    resumable. ``exit_code``: 128 + the signal's number."""

    exit_code = 130

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Progress(Protocol):
    def started(
        self, session_id: int, path_length: int, expected_steps: int, spent_s: float = 0.0
    ) -> None:
        """``spent_s``: the session's time before this run (a resumed session's earlier runs)."""

    def stage(self, request: LaunchRequest, stage: str) -> None: ...
    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None: ...
    def verdict(self, point: PointResult) -> None: ...


class NoProgress:
    def started(
        self, session_id: int, path_length: int, expected_steps: int, spent_s: float = 0.0
    ) -> None:
        pass

    def stage(self, request: LaunchRequest, stage: str) -> None:
        pass

    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None:
        pass

    def verdict(self, point: PointResult) -> None:
        pass


@dataclass(frozen=True)
class SearchOptions:
    threshold: float | None = None
    min_launches: int = 1
    max_launches: int = 5
    all_steps: bool = False  # map every level change, not only the crossing
    # Search launches of earlier sessions of the same experiment on the same host, at most this
    # old, stand in for new ones (endpoints and verification are always launched anew, which
    # is also the drift check); 0 = never (--fresh).
    reuse_days: float = 7.0
    slots: int | None = None  # launches at once (--slots); None: the [executor]'s
    # "model" (the default): the search as one posterior (bisect/search/), for the crossing,
    # every step (--all-steps) and several axes alike; "rules": the earlier rule engine.
    engine: str = "model"
    confidence: float = 0.99  # the model's stop rule: the posterior a step must reach
    # A crossing at a merge commit is searched inside the branch it merged (merges.py);
    # False: --no-descend-merges.
    descend_merges: bool = True
    # --prior-path / --prior-area: the paths and code areas whose commits hold half of the
    # model's prior (prior.py), and the prior itself once the path is known (kept with the
    # session for its resume).
    prior_paths: tuple[str, ...] = ()
    prior_areas: tuple[str, ...] = ()
    prior: PathPrior | None = None
    # The engine of the searches inside a merge: None, the session's own (sessions from before
    # it was stored searched inside merges with the rule engine, and resume so).
    merge_engine: str | None = None

    @property
    def engine_inside_merges(self) -> str:
        return self.merge_engine or self.engine

    def policy(self, experiment: Experiment) -> Policy:
        return Policy(
            slots=len(slot_experiments(experiment, self.slots)),
            all_steps=self.all_steps,
            min_launches=self.min_launches,
            good_endpoint_launches=self.min_launches,
            bad_endpoint_launches=max(2, self.min_launches),
            max_launches=max(self.max_launches, self.min_launches, 2),
            higher_is_better=experiment.metric.higher_is_better,
            confidence=self.confidence,
        )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def session_log_root(session_id: int, log_key: str | None) -> Path:
    """Where a session's launch logs go: unique across databases (sessions of before the key
    existed keep their old place)."""
    name = f"session-{log_key}" if log_key else f"session-{session_id}"
    return cache_dir() / "logs" / name


def launch_log_dir(root: Path, seq: int, config: Configuration) -> Path:
    return root / f"{seq:04d}-{config.fingerprint[:8]}"


def _replayed(view: LaunchView) -> LaunchResult:
    # With the seconds it cost, so that a resumed search plans its next launches as the
    # interrupted one did (the model weighs a launch's information against its cost).
    seconds = launch_seconds(view.timings)
    if view.value is not None:
        return LaunchResult(view.value, seconds=seconds)
    reason = lead_with_error(view.reason or "failed")
    return LaunchResult(reason=f"{view.stage}: {reason}" if view.stage else reason, seconds=seconds)


def measure_launch(
    target: Target,
    store: Store,
    session_id: int | None,  # None: a watcher's launch (perfbisect/watch)
    seq: int,
    request: LaunchRequest,
    experiment: Experiment,
    on_stage: Callable[[str], None],
    log_root: Path,
    hosts_seen: set[str],
) -> LaunchResult:
    config = request.config
    log_dir = launch_log_dir(log_root, seq, config)
    # When the launch began (the record is written when it ends): launches of one round overlap.
    base = replace(
        _record(session_id, seq, request, experiment), log_path=str(log_dir), started_at=utcnow()
    )

    def stage(name: str) -> None:
        interrupts.check()  # a Ctrl-C whose first delivery was lost stops here
        on_stage(name)

    interrupts.check()
    try:
        m = target.launch(config, str(log_dir), stage)
    except StepFailed as failure:
        records.record_launch(
            store,
            replace(
                base,
                stage=failure.stage,
                reason=failure.reason,
                build_status="failed" if failure.stage == "build" else None,
            ),
        )
        return LaunchResult(reason=f"{failure.stage}: {lead_with_error(failure.reason)}")
    value = median(m.samples)
    build = m.build
    hosts_seen.add(str(m.snapshot.get("host", "local")))
    records.record_launch(
        store,
        replace(
            base,
            host_name=str(m.snapshot.get("host", "local")),
            host_address=str(m.snapshot.get("address", "local")),
            samples=m.samples,
            value=value,
            flags=m.flags or instability_flags(m.samples),
            timings=m.timings,
            snapshot=m.snapshot,
            build_status=build.status if build else None,
            build_cached=bool(build and build.cached),
            build_s=build.duration_s if build else 0.0,
            build_log_tail=build.log_tail if build else "",
        ),
    )
    return LaunchResult(value, seconds=launch_seconds(m.timings))


def launch_seconds(timings: Mapping[str, object] | None) -> float | None:
    """One launch's stage times (build, ready, measure, teardown), summed; None if none."""
    found = [
        float(v)
        for k, v in (timings or {}).items()
        if k.endswith("_s") and isinstance(v, (int, float))
    ]
    return sum(found) if found else None


def stage_seconds(launches: list[LaunchView]) -> float:
    """What the session's launches cost: the sum of their stage times (build, ready, measure,
    teardown), across resumes."""
    return round(sum(launch_seconds(launch.timings) or 0.0 for launch in launches), 1)


def _reuse_pool(
    store: Store, session_id: int, experiment: Experiment, options: SearchOptions
) -> dict[str, list[Reusable]]:
    if options.reuse_days <= 0:
        return {}
    since = datetime.utcnow() - timedelta(days=options.reuse_days)
    pool = reusable_launches(
        store,
        exclude_session=session_id,
        experiment_sha256=_digest(experiment.text),
        metric=experiment.metric.name,
        since=since,
    )
    # and what watchers of this experiment measured (`perfbisect watch`)
    watched = watch_reusable(
        store,
        experiment_sha256=_digest(experiment.text),
        metric=experiment.metric.name,
        since=since,
    )
    for fingerprint, launches in watched.items():
        pool.setdefault(fingerprint, []).extend(launches)
    return pool


def _reuse(
    pool: dict[str, list[Reusable]],
    request: LaunchRequest,
    hosts_seen: set[str],
    endpoints: bool = False,
) -> Reusable | None:
    """An earlier launch that stands in for this one: search launches only, and only from a
    host this session has itself launched on (its endpoints ran there first). ``endpoints``:
    endpoint launches too (a search inside a merge: the session's own endpoints, launched
    anew, were its check for drift)."""
    allowed = (Purpose.SEARCH, Purpose.ENDPOINT) if endpoints else (Purpose.SEARCH,)
    if request.purpose not in allowed:
        return None
    stored = pool.get(request.config.fingerprint)
    while stored:
        candidate = stored.pop(0)
        if candidate.host in hosts_seen:
            return candidate
    return None


def _record_reused(
    store: Store,
    session_id: int,
    seq: int,
    request: LaunchRequest,
    experiment: Experiment,
    reused: Reusable,
    flag: str | None = None,
) -> LaunchResult:
    records.record_launch(
        store,
        replace(
            _record(session_id, seq, request, experiment),
            samples=reused.samples,
            value=reused.value,
            flags=[
                flag
                or f"reused from launch {reused.launch_id} ("
                + (f"session {reused.session_id}" if reused.session_id else "watch series")
                + f", {reused.started_at.isoformat(timespec='seconds')}Z, host {reused.host})"
            ],
        ),
    )
    return LaunchResult(reused.value)


def _record(
    session_id: int | None, seq: int, request: LaunchRequest, experiment: Experiment
) -> records.LaunchRecord:
    """The part of a launch's record that its request alone decides."""
    config = request.config
    return records.LaunchRecord(
        session_id=session_id,
        seq=seq,
        fingerprint=config.fingerprint,
        axes=config.as_dict(),
        context=config.context,
        position=request.position,
        purpose=request.purpose.value,
        metric=experiment.metric.name,
        samples=[],
        value=None,
    )


def _close(target: Target | None) -> None:
    if target is not None:
        target.close()


class _LockedProgress:
    """Progress reports from several slots' threads, one at a time."""

    def __init__(self, inner: Progress) -> None:
        self.inner = inner
        self.lock = threading.Lock()

    def started(
        self, session_id: int, path_length: int, expected_steps: int, spent_s: float = 0.0
    ) -> None:
        with self.lock:
            self.inner.started(session_id, path_length, expected_steps, spent_s)

    def stage(self, request: LaunchRequest, stage: str) -> None:
        with self.lock:
            self.inner.stage(request, stage)

    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None:
        with self.lock:
            self.inner.launched(request, result, replayed)

    def verdict(self, point: PointResult) -> None:
        with self.lock:
            self.inner.verdict(point)


def slot_experiments(experiment: Experiment, slots: int | None = None) -> list[Experiment]:
    """One experiment per slot, each with the host its launches run on: the pool's hosts
    (``[executor] kind = "hosts"``, one launch per host at a time), else the experiment's own
    host, ``slots`` times."""
    settings = experiment.executor
    count = slots or settings.slots
    if settings.kind == "hosts":
        hosts = settings.hosts[: max(1, min(count, len(settings.hosts)))]
        return [replace(experiment, host=replace(experiment.host, address=h)) for h in hosts]
    return [experiment] * max(1, count)


class EarlierLaunches(Generic[T]):
    """Launches of a session's earlier phases that stand in for a later phase's endpoint and
    search launches of the same configuration, each once, in the order they ran (verification
    launches always run anew, back to back). Which one a request takes depends only on the
    pool and the requests before it, so a resumed session replays into the same state."""

    def __init__(self, pool: dict[str, list[T]]) -> None:
        self.pool = pool
        self.taken: dict[str, int] = {}

    def take(self, request: LaunchRequest) -> T | None:
        if request.purpose not in (Purpose.ENDPOINT, Purpose.SEARCH) or not self.pool:
            return None
        fingerprint = request.config.fingerprint
        n = self.taken.get(fingerprint, 0)
        self.taken[fingerprint] = n + 1
        earlier = self.pool.get(fingerprint, [])
        return earlier[n] if n < len(earlier) else None


class _Searcher(Protocol):
    """What the driver runs: the engine, the multi-axis engine, a full-model confirmation."""

    def next_batch(self) -> list[LaunchRequest]: ...
    def feed(self, results: Sequence[LaunchResult]) -> None: ...
    def take_verdicts(self) -> list[PointResult]: ...


class _Driver:
    """Runs searchers' launches: replayed from the store while the stored launches match (a
    resumed session), reused from earlier sessions where allowed, else launched and recorded.
    One sequence number runs through every phase of a session. The launches of one batch run
    at once on the executor's slots (one target per slot: a pool host each, or the
    experiment's host), each recorded in its own transaction as it ends."""

    def __init__(
        self,
        store: Store,
        session_id: int,
        experiment: Experiment,
        options: SearchOptions,
        progress: Progress,
        log_root: Path,
    ) -> None:
        self.store, self.session_id, self.experiment = store, session_id, experiment
        self.progress = _LockedProgress(progress)
        self.log_root = log_root
        self.pool = _reuse_pool(store, session_id, experiment, options)
        self.hosts_seen: set[str] = set()  # where this session's own launches ran
        # Explain launches come after the search and are never replayed into it.
        self.stored = [
            v for v in session_launches(store, session_id) if v.purpose != Purpose.EXPLAIN.value
        ]
        self.recorded_steps = {
            (s.position, s.verdict, s.n_launches) for s in session_steps(store, session_id)
        }
        self.slots = slot_experiments(experiment, options.slots)
        self.targets: list[Target] = []  # made on first use, one per slot
        self._targets_lock = threading.Lock()
        self.seq = 0
        self.rounds = 0  # batches run (their launches at once when there are several slots)
        # This session's own launches that a later phase's endpoint and search launches of the
        # same configuration reuse (a merge's inside search starts at the merge base, often
        # measured by the search before it); see `reuse_own_before`.
        self.own: EarlierLaunches[Reusable] = EarlierLaunches({})
        self.inside = False  # running a search inside a merge (earlier sessions' endpoints too)

    def reuse_own_before(self, before_seq: int) -> None:
        """From now on an endpoint or search launch of a configuration this session measured
        in its launches before ``before_seq`` takes those values instead of launching (see
        ``EarlierLaunches``), and earlier sessions' endpoint launches may stand in like their
        search launches; ``-1``: no more (the phases after launch anew)."""
        self.inside = before_seq >= 0
        pool: dict[str, list[Reusable]] = {}
        for v in session_launches(self.store, self.session_id):
            if v.seq >= before_seq or v.value is None or v.purpose == Purpose.EXPLAIN.value:
                continue
            _, samples, _ = launch_with_samples(self.store, v.id)
            pool.setdefault(v.fingerprint, []).append(
                Reusable(v.id, self.session_id, v.value, samples, v.host or "", v.started_at)
            )
        self.own = EarlierLaunches(pool)

    def close(self) -> None:
        for target in self.targets:
            _close(target)
        self.targets = []

    def run(self, searcher: _Searcher) -> None:
        while batch := searcher.next_batch():
            self.rounds += 1
            searcher.feed(self._batch(batch))
            for point in searcher.take_verdicts():
                self._record_verdict(point)

    def _batch(self, batch: list[LaunchRequest]) -> list[LaunchResult]:
        results: list[LaunchResult | None] = [None] * len(batch)
        to_launch: list[tuple[int, int, LaunchRequest]] = []
        for i, request in enumerate(batch):
            seq, self.seq = self.seq, self.seq + 1
            known = self._known(seq, request)
            if known is not None:
                results[i] = known
            else:
                to_launch.append((i, seq, request))
        # The comparisons that decide (endpoints, verification, confirmation, baseline) run on
        # one node, the first slot's: between-node variance must not be in their difference.
        deciding = any(r.purpose is not Purpose.SEARCH for _, _, r in to_launch)
        if len(to_launch) <= 1 or len(self.slots) == 1 or deciding:
            for i, seq, request in to_launch:
                results[i] = self._launch(self._target(0), seq, request)
        else:
            for i, result in self._at_once(to_launch):
                results[i] = result
        return [r for r in results if r is not None]

    def _at_once(
        self, to_launch: list[tuple[int, int, LaunchRequest]]
    ) -> list[tuple[int, LaunchResult]]:
        """Up to one launch per slot at a time, in threads. Ctrl-C stops every running
        launch's server (those launches fail and tear down), waits for them, and goes on."""
        free: queue.Queue[int] = queue.Queue()
        for slot in range(len(self.slots)):
            free.put(slot)
        busy: dict[int, Target] = {}

        def work(item: tuple[int, int, LaunchRequest]) -> tuple[int, LaunchResult]:
            i, seq, request = item
            slot = free.get()
            try:
                target = self._target(slot)
                busy[slot] = target
                return i, self._launch(target, seq, request)
            finally:
                busy.pop(slot, None)
                free.put(slot)

        pool = ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="slot")
        futures = [pool.submit(work, item) for item in to_launch]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            for target in list(busy.values()):
                target.abort()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _target(self, slot: int) -> Target:
        with self._targets_lock:  # slots' threads ask at once: each slot's own target
            while len(self.targets) <= slot:
                self.targets.append(make_target(self.slots[len(self.targets)], cache_dir()))
            return self.targets[slot]

    def _known(self, seq: int, request: LaunchRequest) -> LaunchResult | None:
        """A stored (resumed) or reusable result for this launch, else None."""
        stored = self.stored
        own = self.own.take(request)  # counted whether replayed or not: the same on a resume
        if seq < len(stored) and stored[seq].fingerprint == request.config.fingerprint:
            result = _replayed(stored[seq])
            self.progress.launched(request, result, replayed=True)
            return result
        if own is not None:
            flag = f"{OWN_REUSE} {own.launch_id} (an earlier phase of this session)"
            result = _record_reused(
                self.store, self.session_id, seq, request, self.experiment, own, flag
            )
            self.progress.launched(request, result, replayed=True)
            return result
        reused = _reuse(self.pool, request, self.hosts_seen, endpoints=self.inside)
        if reused is not None:
            result = _record_reused(
                self.store, self.session_id, seq, request, self.experiment, reused
            )
            self.progress.launched(request, result, replayed=True)
            return result
        return None

    def _launch(self, target: Target, seq: int, request: LaunchRequest) -> LaunchResult:
        def on_stage(name: str) -> None:
            records.heartbeat(self.store, self.session_id)
            self.progress.stage(request, name)

        result = measure_launch(
            target,
            self.store,
            self.session_id,
            seq,
            request,
            self.experiment,
            on_stage,
            self.log_root,
            self.hosts_seen,
        )
        self.progress.launched(request, result, replayed=False)
        return result

    def _record_verdict(self, point: PointResult) -> None:
        self.progress.verdict(point)
        est = point.estimate
        n = est.n if est else 0
        key = (point.position, point.verdict.value, n)
        if key in self.recorded_steps:
            return
        self.recorded_steps.add(key)
        records.record_step(
            self.store,
            self.session_id,
            point.config.fingerprint,
            point.position,
            point.verdict.value,
            est.median if est else None,
            (est.lo, est.hi) if est else None,
            n,
            point.reason,
        )
