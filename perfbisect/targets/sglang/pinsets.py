"""The pin sets of a commit range: for every first-parent commit from good to bad, the
environment its ``python/pyproject.toml`` asks for (deps.py), grouped so that a range of
hundreds of commits shows the few environments a bisect over it needs.

One ``git cat-file --batch`` reads every commit's project file (a range of a release to the
next is several hundred commits; one process each would dominate).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from perfbisect.errors import RevisionError, StepFailed
from perfbisect.targets.gitrepo import GitRepo
from perfbisect.targets.sglang.deps import InstallPlan, install_plan

PROJECT_FILE = "python/pyproject.toml"


@dataclass(frozen=True)
class PinSet:
    plan: InstallPlan
    commits: tuple[str, ...]  # the range's commits with this set, oldest first


@dataclass(frozen=True)
class RangePins:
    commits: tuple[str, ...]  # the first-parent path, good first
    sets: tuple[PinSet, ...]  # in order of first appearance
    unreadable: tuple[tuple[str, str], ...]  # (commit, why): no or a broken project file


def _blobs(repo: Path, commits: list[str]) -> dict[str, bytes | None]:
    query = "".join(f"{sha}:{PROJECT_FILE}\n" for sha in commits).encode()
    out = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"],
        input=query,
        capture_output=True,
        timeout=600,
        check=True,
    ).stdout
    found: dict[str, bytes | None] = {}
    pos = 0
    for sha in commits:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            found[sha] = out[pos : pos + size]
            pos += size + 1
        else:  # "<object> missing": the commit has no python/pyproject.toml
            found[sha] = None
    return found


def range_pins(repo: Path, good: str, bad: str, pins: tuple[str, ...] = ()) -> RangePins:
    """The pin sets of ``good..bad`` (first-parent), ``pins`` narrowing the key as the
    experiment's ``[target] pins`` does."""
    git = GitRepo(repo)
    path = git.first_parent_path(git.resolve(good), git.resolve(bad))
    try:
        blobs = _blobs(repo, path)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise RevisionError(f"cannot read {PROJECT_FILE} of {repo}'s commits: {exc}") from None
    by_digest: dict[str, tuple[InstallPlan, list[str]]] = {}
    unreadable = []
    for sha in path:
        blob = blobs[sha]
        if blob is None:
            unreadable.append((sha, f"no {PROJECT_FILE}"))
            continue
        try:
            plan = install_plan(blob.decode(errors="replace"), f"{sha[:12]}:{PROJECT_FILE}", pins)
        except StepFailed as exc:
            unreadable.append((sha, exc.reason))
            continue
        by_digest.setdefault(plan.digest, (plan, []))[1].append(sha)
    sets = tuple(PinSet(plan, tuple(shas)) for plan, shas in by_digest.values())
    return RangePins(tuple(path), sets, tuple(unreadable))
