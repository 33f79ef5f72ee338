"""Several sessions on one history database: what must not happen is two sessions measuring
on the same host at once. Real processes hold real sessions (SQLite here; the same tests run
on a real PostgreSQL server in test_postgres.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXPERIMENT, Cli, make_repo, wait_for_session

from perfbisect.errors import SessionBusy
from perfbisect.store.database import Store
from perfbisect.store.records import HostWait, claim_new_session

HOLDER = textwrap.dedent(
    """
    import sys, time
    from perfbisect.store.database import Store
    from perfbisect.store.records import FINISHED, claim_new_session, set_session_status
    store = Store(sys.argv[1])
    sid = claim_new_session(store, name=None, good={}, bad={}, params={}, path=[],
                            experiment_path="x", experiment_text="", hosts=[sys.argv[2]])
    print(sid, flush=True)
    time.sleep(float(sys.argv[3]))
    set_session_status(store, sid, FINISHED)
    """
)


def _claim(store: Store, host: str, wait: HostWait) -> int:
    return claim_new_session(
        store,
        name=None,
        good={},
        bad={},
        params={},
        path=[],
        experiment_path="x",
        experiment_text="",
        hosts=[host],
        wait=wait,
    )


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Another process that runs a session measuring on ssh://gpu-a for 4 seconds."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    yield from hold(url, "ssh://gpu-a", 4.0)


def hold(url: str, host: str, seconds: float) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    Store(url)  # migrated before the other process starts
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, host, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "1"
        yield url, proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def check_host_locks(url: str, proc: subprocess.Popen[str]) -> None:
    store = Store(url)
    # Another host: at once, while session 1 runs.
    t0 = time.monotonic()
    assert _claim(store, "ssh://gpu-b", HostWait(wait=False)) == 2
    assert time.monotonic() - t0 < 3
    # The busy host with --no-wait: refused, naming the session that holds it.
    with pytest.raises(SessionBusy) as refused:
        _claim(store, "ssh://gpu-a", HostWait(wait=False))
    message = str(refused.value)
    assert "host ssh://gpu-a is in use by session 1" in message and str(proc.pid) in message
    # Waiting: told once, and granted when session 1 ends.
    told: list[str] = []
    sid = _claim(store, "ssh://gpu-a", HostWait(poll_s=0.2, on_wait=told.append))
    assert proc.poll() is not None or proc.wait(timeout=10) == 0
    assert sid not in (1, 2) and len(told) == 1 and "session 1" in told[0]


def test_sessions_on_other_hosts_proceed_and_a_busy_host_waits(
    holder: tuple[str, subprocess.Popen[str]],
) -> None:
    check_host_locks(*holder)


def test_a_wait_has_a_timeout(holder: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = holder
    with pytest.raises(SessionBusy, match="gave up waiting after 1s"):
        _claim(Store(url), "ssh://gpu-a", HostWait(timeout_s=1, poll_s=0.2))


def test_a_second_bisect_on_the_same_host_waits_then_completes(cli: Cli, tmp_path: Path) -> None:
    slow = "import time\ntime.sleep(1.5)\nprint('verify_ms=' + open('value').read())\n"
    repo = make_repo(tmp_path / "repo", [{"value": "10", "measure.py": slow}, {"value": "30"}])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    argv = [sys.executable, "-m", "perfbisect", "bisect", "start", "--good", repo.shas[0]]
    first = subprocess.Popen(
        [*argv, "--bad", repo.shas[1], "--json"],
        cwd=tmp_path,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the second starts once the first holds the host (a fixed sleep raced a loaded machine)
        assert wait_for_session(tmp_path, timeout=60) == 1, "the first session never started"
        second = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1], "--json")
        out, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, out
    assert second.returncode == 0, second.stderr
    assert "waiting: host local:" in second.stderr and "in use by session 1" in second.stderr
    log = cli.json("query", "history", "--json")
    rows = log if isinstance(log, list) else log["launches"]
    first_end = max(r["started_at"] for r in rows if r["session"] == 1)
    second_start = min(r["started_at"] for r in rows if r["session"] == 2)
    assert second_start > first_end  # never measuring on the same host at once
