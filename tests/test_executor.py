"""Several launches at once: a pool of ssh hosts (the real sshd fixture, two host entries:
its throwaway user and root, each with its own home and cache) and k-ary search."""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path

from conftest import EXPERIMENT, Cli, make_repo
from sshd_fixture import SshServer

MEASURE = """\
import time
time.sleep(1.0)
value = float(open("value").read())
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


def pool_experiment(server: SshServer) -> str:
    return EXPERIMENT + (
        f'\n[host]\nssh_config = "{server.ssh_config}"\n\n[executor]\nkind = "hosts"\n'
        f'hosts = ["{server.address}", "{server.root_address}"]\n'
    )


def test_a_host_pool_runs_launches_at_once_and_records_each_host(
    cli: Cli, ssh_server: SshServer, tmp_path: Path
) -> None:
    values = [10.0] * 9 + [30.0] * 8
    repo = make_repo(
        tmp_path / "repo",
        [
            {"value": str(v), **({"measure.py": MEASURE} if i == 0 else {})}
            for i, v in enumerate(values)
        ],
    )
    (tmp_path / "perfbisect.toml").write_text(pool_experiment(ssh_server))
    report = cli.json(
        "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[-1], "--json", timeout=600
    )
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["first_bad"]["commit"] == repo.shas[9]
    assert 0 < report["rounds"] < report["launches"]  # some rounds ran two launches at once
    rows = cli.json("query", "history", "--json")
    rows = rows if isinstance(rows, list) else rows["launches"]
    hosts = {r["host"] for r in rows if r["host"]}
    assert hosts == {ssh_server.address, ssh_server.root_address}, hosts
    # Two launches of one round overlapped in time (each sleeps 1 s while measuring).
    starts = sorted(datetime.fromisoformat(r["started_at"].rstrip("Z")) for r in rows)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert min(gaps) < 1.0, gaps


def test_an_executor_table_with_bad_hosts_is_refused(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "perfbisect.toml").write_text(
        '[target]\nkind = "command"\nmeasure = "true"\n[metric]\nname = "m"\npattern = "m=(.*)"\n'
        '[executor]\nkind = "hosts"\nhosts = ["gpu-a"]\n'
    )
    result = cli.run("bisect", "start", "--good", "a", "--bad", "b")
    assert result.returncode == 2
    assert "executor.hosts" in result.stderr and "'gpu-a' is not ssh://" in result.stderr
