"""Shared fixtures: real git repositories, experiment files, and the installed CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import sshd_fixture

# A CI runner, or a shell without job control that starts the suite in the background, can hand
# it SIGINT ignored, and an ignored signal stays ignored across exec: every test that presses
# Ctrl-C on a perfbisect it started would press it on a process that cannot hear it (as a user's
# `nohup perfbisect ...` rightly cannot). The suite restores the default for what it starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A measure command that really runs: it reads the commit's `cost` file and times that much
# pure-Python work per sample, so the regression is a real slowdown, not a printed number.
TIMED_MEASURE = r"""
import sys, time
cost = float(open("cost").read())
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 8):
    t = time.perf_counter()
    x = 0
    for i in range(int(cost * 20000)):
        x += i * i
    print(f"verify_ms={(time.perf_counter() - t) * 1000:.4f}")
"""

# A measure command that prints the commit's value with a small deterministic jitter: for tests
# about control flow (bad input, resume) where timing noise would only slow them down.
PRINTED_MEASURE = r"""
import sys
value = float(open("value").read())
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "T",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Repo:
    path: Path
    shas: list[str]

    def git(self, *args: str) -> str:
        return _git(self.path, *args)


def make_repo(root: Path, files_per_commit: Sequence[dict[str, str]]) -> Repo:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    shas = []
    for i, files in enumerate(files_per_commit):
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "--allow-empty", "-m", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    return Repo(root, shas)


def value_repo(
    root: Path, values: Sequence[float], name: str = "value", script: str = PRINTED_MEASURE
) -> Repo:
    commits = [{name: str(v)} for v in values]
    commits[0]["measure.py"] = script
    return make_repo(root, commits)


def process_running(pattern: str) -> bool:
    """Does a process whose command line matches ``pattern`` run? (Tests pass a marker of
    their own: the suite's parallel workers run other tests' processes at the same time.)"""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, timeout=30)
    return bool(found.stdout.strip())


def wait_for_process(pattern: str, timeout: float) -> None:
    """Until a process whose command line matches ``pattern`` runs (the measure stage)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_running(pattern):
            return
        time.sleep(0.1)
    raise AssertionError(f"no process matching {pattern!r} within {timeout}s")


def wait_for_session(tmp_path: Path, timeout: float) -> int:
    """Until the history of a test's ``cli`` holds a session (one started in the background
    has claimed its host), or ``timeout``; the sessions it holds then."""
    deadline = time.monotonic() + timeout
    while sessions_in(tmp_path) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return sessions_in(tmp_path)


def sessions_in(tmp_path: Path) -> int:
    """Sessions in the history of a test's ``cli`` (its tmp_path's history.db)."""
    db = tmp_path / "history.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master")}
        return (
            conn.execute("select count(*) from sessions").fetchone()[0]
            if "sessions" in tables
            else 0
        )


EXPERIMENT = """\
[target]
kind = "command"
repo = "repo"
measure = "python3 measure.py"
timeout_s = 60

[metric]
name = "verify_ms"
pattern = 'verify_ms=([0-9.]+)'
"""


def layered_env(parent_python: str, where: Path) -> tuple[Path, Path]:
    """A real environment made as perfbisect makes its own (layered on ``parent_python``'s):
    its interpreter and its site-packages."""
    from perfbisect.targets.pyenv import layered_venv_argv

    subprocess.run(
        layered_venv_argv(parent_python, str(where)), check=True, capture_output=True, timeout=120
    )
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return python, Path(site)


@dataclass
class Cli:
    env: dict[str, str]
    cwd: Path

    def run(
        self, *args: str, timeout: float = 240, check_json: bool = False
    ) -> subprocess.CompletedProcess[str]:
        exe = shutil.which("perfbisect")
        argv = [exe] if exe else [sys.executable, "-m", "perfbisect"]
        result = subprocess.run(
            [*argv, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check_json:
            json.loads(result.stdout)
        return result

    def json(  # type: ignore[type-arg]
        self, *args: str, codes: tuple[int, ...] = (0,), timeout: float = 240
    ) -> dict:
        result = self.run(*args, timeout=timeout)
        assert result.returncode in codes, (result.returncode, result.stdout, result.stderr)
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def bisect(  # type: ignore[type-arg]
        self,
        good: str,
        bad: str,
        *extra: str,
        codes: tuple[int, ...] = (0,),
        db: str | None = None,
        timeout: float = 240,
    ) -> dict:
        """`[--db DB] bisect start --good G --bad B [extra...] --json`, which must exit with
        one of ``codes``: the report."""
        head = ["--db", db] if db else []
        args = [*head, "bisect", "start", "--good", good, "--bad", bad, *extra, "--json"]
        return self.json(*args, codes=codes, timeout=timeout)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    env = dict(os.environ)
    env["PERFBISECT_DB"] = f"sqlite:///{tmp_path / 'history.db'}"
    env["PERFBISECT_CACHE"] = str(tmp_path / "cache")
    env.pop("PERFBISECT_TEST_SECRET", None)
    env.pop("COLUMNS", None)  # piped tables follow COLUMNS when set: tests set it themselves
    return Cli(env, tmp_path)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFBISECT_DB", f"sqlite:///{tmp_path / 'history.db'}")
    monkeypatch.setenv("PERFBISECT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="session", autouse=True)
def _isolated_tmux() -> Iterator[None]:
    """Local tmux servers of the tests live on their own socket directory, killed at the end."""
    sock_dir = Path(tempfile.mkdtemp(prefix="pbtmux-", dir="/tmp"))
    old = os.environ.get("TMUX_TMPDIR")
    os.environ["TMUX_TMPDIR"] = str(sock_dir)
    os.environ.pop("TMUX", None)
    yield
    if shutil.which("tmux"):
        subprocess.run(["tmux", "kill-server"], capture_output=True, timeout=30)
    if old is None:
        os.environ.pop("TMUX_TMPDIR", None)
    else:
        os.environ["TMUX_TMPDIR"] = old
    shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ssh_server() -> Iterator[sshd_fixture.SshServer]:
    """A real sshd on 127.0.0.1 for a throwaway user (see tests/sshd_fixture.py)."""
    why = sshd_fixture.available()
    if why:
        pytest.skip(f"ssh test host unavailable: {why}")
    server = sshd_fixture.start()
    try:
        yield server
    finally:
        sshd_fixture.stop(server)


def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver: no GPU
        return 0


GPU_COUNT = _gpu_count()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests run where an NVIDIA GPU is (the H200 machine) and are skipped elsewhere (CI)."""
    if GPU_COUNT:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
