"""What perfbisect keeps in its cache (``$PERFBISECT_CACHE``, default the user cache directory)
and freeing it: ``perfbisect cache list|clean``.

Kinds: ``worktrees`` (checkouts per commit and patch set, registered in perfbisect's own bare
clone of each repository, never in the user's), ``logs`` (per session), ``sglang-envs`` (one
Python environment per pinned dependency set), ``trees`` (commit trees copied for remote hosts
are on those hosts), and small working folders. Worktrees are also bounded on their own: the
least recently used beyond 48 per repository are evicted (gitrepo.evict_worktrees).
SGLang environments likewise: beyond ``[target] max_envs`` (4) per host
(targets/sglang/envs.evict_envs), and the compile caches of their pin sets (``sglang-compile``,
targets/sglang/caches.py) by the same bound.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from perfbisect.errors import UsageError
from perfbisect.paths import cache_dir

KINDS = {
    "worktrees": "git checkouts per commit and patch set",
    "logs": "launch logs per session",
    "sglang-envs": "Python environments per pinned SGLang dependency set",
    "sglang-compile": "Triton, TorchInductor and JIT kernel caches per SGLang pin set",
    "nccl": "NCCL libraries materialised from wheels",
    "sitecustomize": "generated sitecustomize folders (deleted after each launch)",
    "launch": "tmux launch folders (deleted after each launch)",
    "probes": "probe working folders (deleted after each probe)",
}


@dataclass(frozen=True)
class CacheEntry:
    kind: str
    path: str
    bytes: int
    items: int
    newest: float | None  # mtime of the newest item
    what: str


def _size(path: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path, onerror=lambda _e: None):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _items(path: Path, kind: str) -> list[Path]:
    if not path.is_dir():
        return []
    if kind == "worktrees":  # one folder per repository, worktrees inside
        return [
            t
            for repo in path.iterdir()
            if repo.is_dir()
            for t in repo.iterdir()
            if t.is_dir() and (t / ".git").exists()
        ]
    if kind in ("sglang-envs", "sglang-compile"):  # the folders; not lock files
        return [p for p in path.iterdir() if p.is_dir()]
    return list(path.iterdir())


def list_cache(root: Path | None = None) -> list[CacheEntry]:
    root = root or cache_dir()
    out = []
    for kind in sorted(
        {*KINDS, *(p.name for p in root.iterdir() if p.is_dir())} if root.is_dir() else KINDS
    ):
        path = root / kind
        if not path.exists():
            continue
        items = _items(path, kind)
        newest = max((p.stat().st_mtime for p in items), default=None)
        out.append(
            CacheEntry(kind, str(path), _size(path), len(items), newest, KINDS.get(kind, ""))
        )
    return out


def clean_cache(
    kinds: list[str], older_than_days: float | None = None, root: Path | None = None
) -> list[str]:
    """Remove the items of ``kinds`` (older than the given age, if any); what was removed."""
    root = root or cache_dir()
    unknown = [k for k in kinds if k not in KINDS and not (root / k).is_dir()]
    if unknown:
        raise UsageError(f"cache clean: unknown kind {unknown[0]!r} (known: {', '.join(KINDS)})")
    cutoff = time.time() - older_than_days * 86400 if older_than_days is not None else None
    removed: list[str] = []
    for kind in kinds:
        for item in _items(root / kind, kind):
            if cutoff is not None and item.stat().st_mtime > cutoff:
                continue
            if item.is_dir():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)
            removed.append(str(item))
        if kind == "worktrees" and (root / kind).is_dir():
            for clone in (root / kind).glob("*/checkouts.git"):
                subprocess.run(
                    ["git", "--git-dir", str(clone), "worktree", "prune"],
                    capture_output=True,
                    timeout=60,
                )
                if cutoff is None:  # everything of this repository went: the clone too
                    shutil.rmtree(clone, ignore_errors=True)
            for leftover in (root / kind).glob("*/*.patched"):
                if not leftover.with_suffix("").exists():
                    leftover.unlink(missing_ok=True)
            for leftover in (root / kind).glob("*/*.build.json"):
                if not Path(str(leftover)[: -len(".build.json")]).exists():
                    leftover.unlink(missing_ok=True)
    return removed
