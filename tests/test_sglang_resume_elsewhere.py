"""A GPU bisect of SGLang outlives one device call (a launch is 40-100 s to ready there): the
session is stopped by SIGINT between calls, its SQLite database carried back, and the next call
resumes it from that copy, in another folder with a fresh cache (docs/examples/sglang_real/
gpu_real.sh). Here with the stand-in SGLang server (tests/standin_sglang): the provisional
report in between shows the verdicts reached so far, and the resumed session keeps them,
measures none of the finished launches again and names the same culprit."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Cli
from test_sglang_e2e import served_python  # noqa: F401 (a fixture)

pytestmark = pytest.mark.xdist_group("sglang_e2e")

# An ordered axis of six settings; from "d" on the verify runs outside CUDA graphs (2 -> 6 ms).
EXPERIMENT = """
[target]
kind = "sglang"
build = "installed"
python = "{python}"
model = "{models}/target"
draft_model = "{models}/draft"
tp = 1
requests = 4
concurrency = 2
max_new_tokens = 16
warmup_requests = 1
timeout_s = 60

[target.axis_args.setting]
d = ["--disable-cuda-graph"]
e = ["--disable-cuda-graph"]
f = ["--disable-cuda-graph"]

[axes.custom.setting]
values = ["a", "b", "c", "d", "e", "f"]
ordered = true
"""


def _rows(db: Path, query: str) -> list[tuple[object, ...]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute(query).fetchall()
        except sqlite3.OperationalError:  # not made yet
            return []


def _verdicts(report: dict[str, object]) -> dict[str, str]:
    path = report["path"]
    assert isinstance(path, list)
    return {p["config"]["setting"]: p["verdict"] for p in path if p["verdict"] != "unknown"}


def _launched(report: dict[str, object]) -> dict[str, int]:
    path = report["path"]
    assert isinstance(path, list)
    return {p["config"]["setting"]: len(p["launch_values"]) for p in path}


def test_interrupted_session_resumed_from_a_copy_of_its_database_elsewhere(
    cli: Cli,
    tmp_path: Path,
    served_python: str,  # noqa: F811
) -> None:
    here = tmp_path / "call1"
    there = tmp_path / "call2"  # the next device call: another folder, another cache
    here.mkdir()
    there.mkdir()
    models = tmp_path / "models"
    for name in ("target", "draft"):
        (models / name).mkdir(parents=True)
    experiment = here / "perfbisect.toml"
    experiment.write_text(EXPERIMENT.format(python=served_python, models=models))
    db = here / "pb.sqlite"
    # As gpu_real.sh sets them: the database as a plain path
    env = {**cli.env, "PERFBISECT_DB": str(db), "PERFBISECT_CACHE": str(here / "cache")}
    exe = shutil.which("perfbisect")
    argv = [exe] if exe else [sys.executable, "-m", "perfbisect"]
    proc = subprocess.Popen(
        [*argv, "bisect", "start", "-c", str(experiment), "--good", "setting=a", "--bad",
         "setting=f"],
        cwd=here, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # Stop it once the endpoints have verdicts and the search has launched past them.
        deadline = time.monotonic() + 240
        while not (
            len(_rows(db, "select id from steps")) >= 2
            and len(_rows(db, "select id from launches")) >= 5
        ):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no verdicts within 240 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "`perfbisect bisect resume 1` continues it" in err, err
    before = _rows(db, "select id, seq, fingerprint, value from launches order by id")

    # The provisional report of the interrupted session: the verdicts so far (exit 5).
    shown = subprocess.run(
        [*argv, "bisect", "report", "--json"],
        cwd=here, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 5, shown.stderr
    provisional = json.loads(shown.stdout)
    assert provisional["status"] == "provisional"
    so_far = _verdicts(provisional)
    assert so_far.get("a") == "good" and so_far.get("f") == "bad", provisional["path"]
    assert "continues it" in provisional["remaining"]
    text = subprocess.run(
        [*argv, "bisect", "report"],
        cwd=here, env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert "provisional" in text and " good " in text and " bad " in text, text

    # The next call: the database carried there (the file alone, as gpu_real.sh copies it:
    # every perfbisect command leaves its whole history in it, none in a -wal file beside it),
    # resumed from that folder with a fresh cache.
    shutil.copy(db, there / "pb.sqlite")
    carried = _rows(there / "pb.sqlite", "select id, seq, fingerprint, value from launches")
    assert sorted(carried) == sorted(before)
    copy = str(there / "pb.sqlite")
    later = {**env, "PERFBISECT_DB": copy, "PERFBISECT_CACHE": str(there / "cache")}
    # The copy alone, read in the other folder, holds the same session: the same verdicts on
    # the same launches as the provisional report of the original.
    seen_there = subprocess.run(
        [*argv, "--db", copy, "bisect", "report", "--json"],
        cwd=there, env=later, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert seen_there.returncode == 5, seen_there.stderr
    copied = json.loads(seen_there.stdout)
    assert _verdicts(copied) == so_far
    assert _launched(copied) == _launched(provisional)
    done = subprocess.run(
        [*argv, "--db", copy, "bisect", "resume", "1", "--json"],
        cwd=there, env=later, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["first_bad"] == {"setting": "d"}
    assert report["culprit"]["last_good"] == {"setting": "c"}
    final = _verdicts(report)
    before_n, after_n = _launched(provisional), _launched(report)
    for setting, verdict in so_far.items():
        # A verdict reached before the stop stands where nothing new was measured on it: a
        # configuration the resumed session launched again (the culprit's verification pair)
        # is judged on its launches since. "unclear" is not a verdict to keep: on an ordered
        # axis one posterior covers every point, so the launches of its neighbours may decide
        # it (seen on a loaded CI machine: "d" unclear after its first launch, bad once "e" and
        # the pair around the culprit were measured). A good that turns bad, or the reverse,
        # with no launch of its own since, would be a verdict the stop got wrong.
        if after_n.get(setting) == before_n.get(setting) and verdict != "unclear":
            assert final[setting] == verdict, (setting, so_far, final)
    assert final["a"] == "good" and final["f"] == "bad", final
    after = _rows(
        there / "pb.sqlite", "select id, seq, fingerprint, value from launches order by id"
    )
    assert after[: len(before)] == before  # finished launches kept, never measured again
    assert len(after) > len(before)
    # the new launches ran under the new cache, the original one was not touched again
    assert (there / "cache" / "logs").is_dir()
    assert not os.path.exists(there / "cache" / "worktrees")  # build = installed: no checkouts
    assert _rows(db, "select count(*) from launches")[0][0] == len(before)
