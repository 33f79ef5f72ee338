"""The report of a session that has not finished (interrupted, or still running): its stored
launches replayed into a fresh engine (the engine is pure, so this is the state the search had
reached), its verdicts with their launches, the provisional culprit and what remains to confirm
it, marked provisional. No launch is made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import tomllib

from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.report.report import build_report
from perfbisect.bisect.report.report_model import Report, ReportStatus, counted
from perfbisect.bisect.session.driver import (
    _digest,
    _replayed,
    _Searcher,
    session_log_root,
    stage_seconds,
)
from perfbisect.bisect.session.engines import make_engine
from perfbisect.bisect.session.merge_report import with_descent
from perfbisect.bisect.session.merges import Descent, descend
from perfbisect.bisect.session.session import resume_command, stored_options
from perfbisect.bisect.stats import Verdict, difference
from perfbisect.bisect.values import Culprit, LaunchRequest, Outcome, Status
from perfbisect.config import Configuration
from perfbisect.errors import ExperimentError
from perfbisect.experiment import Experiment, load_experiment, parse_experiment
from perfbisect.store.database import Store
from perfbisect.store.history import LaunchView, session_launches
from perfbisect.store.models import SessionRow
from perfbisect.targets.gitrepo import GitRepo
from perfbisect.targets.sglang.proxy import ProxySpec


def _experiment(row: SessionRow) -> Experiment:
    """The session's experiment: its file while unchanged, else the text stored with it."""
    try:
        experiment = load_experiment(row.experiment_path)
        if _digest(experiment.text) == row.params.get("experiment_sha256"):
            return experiment
    except ExperimentError:
        pass
    text = row.experiment_text or ""
    return parse_experiment(tomllib.loads(text), Path(row.experiment_path), text)


def _matched(stored: dict[int, LaunchView], seq: int, batch: Sequence[LaunchRequest]) -> int:
    """How many of ``batch``, from launch ``seq`` on, the stored launches hold, in order."""
    made = 0
    for i, request in enumerate(batch):
        view = stored.get(seq + i)
        if view is None or view.fingerprint != request.config.fingerprint:
            break
        made += 1
    return made


def _replay(stored: dict[int, LaunchView], engine: EngineState) -> tuple[int, int]:
    """Feed the engine the session's stored launches, batch by batch, while they match what
    it asks for: the launches fed, and how many of the batch it asks for next the session
    made before it stopped (a back-to-back pair interrupted after its first launch: the
    search reads a batch whole, so those wait for the rest of it)."""
    seq = 0
    while batch := engine.next_batch():
        made = _matched(stored, seq, batch)
        if made < len(batch):
            # made before it stopped, not where the stored launches part from the search
            return seq, made if stored.get(seq + made) is None else 0
        engine.feed([_replayed(stored[seq + i]) for i in range(len(batch))])
        seq += len(batch)
    return seq, 0


def _next_launches(batch: Sequence[LaunchRequest], made: int) -> str:
    """What the search launches next, the launches of its batch already made said so (a
    resumed session does not make them again)."""

    def named(requests: Sequence[LaunchRequest]) -> str:
        return ", ".join(f"position {r.position} ({r.purpose.value})" for r in requests)

    if not made:
        return named(batch) or "nothing"
    them = "it" if made == 1 else "them"
    return (
        f"{named(batch[made:])}, whose batch has {counted(made, 'launch')} made already "
        f"({named(batch[:made])}: stored, in `bisect log`; the search reads {them} with the rest)"
    )


class _StoredOnly:
    """Runs the searches inside a merge on the session's stored launches alone (nothing is
    launched): each goes as far as they go, and the first one they do not finish stops the
    rest (``merges.Runner``)."""

    def __init__(self, stored: dict[int, LaunchView], seq: int) -> None:
        self.stored, self.seq = stored, seq
        self.stopped = False

    def run(self, searcher: _Searcher) -> None:
        while not self.stopped and (batch := searcher.next_batch()):
            if _matched(self.stored, self.seq, batch) < len(batch):
                self.stopped = True
                return
            searcher.feed([_replayed(self.stored[self.seq + i]) for i in range(len(batch))])
            searcher.take_verdicts()
            self.seq += len(batch)

    def reuse_own_before(self, before_seq: int) -> None:
        """The stored launches already hold the values reused (each has its own record)."""


def _stored_descent(
    stored: dict[int, LaunchView],
    row: SessionRow,
    experiment: Experiment,
    engine: EngineState,
    fed: int,
) -> list[Descent]:
    """The searches inside the merge the finished search named, as far as the stored
    launches go (a session interrupted inside a merge)."""
    options = stored_options(row.params)
    outcome = engine.outcome
    if (
        not options.descend_merges
        or row.params.get("plans")
        or experiment.target.repo is None
        or outcome is None
    ):
        return []
    runner = _StoredOnly(stored, fed)
    repo = GitRepo(experiment.target.repo)
    descents = descend(
        runner,
        repo,
        outcome,
        len(engine.path),
        options.policy(experiment),
        options.engine_inside_merges,
    )
    unfinished = next((i for i, d in enumerate(descents) if d.engine and not d.outcome), None)
    return descents if unfinished is None else descents[: unfinished + 1]


def _bracket(engine: EngineState) -> tuple[int, int] | None:
    """The last good and the first crossed configuration on the path so far (one path: the
    multi-axis search's configurations are not in path order)."""
    if not engine.in_path_order or engine.threshold is None:
        return None
    sign = -1.0 if engine.policy.higher_is_better else 1.0

    def crossed(p: int) -> bool:
        verdict = engine.verdicts[p]
        if verdict is Verdict.BAD:
            return True
        est = engine.point(p).estimate
        threshold = engine.threshold
        return (
            verdict is Verdict.INTERMEDIATE
            and est is not None
            and threshold is not None
            and sign * est.median >= sign * threshold
        )

    judged = sorted(engine.verdicts)
    hi = next((p for p in judged if crossed(p)), None)
    if hi is None:
        return None
    below = [
        p
        for p in judged
        if p < hi and engine.verdicts[p] in (Verdict.GOOD, Verdict.INTERMEDIATE) and not crossed(p)
    ]
    return (below[-1], hi) if below else None


def provisional_report(store: Store, row: SessionRow) -> Report:
    experiment = _experiment(row)
    context = experiment.context()
    configs = [Configuration.of(c, context) for c in row.path]
    options = stored_options(row.params)
    threshold = options.threshold
    proxied = experiment.target.kind == "sglang" and bool(ProxySpec.of(experiment.target.options))
    if proxied:
        # The search runs on proxy launches first (session._run_phases): they are replayed.
        configs, threshold = [c.as_proxy() for c in configs], None
    # The session's own engine and prior: replayed into another, the stored launches stop
    # matching what it asks for at the first choice the two make apart.
    policy = options.policy(experiment)
    plans = row.params.get("plans")
    engine = make_engine(configs, plans, policy, threshold, options.engine, options.prior)
    launches = session_launches(store, row.id)  # read once: the replays and the time spent
    stored = {v.seq: v for v in launches}
    fed, made = _replay(stored, engine)
    last = engine.bad_end
    pending = engine.next_batch()
    nexts = _next_launches(pending, made)
    resume = (
        "it was reset and will not finish: `bisect start` begins a new session"
        if row.status == "reset"
        else f"`{resume_command(store, row.id)}` continues it (these launches are not made again)"
    )
    descents: list[Descent] = []
    if engine.outcome is not None and not proxied:  # the proxy's later phases come first
        descents = _stored_descent(stored, row, experiment, engine, fed)
    if engine.outcome is not None:
        outcome = engine.outcome
        remaining = (
            f"the search ended after {counted(fed, 'launch')}, the session did not "
            f"(status {row.status}): its later phases remain; {resume}"
        )
    else:
        bracket = _bracket(engine)
        culprit = None
        if bracket is None:
            where = (
                "the endpoints are still being measured"
                if not engine.verdicts
                else ("no configuration has crossed the threshold yet")
            )
        elif bracket[1] - bracket[0] > 1:
            lo, hi = bracket
            where = (
                f"the step lies between positions {lo} and {hi} "
                f"({counted(hi - lo - 1, 'configuration')} between them still to judge)"
            )
        else:
            lo, hi = bracket
            a, b = engine.launches.get(lo), engine.launches.get(hi)
            effect = difference(a, b, engine.rel_sd(), 2.0) if a and b else None
            where = f"first bad so far at position {hi} of {last}"
            if effect is not None:
                culprit = Culprit(
                    engine.point(lo),
                    engine.point(hi),
                    effect,
                    False,
                    "not verified yet: the session stopped before the verification and the "
                    "crossing's audit were complete",
                )
        outcome = Outcome(
            Status.AMBIGUOUS,
            engine.threshold,
            f"provisional, after {counted(fed, 'launch')}: {where}",
            culprit,
            (),
            len(engine.verdicts),
            engine.launch_count,
            (culprit,) if culprit else (),
            None if engine.fixed_threshold else engine.threshold_interval(),
        )
        remaining = f"the session is {row.status}; the search would launch next: {nexts}; " + resume
    log_root = session_log_root(row.id, row.params.get("log_key"))
    inside = next((d.first_seq for d in descents if d.engine is not None), None)
    searched = (0, inside) if inside is not None else None
    report = build_report(store, row.id, experiment, engine, outcome, str(log_root), searched)
    report = with_descent(store, row.id, experiment, report, descents, str(log_root))
    return replace(
        report,
        status=ReportStatus.PROVISIONAL,
        remaining=remaining,
        # The time so far: a provisional report said 0:00 after four launches of 80 s each.
        time_spent_s=stage_seconds(launches),
    )
