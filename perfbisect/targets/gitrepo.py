"""The commit axis: resolving revisions, the first-parent path, and one worktree per commit."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfbisect.errors import RevisionError, StepFailed
from perfbisect.folder_lock import held


@dataclass(frozen=True)
class CommitInfo:
    """A commit as the report shows it."""

    sha: str
    subject: str
    author: str
    date: str


class GitRepo:
    def __init__(self, path: Path) -> None:
        import git  # GitPython is slow to import; only commands that touch a repo pay for it

        self.path = path
        try:
            self.repo: Any = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise RevisionError(f"{path} is not a git repository") from None
        self._errors = git.GitCommandError

    def resolve(self, rev: str) -> str:
        try:
            return str(self.repo.git.rev_parse("--verify", "--end-of-options", f"{rev}^{{commit}}"))
        except self._errors:
            raise RevisionError(f"unknown revision {rev!r} in {self.path}") from None

    def is_ancestor(self, older: str, newer: str) -> bool:
        try:
            self.repo.git.merge_base("--is-ancestor", older, newer)
        except self._errors:
            return False
        return True

    def merge_base(self, a: str, b: str) -> str | None:
        try:
            return str(self.repo.git.merge_base(a, b))
        except self._errors:
            return None

    def parents(self, sha: str) -> list[str]:
        """A commit's parents, first parent first (two or more: a merge)."""
        return [str(p.hexsha) for p in self.repo.commit(sha).parents]

    def first_parent_path(self, good: str, bad: str) -> list[str]:
        """[good, ..., bad]: bad's first-parent chain back to (excluding) what good contains."""
        if good == bad:
            raise RevisionError(f"good and bad are the same commit ({good[:12]})")
        if not self.is_ancestor(good, bad):
            base = self.merge_base(good, bad)
            where = f"their merge base is {base[:12]}" if base else "they share no history"
            raise RevisionError(
                f"good {good[:12]} is not an ancestor of bad {bad[:12]} ({where}); "
                "pick a good commit that bad contains"
            )
        out = self.repo.git.rev_list("--first-parent", "--reverse", f"{good}..{bad}")
        return [good, *out.split()]

    def touching(self, good: str, bad: str, paths: list[str]) -> set[str]:
        """The commits of good..bad's first-parent line whose change (against their first
        parent: a merge's is everything its branch brought in) touches one of ``paths``
        (git pathspecs, relative to the repository's top)."""
        out = self.repo.git.log(
            "--first-parent", "--format=%H", f"{good}..{bad}", "--", *[f":/{p}" for p in paths]
        )
        return set(out.split())

    def files_by_commit(self, good: str, bad: str) -> dict[str, set[str]]:
        """The files each commit of good..bad's first-parent line changed, against its first
        parent (a merge: everything its branch brought in)."""
        out = self.repo.git.log(
            "-m", "--first-parent", "--name-only", "--format=%x00%H", f"{good}..{bad}"
        )
        files: dict[str, set[str]] = {}
        for block in str(out).split("\0")[1:]:
            lines = [x.strip() for x in block.splitlines() if x.strip()]
            if lines:
                files.setdefault(lines[0], set()).update(lines[1:])
        return files

    def diff(self, older: str, newer: str) -> str:
        """The unified diff from ``older`` to ``newer``, without context lines."""
        return str(self.repo.git.diff("-U0", "--no-color", older, newer, "--"))

    def show(self, sha: str, path: str) -> str | None:
        """A file's text at a commit (None where it does not exist)."""
        try:
            return str(self.repo.git.show(f"{sha}:{path}"))
        except self._errors:
            return None

    def info(self, sha: str) -> CommitInfo:
        commit = self.repo.commit(sha)
        return CommitInfo(
            sha,
            commit.summary if isinstance(commit.summary, str) else commit.summary.decode(),
            f"{commit.author.name} <{commit.author.email}>",
            commit.committed_datetime.isoformat(),
        )

    def patched_worktree(self, sha: str, root: Path, patches: list[tuple[str, Path]]) -> Path:
        """A worktree at ``sha`` with ``patches`` (name, file) applied in order with
        ``git apply --index``; created once per (commit, patch set). A patch that does not
        apply is a ``StepFailed`` with git's message (the configuration becomes SKIP)."""
        if not patches:
            return self.worktree(sha, root)
        key = hashlib.sha256(
            "".join(f"{name}:{file.read_bytes().hex()}" for name, file in patches).encode()
        ).hexdigest()[:10]
        digest = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:10]
        marker = root / digest / f"{sha[:16]}-p{key}.patched"
        if not (marker.with_suffix("") / ".git").exists():
            marker.unlink(missing_ok=True)  # the worktree is (re)created: apply again
        where = self.worktree(sha, root, variant=f"-p{key}")
        if marker.exists():
            return where
        for name, file in patches:
            try:
                self.repo_at(where).git.apply("--index", str(file))
            except self._errors as exc:
                shutil.rmtree(where, ignore_errors=True)
                self.checkouts(root).git.worktree("prune")
                message = exc.stderr.strip().replace("error: ", "")
                raise StepFailed("patch", f"{name} does not apply: {message}") from None
        marker.write_text("\n".join(name for name, _ in patches))
        return where

    def repo_at(self, where: Path):  # type: ignore[no-untyped-def]
        import git

        return git.Repo(where)

    def checkouts(self, root: Path) -> Any:
        """perfbisect's own bare clone of the repository, sharing its objects (``--shared``:
        nothing is copied), where the worktrees are registered: the user's repository keeps
        its own ``git worktree list``. New commits need no fetch: their objects are found
        through the alternates link."""
        digest = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:10]
        with held(root / digest / ".lock"):
            return self._checkouts(root / digest / "checkouts.git")

    def _checkouts(self, clone: Path) -> Any:
        import git

        if not (clone / "HEAD").exists():
            clone.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(clone, ignore_errors=True)
            # Cloned aside and renamed into place: a clone killed half-way (Ctrl-C, a scancel)
            # leaves no "checkouts.git" that a later launch would take for a whole one.
            for leftover in clone.parent.glob(f"{clone.name}.partial-*"):  # under the lock
                shutil.rmtree(leftover, ignore_errors=True)
            partial = clone.with_name(f"{clone.name}.partial-{os.getpid()}")
            try:
                git.Repo.clone_from(
                    str(self.path.resolve()), str(partial), bare=True, shared=True, quiet=True
                )
            except self._errors as exc:
                shutil.rmtree(partial, ignore_errors=True)
                raise StepFailed(
                    "checkout", f"git clone --shared failed: {exc.stderr.strip()}"
                ) from None
            os.replace(partial, clone)
        return git.Repo(clone)

    def worktree(self, sha: str, root: Path, variant: str = "") -> Path:
        """A detached worktree at ``sha`` under ``root``, created once and reused (and touched,
        so that the least recently used ones are the ones evicted)."""
        digest = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:10]
        where = root / digest / f"{sha[:16]}{variant}"
        if _checked_out(where, sha):
            where.touch()
            return where
        where.parent.mkdir(parents=True, exist_ok=True)
        # Another process sharing this cache (a second session, a watcher) may be adding,
        # pruning or evicting worktrees of this repository at this moment.
        with held(root / digest / ".lock"):
            return self._add_worktree(sha, root / digest, where)

    def _add_worktree(self, sha: str, folder: Path, where: Path) -> Path:
        if _checked_out(where, sha):  # made by another process while this one waited
            where.touch()
            return where
        clone = self._checkouts(folder / "checkouts.git")
        try:
            clone.git.worktree("prune")
            if where.exists():
                # Left over from a repository that no longer exists at this path (or a broken
                # checkout): git does not know it, so it cannot remove it for us.
                shutil.rmtree(where)
                clone.git.worktree("prune")
            clone.git.worktree("add", "--detach", "--force", str(where), sha)
        except self._errors as exc:
            raise StepFailed("checkout", f"git worktree add failed: {exc.stderr.strip()}") from None
        evict_worktrees(folder, keep=MAX_WORKTREES, spare=where)
        return where


def _checked_out(where: Path, sha: str) -> bool:
    if not (where / ".git").exists():
        return False
    import git

    try:
        return bool(git.Repo(where).head.commit.hexsha == sha)
    except Exception:  # a broken worktree is recreated by the caller
        return False


MAX_WORKTREES = 48  # per repository; the least recently used beyond this are removed
EVICT_IDLE_S = 600  # never one used in the last ten minutes (another session may be on it)


def evict_worktrees(folder: Path, keep: int, spare: Path | None = None) -> list[Path]:
    """Remove the least recently used worktrees of one repository beyond ``keep``."""
    import time

    trees = sorted(
        (p for p in folder.iterdir() if p.is_dir() and (p / ".git").exists() and p != spare),
        key=lambda p: p.stat().st_mtime,
    )
    excess = len(trees) + (1 if spare else 0) - keep
    removed = []
    now = time.time()
    for tree in trees[: max(0, excess)]:
        if now - tree.stat().st_mtime < EVICT_IDLE_S:
            continue
        shutil.rmtree(tree, ignore_errors=True)
        for marker in folder.glob(f"{tree.name}*.patched"):
            marker.unlink(missing_ok=True)
        Path(f"{tree}.build.json").unlink(missing_ok=True)
        removed.append(tree)
    clone = folder / "checkouts.git"
    if removed and clone.exists():
        import subprocess

        subprocess.run(
            ["git", "--git-dir", str(clone), "worktree", "prune"], capture_output=True, timeout=60
        )
    return removed
