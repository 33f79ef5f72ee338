"""The session driver: the only place where the engine meets targets and the store.

It feeds the engine's launch requests to the target one after another, records every launch
(samples, timings, log, snapshot) in its own transaction, and on resume replays the stored
launches into a fresh engine, so finished steps are never re-measured.
"""

from __future__ import annotations

import math
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfbisect import interrupts
from perfbisect.bisect.axis_sets import AxisPlan
from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.report.report import build_report
from perfbisect.bisect.report.report_model import Fidelity, FullModelCheck, Report, counted
from perfbisect.bisect.session.baseline import BaselineRuns, SpeedupRow
from perfbisect.bisect.session.confirm import Confirmation, PairToConfirm
from perfbisect.bisect.session.driver import (
    Interrupted,
    NoProgress,
    Progress,
    SearchOptions,
    _digest,
    _Driver,
    session_log_root,
    slot_experiments,
    stage_seconds,
)
from perfbisect.bisect.session.engines import make_engine
from perfbisect.bisect.session.merge_report import undescended_warning, with_descent
from perfbisect.bisect.session.merges import Descent, descend
from perfbisect.bisect.session.prior import PathPrior, path_prior
from perfbisect.bisect.session.specs import resolve_endpoints
from perfbisect.bisect.session.unmatched import StopWhenNothingMatches
from perfbisect.bisect.values import (
    Outcome,
    Purpose,
    Status,
)
from perfbisect.config import Configuration
from perfbisect.errors import ExperimentError, MetricMatchedNothing, StoreError
from perfbisect.executors.registry import make_target
from perfbisect.experiment import Experiment, load_experiment
from perfbisect.invocation import command_line
from perfbisect.paths import cache_dir
from perfbisect.redact import redact_toml
from perfbisect.store import records
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    find_session,
    session_launches,
)
from perfbisect.targets.sglang.proxy import ProxySpec


def expected_steps(path_length: int, plans: list[dict[str, Any]] | None = None) -> int:
    """Configurations a session is expected to judge, for the progress display: the
    endpoints and the search (verifying the crossing judges two of them again: no new ones).
    Across several axes (``plans``) the search is the attribution (one configuration per
    axis), then each axis's own search: a binary search along a path, ddmin over a set (about
    two configurations per halving of its members)."""
    if not plans:
        return 2 + _halvings(path_length)
    axes = [AxisPlan.from_json(p) for p in plans]
    attribution = len(axes) if len(axes) > 1 else 0
    inner = sum(
        _halvings(len(a.values)) if a.kind == "path" else 2 * max(1, _halvings(len(a.items) + 1))
        for a in axes
    )
    return 2 + attribution + inner


def _halvings(length: int) -> int:
    """Binary-search steps between the two ends of a path of ``length`` configurations."""
    return max(0, math.ceil(math.log2(max(length - 1, 1))))


def resume_command(store: Store, session_id: int) -> str:
    """The command that continues an interrupted session, as the user can run it."""
    return command_line("bisect", "resume", str(session_id), db_url=store.url)


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


@dataclass(frozen=True)
class HostOptions:
    """How the hosts are reached, given on the command line over the experiment's ``[host]``
    (``--ssh-config``, ``--accept-new-host-key``); kept with the session for its resume."""

    ssh_config: str | None = None
    accept_new_host_key: bool = False

    def apply(self, experiment: Experiment) -> Experiment:
        host = experiment.host
        if self.ssh_config:
            host = replace(host, ssh_config=str(Path(self.ssh_config).expanduser().resolve()))
        if self.accept_new_host_key:
            host = replace(host, accept_new_host_key=True)
        return replace(experiment, host=host)

    def as_json(self) -> dict[str, Any]:
        return {"ssh_config": self.ssh_config, "accept_new_host_key": self.accept_new_host_key}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> HostOptions:
        data = data or {}
        return cls(data.get("ssh_config"), bool(data.get("accept_new_host_key", False)))


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
    host: HostOptions | None = None,
    from_change: int | None = None,
    after: Callable[[Report], Report] | None = None,
) -> Report:
    """Validate everything, create the session, run it. Bad input stores nothing.
    ``from_change``: the change point of a watched series this session bisects. ``after``:
    more work on the finished report (``bisect explain``) while the session still holds its
    hosts, so no other session measures on them meanwhile."""
    host = host or HostOptions()
    experiment = host.apply(load_experiment(experiment_path))
    endpoints = resolve_endpoints(good, bad, experiment)
    if options.prior_paths or options.prior_areas:
        options = replace(options, prior=_prior(experiment, endpoints, options))
    params: dict[str, Any] = {
        "threshold": options.threshold,
        "min_launches": options.min_launches,
        "max_launches": options.max_launches,
        "all_steps": options.all_steps,
        "reuse_days": options.reuse_days,
        "slots": options.slots,
        "engine": options.engine,
        "confidence": options.confidence,
        "descend_merges": options.descend_merges,
        "merge_engine": options.engine_inside_merges,
        "prior": options.prior.as_json() if options.prior else None,
        "plans": [p.as_json() for p in endpoints.plans] if endpoints.multi_axis else None,
        # Log directories are keyed by this, not by the per-database session number: two
        # databases (the demo's and the default) both have a session 1.
        "log_key": uuid.uuid4().hex[:12],
        "host_options": host.as_json(),
        **({"from_change": from_change} if from_change is not None else {}),
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
        after=after,
    )


def dry_run(
    *, experiment_path: Path, good: str, bad: str, host: HostOptions | None = None
) -> dict[str, Any]:
    """What the first launch would run on the host (checks everything, stores nothing)."""
    experiment = (host or HostOptions()).apply(load_experiment(experiment_path))
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
    if row.status == records.RESET:
        raise StoreError(
            f"session {row.id} was reset (ended for good) at {row.updated_at:%Y-%m-%d %H:%M}Z; "
            "a reset cannot be undone: start a new session with `bisect start` (the reset "
            "session's search launches may be reused by it)"
        )
    if row.status == records.FINISHED:
        raise StoreError(
            f"session {row.id} is finished; see "
            f"`{command_line('bisect', 'report', str(row.id), db_url=store.url)}`"
        )
    records.claim_existing_session(store, row.id, wait)
    experiment = HostOptions.from_json(row.params.get("host_options")).apply(
        load_experiment(row.experiment_path)
    )
    if _digest(experiment.text) != row.params.get("experiment_sha256"):
        raise ExperimentError(
            f"{experiment.path}: the experiment file changed since session {row.id} started; "
            "restore it, or start a new session"
        )
    context = experiment.context()
    configs = [Configuration.of(c, context) for c in row.path]
    p = row.params
    options = stored_options(p)
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


def stored_options(params: dict[str, Any]) -> SearchOptions:
    """The search options a session started with, from its stored parameters."""
    return SearchOptions(
        params.get("threshold"),
        int(params["min_launches"]),
        int(params["max_launches"]),
        # sessions from before crossing-first mapped every step
        bool(params.get("all_steps", True)),
        float(params.get("reuse_days", 0.0)),
        params.get("slots"),
        str(params.get("engine", "rules")),
        float(params.get("confidence", 0.99)),
        # sessions from before the search inside merges stopped at the merge
        descend_merges=bool(params.get("descend_merges", False)),
        prior=PathPrior.from_json(params.get("prior")),
        merge_engine=str(params.get("merge_engine", "rules")),
    )


def _prior(experiment: Experiment, endpoints: Any, options: SearchOptions) -> PathPrior:
    """``--prior-path``/``--prior-area``'s prior over the session's path, checked before
    anything is stored."""
    from perfbisect.errors import UsageError
    from perfbisect.targets.gitrepo import GitRepo

    if options.engine != "model":
        raise UsageError(
            "--prior-path and --prior-area need --engine model (the rule engine has no prior)"
        )
    if endpoints.multi_axis or experiment.target.repo is None:
        raise UsageError(
            "--prior-path and --prior-area weigh commits: they need a search along commits "
            "alone (one commit per configuration)"
        )
    repo = GitRepo(experiment.target.repo)
    return path_prior(repo, endpoints.path, options.prior_paths, options.prior_areas)


@dataclass
class _Phases:
    """What a session's phases left: the engine whose search the report shows, and with a
    proxy, the proxy's own search (when the search fell back to full launches) and the
    full-model confirmation."""

    engine: EngineState
    proxy: ProxySpec | None = None
    proxy_engine: EngineState | None = None
    fallback: str | None = None
    confirmation: Confirmation | None = None
    descents: list[Descent] = field(default_factory=list)  # searched inside a merge


def _descend(
    driver: _Driver,
    phases: _Phases,
    plans: list[dict[str, Any]] | None,
    options: SearchOptions,
    experiment: Experiment,
) -> _Phases:
    """The crossing is a merge commit: search the commits it brought in (merges.py)."""
    outcome = phases.engine.outcome
    if not options.descend_merges or plans or experiment.target.repo is None or outcome is None:
        return phases
    from perfbisect.targets.gitrepo import GitRepo

    repo = GitRepo(experiment.target.repo)
    policy = options.policy(experiment)
    phases.descents = descend(
        driver, repo, outcome, len(phases.engine.path), policy, options.engine_inside_merges
    )
    return phases


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
        engine = make_engine(path, plans, policy, options.threshold, options.engine, options.prior)
        driver.run(engine)
        return _descend(driver, _Phases(engine), plans, options, experiment)
    # The search runs on proxy launches. A given threshold is in the full model's units, so
    # the proxy's threshold is derived from its own endpoints; the given one is checked when
    # the full model confirms the culprit.
    proxy_engine = make_engine(
        [c.as_proxy() for c in path], plans, policy, None, options.engine, options.prior
    )
    driver.run(proxy_engine)
    outcome = proxy_engine.outcome
    assert outcome is not None
    if outcome.status is Status.NOT_REPRODUCED:
        fallback = (
            "the proxy launches do not show the regression between the endpoints "
            f"({outcome.message}); it may depend on the weights: the search ran on full launches"
        )
        engine = make_engine(path, plans, policy, options.threshold, options.engine, options.prior)
        driver.run(engine)
        phases = _Phases(engine, proxy, proxy_engine, fallback)
        return _descend(driver, phases, plans, options, experiment)
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
    return _descend(driver, phases, plans, options, experiment)


def _drive(
    store: Store,
    session_id: int,
    experiment: Experiment,
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    options: SearchOptions,
    progress: Progress,
    log_key: str | None,
    after: Callable[[Report], Report] | None = None,
) -> Report:
    log_root = session_log_root(session_id, log_key)
    progress = StopWhenNothingMatches(progress, experiment)
    driver = _Driver(store, session_id, experiment, options, progress, log_root)
    # The session's own time so far (earlier runs of a resumed session), for its elapsed time.
    spent = stage_seconds(session_launches(store, session_id))
    progress.started(session_id, len(path), expected_steps(len(path), plans), spent)
    baseline = experiment.target.kind == "sglang" and bool(
        experiment.target.options.get("baseline")
    )
    try:
        phases = _run_phases(driver, path, plans, options, experiment)
        if baseline:
            rounds = int(experiment.target.options.get("baseline_rounds", 2))
            driver.run(BaselineRuns([(0, path[0]), (len(path) - 1, path[-1])], rounds))
    except KeyboardInterrupt as stop:
        driver.close()
        records.set_session_status(store, session_id, records.INTERRUPTED)
        what, code = interrupts.stopped_by(stop)
        raise Interrupted(
            f"{what}; the session is saved: `{resume_command(store, session_id)}` continues it",
            code,
        ) from None
    except MetricMatchedNothing:
        driver.close()  # nothing to resume: the experiment file must change first
        records.set_session_status(store, session_id, records.FAILED)
        raise
    except BaseException:
        driver.close()
        records.set_session_status(store, session_id, records.INTERRUPTED)
        raise
    driver.close()
    engine = phases.engine
    outcome = engine.outcome
    assert outcome is not None
    descents = phases.descents
    inside = next((d.first_seq for d in descents if d.engine is not None), None)
    searched = (0, inside) if inside is not None else None
    report = build_report(
        store, session_id, experiment, engine, outcome, str(log_root), seqs=searched
    )
    report = with_descent(store, session_id, experiment, report, descents, str(log_root))
    if not options.descend_merges and (note := undescended_warning(experiment, report)):
        report = replace(report, warnings=(*report.warnings, note))
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
    # Only a drift the kept launches show (one launch now could be a slow one).
    if reused_ids and any(d.get("firm", True) for d in report.drift):
        warnings.append(
            f"{counted(len(reused_ids), 'search launch')} reused from earlier sessions, and an "
            "endpoint drifted since then: re-run with --fresh to measure everything anew"
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
    params = {"derived_threshold": outcome.threshold}
    if after is not None:
        # The report is readable (status, report) while `after` runs; the session stays
        # running, so its hosts stay locked, and ends finished whatever `after` does.
        records.set_session_status(
            store, session_id, records.RUNNING, result=report.to_json(), params=params
        )
        try:
            report = after(report)
        finally:
            records.set_session_status(
                store, session_id, records.FINISHED, result=report.to_json(), params=params
            )
        return report
    records.set_session_status(
        store, session_id, records.FINISHED, result=report.to_json(), params=params
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
    # the searches inside a merge ran on the same kind of launches as the search before them
    proxy_prints |= {
        c.fingerprint for d in phases.descents if d.engine for c in d.engine.path if c.is_proxy
    }
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
