"""A prior from the change itself (``--prior-path``, perfbisect/bisect/session/prior.py): the
commits that touch the named paths hold half of the model's prior. On a real repository through
the CLI: a right guess saves launches, a wrong one still names the culprit, bad input stores
nothing; and on the search benchmark's simulated worlds (a test double for GPU launches)."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXPERIMENT, PRINTED_MEASURE, Cli, _git, make_repo

from perfbisect.bisect.search.model import believe
from perfbisect.bisect.session.prior import PathPrior

N = 48  # commits after the good one
CULPRIT = 37
TOUCHING = (6, 19, CULPRIT)  # the commits that change verify/attention.py


def _repo(tmp_path: Path, touching: tuple[int, ...], culprit: int = CULPRIT) -> list[str]:
    """N+1 commits; the value goes 10 -> 13 at ``culprit``; the commits of ``touching`` change
    verify/attention.py, every other one a file elsewhere (docs/, a merge-free history)."""
    commits: list[dict[str, str]] = []
    for i in range(N + 1):
        files = {"value": "10.0" if i < culprit else "13.0"}
        if i == 0:
            files["measure.py"] = PRINTED_MEASURE
            files["verify/attention.py"] = "# 0\n"
        elif i in touching:
            files["verify/attention.py"] = f"# {i}\n"
        else:
            files[f"docs/note{i}.md"] = f"{i}\n"
        commits.append(files)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    return make_repo(tmp_path / "repo", commits).shas


def _launches(cli: Cli, shas: list[str], *extra: str) -> dict[str, Any]:
    return cli.bisect(shas[0], shas[-1], "--engine", "model", "--fresh", *extra)


def test_a_right_prior_names_the_culprit_in_fewer_launches(cli: Cli, tmp_path: Path) -> None:
    shas = _repo(tmp_path, TOUCHING)
    flat = _launches(cli, shas)
    # an absolute path inside the repository is as good as one relative to its top
    guided = _launches(cli, shas, "--prior-path", str(tmp_path / "repo" / "verify"))
    for report in (flat, guided):
        assert report["culprit"]["first_bad"] == {"commit": shas[CULPRIT]}
        assert report["culprit"]["verified"] is True
    assert guided["launches"] < flat["launches"], (guided["launches"], flat["launches"])
    # The report says the search was weighed, in JSON and in text
    assert "prior: the 3 of 48 commits touching verify held half of it" in guided["search"]
    assert "prior:" not in flat["search"]
    text = cli.run("bisect", "report", "--html", str(tmp_path / "r.html")).stdout
    assert "commits touching verify held half of it" in text
    page = (tmp_path / "r.html").read_text()
    assert "<b>search:</b> crossing first" in page
    assert "the 3 of 48 commits touching verify held half of it" in page


def test_a_wrong_prior_still_names_the_culprit(cli: Cli, tmp_path: Path) -> None:
    shas = _repo(tmp_path, (6, 19, 30), culprit=CULPRIT)  # the culprit touches docs/ alone
    report = _launches(cli, shas, "--prior-path", "verify")
    assert report["culprit"]["first_bad"] == {"commit": shas[CULPRIT]}
    assert report["culprit"]["verified"] is True and report["culprit"]["confidence"] >= 0.99


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--engine", "model", "--prior-path", "nowhere/"], "no commit between good and bad"),
        (["--engine", "rules", "--prior-path", "verify"], "--prior-area need --engine model"),
        (["--engine", "model", "--prior-area", "kernels"], "--prior-area kernels: unknown"),
        (["--engine", "model", "--prior-path", "/elsewhere/verify"], "not inside the repository"),
    ],
)
def test_a_prior_that_cannot_apply_is_an_input_error_and_stores_nothing(
    cli: Cli, tmp_path: Path, extra: list[str], said: str
) -> None:
    shas = _repo(tmp_path, TOUCHING)
    result = cli.run("bisect", "start", "--good", shas[0], "--bad", shas[-1], *extra)
    assert result.returncode == 2, result.stdout + result.stderr
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    listed = cli.run("query", "history", "--json")
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stdout


def test_the_prior_weighs_where_the_crossing_is_until_the_launches_speak() -> None:
    prior = PathPrior(("verify",), (3, 9), 12)
    weights = prior.weights()
    assert weights[0] == 0 and sum(weights[x] for x in (3, 9)) == pytest.approx(0.5)
    # Only the endpoints measured: the crossing's mass is the prior's
    b = believe([(12, 13.0), (0, 10.0), (12, 13.0)], 12, None, 0.02, weights)
    assert b.crossing_at(3) == pytest.approx(0.25, abs=1e-6)
    assert b.crossing_at(5) == pytest.approx(0.05, abs=1e-6)
    assert b.best()[0] == 3
    # Position 6 measured below: 3 is out, 9 holds its gap's half
    b = believe([(12, 13.0), (0, 10.0), (12, 13.0), (6, 10.0)], 12, None, 0.02, weights)
    assert b.crossing_at(3) < 1e-3 and b.best()[0] == 9
    assert b.cdf()[-1] == pytest.approx(1.0)


def _bench() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import search_bench

    return search_bench


def test_on_simulated_worlds_a_right_prior_saves_and_a_wrong_one_costs_little() -> None:
    bench = _bench()
    totals = {"flat": 0, "right": 0, "wrong": 0}
    for trial in range(12):
        for kind in totals:
            world = bench.prior_world(1024, random.Random(7_000 + trial), kind)
            result = bench.run_perfbisect(
                world, 1024, bench.Policy(), model=True, prior=world.prior
            )
            assert result.correct, (kind, trial)
            totals[kind] += result.launches
    assert totals["right"] < totals["flat"] - 12 * 2  # at least two launches a search
    assert totals["wrong"] <= totals["flat"] + 12 * 3


def test_a_resumed_session_keeps_its_prior_and_its_engine_inside_merges() -> None:
    from perfbisect.bisect.session.session import stored_options

    prior = PathPrior(("verify",), (3, 9), 12)
    params = {"min_launches": 1, "max_launches": 5, "engine": "model", "prior": prior.as_json()}
    assert stored_options(params).prior == prior
    assert stored_options({**params, "prior": None}).prior is None
    # The searches inside merges: the session's engine, as stored; a session stored before
    # that searched inside with the rule engine, and resumes so (its stored launches match).
    assert stored_options({**params, "merge_engine": "model"}).engine_inside_merges == "model"
    assert stored_options(params).engine_inside_merges == "rules"


def test_a_prior_on_the_verify_area_reads_the_files_each_commit_changed(
    cli: Cli, tmp_path: Path
) -> None:
    # SGLang-like paths: the culprit and two other commits change the speculative worker, the
    # rest documentation; --prior-area verify finds them by the file names `bisect explain`
    # flags, with no path given.
    commits: list[dict[str, str]] = []
    for i in range(N + 1):
        files = {"value": "10.0" if i < CULPRIT else "13.0"}
        if i == 0:
            files["measure.py"] = PRINTED_MEASURE
        if i in TOUCHING:
            files["python/sglang/srt/speculative/eagle_worker.py"] = f"# {i}\n"
        elif i:
            files[f"docs/note{i}.md"] = f"{i}\n"
        commits.append(files)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    shas = make_repo(tmp_path / "repo", commits).shas
    flat = _launches(cli, shas)
    guided = _launches(cli, shas, "--prior-area", "verify")
    assert guided["culprit"]["first_bad"] == {"commit": shas[CULPRIT]}
    assert guided["culprit"]["verified"] is True
    assert guided["launches"] < flat["launches"], (guided["launches"], flat["launches"])
    assert "the 3 of 48 commits touching the speculative/verify path" in guided["search"]


def test_a_merge_counts_with_the_files_its_branch_brought_in(tmp_path: Path) -> None:
    from perfbisect.targets.gitrepo import GitRepo

    repo = make_repo(tmp_path / "repo", [{"a.txt": "0"}, {"a.txt": "1"}])
    _git(repo.path, "checkout", "-q", "-b", "feature")
    for i in range(2):
        (repo.path / "spec_decode.py").write_text(f"# {i}\n")
        _git(repo.path, "add", "-A")
        _git(repo.path, "commit", "-q", "-m", f"feature {i}")
    _git(repo.path, "checkout", "-q", "main")
    (repo.path / "b.txt").write_text("main\n")
    _git(repo.path, "add", "-A")
    _git(repo.path, "commit", "-q", "-m", "main moves on")
    _git(repo.path, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merge = _git(repo.path, "rev-parse", "HEAD")
    files = GitRepo(repo.path).files_by_commit(repo.shas[0], merge)
    assert files[merge] == {"spec_decode.py"}  # against the first parent: the branch's
    assert files[repo.shas[1]] == {"a.txt"}
    assert len(files) == 3  # the first-parent line only: not the branch's own commits
