"""The installed `perfbisect` command on real git repositories with real measure commands."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import EXPERIMENT, TIMED_MEASURE, Cli, value_repo


def test_bisect_finds_real_slowdown_and_history_remembers(cli: Cli, tmp_path: Path) -> None:
    costs = [1.0] * 7 + [8.0] * 6  # commit 7 makes the measured work 8x slower
    repo = value_repo(tmp_path / "repo", costs, name="cost", script=TIMED_MEASURE)
    exp = tmp_path / "perfbisect.toml"
    exp.write_text(EXPERIMENT)
    plot = tmp_path / "plot.png"
    report = cli.json(
        "bisect",
        "start",
        "--good",
        repo.shas[0],
        "--bad",
        "main",
        "-c",
        str(exp),
        "--name",
        "first",
        "--json",
        "--plot",
        str(plot),
    )
    assert report["status"] == "found"
    culprit = report["culprit"]
    assert culprit["axis"] == "commit"
    assert culprit["first_bad"] == {"commit": repo.shas[7]}
    assert culprit["last_good"] == {"commit": repo.shas[6]}
    assert culprit["commit"]["subject"] == "commit 7"
    assert culprit["first_bad_ms"]["median"] > 3 * culprit["last_good_ms"]["median"]
    lo, hi = culprit["first_bad_ms"]["ci"]
    assert lo <= culprit["first_bad_ms"]["median"] <= hi
    assert culprit["verified"] is True
    assert report["launches"] >= report["evaluations"] >= 5
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"

    # The report, the log and the history all come back from the store.
    again = cli.json("bisect", "report", "first", "--json")
    assert again["culprit"] == culprit
    log = cli.json("bisect", "log", "--json")
    explained = [entry for entry in log if entry["purpose"] == "explain"]  # bisect explain's
    assert len(log) == report["launches"] + len(explained) and len(explained) == 4
    assert all(entry["status"] == "ok" and entry["samples"] == 8 for entry in log)
    hist = cli.json("query", "history", "--config", f"commit={repo.shas[7][:10]}", "--json")
    assert hist and all(h["config"]["commit"] == repo.shas[7] for h in hist)
    shown = cli.json("query", "show", str(log[0]["id"]), "--json")
    assert len(shown["samples"]) == 8 and shown["snapshot"]["python"]
    # Endpoints run interleaved B, G, B: launch 1 is the good endpoint, launch 0 the bad one.
    assert [entry["config"]["commit"] for entry in log[:3]] == [
        repo.shas[12],
        repo.shas[0],
        repo.shas[12],
    ]
    compared = cli.json("query", "compare", str(log[1]["id"]), str(log[0]["id"]), "--json")
    assert compared["ratio"] > 3
    sessions = cli.json("query", "sessions", "--json")
    assert sessions[0]["outcome"] == "found" and sessions[0]["first_bad"] == {
        "commit": repo.shas[7]
    }
    text = cli.run("bisect", "report", "first")
    assert text.returncode == 0 and "commit 7" in text.stdout and repo.shas[7] in text.stdout


def test_custom_ordered_axis_without_repo(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "perfbisect.toml").write_text("""\
[target]
kind = "command"
measure = "python3 -c \\"import os; b=int(os.environ['PERFBISECT_BATCH']); [print(f'tok_s={900/(1 if b < 8 else 3):.1f}') for _ in range(4)]\\" --batch {batch}"

[metric]
name = "tok_s"
pattern = 'tok_s=([0-9.]+)'
higher_is_better = true

[axes.custom.batch]
values = ["1", "2", "4", "8", "16", "32"]
""")
    report = cli.bisect("batch=1", "batch=32")
    assert report["status"] == "found"
    assert report["culprit"]["first_bad"] == {"batch": "8"}
    assert report["culprit"]["last_good"] == {"batch": "4"}
    assert report["culprit"]["effect_ms"]["delta"] < 0  # throughput dropped


def test_drift_of_an_endpoint_is_reported(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 20.0, 20.0])
    exp = tmp_path / "perfbisect.toml"
    exp.write_text(EXPERIMENT)
    cli.bisect(repo.shas[0], repo.shas[3])
    # The good commit's measurement moves (same configuration, new value): the second session
    # must say so, with dates and values.
    (repo.path / "value").write_text("10")
    worktrees = list((tmp_path / "cache" / "worktrees").glob(f"*/{repo.shas[0][:16]}"))
    assert len(worktrees) == 1
    (worktrees[0] / "value").write_text("14")
    report = cli.bisect(repo.shas[0], repo.shas[3])
    drift = [d for d in report["drift"] if d["endpoint"] == "good"]
    assert drift, report["drift"]
    assert drift[0]["before"]["median"] < 10.5 and drift[0]["now"]["median"] > 13
    assert drift[0]["before"]["sessions"] == [1]


def test_database_rows_are_complete(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    exp = tmp_path / "perfbisect.toml"
    exp.write_text(
        EXPERIMENT.replace("timeout_s = 60", "timeout_s = 60\n")
        + '[env]\nHF_TOKEN = "hf_supersecretvalue"\nNCCL_PROTO = "LL"\n'
    )
    cli.json(
        "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[2], "-c", str(exp), "--json"
    )
    db = sqlite3.connect(tmp_path / "history.db")
    n_launches, n_samples = db.execute("select count(*), sum(n_samples) from launches").fetchone()
    assert db.execute("select count(*) from samples").fetchone()[0] == n_samples > 0
    snapshots = [json.loads(r[0]) for r in db.execute("select data from env_snapshots")]
    assert snapshots and snapshots[0]["env"] == {"HF_TOKEN": "<redacted>", "NCCL_PROTO": "LL"}
    assert "hf_supersecretvalue" not in "\n".join(db.iterdump())
    assert (
        'HF_TOKEN = "<redacted>"'
        in db.execute("select experiment_text from sessions").fetchone()[0]
    )
    assert db.execute("select journal_mode from pragma_journal_mode").fetchone()[0] == "wal"
    assert db.execute("select version_num from alembic_version").fetchone()[0] == "0003_watch"
    assert n_launches >= 5


def test_two_step_regression_is_reported_as_steps(cli: Cli, tmp_path: Path) -> None:
    # 19 -> 23 -> 29 over 12 commits with --all-steps: the report names both steps and marks
    # 23 -> 29 (the one that crosses the threshold 24) as the culprit; the text lists the steps.
    # By default (crossing first) only the crossing is searched; the other step is "seen".
    values = [19.0] * 4 + [23.0] * 4 + [29.0] * 4
    repo = value_repo(tmp_path / "repo", values)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    first = cli.bisect(repo.shas[0], repo.shas[-1], "--threshold-ms", "26")
    assert first["search"] == "crossing first"
    assert first["culprit"]["first_bad"]["commit"] == repo.shas[8]
    assert [s["first_bad"]["commit"] for s in first["steps"]] == [repo.shas[8]]
    for seen in first["seen_not_searched"]:  # the 19 -> 23 step, from launches already made
        assert values[repo.shas.index(seen["good"]["commit"])] == 19.0
        assert values[repo.shas.index(seen["bad"]["commit"])] == 23.0
    report = cli.bisect(repo.shas[0], repo.shas[-1], "--all-steps")
    assert report["search"] == "all steps"
    assert report["launches"] > first["launches"]
    assert report["status"] == "found", report["message"]
    assert [s["first_bad"]["commit"] for s in report["steps"]] == [repo.shas[4], repo.shas[8]]
    assert report["culprit"]["first_bad"]["commit"] == repo.shas[8]
    verdicts = {p["position"]: p["verdict"] for p in report["path"]}
    assert "intermediate" in verdicts.values()
    text = cli.run("bisect", "report")
    assert text.returncode == 0, text.stderr
    assert "2 steps" in text.stdout and repo.shas[4][:12] in text.stdout


def test_query_history_limits_and_dates_in_the_database(cli: Cli, tmp_path: Path) -> None:
    repo = value_repo(tmp_path / "repo", [10.0] * 4 + [30.0] * 4)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    report = cli.bisect(repo.shas[0], repo.shas[-1])
    every = cli.json("query", "history", "--limit", "0", "--json")
    assert len([v for v in every if v["purpose"] != "explain"]) == report["launches"]
    newest = cli.json("query", "history", "--limit", "2", "--json")
    assert [v["id"] for v in newest] == [v["id"] for v in every[-2:]]  # newest two, in order
    day = every[0]["started_at"][:10]
    assert len(cli.json("query", "history", "--until", day, "--limit", "0", "--json")) == len(every)
    assert cli.json("query", "history", "--until", "2000-01-01", "--json") == []
    good = cli.json("query", "history", "--config", f"commit={repo.shas[0][:8]}", "--json")
    assert good and all(v["config"]["commit"] == repo.shas[0] for v in good)
    bad_date = cli.run("query", "history", "--until", "yesterday")
    assert bad_date.returncode == 2 and "--until 'yesterday'" in bad_date.stderr
