"""The commands' rough edges (issue 29): every printed next command works as printed, reset is
final, output files and databases are checked before any work, missing extras and misspelt
input are one line naming the fix, completion for the shell asked, help without Python types,
progress that neither repeats itself nor restarts its clock. Real git repositories, real
perfbisect processes, real shells."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EXPERIMENT, Cli, sessions_in, value_repo
from sshd_fixture import SshServer
from test_resume import SLOW_MEASURE, launches, start_background, wait_for_launches


def count_launches(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return int(conn.execute("select count(*) from launches").fetchone()[0])
        except sqlite3.OperationalError:  # not migrated yet
            return 0


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line a failing command ends with (progress lines may come before it)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("perfbisect: error: "), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


@pytest.fixture
def finished(cli: Cli, tmp_path: Path) -> list[str]:
    """A finished session (1) of a three-commit history: its commits."""
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    cli.bisect(repo.shas[0], repo.shas[2])
    return repo.shas


# ---- 6, 7, 19: Ctrl-C, the printed resume command, reset ----------------------------------


def test_ctrl_c_prints_a_resume_command_with_db_and_path_that_works_as_printed(
    cli: Cli, tmp_path: Path
) -> None:
    exe = shutil.which("perfbisect", path=cli.env.get("PATH"))
    if exe is None:
        pytest.skip("perfbisect is not installed as a command")
    repo = value_repo(tmp_path / "repo", [10.0] * 5 + [30.0] * 4, script=SLOW_MEASURE)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    mine = tmp_path / "mine.db"
    env = {k: v for k, v in cli.env.items() if k != "PERFBISECT_DB"}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # where the default history would go
    # a venv not activated: perfbisect is not on PATH, only its full path runs it
    env["PATH"] = os.pathsep.join(
        d for d in env["PATH"].split(os.pathsep) if d and Path(d) != Path(exe).parent
    )
    assert shutil.which("perfbisect", path=env["PATH"]) is None
    proc = subprocess.Popen(
        [exe, "--db", str(mine), "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[-1]],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while count_launches(mine) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    said = [line for line in err.splitlines() if "the session is saved" in line]
    assert said and said[-1].startswith("perfbisect: interrupted"), err  # no "error:" on it
    hint = re.search(r"`([^`]+)` continues it", said[-1])
    assert hint, said
    expected = shlex.join([exe, "--db", str(mine), "bisect", "resume", "1"])
    assert hint.group(1) == expected

    # the status of the interrupted session says the same command
    status = subprocess.run(
        [exe, "--db", str(mine), "bisect", "status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    assert f"`{expected}` continues it" in status.stdout
    assert re.search(r"started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ by", status.stdout), status.stdout

    # a session that is not there: the command that lists them names this database too
    missing = subprocess.run(
        [exe, "--db", str(mine), "bisect", "status", "99"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    listing = shlex.join([exe, "--db", str(mine), "query", "sessions"])
    assert f"(see `{listing}`)" in error_line(missing)

    # and run as printed, from elsewhere, it resumes this session in this database
    before = count_launches(mine)
    resumed = subprocess.run(
        [*shlex.split(hint.group(1)), "--json"],
        cwd=tmp_path / "repo",
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["session"] == 1 and report["status"] == "found"
    assert report["culprit"]["first_bad"] == {"commit": repo.shas[5]}
    assert report["launches"] > before
    assert not (tmp_path / "data").exists()  # no default database made on the side
    # the resumed run's clock is the session's: its first verdict line counts the time the
    # first run already spent (two or more launches of 1.2 s each), not 0:00
    first = next(line for line in resumed.stderr.splitlines() if line.startswith("["))
    assert not re.search(r"launches, 0:00[,)]", first), first


def test_a_reset_session_is_not_resumed(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0] * 5 + [30.0] * 4, script=SLOW_MEASURE)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    proc = start_background(cli, "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[-1])
    wait_for_launches(tmp_path, 1, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    reset = cli.run("bisect", "reset", "1")
    assert reset.returncode == 0 and "ended for good" in reset.stdout
    n = len(launches(tmp_path))
    resumed = cli.run("bisect", "resume", "1")
    assert resumed.returncode == 1
    assert "session 1 was reset" in error_line(resumed)
    assert len(launches(tmp_path)) == n  # nothing run again
    assert cli.json("bisect", "status", "1", "--json")["status"] == "reset"
    assert "refuses" in cli.run("bisect", "reset", "--help").stdout  # the help says so


# ---- 8: output files ------------------------------------------------------------------------


def test_html_and_plot_into_a_missing_directory_are_one_line(
    cli: Cli, tmp_path: Path, finished: list[str]
) -> None:
    for args in (
        ("bisect", "report", "1", "--html", "nodir/r.html"),
        ("bisect", "report", "1", "--plot", "nodir/r.png"),
        ("query", "compare", "1", "2", "--html", "nodir/c.html"),
    ):
        result = cli.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "directory nodir does not exist" in error_line(result)
        assert len(result.stderr.strip().splitlines()) == 1
        as_json = cli.run(*args, "--json")
        error = json.loads(as_json.stdout)
        assert error["exit_code"] == 2 and args[-1] in error["error"]
    # a session's --plot is checked before it runs, not after its launches
    n = sessions_in(tmp_path)
    start = cli.run(
        "bisect", "start", "--good", finished[0], "--bad", finished[2], "--plot", "no/p.png"
    )
    assert start.returncode == 2 and "--plot no/p.png" in error_line(start)
    assert sessions_in(tmp_path) == n


# ---- 10: read-only commands and a database that does not exist ------------------------------


def test_read_only_commands_refuse_a_database_that_does_not_exist(cli: Cli, tmp_path: Path) -> None:
    typo = tmp_path / "histroy.db"
    for args in (
        ("bisect", "status"),
        ("bisect", "log"),
        ("bisect", "report"),
        ("bisect", "resume"),
        ("bisect", "reset"),
        ("query", "sessions"),
        ("query", "history"),
        ("query", "show", "1"),
    ):
        result = cli.run("--db", str(typo), *args)
        assert result.returncode == 2, (args, result.stderr)
        assert f"database {typo} does not exist" in error_line(result)
        assert not typo.exists()


# ---- 11: optional extras --------------------------------------------------------------------


def test_missing_extras_name_the_extra_to_install(cli: Cli, tmp_path: Path) -> None:
    # submitit and psycopg made unimportable in the perfbisect process (they are installed for
    # the suite): what a machine without the extras has.
    shim = tmp_path / "without_extras"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\nsys.modules['submitit'] = None\nsys.modules['psycopg'] = None\n"
    )
    env = dict(cli.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH")) if p)
    bare = Cli(env, tmp_path)
    repo = value_repo(tmp_path / "repo", [10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT + '\n[executor]\nkind = "slurm"\n')
    slurm = bare.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1])
    assert slurm.returncode == 2, slurm.stderr
    line = error_line(slurm)
    assert "key 'executor.kind'" in line and "pip install 'perfbisect[slurm]'" in line
    assert "ModuleNotFoundError" not in slurm.stderr
    assert sessions_in(tmp_path) == 0
    pg = bare.run("--db", "postgresql+psycopg://me:s3cret@127.0.0.1:1/h", "query", "sessions")
    assert pg.returncode == 1
    line = error_line(pg)
    assert "pip install 'perfbisect[postgres]'" in line and "s3cret" not in pg.stderr


# ---- 12: timeouts; 19: no build stage without a build; show without reprs -------------------


def test_a_timeout_says_how_to_raise_it(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace("python3 measure.py", "sleep 30").replace(
            "timeout_s = 60", "timeout_s = 1"
        )
    )
    report = cli.bisect(repo.shas[0], repo.shas[1], codes=(3,))
    assert report["status"] == "endpoints-not-reproduced"
    failed = [v for v in cli.json("bisect", "log", "--json") if v["value"] is None]
    assert failed
    for launch in failed:
        reason = launch["reason"]
        assert "timed out after 1s" in reason and "raise [target] timeout_s" in reason, reason
        assert not reason.rstrip().endswith(":"), reason


def test_stages_shown_are_those_configured_and_show_prints_no_reprs(
    cli: Cli, tmp_path: Path
) -> None:
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    run = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[2])
    assert run.returncode == 0, run.stderr
    assert "(endpoint): measure" in run.stderr
    assert "): build" not in run.stderr  # no build configured: no build stage
    show = cli.run("query", "show", "1")
    assert show.returncode == 0, show.stderr
    assert "{'" not in show.stdout and "': " not in show.stdout, show.stdout
    assert f"config: {repo.shas[2]}" in show.stdout
    assert re.search(r"^timings: checkout \d+\.\ds, measure \d+\.\ds$", show.stdout, re.M)
    sessions = cli.run("query", "sessions").stdout
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sessions), sessions
    history = cli.run("query", "history").stdout
    assert re.search(r"\d\d:\d\d:\d\dZ", history), history  # the table wraps at the date's end
    cache = cli.run("cache", "list").stdout  # UTC like the rest, not the local clock
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", cache), cache


# ---- 13: misspelt input ---------------------------------------------------------------------


def test_misspelt_axis_and_negative_threshold_are_input_errors(
    cli: Cli, tmp_path: Path, finished: list[str]
) -> None:
    axis = cli.run("query", "history", "--config", f"comit={finished[0][:8]}")
    assert axis.returncode == 2
    assert "unknown axis 'comit'" in error_line(axis) and "commit" in error_line(axis)
    n = len(launches(tmp_path))
    negative = cli.run(
        "bisect", "start", "--good", finished[0], "--bad", finished[2], "--threshold-ms", "-5"
    )
    assert negative.returncode == 2
    assert "--threshold-ms -5: must be above 0" in error_line(negative)
    assert len(launches(tmp_path)) == n and sessions_in(tmp_path) == 1


# ---- 14: completion -------------------------------------------------------------------------


def test_completion_is_for_the_shell_named(cli: Cli, tmp_path: Path) -> None:
    fish = cli.run("--show-completion", "fish")
    assert fish.returncode == 0 and "complete --command perfbisect" in fish.stdout
    assert "COMPREPLY" not in fish.stdout
    zsh = cli.run("--show-completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef perfbisect")
    bash = cli.run("--show-completion", "bash")
    assert "COMPREPLY" in bash.stdout
    home = tmp_path / "home"
    home.mkdir()
    installed = Cli({**cli.env, "HOME": str(home)}, tmp_path).run("--install-completion", "fish")
    assert installed.returncode == 0, installed.stderr
    script = home / ".config" / "fish" / "completions" / "perfbisect.fish"
    assert script.exists() and "complete --command perfbisect" in script.read_text()
    assert not (home / ".bashrc").exists()
    unknown = cli.run("--show-completion", "tcsh")
    assert unknown.returncode == 2 and "'tcsh'" in error_line(unknown)
    if shutil.which("fish") and shutil.which("perfbisect", path=cli.env.get("PATH")):
        # a real fish completes through the script it was given
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {script}; complete -C 'perfbisect bis'"],
            env={**cli.env, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.split()[:1] == ["bisect"], (done.stdout, done.stderr)


# ---- 17: help and version -------------------------------------------------------------------


def test_help_describes_every_argument_without_python_types(cli: Cli) -> None:
    from perfbisect.cli.main import command as root_command

    def walk(group: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = [path]
        for name, sub in getattr(group, "commands", {}).items():
            found += walk(sub, (*path, name))
        return found

    commands = walk(root_command(), ())
    # every command, present and future: a new one cannot bring Python types back
    assert ("bisect", "start") in commands and ("query", "compare") in commands
    for command in commands:
        text = cli.run(*command, "--help").stdout
        assert text.startswith("Usage:"), command
        found = re.findall(r"<(?:str|int|float|path|list\[\w+\]|int range|float range)>", text)
        assert not found, (command, found)
        if "Arguments:" in text:
            block = text.split("Arguments:")[1].split("Options:")[0]
            for line in block.strip().splitlines():
                if not line.startswith("    "):  # an argument's first line: name, then text
                    assert len(line.split()) > 1, (command, line)
    start = cli.run("bisect", "start", "--help").stdout
    assert "--accept-new-host-key" in start and "--ssh-config" in start
    assert "2 minutes" not in cli.run("demo", "--help").stdout
    assert cli.run("version").stdout == cli.run("--version").stdout


def test_db_after_the_command_says_it_is_a_global_option(cli: Cli) -> None:
    result = cli.run("bisect", "status", "--db", "x.db")
    assert result.returncode == 2
    line = error_line(result)
    assert "--db is an option of perfbisect itself" in line
    assert line.endswith("perfbisect --db x.db bisect status")


# ---- 14c: progress --------------------------------------------------------------------------

VERDICT_LINE = re.compile(r"^\[(\d+)/~(\d+)\] (\S+): (\w+) (.*?)  \(", re.M)


def test_progress_says_each_verdict_once_and_its_count_stays_ahead(
    cli: Cli, tmp_path: Path
) -> None:
    repo = value_repo(tmp_path / "repo", [10.0] * 5 + [30.0] * 4)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    run = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[-1])
    assert run.returncode == 0, run.stderr
    verdicts = VERDICT_LINE.findall(run.stderr)
    said = [(label, verdict, value) for _, _, label, verdict, value in verdicts]
    assert said and len(said) == len(set(said)), run.stderr  # no verdict line said twice


def test_the_multi_axis_estimate_counts_its_phases(cli: Cli, tmp_path: Path) -> None:
    from test_multiaxis import EXPERIMENT as AXES
    from test_multiaxis import _repo

    repo = _repo(tmp_path, interaction_at=6)
    (tmp_path / "perfbisect.toml").write_text(AXES.format(patches=""))
    run = cli.run(
        "bisect", "start", "--good", f"{repo.shas[0]},flag=a", "--bad", f"{repo.shas[-1]},flag=b"
    )
    assert run.returncode == 0, run.stderr
    estimate = int(re.search(r"about (\d+) to judge", run.stderr).group(1))  # type: ignore[union-attr]
    judged = {label for _, _, label, _, _ in VERDICT_LINE.findall(run.stderr)}
    assert len(judged) - 1 <= estimate <= len(judged) + 1, (estimate, run.stderr)
    # past its estimate the counter stays one ahead: never [6/~6] right after [5/~5]
    counters = [(int(j), int(t)) for j, t, *_ in VERDICT_LINE.findall(run.stderr)]
    assert all(j <= t for j, t in counters), counters
    assert not any(
        j1 == t1 and j2 == t2 and j2 > j1 for (j1, t1), (j2, t2) in itertools.pairwise(counters)
    ), counters


def test_graph_warning_says_none_when_no_cycle_ran_in_a_graph() -> None:
    from perfbisect.targets.sglang.target import graph_warning

    assert graph_warning(["verify in CUDA graphs: 0% of cycles"]) == (
        "verify ran outside CUDA graphs in every cycle"
    )
    assert graph_warning(["verify in CUDA graphs: 40% of cycles"]) == (
        "verify left CUDA graphs in some cycles"
    )
    assert graph_warning(["verify in CUDA graphs: 100% of cycles"]) is None
    assert graph_warning(["accept length 4.00"]) is None


def test_python_m_prints_python_m_in_its_commands(cli: Cli, tmp_path: Path) -> None:
    # `python -m perfbisect` (no script installed): the resume command it prints starts so
    repo = value_repo(tmp_path / "repo", [10.0] * 5 + [30.0] * 4, script=SLOW_MEASURE)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfbisect",
            "bisect",
            "start",
            "--good",
            repo.shas[0],
            "--bad",
            repo.shas[-1],
        ],
        cwd=tmp_path,
        env=cli.env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for_launches(tmp_path, 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    # PERFBISECT_DB (the fixture's) is what a bare command opens: no --db needed
    assert f"`{shlex.join([sys.executable, '-m', 'perfbisect', 'bisect', 'resume', '1'])}`" in err


def test_the_counter_stays_one_ahead_past_its_estimate_and_keeps_the_sessions_clock() -> None:
    # The console progress itself, printing to a string (what it prints on stderr).
    import io

    from rich.console import Console

    from perfbisect.bisect.stats import Estimate, Verdict
    from perfbisect.bisect.values import PointResult
    from perfbisect.cli.progress import ConsoleProgress
    from perfbisect.config import Configuration

    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, width=200, highlight=False))
    progress.started(1, 9, 2, 125.0)  # a resumed session: 2:05 spent before this run

    def judge(position: int, verdict: Verdict, median: float, n: int = 1) -> None:
        config = Configuration.of({"commit": f"{position:040x}"})
        estimate = Estimate(median, median * 0.9, median * 1.1, n)
        progress.verdict(PointResult(position, config, verdict, estimate))

    judge(0, Verdict.GOOD, 10)
    judge(8, Verdict.BAD, 30)
    judge(4, Verdict.GOOD, 10)
    judge(6, Verdict.BAD, 30)
    judge(6, Verdict.BAD, 30)  # judged again to the same numbers: not said again
    judge(5, Verdict.BAD, 30)
    judge(5, Verdict.BAD, 30, n=2)  # more launches: said
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert [line.split("]")[0] + "]" for line in lines] == [
        "[1/~2]",
        "[2/~2]",
        "[3/~4]",
        "[4/~5]",
        "[5/~6]",
        "[5/~6]",
    ], lines
    assert "launches, 2:05" in lines[0], lines[0]  # the session's time, not 0:00


def test_bisect_start_takes_the_hosts_ssh_config_and_accepts_a_new_key(
    cli: Cli, ssh_server: SshServer, tmp_path: Path
) -> None:
    # The README's `bisect start --accept-new-host-key` / `--ssh-config`: a host whose key is
    # unknown, reached with a config the experiment does not name.
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT + f'\n[host]\naddress = "{ssh_server.address}"\n'
    )
    known = tmp_path / "known_hosts"
    key = next(p for p in ssh_server.ssh_config.read_text().split() if p.endswith("/client"))
    config = tmp_path / "my_ssh_config"
    config.write_text(f"Host *\n  IdentityFile {key}\n  UserKnownHostsFile {known}\n")
    result = cli.run(
        "bisect",
        "start",
        "--good",
        repo.shas[0],
        "--bad",
        repo.shas[2],
        "--ssh-config",
        str(config),
        "--accept-new-host-key",
        "--json",
        timeout=400,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "found"
    assert report["culprit"]["first_bad"] == {"commit": repo.shas[2]}
    assert "trusting the new host key" in result.stderr
    assert f"[127.0.0.1]:{ssh_server.port}" in known.read_text()
    hosts = {v["host"] for v in cli.json("bisect", "log", "--json")}
    assert hosts == {ssh_server.address}, hosts
