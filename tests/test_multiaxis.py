"""Multi-axis searches through the CLI with --json: real git repositories, real patch files
(one that only applies on top of another), real measure processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import EXPERIMENT as BASE_EXPERIMENT
from conftest import Cli, make_repo

# The measured value: a base from the commit, plus every number in cost/*, times 3 when the
# `flag` axis is b and the commit has `interaction` (a regression that needs both).
MEASURE = r"""
import os, pathlib
base = float(pathlib.Path("base").read_text())
extra = sum(float(p.read_text().split()[0]) for p in sorted(pathlib.Path("cost").glob("*")))
value = base + extra
if pathlib.Path("cost/pair_a").exists() and pathlib.Path("cost/pair_b").exists():
    value += 20  # two patches that only regress together
if os.environ.get("PERFBISECT_FLAG") == "b" and pathlib.Path("interaction").exists():
    value *= 3
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""

EXPERIMENT = (
    BASE_EXPERIMENT
    + """
[axes.custom.flag]
values = ["a", "b"]
ordered = false
{patches}
"""
)


def patch_names(value: str) -> list[str]:
    """The patch names of a `patches` axis value (tokens are name@content-hash)."""
    return [t.split("@")[0] for t in value.split("+") if t]


def _patch(repo: Path, name: str, files: dict[str, str], out: Path) -> None:
    """A real `git diff` patch: write files in a scratch branch, diff, restore."""
    for rel, text in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    diff = subprocess.run(
        ["git", "diff", "--cached"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    subprocess.run(["git", "reset", "-q", "--hard", "HEAD"], cwd=repo, check=True)
    (out / name).write_text(diff)


def _repo(tmp_path: Path, interaction_at: int | None = None, step_at: int | None = None):  # type: ignore[no-untyped-def]
    commits: list[dict[str, str]] = []
    for i in range(12):
        files = {"base": "20" if step_at is not None and i >= step_at else "10", "cost/keep": "0"}
        if i == 0:
            files["measure.py"] = MEASURE
        if interaction_at is not None and i == interaction_at:
            files["interaction"] = "yes"
        commits.append(files)
    return make_repo(tmp_path / "repo", commits)


def test_bad_patch_needing_another_is_found_by_ddmin(cli: Cli, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    patches = tmp_path / "patches"
    patches.mkdir()
    _patch(repo.path, "p1.patch", {"cost/p1": "0 docs"}, patches)
    _patch(repo.path, "p2.patch", {"cost/p2": "0 logging"}, patches)
    _patch(repo.path, "p3.patch", {"cost/p3": "0\n"}, patches)
    # p4 edits the file p3 adds: alone it does not apply (SKIP); on top of p3 it costs 20 ms.
    subprocess.run(["git", "apply", str(patches / "p3.patch")], cwd=repo.path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo.path, check=True)
    subprocess.run(
        ["git", "commit", "-qm", "tmp"],
        cwd=repo.path,
        check=True,
        env={
            **__import__("os").environ,
            "GIT_AUTHOR_NAME": "T",
            "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "T",
            "GIT_COMMITTER_EMAIL": "t@e",
        },
    )
    _patch(repo.path, "p4.patch", {"cost/p3": "20\n"}, patches)
    subprocess.run(["git", "reset", "-q", "--hard", "HEAD~1"], cwd=repo.path, check=True)
    files = ", ".join(f'"patches/p{i}.patch"' for i in range(1, 5))
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(patches=f"[axes.patches]\nfiles = [{files}]\n")
    )
    head = repo.shas[-1]
    report = cli.bisect(
        f"{head},patches=none", f"{head},patches=p1.patch+p2.patch+p3.patch+p4.patch"
    )
    assert report["status"] == "found", report["message"]
    culprit = report["culprit"]
    assert culprit["axis"] == "patches"
    assert patch_names(culprit["first_bad"]["patches"]) == ["p3.patch", "p4.patch"]
    assert patch_names(culprit["last_good"]["patches"]) == ["p3.patch"]
    assert culprit["effect_ms"]["delta"] > 15
    skipped = [p for p in report["path"] if p["verdict"] == "skip"]
    assert skipped and "p4.patch does not apply" in skipped[0]["reason"]


def _patch_set(repo: Path, tmp_path: Path, special: dict[int, dict[str, str]]) -> str:
    """Eight real patches p1..p8 (each adds a harmless file) except where ``special`` says."""
    patches = tmp_path / "patches"
    patches.mkdir()
    for i in range(1, 9):
        _patch(repo, f"p{i}.patch", special.get(i, {f"cost/p{i}": "0 harmless"}), patches)
    files = ", ".join(f'"patches/p{i}.patch"' for i in range(1, 9))
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(patches=f"[axes.patches]\nfiles = [{files}]\n")
    )
    return "+".join(f"p{i}.patch" for i in range(1, 9))


def test_one_bad_patch_among_eight_with_the_commit_differing_too(cli: Cli, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    every = _patch_set(repo.path, tmp_path, {6: {"cost/p6": "20 slow"}})
    report = cli.bisect(f"{repo.shas[0]},patches=none", f"{repo.shas[-1]},patches={every}")
    assert report["status"] == "found", report["message"]
    assert report["culprit_axes"] == [["patches"]]
    first_bad = report["culprit"]["first_bad"]
    assert patch_names(first_bad["patches"])[-1] == "p6.patch"
    assert first_bad["commit"] == repo.shas[0]


def test_two_patches_that_regress_only_together(cli: Cli, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    every = _patch_set(repo.path, tmp_path, {2: {"cost/pair_a": "0"}, 7: {"cost/pair_b": "0"}})
    head = repo.shas[-1]
    report = cli.bisect(f"{head},patches=none", f"{head},patches={every}")
    assert report["status"] == "found", report["message"]
    assert patch_names(report["culprit"]["first_bad"]["patches"]) == ["p2.patch", "p7.patch"]
    assert patch_names(report["culprit"]["last_good"]["patches"]) == ["p2.patch"]


def test_a_stack_with_two_regressions_names_both_with_all_steps(cli: Cli, tmp_path: Path) -> None:
    # p3 costs +30 ms (verify made eager), p6 +3 ms (a host sync: 30% of the good 10 ms, far
    # below the threshold that p3 alone crosses, so the crossing-first search would stop at p3).
    repo = _repo(tmp_path)
    every = _patch_set(repo.path, tmp_path, {3: {"cost/p3": "30 eager"}, 6: {"cost/p6": "3 sync"}})
    head = repo.shas[-1]
    report = cli.bisect(f"{head},patches=none", f"{head},patches={every}", "--all-steps")
    assert report["status"] == "found", report["message"]
    assert "2 steps" in report["message"]
    steps = report["steps"]
    assert [patch_names(s["first_bad"]["patches"]) for s in steps] == [["p3.patch"], ["p6.patch"]]
    assert all(s["verified"] for s in steps)
    assert [round(s["effect_ms"]["delta"]) for s in steps] == [30, 3]
    # The derived threshold rests on the endpoints, not on the last configuration measured.
    lo, hi = report["threshold_interval"]
    assert 10 < lo <= report["threshold_ms"] <= hi < 43


def test_interaction_of_commit_and_flag_is_attributed(cli: Cli, tmp_path: Path) -> None:
    repo = _repo(tmp_path, interaction_at=7)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT.format(patches=""))
    report = cli.bisect(f"{repo.shas[0]},flag=a", f"{repo.shas[-1]},flag=b")
    assert report["status"] == "found", report["message"]
    assert sorted(report["culprit_axes"][0]) == ["commit", "flag"]
    assert "needs" in report["message"]
    singles = {tuple(r["axes"]): r["verdict"] for r in report["attribution"]}
    assert singles[("commit",)] == "good" and singles[("flag",)] == "good"
    by_axis = {c["axis"]: c for c in report["culprits"]}
    assert by_axis["commit"]["first_bad"]["commit"] == repo.shas[7]
    assert by_axis["commit"]["first_bad"]["flag"] == "b"  # searched with flag held bad
    assert by_axis["flag"]["first_bad"]["flag"] == "b"


def test_two_stacked_regressions_on_two_axes(cli: Cli, tmp_path: Path) -> None:
    # The commit step doubles the base (10 -> 20); flag=b with `interaction` present from the
    # first commit triples whatever it is: each axis is bad on its own.
    repo = _repo(tmp_path, interaction_at=0, step_at=5)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT.format(patches=""))
    report = cli.bisect(f"{repo.shas[0]},flag=a", f"{repo.shas[-1]},flag=b")
    assert report["status"] == "found", report["message"]
    assert sorted(map(tuple, report["culprit_axes"])) == [("commit",), ("flag",)]
    by_axis = {c["axis"]: c for c in report["culprits"]}
    assert by_axis["commit"]["first_bad"]["commit"] == repo.shas[5]
    assert by_axis["commit"]["first_bad"]["flag"] == "a"  # searched with the other axis good
    # k = 2 differing axes: attribution took 2 single-axis configurations (<= 2k + 2).
    assert len([r for r in report["attribution"] if len(r["axes"]) == 1]) == 2


def test_bad_patch_input_is_refused_before_anything_is_stored(cli: Cli, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "evil.patch").write_text(
        "diff --git a/../outside b/../outside\n--- a/../outside\n+++ b/../outside\n@@ -0,0 +1 @@\n+x\n"
    )
    exp = tmp_path / "perfbisect.toml"
    head = repo.shas[-1]
    cases = [
        ('files = ["patches/missing.patch"]', "patch file 'patches/missing.patch' does not exist"),
        ('files = ["patches/evil.patch"]', "touches '../outside' outside the worktree"),
    ]
    for files, message in cases:
        exp.write_text(EXPERIMENT.format(patches=f"[axes.patches]\n{files}\n"))
        result = cli.run("bisect", "start", "--good", head, "--bad", f"{head},patches=evil.patch")
        assert result.returncode == 2, result.stderr  # a malformed experiment file
        assert message in result.stderr and "perfbisect.toml:" in result.stderr
    _patch(repo.path, "ok.patch", {"cost/ok": "0"}, patches)
    exp.write_text(EXPERIMENT.format(patches='[axes.patches]\nfiles = ["patches/ok.patch"]\n'))
    result = cli.run("bisect", "start", "--good", head, "--bad", f"{head},patches=nope.patch")
    assert result.returncode == 2
    assert "patch 'nope.patch' is not listed in [axes.patches] (ok.patch)" in result.stderr
    result = cli.run("bisect", "start", "--good", head, "--bad", f"{head},flag=c")
    assert result.returncode == 2 and "value 'c' is not listed" in result.stderr
    assert (
        not (tmp_path / "history.db").exists()
        or b"sessions" not in (tmp_path / "history.db").read_bytes()
        or _sessions(tmp_path) == 0
    )


def _sessions(tmp_path: Path) -> int:
    import sqlite3

    with sqlite3.connect(tmp_path / "history.db") as db:
        return int(db.execute("select count(*) from sessions").fetchone()[0])
