"""`perfbisect demo` as a newcomer runs it: it must name the planted commit."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from conftest import Cli


def test_demo_names_the_planted_commit(cli: Cli, tmp_path: Path) -> None:
    # A shared machine can make the demo's launches several times slower (one CI run: 302 ms
    # per verify instead of ~38): the limit is for a hang, not for a slow machine.
    report = cli.json("demo", "--dir", str(tmp_path / "demo"), "--json", timeout=600)
    assert report["status"] == "found"
    assert report["demo"]["named_planted"] is True
    assert report["culprit"]["first_bad"]["commit"] == report["demo"]["planted"]
    assert "whole sequence" in report["culprit"]["commit"]["subject"]
    assert (
        report["culprit"]["first_bad_ms"]["median"]
        > 2.5 * report["culprit"]["last_good_ms"]["median"]
    )
    sessions = cli.json("query", "sessions", "--json")  # PERFBISECT_DB set by the fixture wins
    assert [s["outcome"] for s in sessions] == ["found"]
    for command in report["demo"]["next"]:  # each next step works as printed
        done = subprocess.run(
            shlex.split(command),
            cwd=tmp_path,
            env=cli.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stderr)
    again = cli.run("demo", "--dir", str(tmp_path / "demo"))
    assert again.returncode == 2 and "already exists" in again.stderr
