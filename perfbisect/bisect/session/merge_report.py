"""The report of a session whose crossing is a merge commit: the session's report with the
searches inside the merge added. Each branch becomes a ``MergeDescent``; the configurations
the inside searches judged join the report's path at their own positions (numbered on after
the session's path), so every view shows them with the same numbers; the message names both
the merge and the commit inside it that crosses."""

from __future__ import annotations

from dataclasses import replace

from perfbisect.bisect.report.report import build_report
from perfbisect.bisect.report.report_model import MergeDescent, Report, Step, counted
from perfbisect.bisect.session.merges import MAX_DEPTH, Descent
from perfbisect.bisect.values import Status
from perfbisect.config import COMMIT_AXIS
from perfbisect.experiment import Experiment
from perfbisect.store.database import Store
from perfbisect.targets.gitrepo import CommitInfo, GitRepo


def _shifted(report: Report, offset: int) -> Report:
    """An inside search's report at the session's positions."""

    def step(s: Step | None) -> Step | None:
        return replace(s, position=s.position + offset) if s is not None else None

    return replace(
        report,
        path=tuple(replace(p, position=p.position + offset) for p in report.path),
        culprit=step(report.culprit),
        steps=tuple(replace(s, position=s.position + offset) for s in report.steps),
    )


def _label(repo: GitRepo, sha: str) -> str:
    try:
        subject = repo.info(sha).subject
    except Exception:  # the repository may have moved since the session ran
        return sha[:12]
    return f"{sha[:12]} ({subject})"


def _info(repo: GitRepo, sha: str) -> CommitInfo | None:
    try:
        return repo.info(sha)
    except Exception:  # the repository may have moved since the session ran
        return None


def _what(repo: GitRepo, d: Descent, inside: Report | None, threshold: float | None) -> str:
    """What became of one branch, in a sentence."""
    b = d.branch
    merge = _label(repo, b.merge)
    line = f"parent {b.parent}, {counted(max(0, len(b.commits) - 1), 'commit')}"
    if b.base is None:
        return (
            f"the merge {merge} brought in {b.head[:12]}, whose history it shares nothing "
            "with: there is nothing to search inside"
        )
    if not b.commits:
        return (
            f"the merge {merge}'s parent {b.parent} ({b.head[:12]}) is already in its first "
            "parent's history: the merge brought in no commit, so the change is the merge's "
            "own (its conflict resolution)"
        )
    outcome = d.outcome
    if outcome is None or inside is None:
        return (
            f"the search inside the merge {merge} ({line} from the merge base {b.base[:12]}) "
            f"is under way: {counted(d.end_seq - d.first_seq, 'launch')} so far"
        )
    if d.found and inside.culprit is not None:
        sha = inside.culprit.first_bad.get(COMMIT_AXIS, "")
        return (
            f"inside the merge {merge} ({line} from the merge base {b.base[:12]}): commit "
            f"{_label(repo, sha)} crosses"
        )
    if outcome.status is Status.NOT_REPRODUCED and _base_crossed(inside, d):
        return (
            f"inside the merge {merge} ({line}): the merge base {b.base[:12]} is already past "
            f"the threshold, though the merge's first parent is not; nothing inside is named "
            f"({outcome.message})"
        )
    if outcome.status is Status.NOT_REPRODUCED:
        head = inside.point(d.offset + len(b.commits) - 1)
        shown = (
            f" ({head.ms.median:.4g} {inside.metric}, threshold {threshold:.4g})"
            if head is not None and head.ms is not None and threshold is not None
            else ""
        )
        return (
            f"the branch merged by {merge} ({line}) does not cross on its own: its head "
            f"{b.head[:12]} is not past the threshold{shown}, so the regression comes from "
            f"the branch together with the mainline since the merge base {b.base[:12]}; the "
            f"merge is the answer ({outcome.message})"
        )
    return f"inside the merge {merge} ({line}): {outcome.message}"


def _base_crossed(inside: Report, d: Descent) -> bool:
    base = inside.point(d.offset)
    return base is not None and base.verdict.value in ("bad", "intermediate")


def _word(d: Descent) -> str:
    outcome = d.outcome
    if d.engine is not None and outcome is None:
        return "under-way"  # a provisional report: the session stopped inside
    if outcome is None:
        return "nothing-to-search"
    if d.found:
        return "found"
    if outcome.status is Status.NOT_REPRODUCED:
        return "branch-alone-does-not-cross"
    return "ambiguous"


def _headline(repo: GitRepo, rows: list[MergeDescent]) -> str:
    """ "the merge X crosses; inside it, commit Y" (a merge inside: "inside it, the merge Z;
    inside that, commit Y"); what stopped the descent where no commit inside crosses."""
    parts = [f"the merge {_label(repo, rows[0].merge.get(COMMIT_AXIS, ''))} crosses"]
    found = [r for r in rows if r.culprit is not None]
    for i, r in enumerate(found):
        assert r.culprit is not None
        sha = r.culprit.first_bad.get(COMMIT_AXIS, "")
        deeper = any(x.depth == r.depth + 1 for x in rows)
        where = "inside it" if i == 0 else "inside that"
        parts.append(f"{where}, {'the merge' if deeper else 'commit'} {_label(repo, sha)}")
    last = rows[-1]
    if last.culprit is None:
        parts.append(last.message)
    elif last.depth == MAX_DEPTH and len(repo.parents(last.culprit.first_bad[COMMIT_AXIS])) > 1:
        parts.append(f"that commit is a merge too; merges deeper than {MAX_DEPTH} are not searched")
    return "; ".join(parts)


def with_descent(
    store: Store,
    session_id: int,
    experiment: Experiment,
    report: Report,
    descents: list[Descent],
    log_dir: str | None,
) -> Report:
    """``report`` (the session's search) with the searches inside its merge added."""
    if not descents or experiment.target.repo is None:
        return report
    repo = GitRepo(experiment.target.repo)
    path, rows = list(report.path), []
    launches, evaluations, failed = report.launches, report.evaluations, report.failed_launches
    warnings, unresolved, seen = list(report.warnings), list(report.unresolved), list(report.seen)
    for d in descents:
        inside: Report | None = None
        if d.engine is not None and d.engine.outcome is not None:
            inside = _shifted(
                build_report(
                    store,
                    session_id,
                    experiment,
                    d.engine,
                    d.engine.outcome,
                    log_dir,
                    seqs=(d.first_seq, d.end_seq),
                ),
                d.offset,
            )
            path.extend(inside.path)
            launches += inside.launches
            evaluations += inside.evaluations
            failed += inside.failed_launches
            short = d.branch.merge[:12]
            warnings += [f"inside the merge {short}: {w}" for w in inside.warnings]
            unresolved += inside.unresolved
            seen += inside.seen
        b = d.branch
        rows.append(
            MergeDescent(
                depth=d.depth,
                merge=d.merge_config.as_dict(),
                merge_position=d.merge_position,
                parent=b.parent,
                base=b.base or "",
                head=b.head,
                commits=max(0, len(b.commits) - 1),
                outcome=(
                    "base-crosses"
                    if inside is not None
                    and d.outcome is not None
                    and d.outcome.status is Status.NOT_REPRODUCED
                    and _base_crossed(inside, d)
                    else _word(d)
                ),
                message=_what(repo, d, inside, report.threshold_ms),
                positions=(d.offset, d.offset + len(b.commits) - 1) if d.engine else None,
                culprit=inside.culprit if inside is not None and d.found else None,
                merge_commit=_info(repo, b.merge),
                launches=inside.launches if inside is not None else 0,
            )
        )
    return replace(
        report,
        path=tuple(path),
        descent=tuple(rows),
        message=f"{report.message}; {_headline(repo, rows)}",
        launches=launches,
        evaluations=evaluations,
        failed_launches=failed,
        warnings=tuple(warnings),
        unresolved=tuple(unresolved),
        seen=tuple(seen),
    )


def undescended_warning(experiment: Experiment, report: Report) -> str | None:
    """Said when the culprit is a merge and the search inside it was turned off."""
    sha = report.culprit.first_bad.get(COMMIT_AXIS) if report.culprit else None
    if sha is None or experiment.target.repo is None:
        return None
    try:
        parents = GitRepo(experiment.target.repo).parents(sha)
    except Exception:  # the repository may have moved since the session ran
        return None
    if len(parents) < 2:
        return None
    return (
        f"the culprit {sha[:12]} is a merge commit; the commits it brought in were not searched "
        "(--no-descend-merges): without it the search goes on inside the branch"
    )
