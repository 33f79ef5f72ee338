"""Several processes sharing one cache (two sessions on one machine, a watcher beside a
session): each must get its worktree. Before the cache's per-repository lock, six processes
asking at once for worktrees of one new repository failed in every round (a clone made twice,
a half-made clone read as a repository, ``git worktree add`` racing a prune)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import make_repo

from perfbisect.errors import StepFailed
from perfbisect.folder_lock import held

ASK = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from perfbisect.targets.gitrepo import GitRepo
    tree = GitRepo(Path(sys.argv[1])).worktree(sys.argv[3], Path(sys.argv[2]))
    print((tree / "value").read_text())
    """
)


@pytest.mark.parametrize("round_", range(3))
def test_processes_sharing_a_cache_each_get_their_worktree(tmp_path: Path, round_: int) -> None:
    repo = make_repo(tmp_path / "repo", [{"value": str(i)} for i in range(6)])
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ASK, str(repo.path), str(cache), sha],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for sha in repo.shas
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err for _out, err in results]
    assert [out.strip() for out, _err in results] == [str(i) for i in range(6)]


def test_a_lock_held_too_long_names_its_file(tmp_path: Path) -> None:
    lock = tmp_path / "repo" / ".lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from perfbisect.folder_lock import held\n"
            "with held(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(30)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with (
            pytest.raises(StepFailed, match=r"\.lock stayed locked by another process"),
            held(lock, timeout_s=0.5),
        ):
            pass
        assert time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with held(lock, timeout_s=5):  # the kernel released the dead holder's lock
        pass
