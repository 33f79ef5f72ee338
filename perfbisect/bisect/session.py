"""The session driver: the only place where the engine meets targets and the store.

It feeds the engine's launch requests to the target one after another, records every launch
(samples, timings, log, snapshot) in its own transaction, and on resume replays the stored
launches into a fresh engine, so finished steps are never re-measured.
"""

from __future__ import annotations

import hashlib
import math
import queue
import re
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from perfbisect.bisect.baseline import BaselineRuns, SpeedupRow
from perfbisect.bisect.confirm import Confirmation, PairToConfirm
from perfbisect.bisect.engine import (
    Engine,
    LaunchRequest,
    LaunchResult,
    Outcome,
    PointResult,
    Policy,
    Purpose,
    Status,
)
from perfbisect.bisect.multiaxis import AxisPlan, MultiAxisEngine
from perfbisect.bisect.report import build_report
from perfbisect.bisect.report_model import Fidelity, FullModelCheck, Report
from perfbisect.bisect.specs import resolve_endpoints
from perfbisect.bisect.stats import instability_flags, median
from perfbisect.config import Configuration
from perfbisect.errors import ExperimentError, PerfbisectError, StepFailed, lead_with_error
from perfbisect.executors.registry import make_target
from perfbisect.experiment import Experiment, load_experiment
from perfbisect.paths import cache_dir
from perfbisect.redact import redact_toml
from perfbisect.store import records
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    Reusable,
    find_session,
    reusable_launches,
    session_launches,
    session_steps,
)
from perfbisect.targets.base import Target
from perfbisect.targets.sglang.proxy import ProxySpec


class Interrupted(PerfbisectError):
    """Raised when the user pressed Ctrl-C; the session is left resumable."""

    exit_code = 130


class Progress(Protocol):
    def started(self, session_id: int, path_length: int, expected_steps: int) -> None: ...
    def stage(self, request: LaunchRequest, stage: str) -> None: ...
    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None: ...
    def verdict(self, point: PointResult) -> None: ...


class NoProgress:
    def started(self, session_id: int, path_length: int, expected_steps: int) -> None:
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

    def policy(self, experiment: Experiment) -> Policy:
        return Policy(
            slots=len(slot_experiments(experiment, self.slots)),
            all_steps=self.all_steps,
            min_launches=self.min_launches,
            good_endpoint_launches=self.min_launches,
            bad_endpoint_launches=max(2, self.min_launches),
            max_launches=max(self.max_launches, self.min_launches, 2),
            higher_is_better=experiment.metric.higher_is_better,
        )


def expected_steps(path_length: int) -> int:
    """Endpoints + binary search + the verified pair, for the progress display."""
    return 2 + max(0, math.ceil(math.log2(max(path_length - 1, 1)))) + 2


def measurement_hosts(experiment: Experiment) -> list[str]:
    """The hosts a session of this experiment measures on: what two sessions must not share
    at once (``local`` is this machine, named)."""
    if experiment.executor.kind == "slurm":
        # Slurm allocates the nodes (exclusively): a session holds no host of its own.
        return [f"slurm:{uuid.uuid4().hex[:12]}"]
    addresses = [e.host.address for e in slot_experiments(experiment)]
    if experiment.driver is not None:
        addresses += list(experiment.driver.hosts.values())
    return sorted({f"local:{socket.gethostname()}" if a == "local" else a for a in addresses})


def start(
    store: Store,
    *,
    experiment_path: Path,
    good: str,
    bad: str,
    options: SearchOptions,
    name: str | None = None,
    progress: Progress | None = None,
    wait: records.HostWait | None = None,
) -> Report:
    """Validate everything, create the session, run it. Bad input stores nothing."""
    experiment = load_experiment(experiment_path)
    endpoints = resolve_endpoints(good, bad, experiment)
    params: dict[str, Any] = {
        "threshold": options.threshold,
        "min_launches": options.min_launches,
        "max_launches": options.max_launches,
        "all_steps": options.all_steps,
        "reuse_days": options.reuse_days,
        "slots": options.slots,
        "plans": [p.as_json() for p in endpoints.plans] if endpoints.multi_axis else None,
        # Log directories are keyed by this, not by the per-database session number: two
        # databases (the demo's and the default) both have a session 1.
        "log_key": uuid.uuid4().hex[:12],
    }
    session_id = records.claim_new_session(
        store,
        name=name,
        good=endpoints.good.as_dict(),
        bad=endpoints.bad.as_dict(),
        params={**params, "experiment_sha256": _digest(experiment.text)},
        path=[c.as_dict() for c in endpoints.path],
        experiment_path=str(experiment.path),
        experiment_text=redact_toml(experiment.text),
        hosts=measurement_hosts(experiment),
        wait=wait,
    )
    return _drive(
        store,
        session_id,
        experiment,
        endpoints.path,
        params["plans"],
        options,
        progress or NoProgress(),
        log_key=params["log_key"],
    )


def dry_run(*, experiment_path: Path, good: str, bad: str) -> dict[str, Any]:
    """What the first launch would run on the host (checks everything, stores nothing)."""
    experiment = load_experiment(experiment_path)
    endpoints = resolve_endpoints(good, bad, experiment)
    target = make_target(experiment, cache_dir())
    try:
        first = endpoints.path[0]
        return {
            "configuration": first.as_dict(),
            "path_length": len(endpoints.path),
            "axes": [p.name for p in endpoints.plans],
            "commands": target.describe(first),
        }
    finally:
        target.close()


def resume(
    store: Store,
    ref: str | None,
    progress: Progress | None = None,
    wait: records.HostWait | None = None,
) -> Report:
    row = find_session(store, ref)
    records.claim_existing_session(store, row.id, wait)
    experiment = load_experiment(row.experiment_path)
    if _digest(experiment.text) != row.params.get("experiment_sha256"):
        raise ExperimentError(
            f"{experiment.path}: the experiment file changed since session {row.id} started; "
            "restore it, or start a new session"
        )
    context = experiment.context()
    configs = [Configuration.of(c, context) for c in row.path]
    p = row.params
    options = SearchOptions(
        p.get("threshold"),
        int(p["min_launches"]),
        int(p["max_launches"]),
        bool(p.get("all_steps", True)),  # sessions from before crossing-first mapped every step
        float(p.get("reuse_days", 0.0)),
        p.get("slots"),
    )
    return _drive(
        store,
        row.id,
        experiment,
        configs,
        p.get("plans"),
        options,
        progress or NoProgress(),
        log_key=p.get("log_key"),
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def session_log_root(session_id: int, log_key: str | None) -> Path:
    """Where a session's launch logs go: unique across databases (sessions of before the key
    existed keep their old place)."""
    name = f"session-{log_key}" if log_key else f"session-{session_id}"
    return cache_dir() / "logs" / name


def _log_dir(root: Path, seq: int, config: Configuration) -> Path:
    return root / f"{seq:04d}-{config.fingerprint[:8]}"


def _replayed(view: LaunchView) -> LaunchResult:
    if view.value is not None:
        return LaunchResult(view.value)
    reason = lead_with_error(view.reason or "failed")
    return LaunchResult(reason=f"{view.stage}: {reason}" if view.stage else reason)


def _measure(
    target: Target,
    store: Store,
    session_id: int,
    seq: int,
    request: LaunchRequest,
    experiment: Experiment,
    on_stage: Callable[[str], None],
    log_root: Path,
    hosts_seen: set[str],
) -> LaunchResult:
    config = request.config
    log_dir = _log_dir(log_root, seq, config)
    base = replace(_record(session_id, seq, request, experiment), log_path=str(log_dir))
    try:
        m = target.launch(config, str(log_dir), on_stage)
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
    return LaunchResult(value)


def stage_seconds(launches: list[LaunchView]) -> float:
    """What the session's launches cost: the sum of their stage times (build, ready, measure,
    teardown), across resumes."""
    return round(
        sum(
            float(v)
            for launch in launches
            for k, v in (launch.timings or {}).items()
            if k.endswith("_s") and isinstance(v, (int, float))
        ),
        1,
    )


def _reuse_pool(
    store: Store, session_id: int, experiment: Experiment, options: SearchOptions
) -> dict[str, list[Reusable]]:
    if options.reuse_days <= 0:
        return {}
    since = datetime.utcnow() - timedelta(days=options.reuse_days)
    return reusable_launches(
        store,
        exclude_session=session_id,
        experiment_sha256=_digest(experiment.text),
        metric=experiment.metric.name,
        since=since,
    )


def _reuse(
    pool: dict[str, list[Reusable]], request: LaunchRequest, hosts_seen: set[str]
) -> Reusable | None:
    """An earlier launch that stands in for this one: search launches only, and only from a
    host this session has itself launched on (its endpoints ran there first)."""
    if request.purpose is not Purpose.SEARCH:
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
) -> LaunchResult:
    records.record_launch(
        store,
        replace(
            _record(session_id, seq, request, experiment),
            samples=reused.samples,
            value=reused.value,
            flags=[
                f"reused from launch {reused.launch_id} (session {reused.session_id}, "
                f"{reused.started_at.isoformat(timespec='seconds')}Z, host {reused.host})"
            ],
        ),
    )
    return LaunchResult(reused.value)


def _record(
    session_id: int, seq: int, request: LaunchRequest, experiment: Experiment
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


def _engine(
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    policy: Policy,
    threshold: float | None,
) -> Engine:
    """One path: the binary search; several axes (or a patch set): the multi-axis search."""
    if plans:
        axis_plans = [AxisPlan.from_json(p) for p in plans]
        return MultiAxisEngine(path[0], path[-1], axis_plans, policy, threshold)
    return Engine(path, policy, threshold)


class _LockedProgress:
    """Progress reports from several slots' threads, one at a time."""

    def __init__(self, inner: Progress) -> None:
        self.inner = inner
        self.lock = threading.Lock()

    def started(self, session_id: int, path_length: int, expected_steps: int) -> None:
        with self.lock:
            self.inner.started(session_id, path_length, expected_steps)

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
        self.stored = session_launches(store, session_id)
        self.recorded_steps = {
            (s.position, s.verdict, s.n_launches) for s in session_steps(store, session_id)
        }
        self.slots = slot_experiments(experiment, options.slots)
        self.targets: list[Target] = []  # made on first use, one per slot
        self._targets_lock = threading.Lock()
        self.seq = 0
        self.rounds = 0  # batches run (their launches at once when there are several slots)

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
        if seq < len(stored) and stored[seq].fingerprint == request.config.fingerprint:
            result = _replayed(stored[seq])
            self.progress.launched(request, result, replayed=True)
            return result
        reused = _reuse(self.pool, request, self.hosts_seen)
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

        result = _measure(
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


@dataclass
class _Phases:
    """What a session's phases left: the engine whose search the report shows, and with a
    proxy, the proxy's own search (when the search fell back to full launches) and the
    full-model confirmation."""

    engine: Engine
    proxy: ProxySpec | None = None
    proxy_engine: Engine | None = None
    fallback: str | None = None
    confirmation: Confirmation | None = None


def _run_phases(
    driver: _Driver,
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    options: SearchOptions,
    experiment: Experiment,
) -> _Phases:
    policy = options.policy(experiment)
    proxy = ProxySpec.of(experiment.target.options) if experiment.target.kind == "sglang" else None
    if proxy is None:
        engine = _engine(path, plans, policy, options.threshold)
        driver.run(engine)
        return _Phases(engine)
    # The search runs on proxy launches. A given threshold is in the full model's units, so
    # the proxy's threshold is derived from its own endpoints; the given one is checked when
    # the full model confirms the culprit.
    proxy_engine = _engine([c.as_proxy() for c in path], plans, policy, None)
    driver.run(proxy_engine)
    outcome = proxy_engine.outcome
    assert outcome is not None
    if outcome.status is Status.NOT_REPRODUCED:
        fallback = (
            "the proxy launches do not show the regression between the endpoints "
            f"({outcome.message}); it may depend on the weights: the search ran on full launches"
        )
        engine = _engine(path, plans, policy, options.threshold)
        driver.run(engine)
        return _Phases(engine, proxy, proxy_engine, fallback)
    phases = _Phases(proxy_engine, proxy, proxy_engine)
    if outcome.status is Status.FOUND and proxy.confirm == "full":
        pairs = [
            PairToConfirm(
                c.last_good.config.as_full(),
                c.first_bad.config.as_full(),
                c.last_good.position,
                c.first_bad.position,
            )
            for c in outcome.steps
        ]
        phases.confirmation = Confirmation(pairs, policy, options.threshold)
        driver.run(phases.confirmation)
    return phases


def _drive(
    store: Store,
    session_id: int,
    experiment: Experiment,
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    options: SearchOptions,
    progress: Progress,
    log_key: str | None,
) -> Report:
    log_root = session_log_root(session_id, log_key)
    driver = _Driver(store, session_id, experiment, options, progress, log_root)
    progress.started(session_id, len(path), expected_steps(len(path)))
    baseline = experiment.target.kind == "sglang" and bool(
        experiment.target.options.get("baseline")
    )
    try:
        phases = _run_phases(driver, path, plans, options, experiment)
        if baseline:
            rounds = int(experiment.target.options.get("baseline_rounds", 2))
            driver.run(BaselineRuns([(0, path[0]), (len(path) - 1, path[-1])], rounds))
    except KeyboardInterrupt:
        driver.close()
        records.set_session_status(store, session_id, records.INTERRUPTED)
        raise Interrupted(
            f"interrupted; the session is saved: `perfbisect bisect resume "
            f"{session_id}` continues it"
        ) from None
    except BaseException:
        driver.close()
        records.set_session_status(store, session_id, records.INTERRUPTED)
        raise
    driver.close()
    engine = phases.engine
    outcome = engine.outcome
    assert outcome is not None
    report = build_report(store, session_id, experiment, engine, outcome, str(log_root))
    launches = session_launches(store, session_id)
    reused_ids = [v.id for v in launches if any(str(f).startswith("reused from") for f in v.flags)]
    warnings = list(report.warnings)
    deciding_hosts = sorted(
        {v.host for v in launches if v.purpose != Purpose.SEARCH.value and v.host}
    )
    if len(deciding_hosts) > 1:
        warnings.append(
            f"the deciding launches (endpoints, verification) ran on {len(deciding_hosts)} hosts "
            f"({', '.join(deciding_hosts)}), e.g. after a resume elsewhere: their difference "
            "may hold between-host variance"
        )
    if reused_ids and report.drift:
        warnings.append(
            f"{len(reused_ids)} search launch(es) were reused from earlier sessions, and an endpoint "
            "drifted since then: re-run with --fresh to measure everything anew"
        )
    report = replace(
        report,
        rounds=driver.rounds,
        time_spent_s=stage_seconds(launches),
        reused_launches=tuple(reused_ids),
        warnings=tuple(warnings),
    )
    if phases.proxy is not None:
        report = with_fidelity(report, phases, launches)
    if baseline:
        report = replace(report, speculation=speedups(path[0], path[-1], launches))
    records.set_session_status(
        store,
        session_id,
        records.FINISHED,
        result=report.to_json(),
        params={"derived_threshold": outcome.threshold},
    )
    return report


_CLIENT_TOKENS = re.compile(r"^client tokens/s ([0-9.]+)$")


def speedups(
    good: Configuration, bad: Configuration, launches: list[LaunchView]
) -> tuple[SpeedupRow, ...]:
    """Client tokens/s with and without speculation at each end, from the baseline launches."""
    rows = []
    for end, config in (("good", good), ("bad", bad)):
        spec, nospec = config.as_full().fingerprint, config.as_baseline().fingerprint
        with_s = [
            float(m.group(1))
            for v in launches
            if v.purpose == Purpose.BASELINE.value and v.fingerprint == spec
            for f in v.flags
            if (m := _CLIENT_TOKENS.match(str(f)))
        ]
        without_s = [
            v.value
            for v in launches
            if v.purpose == Purpose.BASELINE.value
            and v.fingerprint == nospec
            and v.value is not None
        ]
        rows.append(SpeedupRow(end, config.as_dict(), tuple(with_s), tuple(without_s)))
    return tuple(rows)


def with_fidelity(report: Report, phases: _Phases, launches: list[LaunchView]) -> Report:
    """The report of a session with proxy launches: which launches were proxy and which full,
    whether the search fell back to full launches, and what the full model confirmed."""
    assert phases.proxy is not None
    assert phases.proxy_engine is not None
    proxy_prints = {c.fingerprint for c in phases.proxy_engine.path}
    proxy_n = sum(1 for v in launches if v.fingerprint in proxy_prints)
    confirmed: list[FullModelCheck] = []
    if phases.confirmation is not None:
        for r in phases.confirmation.results:
            confirmed.append(
                FullModelCheck(
                    last_good=r.pair.last_good.as_dict(),
                    first_bad=r.pair.first_bad.as_dict(),
                    position=r.pair.hi,
                    good_values=r.good_values,
                    bad_values=r.bad_values,
                    effect_ms=r.effect,
                    confirmed=r.confirmed,
                    note=r.note,
                )
            )
    searched_on = "full" if phases.fallback else "proxy"
    fidelity = Fidelity(
        proxy=phases.proxy.describe(),
        searched_on=searched_on,
        proxy_launches=proxy_n,
        full_launches=len(launches) - proxy_n,
        fallback=phases.fallback,
        confirm=phases.proxy.confirm,
        checks=tuple(confirmed),
    )
    message, warnings = report.message, list(report.warnings)
    if phases.fallback:
        warnings.append(phases.fallback)
    elif report.culprit is not None:
        message = f"{message} (searched on proxy launches: {phases.proxy.describe()})"
        check = next((c for c in confirmed if c.position == report.culprit.position), None)
        if check is not None and check.confirmed:
            message += "; the full model confirmed it"
        elif check is not None:
            message += "; the full model did NOT confirm it"
            warnings.append(f"the full model did not confirm the proxy's culprit: {check.note}")
        elif phases.proxy.confirm == "none":
            warnings.append(
                'not confirmed on the full model (confirm = "none"): the culprit rests on proxy '
                "launches only"
            )
    basis = report.threshold_basis
    if searched_on == "proxy" and basis:
        basis = f"on proxy launches: {basis}"
    return replace(
        report,
        message=message,
        warnings=tuple(warnings),
        fidelity=fidelity,
        threshold_basis=basis,
        launches=len(launches),  # every phase's: proxy search, fallback, confirmation
    )


__all__ = [
    "Interrupted",
    "NoProgress",
    "Outcome",
    "Progress",
    "SearchOptions",
    "resume",
    "start",
]
