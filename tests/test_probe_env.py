"""`perfbisect probe env-propagation` against a real sshd, real tmux, real shells and Pythons."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from conftest import Cli
from sshd_fixture import SshServer

STAGES = ("shell", "python", "spawn_child", "c_getenv")


def cells(result: dict[str, Any], name: str, method: str) -> dict[str, str]:
    return {s: c["status"] for s, c in result["matrix"][name][method].items()}


def test_bashrc_guard_scenario_over_ssh(cli: Cli, ssh_server: SshServer, tmp_path: Path) -> None:
    # The test user's Debian skeleton: ~/.bashrc starts with the non-interactive guard and
    # ~/.profile sources it. The export goes after the guard, as people append it.
    bashrc = ssh_server.home / ".bashrc"
    original = bashrc.read_text()
    assert "case $- in" in original and ".bashrc" in (ssh_server.home / ".profile").read_text()
    bashrc.write_text(original + "\nexport NCCL_PROTO=LL\n")
    guard_line = next(i for i, line in enumerate(original.splitlines(), 1) if "case $- in" in line)
    export_line = len(original.splitlines()) + 2
    try:
        result = cli.json(
            "probe",
            "env-propagation",
            "--host",
            ssh_server.address,
            "--ssh-config",
            str(ssh_server.ssh_config),
            # no --watch: the README's case must be found without being told what to look for
            "--env",
            "NCCL_ALGO=Ring",
            "--env",
            "HF_TOKEN=hf_supersecret_value",
            "--json",
        )
    finally:
        bashrc.write_text(original)
    assert result["errors"] == {}
    assert cells(result, "NCCL_PROTO", "tmux") == dict.fromkeys(STAGES, "present")
    assert result["matrix"]["NCCL_PROTO"]["tmux"]["python"]["value"] == "LL"
    assert cells(result, "NCCL_PROTO", "ssh") == dict.fromkeys(STAGES, "absent")
    assert cells(result, "NCCL_PROTO", "sitecustomize") == dict.fromkeys(STAGES, "absent")
    guard = [h for h in result["hints"] if h["kind"] == "non-interactive-guard"]
    assert len(guard) == 1 and guard[0]["variable"] == "NCCL_PROTO"
    assert f"~/.bashrc:{export_line}" in guard[0]["message"]
    assert f"guard at ~/.bashrc:{guard_line}" in guard[0]["message"]
    assert "sourced via" not in guard[0]["message"]  # ssh reads ~/.bashrc itself
    assert "ssh, sitecustomize" in guard[0]["message"]
    for method in ("tmux", "ssh", "direct"):
        assert cells(result, "NCCL_ALGO", method) == dict.fromkeys(STAGES, "present"), method
    assert cells(result, "NCCL_ALGO", "sitecustomize") == {
        "shell": "absent",
        "python": "present",
        "spawn_child": "present",
        "c_getenv": "present",
    }
    # The generated sitecustomize shadows Debian's /usr/lib/python3.X/sitecustomize.py: said.
    assert any(h["kind"] == "sitecustomize-shadow" for h in result["hints"])
    # Secrets: the value never reaches the output or the store.
    assert result["matrix"]["HF_TOKEN"]["ssh"]["python"]["value"] == "<redacted>"
    text = cli.run(
        "probe",
        "env-propagation",
        "--host",
        ssh_server.address,
        "--ssh-config",
        str(ssh_server.ssh_config),
        "--method",
        "ssh",
        "--env",
        "HF_TOKEN=hf_supersecret_value",
    )
    assert text.returncode == 0, text.stderr
    assert "HF_TOKEN" in text.stdout and "hf_supersecret_value" not in text.stdout
    assert b"hf_supersecret_value" not in (tmp_path / "history.db").read_bytes()
    with sqlite3.connect(tmp_path / "history.db") as db:
        kinds = [r[0] for r in db.execute("select kind from probe_runs")]
        assert kinds == ["env-propagation", "env-propagation"]
        snapshot = db.execute("select s.data from env_snapshots s").fetchone()[0]
        assert '"gpus"' in snapshot
    # Nothing of the probe is left on the host: no tmux session, no probe files.
    sessions = ssh_server.as_user("tmux", "list-sessions")
    assert "perfbisect-" not in sessions.stdout
    assert not list((ssh_server.home / ".cache" / "perfbisect" / "probes").glob("env-*"))


def test_stale_tmux_server_environment_is_reported(cli: Cli, tmp_path: Path) -> None:
    # A tmux server started before PB_STALE_VAR was exported: new sessions do not see it.
    sock = Path(tempfile.mkdtemp(prefix="pbst-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "PB_STALE_VAR"}
    env["TMUX_TMPDIR"] = str(sock)
    subprocess.run(["tmux", "new-session", "-d", "-s", "keeper"], env=env, check=True, timeout=20)
    try:
        cli.env["TMUX_TMPDIR"] = str(sock)
        cli.env["PB_STALE_VAR"] = "1"
        cli.env["NCCL_IB_HCA"] = "mlx5_0"
        result = cli.json(
            "probe",
            "env-propagation",
            "--method",
            "tmux,direct",
            "--watch",
            "PB_STALE_VAR",
            "--json",
        )
    finally:
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, timeout=20)
    assert cells(result, "PB_STALE_VAR", "tmux") == dict.fromkeys(STAGES, "absent")
    assert cells(result, "PB_STALE_VAR", "direct") == dict.fromkeys(STAGES, "present")
    stale = {
        h["variable"]: h["message"]
        for h in result["hints"]
        if h["kind"] == "tmux-stale-environment"
    }
    assert "PB_STALE_VAR" in stale and "NCCL_IB_HCA" in stale
    assert "frozen when it started" in stale["PB_STALE_VAR"]
