"""Searching inside a merge: when the crossing a session names is a first-parent merge commit
(a branch merged as a whole), the commits that merge brought in are searched next, as
`git bisect` would reach them: the branch's first-parent line from the merge base
(``merge-base(M^1, M^k)``, the good end) to the merge's parent ``M^k`` (the bad end), against the
session's threshold, by the same engine, driver and store. A culprit inside that is itself a
merge is descended into again, at most ``MAX_DEPTH`` merges deep. An octopus merge's branches
are searched one after the other until one crosses alone.

The inside searches number their positions on after the session's path (each branch after the
last), so every configuration of the session has one position in the store and in every view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.session.driver import _Searcher
from perfbisect.bisect.session.engines import make_engine
from perfbisect.bisect.values import (
    LaunchRequest,
    LaunchResult,
    Outcome,
    PointResult,
    Policy,
    Status,
)
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.targets.gitrepo import GitRepo

# Merges inside merges searched, at most (a branch that merged another branch that merged ...).
MAX_DEPTH = 3


class Runner(Protocol):
    """What runs the searches inside: the session's driver (``driver._Driver``), or a
    benchmark's simulated machine."""

    seq: int  # launches so far

    def run(self, searcher: _Searcher) -> None: ...
    def reuse_own_before(self, before_seq: int) -> None: ...


@dataclass(frozen=True)
class Branch:
    """One line a merge brought in: from the merge base to the merge's ``parent``-th parent."""

    merge: str
    parent: int  # 2 for a two-parent merge; 3 and on are an octopus merge's further branches
    base: str | None  # None: the branch shares no history with the first parent
    head: str
    commits: tuple[str, ...]  # [base, ..., head] in the branch's first-parent order; () if none


def merge_branches(repo: GitRepo, sha: str) -> list[Branch]:
    """The branches a merge commit brought in (none when ``sha`` is no merge). A parent that
    the first parent already contains brought in nothing (its commits are ``()``)."""
    parents = repo.parents(sha)
    out = []
    for k, head in enumerate(parents[1:], start=2):
        base = repo.merge_base(parents[0], head)
        if base is None or base == head:
            out.append(Branch(sha, k, base, head, ()))
            continue
        out.append(Branch(sha, k, base, head, tuple(repo.first_parent_path(base, head))))
    return out


class Shifted:
    """A search whose positions are numbered ``offset`` on: the driver records its launches
    and verdicts at positions no other search of the session uses."""

    def __init__(self, engine: EngineState, offset: int) -> None:
        self.engine, self.offset = engine, offset

    def next_batch(self) -> list[LaunchRequest]:
        return [replace(r, position=r.position + self.offset) for r in self.engine.next_batch()]

    def feed(self, results: Sequence[LaunchResult]) -> None:
        self.engine.feed(results)

    def take_verdicts(self) -> list[PointResult]:
        return [replace(p, position=p.position + self.offset) for p in self.engine.take_verdicts()]


@dataclass
class Descent:
    """One branch of a merge: its inside search (``engine``: None where there was nothing to
    search) and the session's launches [first_seq, end_seq) it ran."""

    branch: Branch
    depth: int
    merge_config: Configuration
    merge_position: int  # the merge's position in the session (numbered on, when nested)
    offset: int  # the session position of the branch's first commit (its merge base)
    engine: EngineState | None = None
    first_seq: int = 0
    end_seq: int = 0

    @property
    def outcome(self) -> Outcome | None:
        return self.engine.outcome if self.engine is not None else None

    @property
    def found(self) -> bool:
        o = self.outcome
        return o is not None and o.status is Status.FOUND and o.culprit is not None


def descend(
    driver: Runner,
    repo: GitRepo,
    outcome: Outcome,
    path_length: int,
    policy: Policy,
    kind: str = "model",
) -> list[Descent]:
    """Search inside the merge the session's crossing is, and inside the merge found there,
    and so on (``MAX_DEPTH``); every branch searched or passed over, outermost first."""
    try:
        return _descend(driver, repo, outcome, path_length, policy, kind)
    finally:
        driver.reuse_own_before(-1)  # later phases launch anew


def _descend(
    driver: Runner,
    repo: GitRepo,
    outcome: Outcome,
    path_length: int,
    policy: Policy,
    kind: str,
) -> list[Descent]:
    culprit = outcome.culprit
    if outcome.status is not Status.FOUND or culprit is None:
        return []
    config, position = culprit.first_bad.config, culprit.first_bad.position
    if config.get(COMMIT_AXIS) is None:
        return []
    offset = path_length
    out: list[Descent] = []
    for depth in range(1, MAX_DEPTH + 1):
        inner: Descent | None = None
        for branch in merge_branches(repo, str(config.get(COMMIT_AXIS))):
            descent = Descent(branch, depth, config, position, offset)
            out.append(descent)
            if len(branch.commits) < 2:
                continue
            path = [config.with_value(COMMIT_AXIS, sha) for sha in branch.commits]
            # The same threshold and engine as the session's: the inside search asks which
            # commit of the branch crosses the line the merge crossed, and names it on the
            # same evidence (a rule engine inside a model session claimed what the model
            # would not on a machine whose load comes and goes).
            descent.engine = make_engine(path, None, policy, outcome.threshold, kind)
            # Launches the searches before made stand in for the same configurations' launches
            # inside (the merge base is often on the path searched already).
            driver.reuse_own_before(driver.seq)
            descent.first_seq = driver.seq
            driver.run(Shifted(descent.engine, offset))
            descent.end_seq = driver.seq
            offset += len(path)
            if descent.found:
                inner = descent
                break
        if inner is None or inner.engine is None:
            return out
        inside = inner.outcome.culprit if inner.outcome else None
        assert inside is not None
        config, position = inside.first_bad.config, inside.first_bad.position + inner.offset
    return out
