"""Bad input: one clear line naming the culprit, a non-zero exit code, nothing half-stored."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import (
    EXPERIMENT,
    Cli,
    make_repo,
    process_running,
    sessions_in,
    value_repo,
    wait_for_process,
    wait_for_session,
)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("perfbisect: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def setup(cli: Cli, tmp_path: Path) -> tuple[Cli, list[str]]:
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    return cli, repo.shas


def test_unknown_revision(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    result = cli.run("bisect", "start", "--good", "nope", "--bad", shas[2])
    assert result.returncode == 2  # input to fix, as the README says
    assert "unknown revision 'nope'" in one_line_error(result)
    assert sessions_in(tmp_path) == 0


def test_good_equals_bad(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    result = cli.run("bisect", "start", "--good", shas[1], "--bad", shas[1][:8])
    assert result.returncode == 2
    assert "--good and --bad name the same configuration" in one_line_error(result)
    assert sessions_in(tmp_path) == 0


def test_good_not_ancestor_names_merge_base(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0, 10.0])
    repo.git("checkout", "-q", "-b", "side", repo.shas[0])
    (repo.path / "value").write_text("11")
    repo.git("commit", "-qam", "side")
    side = repo.git("rev-parse", "HEAD")
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    result = cli.run("bisect", "start", "--good", side, "--bad", "main")
    assert result.returncode == 2
    line = one_line_error(result)
    assert "is not an ancestor of bad" in line and f"merge base is {repo.shas[0][:12]}" in line
    assert sessions_in(tmp_path) == 0


def test_malformed_experiment(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace("[metric]", "[metric]\nunits = 'ms'")
    )
    result = cli.run("bisect", "start", "--good", shas[0], "--bad", shas[2])
    assert result.returncode == 2
    assert "perfbisect.toml:8: key 'metric.units': unknown key" in one_line_error(result)
    assert sessions_in(tmp_path) == 0


def test_json_errors_are_json_on_stdout(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    result = cli.run("bisect", "start", "--good", "nope", "--bad", shas[2], "--json")
    assert result.returncode == 2
    import json

    error = json.loads(result.stdout)
    assert error["exit_code"] == 2 and "unknown revision 'nope'" in error["error"]
    assert error["kind"] == "RevisionError"
    assert "unknown revision" in one_line_error(result)  # and the usual line on stderr


def test_bad_spec_is_usage_error(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    result = cli.run("bisect", "start", "--good", f"{shas[0]},,x", "--bad", shas[2])
    assert result.returncode == 2
    assert "has an empty item" in one_line_error(result)
    result = cli.run("bisect", "start", "--good", f"commit={shas[0]},flag=a", "--bad", shas[2])
    assert result.returncode == 2
    assert "unknown axis 'flag'" in one_line_error(result)
    assert sessions_in(tmp_path) == 0


def test_pattern_matching_nothing_is_an_input_error_after_both_endpoints(
    setup: tuple[Cli, list[str]], tmp_path: Path
) -> None:
    # Once both endpoints ran and the pattern matched nothing in either, the experiment is at
    # fault: exit 2 with the output tail said once, not exit 3 after a third launch with the
    # tail printed four times.
    cli, shas = setup
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace("verify_ms=([0-9.]+)", "tok_s=([0-9.]+)")
    )
    result = cli.run("bisect", "start", "--good", shas[0], "--bad", shas[2], "--json")
    assert result.returncode == 2, result.stderr
    import json

    error = json.loads(result.stdout)
    assert error["kind"] == "MetricMatchedNothing" and error["exit_code"] == 2
    assert "metric pattern 'tok_s=([0-9.]+)' matched nothing" in error["error"]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("perfbisect: error: ") and "perfbisect.toml" in last
    assert "verify_ms=30.3000" in last  # the bad endpoint's output tail, once
    assert result.stderr.count("verify_ms=") == 5, result.stderr  # its 5 lines, nothing more
    with sqlite3.connect(tmp_path / "history.db") as conn:
        assert conn.execute("select count(*) from launches").fetchone()[0] == 2
        assert conn.execute("select status from sessions").fetchall() == [("failed",)]


def test_measure_command_not_found(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace("python3 measure.py", "no-such-bench --x")
    )
    result = cli.run("bisect", "start", "--good", shas[0], "--bad", shas[2])
    assert result.returncode == 3
    assert "exit 127" in result.stdout and "not found" in result.stdout


def test_unwritable_database(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, shas = setup
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = cli.run(
        "--db",
        str(blocker / "sub" / "history.db"),
        "bisect",
        "start",
        "--good",
        shas[0],
        "--bad",
        shas[2],
    )
    assert result.returncode == 1
    assert "cannot create database directory" in one_line_error(result)


def test_newer_schema_is_refused(setup: tuple[Cli, list[str]], tmp_path: Path) -> None:
    cli, _ = setup
    from perfbisect.store.database import open_store

    open_store(f"sqlite:///{tmp_path / 'history.db'}").close()  # a database at today's schema
    assert cli.run("query", "sessions").returncode == 0
    with sqlite3.connect(tmp_path / "history.db") as conn:
        conn.execute("update alembic_version set version_num = '9999'")
    result = cli.run("query", "sessions")
    assert result.returncode == 1
    assert "written by a newer perfbisect (schema revision 9999" in one_line_error(result)


def test_second_session_on_the_same_host_is_refused_with_no_wait(cli: Cli, tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        [{"value": "10", "measure.py": "import time\ntime.sleep(60)\n"}, {"value": "30"}],
    )
    # A marker on the measure's command line: the check below finds this test's measure, not
    # another test's (the suite runs tests in parallel).
    marker = f"pbnowait{os.getpid()}"
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace(
            'measure = "python3 measure.py"', f'measure = "python3 measure.py {marker}"'
        )
    )
    import shutil
    import sys

    exe = shutil.which("perfbisect")
    argv = [exe] if exe else [sys.executable, "-m", "perfbisect"]
    first = subprocess.Popen(
        [*argv, "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1]],
        cwd=tmp_path,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_session(tmp_path, timeout=30)
        result = cli.run(
            "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1], "--no-wait"
        )
        assert result.returncode == 1
        line = one_line_error(result)
        assert "host local:" in line and "is in use by session 1" in line
        assert str(first.pid) in line and "--no-wait refuses" in line
        assert sessions_in(tmp_path) == 1
        # Ctrl-C while the measure runs: it is stopped too
        wait_for_process(f"measure.py {marker}", timeout=60)
        first.send_signal(signal.SIGINT)
        first.wait(timeout=30)
        assert first.returncode == 130
        assert not process_running(f"measure.py {marker}")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
