"""A crossing at a first-parent merge commit: the session goes on inside the branch that merge
brought in (merge base to the merge's second parent) and names both the merge and the commit
inside it, as `git bisect` would reach it. Real git histories (--no-ff merges, nested merges,
an octopus merge, a merge of an ancestor), real measure processes, the CLI as a user runs it."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

from conftest import EXPERIMENT, Cli, _git
from session_views import same_numbers_in_every_view
from test_resume import start_background

# The value a commit measures: 30 (slow) when its tree holds the file `slow` or `slow2`, or both `needs`
# and `mainline_part` (an interaction), else 10; `delay` seconds per launch when the tree
# holds a file `delay` (a launch to interrupt).
MEASURE = r"""
import os, time
slow = os.path.exists("slow") or os.path.exists("slow2") or (
    os.path.exists("needs") and os.path.exists("mainline_part")
)
if os.path.exists("delay"):
    time.sleep(float(open("delay").read()))
value = 30.0 if slow else 10.0
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


class History:
    """A repository built commit by commit, as a team's history is: branches, --no-ff merges."""

    def __init__(self, root: Path, delay: float | None = None) -> None:
        self.root = root
        root.mkdir(parents=True)
        _git(root, "init", "-q", "-b", "main")
        (root / "measure.py").write_text(MEASURE)
        if delay is not None:
            (root / "delay").write_text(str(delay))
        self.commit("root")

    def commit(self, message: str, add: tuple[str, ...] = (), remove: tuple[str, ...] = ()) -> str:
        # each line of development writes its own file: merges never conflict
        line = _git(self.root, "symbolic-ref", "--short", "HEAD")
        (self.root / f"{line}.txt").write_text(message)
        for name in add:
            (self.root / name).write_text("1")
        for name in remove:
            (self.root / name).unlink()
        _git(self.root, "add", "-A")
        _git(self.root, "commit", "-q", "-m", message)
        return self.head()

    def head(self) -> str:
        return _git(self.root, "rev-parse", "HEAD")

    def branch(self, name: str, at: str = "HEAD") -> None:
        _git(self.root, "checkout", "-q", "-b", name, at)

    def checkout(self, name: str) -> None:
        _git(self.root, "checkout", "-q", name)

    def merge(self, *branches: str) -> str:
        _git(self.root, "merge", "-q", "--no-ff", *branches, "-m", f"Merge {' '.join(branches)}")
        return self.head()


def _feature_history(
    root: Path, broken: int | None = None, delay: float | None = None
) -> tuple[History, dict[str, str]]:
    """main: root, m1, m2 (fork), m3..m5, the --no-ff merge of `feature` (b1..b11, b6 adds
    `slow`), m6..m8. ``broken``: a branch commit whose build fails (it holds `broken`)."""
    h = History(root, delay)
    shas = {"root": h.head()}
    for i in (1, 2):
        shas[f"m{i}"] = h.commit(f"m{i}")
    h.branch("feature")
    for i in range(1, 12):
        add = (("slow",) if i == 6 else ()) + (("broken",) if i == broken else ())
        remove = ("broken",) if broken is not None and i == broken + 1 else ()
        shas[f"b{i}"] = h.commit(f"b{i}", add, remove)
    h.checkout("main")
    for i in (3, 4, 5):
        shas[f"m{i}"] = h.commit(f"m{i}")
    shas["merge"] = h.merge("feature")
    for i in (6, 7, 8):
        shas[f"m{i}"] = h.commit(f"m{i}")
    return h, shas


def _experiment(tmp_path: Path, extra: str = "") -> None:
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.replace(
            'measure = "python3 measure.py"', f'measure = "python3 measure.py"{extra}'
        )
    )


def _commit(step: dict | None) -> str | None:  # type: ignore[type-arg]
    return step["first_bad"]["commit"] if step else None


def _log_rows(tmp_path: Path) -> list[tuple[int, int, str]]:
    """(seq, position, flags) of every launch stored, in order."""
    db = tmp_path / "history.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("select seq, position, flags from launches order by seq").fetchall()
        except sqlite3.OperationalError:  # the tables are not made yet
            return []


def test_a_regression_inside_a_merged_branch_names_the_merge_and_the_commit_inside(
    cli: Cli, tmp_path: Path
) -> None:
    _, shas = _feature_history(tmp_path / "repo")
    _experiment(tmp_path)
    report = cli.bisect(shas["m1"], shas["m8"], "--no-explain")
    assert report["status"] == "found"
    assert _commit(report["culprit"]) == shas["merge"]  # the first-parent answer stays
    assert _commit(report["inside_culprit"]) == shas["b6"]  # and git bisect's answer with it
    assert report["inside_culprit"]["last_good"]["commit"] == shas["b5"]
    assert report["inside_culprit"]["confidence"] >= 0.99, report["inside_culprit"]
    # searched inside by the session's engine (the model), stored so that a resume and the
    # provisional report replay the inside search with it (it was the rule engine always)
    with sqlite3.connect(tmp_path / "history.db") as conn:
        (params,) = conn.execute("select params from sessions").fetchone()
    assert json.loads(params)["merge_engine"] == "model"
    (d,) = report["descent"]
    path_length = report["path_length"]  # m1 .. m8: 9 first-parent commits
    assert path_length == 9
    assert (d["depth"], d["parent"], d["outcome"]) == (1, 2, "found")
    assert (d["base"], d["head"], d["commits"]) == (shas["m2"], shas["b11"], 11)
    assert d["positions"] == [path_length, path_length + 11]
    assert d["merge"] == {"commit": shas["merge"]} and d["merge_position"] == 5
    assert f"the merge {shas['merge'][:12]} (Merge feature) crosses" in report["message"]
    assert f"inside it, commit {shas['b6'][:12]} (b6)" in report["message"]
    # every launch counted once: the log's rows are the report's launches, the inside
    # search's at the positions numbered on after the path
    rows = _log_rows(tmp_path)
    assert len(rows) == report["launches"]
    inside = [r for r in rows if r[1] >= path_length]
    assert len(inside) == d["launches"] and 4 <= len(inside) <= 10
    assert [r[0] for r in rows] == list(range(len(rows)))
    same_numbers_in_every_view(cli, report["session"], tmp_path)
    text = cli.run("bisect", "report", str(report["session"])).stdout
    assert "inside the merge at position 5 (positions 9-20" in text
    assert shas["b6"] in text
    status = cli.json("bisect", "status", "--json")
    assert _commit(status["inside_culprit"]) == shas["b6"]
    for view in ("status", "log"):  # the text views say it in the same words
        shown = cli.run("bisect", view, str(report["session"])).stdout
        assert "merge: inside the merge at position 5 (positions 9-20" in shown, view


def test_the_merge_base_measured_already_is_not_launched_again(cli: Cli, tmp_path: Path) -> None:
    # good = the merge base itself: its endpoint launch stands in for the inside search's good
    # end (the same configuration, this session, same host)
    _, shas = _feature_history(tmp_path / "repo")
    _experiment(tmp_path)
    report = cli.bisect(shas["m2"], shas["m8"], "--no-explain")
    assert _commit(report["inside_culprit"]) == shas["b6"]
    rows = _log_rows(tmp_path)
    base = report["descent"][0]["positions"][0]
    at_base = [r for r in rows if r[1] == base]
    assert at_base and "an earlier phase of this session" in at_base[0][2]
    assert report["reused_launches"] == []  # not counted as earlier sessions' launches
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_an_earlier_sessions_launches_of_the_branch_stand_in_inside(
    cli: Cli, tmp_path: Path
) -> None:
    # session 1 searched the branch itself (merge base to head); session 2 finds the merge:
    # its search inside takes session 1's launches of the same commits, endpoints included
    _, shas = _feature_history(tmp_path / "repo")
    _experiment(tmp_path)
    first = cli.bisect(shas["m2"], shas["b11"], "--no-explain")
    assert _commit(first["culprit"]) == shas["b6"]
    report = cli.bisect(shas["m1"], shas["m8"], "--no-explain")
    assert _commit(report["inside_culprit"]) == shas["b6"]
    (d,) = report["descent"]
    with sqlite3.connect(tmp_path / "history.db") as conn:
        rows = conn.execute(
            "select position, purpose, flags from launches where session_id = ? order by seq",
            (report["session"],),
        ).fetchall()
    ends = [r for r in rows if r[0] in d["positions"] and r[1] == "endpoint"]
    assert ends and all("reused from launch" in r[2] for r in ends)
    assert len(report["reused_launches"]) >= len(ends)
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_turned_off_the_merge_is_the_answer_and_the_report_says_so(
    cli: Cli, tmp_path: Path
) -> None:
    _, shas = _feature_history(tmp_path / "repo")
    _experiment(tmp_path)
    report = cli.bisect(shas["m1"], shas["m8"], "--no-explain", "--no-descend-merges")
    assert _commit(report["culprit"]) == shas["merge"]
    assert report["descent"] == [] and report["inside_culprit"] is None
    assert all(p["position"] < report["path_length"] for p in report["path"])
    assert any("--no-descend-merges" in w for w in report["warnings"])


def test_a_branch_that_crosses_only_with_the_mainline_names_the_merge_plainly(
    cli: Cli, tmp_path: Path
) -> None:
    # b6 brings `needs`, m4 (mainline, after the fork) brings `mainline_part`: only together
    # are they slow, so no commit of the branch crosses alone
    h = History(tmp_path / "repo")
    m1 = h.commit("m1")
    h.branch("feature")
    branch = [h.commit(f"b{i}", ("needs",) if i == 6 else ()) for i in range(1, 12)]
    h.checkout("main")
    h.commit("m3")
    h.commit("m4", ("mainline_part",))
    merge = h.merge("feature")
    last = h.commit("m6")
    _experiment(tmp_path)
    report = cli.bisect(m1, last, "--no-explain")
    assert report["status"] == "found"
    assert _commit(report["culprit"]) == merge
    assert report["inside_culprit"] is None
    (d,) = report["descent"]
    assert d["outcome"] == "branch-alone-does-not-cross" and d["head"] == branch[-1]
    assert "does not cross on its own" in d["message"]
    assert "together with the mainline" in report["message"]
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_nested_merges_are_descended_into_again(cli: Cli, tmp_path: Path) -> None:
    # main merges `feature`; `feature` merged `sub` (whose third commit is slow) on the way
    h = History(tmp_path / "repo")
    good = h.commit("m1")
    h.branch("feature")
    for i in (1, 2, 3):
        h.commit(f"b{i}")
    h.branch("sub")
    sub = [h.commit(f"s{i}", ("slow",) if i == 3 else ()) for i in range(1, 6)]
    h.checkout("feature")
    h.commit("b4")
    inner_merge = h.merge("sub")
    for i in (5, 6, 7):
        h.commit(f"b{i}")
    h.checkout("main")
    h.commit("m2")
    outer_merge = h.merge("feature")
    bad = h.commit("m3")
    _experiment(tmp_path)
    report = cli.bisect(good, bad, "--no-explain")
    assert _commit(report["culprit"]) == outer_merge
    first, second = report["descent"]
    assert (first["depth"], first["outcome"]) == (1, "found")
    assert _commit(first["culprit"]) == inner_merge
    assert (second["depth"], second["outcome"]) == (2, "found")
    assert second["merge"] == {"commit": inner_merge}
    assert second["merge_position"] == first["culprit"]["position"]
    assert _commit(report["inside_culprit"]) == sub[2]
    assert f"inside that, commit {sub[2][:12]} (s3)" in report["message"]
    # three searches, three ranges of positions that do not overlap
    assert first["positions"][1] < second["positions"][0]
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_a_branch_commit_that_cannot_build_is_skipped_inside(cli: Cli, tmp_path: Path) -> None:
    # b5 cannot build and b6 is slow: b4 good, b5 skip, b6 bad; which of b5 and b6 brought
    # the regression is not known, and the report says so instead of naming one
    _, shas = _feature_history(tmp_path / "repo", broken=5)
    _experiment(tmp_path, '\nbuild = "test ! -e broken"')
    report = cli.bisect(shas["m1"], shas["m8"], "--no-explain")
    assert _commit(report["culprit"]) == shas["merge"]
    (d,) = report["descent"]
    assert d["outcome"] == "ambiguous" and report["inside_culprit"] is None
    skipped = [p for p in report["path"] if p["verdict"] == "skip"]
    assert [p["config"]["commit"] for p in skipped] == [shas["b5"]]
    assert skipped[0]["position"] >= report["path_length"]
    assert any(u["bad"] == {"commit": shas["b6"]} for u in report["unresolved"])
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_an_octopus_merge_searches_the_branch_that_crosses(cli: Cli, tmp_path: Path) -> None:
    h = History(tmp_path / "repo")
    good = h.commit("m1")
    h.branch("quiet")
    quiet = [h.commit(f"q{i}") for i in range(1, 4)]
    h.checkout("main")
    h.branch("loud")
    loud = [h.commit(f"l{i}", ("slow",) if i == 3 else ()) for i in range(1, 6)]
    h.checkout("main")
    h.commit("m2")
    octopus = h.merge("quiet", "loud")
    bad = h.commit("m3")
    _experiment(tmp_path)
    report = cli.bisect(good, bad, "--no-explain")
    assert _commit(report["culprit"]) == octopus
    first, second = report["descent"]
    assert (first["parent"], first["head"], first["outcome"]) == (
        2,
        quiet[-1],
        "branch-alone-does-not-cross",
    )
    assert (second["parent"], second["head"], second["outcome"]) == (3, loud[-1], "found")
    assert _commit(report["inside_culprit"]) == loud[2]
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_a_merge_of_what_the_mainline_already_holds_has_nothing_inside(
    cli: Cli, tmp_path: Path
) -> None:
    # a merge whose second parent is already in its first parent's history, its own tree
    # changed (as a conflict resolution does): the merge is the answer, nothing to search
    h = History(tmp_path / "repo")
    good = h.commit("m1")
    first = h.commit("m2")
    h.commit("scratch", ("slow",))  # only for its tree: the merge's own change
    tree = _git(h.root, "rev-parse", "HEAD^{tree}")
    merge = _git(h.root, "commit-tree", tree, "-p", first, "-p", good, "-m", "merge m1 again")
    _git(h.root, "reset", "-q", "--hard", merge)
    bad = h.commit("m4")
    _experiment(tmp_path)
    report = cli.bisect(good, bad, "--no-explain")
    assert _commit(report["culprit"]) == merge
    (d,) = report["descent"]
    assert d["outcome"] == "nothing-to-search" and d["commits"] == 0
    assert "brought in no commit" in d["message"]
    assert report["inside_culprit"] is None


def test_resume_in_the_middle_of_the_descent(cli: Cli, tmp_path: Path) -> None:
    # every launch takes half a second: Ctrl-C lands inside the search in the branch
    _, shas = _feature_history(tmp_path / "repo", delay=0.5)
    _experiment(tmp_path)
    proc = start_background(
        cli, "bisect", "start", "--good", shas["m1"], "--bad", shas["m8"], "--no-explain"
    )
    deadline = time.monotonic() + 180
    while not any(r[1] >= 9 for r in _log_rows(tmp_path)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the search inside the merge never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    before = _log_rows(tmp_path)
    status = cli.json("bisect", "status", "--json")
    assert status["status"] == "interrupted"
    # the provisional report shows the search inside as far as it went
    (d,) = status["descent"]
    assert (d["outcome"], d["head"], d["culprit"]) == ("under-way", shas["b11"], None)
    assert "is under way" in d["message"]
    assert "inside the merge at position 5" in cli.run("bisect", "status").stdout
    report = cli.json("bisect", "resume", "--json")
    assert _commit(report["culprit"]) == shas["merge"]
    assert _commit(report["inside_culprit"]) == shas["b6"]
    after = _log_rows(tmp_path)
    assert after[: len(before)] == before  # nothing launched again
    assert len(after) > len(before)  # the inside search went on where it stopped
    assert [r[0] for r in after] == list(range(len(after)))
    assert len(after) == report["launches"]
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_a_branch_cut_from_a_slow_mainline_says_its_base_already_crosses(
    cli: Cli, tmp_path: Path
) -> None:
    # m2 is slow, the branch is cut from it, m3 fixes the main line; b3 brings a regression of
    # its own, so the merge crosses, and inside it the merge base is slow already: the inside
    # search cannot tell where the branch's own regression came in, and says why
    h = History(tmp_path / "repo")
    h.commit("m1")
    h.commit("m2", ("slow",))
    h.branch("feature")
    for i in range(1, 6):
        h.commit(f"b{i}", ("slow2",) if i == 3 else ())
    h.checkout("main")
    good = h.commit("m3", remove=("slow",))
    merge = h.merge("feature")
    bad = h.commit("m4")
    _experiment(tmp_path)
    report = cli.bisect(good, bad, "--no-explain")
    assert _commit(report["culprit"]) == merge
    (d,) = report["descent"]
    assert d["outcome"] == "base-crosses" and report["inside_culprit"] is None
    assert "is already past the threshold" in d["message"]
    same_numbers_in_every_view(cli, report["session"], tmp_path)


def test_explain_takes_the_commit_inside_the_merge(cli: Cli, tmp_path: Path) -> None:
    # The merge's own diff holds the whole branch; the pair to explain is the inside commit
    # and its parent on the branch, as `git bisect` would have left them.
    _, shas = _feature_history(tmp_path / "repo")
    _experiment(tmp_path)
    report = cli.bisect(shas["m1"], shas["m8"], "--no-explain")
    assert _commit(report["inside_culprit"]) == shas["b6"]
    why = cli.json("bisect", "explain", "--json")
    assert why["good"]["config"] == {"commit": shas["b5"]}
    assert why["bad"]["config"] == {"commit": shas["b6"]}
    changes = [f["title"] for f in why["findings"] if f["kind"] == "change"]
    assert any(f"{shas['b5'][:12]} -> {shas['b6'][:12]}" in t for t in changes), changes
