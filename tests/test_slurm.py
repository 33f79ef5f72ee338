"""Launches as Slurm jobs on a real one-node Slurm cluster (tests/slurm_fixture.py: Debian's
slurmctld/slurmd, no accounting, 3 CPUs declared so three one-CPU jobs run at once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import slurm_fixture
from conftest import EXPERIMENT, Cli, make_repo

# One worker runs this module under pytest-xdist: its fixture is set up once, not per worker.
pytestmark = pytest.mark.xdist_group("slurm")

MEASURE = """\
import os, time
time.sleep(float(os.environ.get("PB_SLEEP", "0.5")))
value = float(open("value").read())
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[slurm_fixture.SlurmCluster]:
    why = slurm_fixture.available()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI must run the Slurm tests: {why}")
    if why:
        pytest.skip(why)
    cluster = slurm_fixture.start()
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        cluster.stop()


def _experiment(
    tmp_path: Path, slots: int, sleep: float = 0.5, good: int = 20, bad: int = 12
) -> list[str]:
    values = [10.0] * good + [30.0] * bad
    repo = make_repo(
        tmp_path / "repo",
        [
            {"value": str(v), **({"measure.py": MEASURE} if i == 0 else {})}
            for i, v in enumerate(values)
        ],
    )
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT
        + f'\n[executor]\nkind = "slurm"\nslots = {slots}\npartition = "{slurm_fixture.PARTITION}"\n'
        f"cpus_per_task = 1\nexclusive = false\ntime_limit_min = 10\n\n"
        f'[env]\nPB_SLEEP = "{sleep}"\n'
    )
    return repo.shas


def _cli(cli: Cli, slurm: slurm_fixture.SlurmCluster) -> Cli:
    return Cli({**cli.env, **slurm.env}, cli.cwd)


def test_three_slots_on_slurm_name_the_culprit_in_fewer_rounds(
    cli: Cli, tmp_path: Path, slurm: slurm_fixture.SlurmCluster
) -> None:
    run = _cli(cli, slurm)
    shas = _experiment(tmp_path, slots=3)
    reports = {}
    for slots in (1, 3):
        reports[slots] = run.json(
            "bisect",
            "start",
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--slots",
            str(slots),
            "--fresh",
            "--json",
            timeout=900,
        )
        assert reports[slots]["status"] == "found", reports[slots]["message"]
        assert reports[slots]["culprit"]["first_bad"]["commit"] == shas[20]
    assert reports[3]["rounds"] < reports[1]["rounds"]
    rows = run.json("query", "history", "--json")
    rows = rows if isinstance(rows, list) else rows["launches"]
    assert all(r["host"] == f"slurm://{slurm_fixture.NODE}" for r in rows if r["status"] == "ok")
    assert all(r["job_id"] for r in rows if r["status"] == "ok")
    assert slurm.squeue() == []  # nothing left in the queue


def _running_jobs(slurm: slurm_fixture.SlurmCluster) -> list[str]:
    return [line.split()[0] for line in slurm.squeue() if line.endswith("RUNNING")]


def _wait_for(condition, timeout: float = 120):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def _start_bisect(run: Cli, tmp_path: Path, shas: list[str]) -> subprocess.Popen[str]:
    """`bisect start` of the whole path in its own process (the test signals or waits on it)."""
    argv = [sys.executable, "-m", "perfbisect", "bisect", "start", "--good", shas[0]]
    return subprocess.Popen(
        [*argv, "--bad", shas[-1], "--json"],
        cwd=tmp_path,
        env=run.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_job_cancelled_from_outside_is_retried_not_a_verdict(
    cli: Cli, tmp_path: Path, slurm: slurm_fixture.SlurmCluster
) -> None:
    shas = _experiment(tmp_path, slots=1, sleep=3, good=3, bad=3)
    first, report, notes = _cancel_the_first_job(
        _cli(cli, slurm), tmp_path, shas, slurm, lambda: bool(_running_jobs(slurm))
    )
    assert report["culprit"]["first_bad"]["commit"] == shas[3]
    assert report["failed_launches"] == 0  # the cancelled job is not a failed launch
    assert any(
        f"slurm job {first} ended CANCELLED" in f and "submitted once more" in f for f in notes
    ), notes
    assert slurm.squeue() == []


def _cancel_the_first_job(
    run: Cli,
    tmp_path: Path,
    shas: list[str],
    slurm: slurm_fixture.SlurmCluster,
    ready: Callable[[], bool],
) -> tuple[str, dict[str, Any], list[str]]:
    """`bisect start` of the whole path; once ``ready``, the first running job is cancelled
    from outside. The job, the session's report and every launch's notes."""
    proc = _start_bisect(run, tmp_path, shas)
    try:
        _wait_for(ready)
        first = _running_jobs(slurm)[0]
        subprocess.run(["scancel", first], env={**os.environ, **slurm.env}, check=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    log = json.loads(run.run("bisect", "log", "--json").stdout)
    launches = log["launches"] if isinstance(log, dict) else log
    return first, json.loads(out), [f for v in launches for f in v["flags"]]


def test_a_job_cancelled_in_its_build_is_retried_and_its_build_not_kept_as_failed(
    cli: Cli, tmp_path: Path, slurm: slurm_fixture.SlurmCluster
) -> None:
    """CI caught this one by chance: a scancel that lands while the job's `git clone` or build
    runs kills that child, the job's Python still reports "checkout failed", and the
    configuration was skipped. Here the first build waits for the scancel, deterministically."""
    run = _cli(cli, slurm)
    shas = _experiment(tmp_path, slots=1, good=2, bad=2)
    flag = tmp_path / "slow-build"
    flag.write_text("")
    started = tmp_path / "build-started"
    experiment = tmp_path / "perfbisect.toml"
    experiment.write_text(
        experiment.read_text().replace(
            "timeout_s = 60\n",
            "timeout_s = 60\n"
            f'build = "if [ -e {flag} ]; then rm {flag}; touch {started}; sleep 60; fi"\n',
        )
    )
    first, report, notes = _cancel_the_first_job(run, tmp_path, shas, slurm, started.exists)
    assert report["culprit"]["first_bad"]["commit"] == shas[2]
    assert report["failed_launches"] == 0
    assert any(
        f"slurm job {first} ended CANCELLED (its build failed" in f and "once more" in f
        for f in notes
    ), notes
    assert slurm.squeue() == []


def test_ctrl_c_leaves_no_job_in_the_queue(
    cli: Cli, tmp_path: Path, slurm: slurm_fixture.SlurmCluster
) -> None:
    run = _cli(cli, slurm)
    shas = _experiment(tmp_path, slots=3, sleep=30)
    proc = _start_bisect(run, tmp_path, shas)
    try:
        _wait_for(lambda: _running_jobs(slurm))
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    _wait_for(lambda: slurm.squeue() == [], timeout=60)
    status = run.json("bisect", "status", "--json")
    assert status["status"] == "interrupted"  # resumable
