"""Several launches at once: a pool of ssh hosts (the real sshd fixture, two host entries:
its throwaway user and root, each with its own home and cache) and k-ary search."""

from __future__ import annotations

import itertools
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from conftest import EXPERIMENT, Cli, make_repo
from sshd_fixture import SshServer

MEASURE = """\
import os, time
start = time.time()
time.sleep(2.5)
with open(os.environ["PB_INTERVALS"], "a") as f:  # when this launch measured, on which host
    f.write(f"{start} {time.time()}\\n")
value = float(open("value").read())
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


def pool_experiment(server: SshServer, intervals: Path) -> str:
    return EXPERIMENT + (
        f'\n[host]\nssh_config = "{server.ssh_config}"\n\n[executor]\nkind = "hosts"\n'
        f'hosts = ["{server.address}", "{server.root_address}"]\n\n'
        f'[env]\nPB_INTERVALS = "{intervals}"\n'
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
    # Both host entries are this machine: one file both users can write (pytest's tmp is 0700).
    shared = Path(tempfile.mkdtemp(prefix="pb-intervals-"))
    shared.chmod(0o777)
    intervals = shared / "intervals"
    (tmp_path / "perfbisect.toml").write_text(pool_experiment(ssh_server, intervals))
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
    # The comparisons that decide ran on one host (the first slot's), search points on both.
    deciding = {r["host"] for r in rows if r["purpose"] != "search"}
    assert deciding == {ssh_server.address}, deciding
    assert not any("deciding launches" in w for w in report["warnings"])

    # Two launches of one round ran at the same time: their spans in the history (start, plus
    # the stage times) overlap. (The measure scripts' own clocks only overlap when both copies
    # of the tree reached their hosts within the 2.5 s measure, which a loaded machine misses.)
    def span(row: dict[str, Any]) -> tuple[float, float]:
        start = datetime.fromisoformat(row["started_at"].rstrip("Z")).timestamp()
        return start, start + sum(float(v) for v in (row["timings"] or {}).values())

    spans = sorted(span(r) for r in rows if r["value"] is not None)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), (
        report["rounds"],
        report["launches"],
        [(r["purpose"], r["config"]["commit"][:6], r["host"][-20:], span(r)) for r in rows],
    )
    # and every launch measured: the scripts wrote one interval each
    assert len(intervals.read_text().splitlines()) == len(spans)


def test_an_executor_table_with_bad_hosts_is_refused(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "perfbisect.toml").write_text(
        '[target]\nkind = "command"\nmeasure = "true"\n[metric]\nname = "m"\npattern = "m=(.*)"\n'
        '[executor]\nkind = "hosts"\nhosts = ["gpu-a"]\n'
    )
    result = cli.run("bisect", "start", "--good", "a", "--bad", "b")
    assert result.returncode == 2
    assert "executor.hosts" in result.stderr and "'gpu-a' is not ssh://" in result.stderr
