"""Which commits of a branch a watcher measures: the first-parent chain (a commit's place on it
is its ordinal, the same for every watcher), every commit or every Nth, or a given range."""

from __future__ import annotations

import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from perfbisect.errors import RevisionError, UsageError

GIT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BranchCommit:
    sha: str
    ordinal: int  # place on the branch's first-parent chain, 0 = its root


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise RevisionError(
            f"git {' '.join(args)} in {repo}: no answer in {GIT_TIMEOUT_S:.0f}s"
        ) from None
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()
        raise RevisionError(f"git {' '.join(args)} in {repo}: {message[-1] if message else ''}")
    return done.stdout


def branch_remote(repo: Path, branch: str) -> str | None:
    """The remote the branch tracks (``branch.<name>.remote``), if any."""
    done = subprocess.run(
        ["git", "-C", str(repo), "config", f"branch.{branch}.remote"],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
    )
    remote = done.stdout.strip()
    return remote if done.returncode == 0 and remote and remote != "." else None


def fetch(repo: Path, remote: str) -> None:
    _git(repo, "fetch", "--quiet", remote)


def branch_ref(repo: Path, branch: str, remote: str | None) -> str:
    """What the watcher reads: the remote's branch once fetched, else the local branch."""
    ref = f"refs/remotes/{remote}/{branch}" if remote else f"refs/heads/{branch}"
    check = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", ref],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
    )
    if check.returncode != 0:
        raise UsageError(f"--branch {branch!r}: {repo} has no {ref}")
    return ref


def chain(repo: Path, ref: str) -> list[BranchCommit]:
    """The first-parent chain of ``ref``, root first."""
    shas = _git(repo, "rev-list", "--first-parent", "--reverse", ref).split()
    return [BranchCommit(sha, i) for i, sha in enumerate(shas)]


def in_range(repo: Path, commits: list[BranchCommit], text: str) -> list[BranchCommit]:
    """``A..B`` (the commits after A up to B, as git reads it) or ``A...`` forms git takes;
    only the branch's first-parent commits count."""
    if ".." not in text:
        raise UsageError(f"--commits {text!r}: expected a range like v1.0..HEAD or abc123..def456")
    try:
        wanted = set(_git(repo, "rev-list", "--first-parent", text).split())
    except RevisionError as exc:
        raise UsageError(f"--commits {text!r}: {exc}") from None
    return [c for c in commits if c.sha in wanted]


def to_measure(
    commits: list[BranchCommit],
    measured: Collection[str],
    every: int,
    since_ordinal: int | None,
) -> list[BranchCommit]:
    """The commits not measured yet: every ``every``-th of the chain (by ordinal, so that every
    watcher of the branch picks the same ones), from ``since_ordinal`` on."""
    return [
        c
        for c in commits
        if c.sha not in measured
        and c.ordinal % every == 0
        and (since_ordinal is None or c.ordinal >= since_ordinal)
    ]
