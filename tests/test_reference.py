"""The reference server (real torch, gloo, spawn, HTTP) through the real pipeline, and its
answers to bad input: too many ranks, a port in use, a rank that dies during a request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cli

from perfbisect.config import Configuration
from perfbisect.errors import StepFailed
from perfbisect.experiment import load_experiment
from perfbisect.targets.reference.target import SERVER, ReferenceTarget

pytest.importorskip("torch")

SMALL = """
[target]
kind = "reference"
tp = 2
hidden = 256
max_seq = 640
prompt = 320
cycles = 16
warmup = 2
timeout_s = 120
{extra}
"""


def _processes_running(path_part: str, cwd: Path) -> list[int]:
    """Live processes whose command line holds ``path_part`` and that run in ``cwd`` (the
    test's experiment directory, where a launch without a repository runs its server): not
    another test's servers of the same packaged program, which the suite's parallel workers
    run at the same time."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                where = Path(os.readlink(entry / "cwd"))
            except OSError:
                continue
            if path_part in cmdline and state != "Z" and where == cwd:
                found.append(int(entry.name))
    return found


def test_tp2_bisect_through_the_pipeline(cli: Cli, tmp_path: Path) -> None:
    extra = (
        'server_args = ["--verify-input", "{verify_input}"]\n'
        '[axes.custom.verify_input]\nvalues = ["cache", "prefix"]\nordered = false\n'
    )
    (tmp_path / "perfbisect.toml").write_text(SMALL.format(extra=extra))
    report = cli.json(
        "bisect", "start", "--good", "verify_input=cache", "--bad", "verify_input=prefix", "--json"
    )
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["axis"] == "verify_input"
    good, bad = report["culprit"]["last_good_ms"], report["culprit"]["first_bad_ms"]
    assert bad["median"] > 1.5 * good["median"]  # 2-6x; the ratio shrinks on a loaded machine
    history = cli.json("query", "history", "--json")
    assert all(h["samples"] == 16 for h in history)  # one sample per measured cycle
    shown = cli.json("query", "show", str(history[0]["id"]), "--json")
    assert any("verify in CUDA graphs: 0%" in f for f in shown["stats"]["flags"])
    assert any("accept length" in f for f in shown["stats"]["flags"])


def test_tp_larger_than_the_devices(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SERVER), "serve", "--tp", "512", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--tp 512 on cpu needs 512 cores" in result.stderr


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, str(SERVER), "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"port {port} is not available" in result.stderr


def test_rank_dying_mid_request_is_skip_without_orphans(tmp_path: Path) -> None:
    extra = 'server_args = ["--fail-rank", "1", "--fail-after", "3"]\n'
    path = tmp_path / "perfbisect.toml"
    path.write_text(SMALL.format(extra=extra))
    target = ReferenceTarget(load_experiment(path), tmp_path / "cache")
    with pytest.raises(StepFailed) as info:
        target.launch(Configuration.of({}), str(tmp_path / "logs"))
    assert info.value.stage == "measure"
    assert "rank 1 died (exit code 3)" in info.value.reason
    log = (tmp_path / "logs" / "serve.log").read_text()
    assert "error: rank 1 died (exit code 3)" in log
    assert _processes_running(str(SERVER), tmp_path) == []


def test_default_interpreter_is_the_one_running_perfbisect() -> None:
    # A user who runs `venv/bin/perfbisect demo` without activating the venv: the served
    # reference server must run with that venv's Python (it has torch), not PATH's python3.
    import shlex
    import sys

    from perfbisect.hosts.base import default_python
    from perfbisect.hosts.local import LocalHost
    from perfbisect.targets.reference.kind import ReferenceOptions
    from perfbisect.targets.reference.target import command_options

    python = default_python(LocalHost())
    assert python == sys.executable
    options = command_options(ReferenceOptions(), "server.py", python)
    assert options["serve"].startswith("exec " + shlex.quote(sys.executable) + " server.py serve")
    assert options["measure"].startswith(shlex.quote(sys.executable) + " server.py bench")
    named = command_options(ReferenceOptions(python="/opt/py/bin/python3"), "server.py", python)
    assert named["serve"].startswith("exec /opt/py/bin/python3 ")
