"""Interruptions: Ctrl-C stops the served process tree and leaves the session resumable;
kill -9 loses at most the step in flight; resume never re-measures a finished step."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import EXPERIMENT, Cli, value_repo

SLOW_MEASURE = r"""
import time
value = float(open("value").read())
time.sleep(1.2)  # slow enough that a signal lands inside a step, also on a busy machine
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


def launches(tmp_path: Path) -> list[tuple[int, int, str]]:
    db = tmp_path / "history.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("select id, seq, fingerprint from launches order by id").fetchall()
        except sqlite3.OperationalError:
            return []


def marked_processes(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def start_background(cli: Cli, *args: str) -> subprocess.Popen[str]:
    exe = shutil.which("perfbisect")
    argv = [exe] if exe else [sys.executable, "-m", "perfbisect"]
    return subprocess.Popen(
        [*argv, *args],
        cwd=cli.cwd,
        env=cli.env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_launches(tmp_path: Path, n: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while len(launches(tmp_path)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.1)


@pytest.fixture
def served(cli: Cli, tmp_path: Path) -> tuple[list[str], str]:
    repo = value_repo(tmp_path / "repo", [10.0] * 9 + [30.0] * 8, script=SLOW_MEASURE)
    marker = f"pbmarker-{uuid.uuid4().hex[:8]}"
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace(
            'measure = "python3 measure.py"',
            f'serve = "exec python3 -m http.server {{port}} --bind 127.0.0.1 --directory . # {marker}"\n'
            'ready = "http://127.0.0.1:{port}/"\nmeasure = "python3 measure.py"',
        )
    )
    return repo.shas, marker


def test_ctrl_c_then_resume(cli: Cli, tmp_path: Path, served: tuple[list[str], str]) -> None:
    shas, marker = served
    proc = start_background(cli, "bisect", "start", "--good", shas[0], "--bad", shas[-1])
    wait_for_launches(tmp_path, 3, proc)
    time.sleep(0.2)  # land inside the next step: server up, measure running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "perfbisect bisect resume 1" in err
    assert marked_processes(marker) == []
    status = cli.json("bisect", "status", "--json")
    assert status["status"] == "interrupted"
    before = launches(tmp_path)
    assert len(before) >= 3

    report = cli.json("bisect", "resume", "--json")
    assert report["status"] == "found"
    assert report["culprit"]["first_bad"] == {"commit": shas[9]}
    after = launches(tmp_path)
    assert after[: len(before)] == before  # finished steps kept, not re-measured
    seqs = [seq for _, seq, _ in after]
    assert seqs == sorted(set(seqs))  # each engine request measured once
    assert len(after) == report["launches"]
    assert marked_processes(marker) == []


def test_kill_9_loses_at_most_the_step_in_flight(
    cli: Cli, tmp_path: Path, served: tuple[list[str], str]
) -> None:
    shas, marker = served
    proc = start_background(cli, "bisect", "start", "--good", shas[0], "--bad", shas[-1])
    wait_for_launches(tmp_path, 2, proc)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)
    before = launches(tmp_path)
    deadline = time.monotonic() + 10  # children die with their parent (PR_SET_PDEATHSIG)
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked_processes(marker) == []
    report = cli.json("bisect", "resume", "1", "--json")
    assert report["status"] == "found"
    assert report["culprit"]["first_bad"] == {"commit": shas[9]}
    assert launches(tmp_path)[: len(before)] == before
    assert cli.json("bisect", "status", "1", "--json")["status"] == "finished"
    result = cli.run("bisect", "resume", "1")
    assert result.returncode == 1 and "is finished" in result.stderr


def test_reset_ends_session_but_keeps_history(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    cli.json("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[2], "--json")
    n = len(launches(tmp_path))
    assert cli.run("bisect", "reset").returncode == 0
    assert cli.json("bisect", "status", "--json")["status"] == "reset"
    assert len(launches(tmp_path)) == n
