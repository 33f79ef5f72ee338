"""`--all-steps`, multi-axis attribution and ddmin on the model (`--engine model`): whole
sessions through the CLI on real git repositories measured by real processes, and simulated
searches (the benchmarks' worlds, a test double for GPU launches) that show no rule-chain class
is needed. Every step and culprit a model session names carries its posterior (`confidence`);
the rule engine, which these modes fell back to before, reports none for them."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXPERIMENT, Cli, value_repo
from test_multiaxis import EXPERIMENT as AXES_EXPERIMENT
from test_multiaxis import _patch_set, _repo, patch_names

from perfbisect.bisect.search.searcher import ModelEngine
from perfbisect.bisect.values import LaunchResult, Policy, Status
from perfbisect.config import Configuration

ROOT = Path(__file__).resolve().parents[1]


def test_all_steps_on_the_model_names_both_steps_with_their_posteriors(
    cli: Cli, tmp_path: Path
) -> None:
    # 19 -> 23 -> 29 ms over 12 commits: the crossing (23 -> 29) first, then the gap below it.
    values = [19.0] * 4 + [23.0] * 4 + [29.0] * 4
    repo = value_repo(tmp_path / "repo", values)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    report = cli.bisect(repo.shas[0], repo.shas[-1], "--all-steps", "--engine", "model")
    assert report["search"] == "all steps"
    assert report["status"] == "found", report["message"]
    assert [s["first_bad"]["commit"] for s in report["steps"]] == [repo.shas[4], repo.shas[8]]
    assert report["culprit"]["first_bad"]["commit"] == repo.shas[8]
    assert all(s["verified"] for s in report["steps"])
    # the model's reading of each step (the rules leave it empty for --all-steps)
    assert all(s["confidence"] >= 0.99 for s in report["steps"]), report["steps"]
    verdicts = {p["position"]: p["verdict"] for p in report["path"]}
    assert "intermediate" in verdicts.values()
    assert "2 steps" in cli.run("bisect", "report").stdout


def test_ddmin_on_the_model_names_two_patches_that_regress_only_together(
    cli: Cli, tmp_path: Path
) -> None:
    repo = _repo(tmp_path)
    every = _patch_set(repo.path, tmp_path, {2: {"cost/pair_a": "0"}, 7: {"cost/pair_b": "0"}})
    head = repo.shas[-1]
    report = cli.bisect(f"{head},patches=none", f"{head},patches={every}", "--engine", "model")
    assert report["status"] == "found", report["message"]
    assert report["culprit_axes"] == [["patches"]]
    assert patch_names(report["culprit"]["first_bad"]["patches"]) == ["p2.patch", "p7.patch"]
    assert patch_names(report["culprit"]["last_good"]["patches"]) == ["p2.patch"]
    assert report["culprit"]["verified"] is True
    assert report["culprit"]["confidence"] >= 0.99


def test_attribution_on_the_model_names_the_interacting_axes(cli: Cli, tmp_path: Path) -> None:
    repo = _repo(tmp_path, interaction_at=7)
    (tmp_path / "perfbisect.toml").write_text(AXES_EXPERIMENT.format(patches=""))
    report = cli.bisect(f"{repo.shas[0]},flag=a", f"{repo.shas[-1]},flag=b", "--engine", "model")
    assert report["status"] == "found", report["message"]
    assert sorted(report["culprit_axes"][0]) == ["commit", "flag"]
    singles = {tuple(r["axes"]): r["verdict"] for r in report["attribution"]}
    assert singles[("commit",)] == "good" and singles[("flag",)] == "good"
    by_axis = {c["axis"]: c for c in report["culprits"]}
    assert by_axis["commit"]["first_bad"]["commit"] == repo.shas[7]
    assert by_axis["commit"]["first_bad"]["flag"] == "b"  # searched with flag held bad
    assert all(c["confidence"] >= 0.99 for c in report["culprits"])
    text = cli.run("bisect", "report").stdout
    assert "attribution" in text and "culprit axes:" in text


def test_a_patch_stack_with_two_regressions_on_the_model_with_all_steps(
    cli: Cli, tmp_path: Path
) -> None:
    # p3 +30 ms, p6 +3 ms: the second step is searched against the level the first leaves.
    repo = _repo(tmp_path)
    every = _patch_set(repo.path, tmp_path, {3: {"cost/p3": "30 eager"}, 6: {"cost/p6": "3 sync"}})
    head = repo.shas[-1]
    report = cli.bisect(
        f"{head},patches=none", f"{head},patches={every}", "--all-steps", "--engine", "model"
    )
    assert report["status"] == "found", report["message"]
    steps = report["steps"]
    assert [patch_names(s["first_bad"]["patches"]) for s in steps] == [["p3.patch"], ["p6.patch"]]
    assert all(s["verified"] and s["confidence"] >= 0.99 for s in steps)


def _bench(name: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    return __import__(name)


def test_all_steps_on_simulated_two_step_worlds() -> None:
    bench = _bench("search_bench")
    for trial in range(3):
        world = bench.two_step(256, random.Random(trial), 0.04, 0.03, False)
        result = bench.run_perfbisect(world, 256, Policy(all_steps=True), model=True)
        assert result.correct and result.all_steps and not result.phantom, (trial, result)


@pytest.mark.parametrize("trial", [9, 23])
def test_a_level_gap_read_from_noise_is_not_searched(trial: int) -> None:
    # The search table's 8% noise row (seed 1): one step, but an end's three or four launches
    # read 14% off the level beside them, and the session's noise (the launches near each
    # point's best: 5%) confirmed the gap; its search then ran to the end of its budget
    # (185 and 180 launches) and left a level change "not pinned down" that is not there.
    bench = _bench("search_bench")
    scenario, make, shift, outliers, failures = next(
        s for s in bench.SCENARIOS if "8% (harsher)" in s[0]
    )
    world = make(1024, random.Random(1_000_003 + trial), shift, outliers, failures)
    path = [Configuration.of({"commit": str(i)}) for i in range(1025)]
    engine = ModelEngine(path, Policy(all_steps=True))
    while batch := engine.next_batch():
        engine.feed([LaunchResult(world.launch(r.position)) for r in batch])
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, scenario
    assert [c.first_bad.position for c in outcome.steps] == [world.culprit]
    assert not outcome.unresolved and outcome.launches <= 40, outcome.launches


def test_one_step_on_the_model_with_all_steps_opens_no_phantom_gap() -> None:
    path = [Configuration.of({"commit": str(i)}) for i in range(129)]
    engine = ModelEngine(path, Policy(all_steps=True))
    rng = random.Random(3)
    while batch := engine.next_batch():
        level = [18.0 if r.position < 70 else 29.0 for r in batch]
        engine.feed([LaunchResult(v * rng.gauss(1, 0.02)) for v in level])
    assert engine.outcome is not None and engine.outcome.status is Status.FOUND
    assert [c.first_bad.position for c in engine.outcome.steps] == [70]


def test_no_mode_on_the_model_imports_the_rule_chain() -> None:
    # Crossing first, every step, multi-axis with ddmin: run on the model in a fresh
    # interpreter, none of the rule engine's layers is ever imported.
    script = textwrap.dedent(
        """
        import random, sys
        sys.path.insert(0, "benchmarks")
        from perfbisect.bisect.axis_sets import AxisPlan, join_set, split_set
        from perfbisect.bisect.search.attribution import ModelMultiAxis
        from perfbisect.bisect.search.searcher import ModelEngine
        from perfbisect.bisect.values import LaunchResult, Policy
        from perfbisect.config import Configuration

        rng = random.Random(1)
        path = [Configuration.of({"commit": str(i)}) for i in range(65)]
        for policy in (Policy(), Policy(all_steps=True)):
            e = ModelEngine(path, policy)
            while batch := e.next_batch():
                e.feed([LaunchResult(19.0 if r.position < 20 else 23.0 if r.position < 40
                                     else 29.0) for r in batch])
            assert e.outcome.steps
        items = tuple(f"p{i}" for i in range(6))
        plans = [AxisPlan("patches", "set", ("", join_set(items, items)), items)]
        e = ModelMultiAxis(Configuration.of({"patches": ""}),
                           Configuration.of({"patches": join_set(items, items)}), plans, Policy())
        while batch := e.next_batch():
            e.feed([LaunchResult(29.0 if {"p1", "p4"} <= set(split_set(r.config.get("patches")))
                                 else 18.0) for r in batch])
        assert e.outcome.culprit is not None
        rules = ("engine", "endpoints", "audit", "verification", "levels", "slow_launches",
                 "multiaxis")
        loaded = [m for m in sys.modules  # bisect/<name>.py or, laid out, bisect/rules/<name>.py
                  if m.startswith("perfbisect.bisect.") and m.rsplit(".", 1)[-1] in rules]
        print("rule modules:", loaded)
        assert not loaded
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rule modules: []" in done.stdout


def test_a_model_multi_axis_search_replays_exactly() -> None:
    # A resumed session feeds the stored launches into a fresh engine: it must ask for the
    # same configurations in the same order (the model's searches hold no state of their own).
    bench = _bench("multiaxis_bench")
    from perfbisect.bisect.search.attribution import ModelMultiAxis

    scenario = next(
        s for s in bench.scenarios(random.Random(5)) if s.name.startswith("two regressions")
    )
    good, bad = Configuration.of(scenario.good), Configuration.of(scenario.bad)
    policy = Policy(all_steps=True)
    first = ModelMultiAxis(good, bad, scenario.plans, policy)
    rng = random.Random(7)
    asked, fed = [], []
    while batch := first.next_batch():
        results = [
            LaunchResult(bench.launch(scenario.level(r.config.as_dict()), rng)) for r in batch
        ]
        asked.append([r.config.fingerprint for r in batch])
        fed.append(results)
        first.feed(results)
    again = ModelMultiAxis(good, bad, scenario.plans, policy)
    for wanted, results in zip(asked, fed):
        assert [r.config.fingerprint for r in again.next_batch()] == wanted
        again.feed(results)
    assert again.next_batch() == []
    assert first.outcome is not None and again.outcome == first.outcome
    assert len(first.outcome.steps) == 2


def test_all_steps_along_a_culprit_axis_on_the_model() -> None:
    # Commits 19 -> 23 ms at 10 and -> 29 ms at 30; a second axis (flag) changes nothing. With
    # --all-steps the commit axis's search goes on into the level gap below its crossing.
    from perfbisect.bisect.axis_sets import AxisPlan
    from perfbisect.bisect.search.attribution import ModelMultiAxis

    commits = tuple(str(i) for i in range(40))
    plans = [AxisPlan("commit", "path", commits), AxisPlan("flag", "path", ("a", "b"))]
    good = Configuration.of({"commit": "0", "flag": "a"})
    bad = Configuration.of({"commit": "39", "flag": "b"})
    named = {}
    for all_steps in (False, True):
        engine = ModelMultiAxis(good, bad, plans, Policy(all_steps=all_steps))
        rng = random.Random(4)
        while batch := engine.next_batch():
            at = [int(r.config.get("commit") or 0) for r in batch]
            levels = [19.0 if c < 10 else 23.0 if c < 30 else 29.0 for c in at]
            engine.feed([LaunchResult(v * rng.gauss(1, 0.02)) for v in levels])
        assert engine.outcome is not None and engine.outcome.status is Status.FOUND
        assert engine.culprit_sets == [("commit",)]
        named[all_steps] = [s.first_bad.config.get("commit") for s in engine.outcome.steps]
        assert all(s.verified and (s.confidence or 0) >= 0.99 for s in engine.outcome.steps)
    assert named == {False: ["30"], True: ["10", "30"]}


def test_a_level_gap_names_its_step_only_after_a_pair_that_shows_it() -> None:
    # --all-steps, 19 -> 23 -> 29 ms: the lower step is at 40. The first back-to-back launch of
    # its last good (39) runs in a busy period (2x), so that pair reads 38 -> 23: no step. The
    # gap's search runs the loop of the crossing-first search, so the step is paired again
    # and named verified only with a pair that shows it (a gap's search once named its
    # bracket verified after one pair, whatever the pair read).
    path = [Configuration.of({"commit": str(i)}) for i in range(129)]
    engine = ModelEngine(path, Policy(all_steps=True))
    rng = random.Random(5)
    busy_once = [True]
    pairs_of_39: list[tuple[float, float]] = []
    while batch := engine.next_batch():
        values = []
        for r in batch:
            level = 19.0 if r.position < 40 else 23.0 if r.position < 90 else 29.0
            value = level * rng.gauss(1, 0.02)
            if r.position == 39 and r.purpose.value == "verify" and busy_once[0]:
                busy_once[0] = False
                value *= 2.0
            values.append(value)
        if [r.position for r in batch] == [39, 40] and batch[0].purpose.value == "verify":
            pairs_of_39.append((values[0], values[1]))
        engine.feed([LaunchResult(v) for v in values])
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome
    steps = {c.first_bad.position: c for c in outcome.steps}
    assert sorted(steps) == [40, 90], sorted(steps)
    assert steps[40].verified
    assert pairs_of_39 and pairs_of_39[0][0] > pairs_of_39[0][1], pairs_of_39  # no step shown
    assert any(bad > 1.1 * good for good, bad in pairs_of_39[1:]), pairs_of_39


# Seeded worlds of multiaxis_bench.py --load (seed 1) where the model named a wrong step at
# >= 99% before each member of a ddmin set had to show its step back to back and a pair had to
# show at least half the minimum effect: a set of several patches claimed where one was the
# cause, and --all-steps worlds that claimed a set of two or three for one patch. Each fails on
# the code before; of the 300 trials' worlds of these three scenarios, 46 named a wrong step at
# >= 99% before and 20 after, none of them new.
MULTIAXIS_WRONG_AT_99 = [
    ("one bad patch", 64),
    ("one bad patch", 102),
    ("one bad patch", 264),
    ("two patches", 173),
    ("two regressions in one patch stack", 2),
    ("two regressions in one patch stack", 39),
    ("two regressions in one patch stack", 186),
    # One axis's bad end launched only in two busy periods (2.08x, 1.63x): its level read 47
    # ms against the true 29, the versions at 29 sat just below the threshold, and a pair at
    # 44.9 and 48.3 ms "showed" the 29 -> 47 step (it had only 2.5% to show): named at
    # 1 - 1e-14 before a pair had to show a third of the step.
    ("one NCCL version", 56),
    # `launch ssh` at the good level read past on two launches in one busy period (101) or
    # clearly worse than the good level on launches of busy periods (3, 161), and its path of
    # two values named `tmux -> ssh` at 100% though its quiet pairs read 18.1 and 18.7 ms: a
    # step searched between its own ends now is worth what its pairs (or the ends' verdicts,
    # asked again) say of those ends being apart.
    ("one bad patch", 3),
    ("one bad patch", 101),
    ("one bad patch", 161),
    # ddmin read subsets without the culprits past in one busy period, its minimal set was not
    # confirmed, and the last search's step between two subsets adding several members was
    # returned as named: {p0+p1} -> all eight at 100% for p5+p7 (47); {p4+p5} -> all eight at
    # 99.99% for p4 and p6 (15). Now said, not named.
    ("two patches", 47),
    ("two regressions in one patch stack", 15),
    # The bad end's two first launches were lone outliers (1.7x, 1.96x): a configuration at
    # the true bad level read below the threshold midway to them, and the commit step under
    # it was named at 99.998% on one pair whose second launch began a busy period, the
    # machine then read quiet (one pair asked). Each axis's step is now weighed again at the
    # end, with the pairs the machine asks for by then.
    ("launch-method-only", 77),
]


@pytest.mark.parametrize(("scenario", "trial"), MULTIAXIS_WRONG_AT_99)
def test_multi_axis_worlds_that_named_a_wrong_step_at_99_claim_none(
    scenario: str, trial: int
) -> None:
    bench = _bench("multiaxis_bench")
    s, rng = next((s, r) for s, r in bench.worlds(1, trial) if s.name.startswith(scenario))
    run = bench.run(s, rng, "model", busy_p=0.05)
    assert not run.sure_wrong, (scenario, trial, run)


# A quiet world of multiaxis_bench.py (seed 1, one NCCL version among 6, trial 756): `nccl
# 2.26.2` alone was launched 15 times at 26.6-29.7 ms, the bad end twice (29.95, 29.60). With
# the bad level read from those two launches alone, each of its launches sat 1.8 noise widths
# below it, and only a machine slow at every one of them explained them: it was judged below
# a threshold of 22.5 ms at 99.99%, ddmin then held commit+nccl needed together, and the commit
# axis's step 0 -> 1 was named at 99.96%. A three-point question now pools the configuration's
# launches with the end at its level.
def test_a_configuration_launched_often_is_judged_against_its_sides_pooled_level() -> None:
    bench = _bench("multiaxis_bench")
    s, rng = next((s, r) for s, r in bench.worlds(1, 756) if s.name.startswith("one NCCL"))
    run = bench.run(s, rng, "model", busy_p=0.0)
    assert run.correct and not run.sure_wrong, run
    assert run.launches < 25, run  # (40 launches when it went wrong)


# A busy world of multiaxis_bench.py (seed 1, two stacked regressions, trial 36): the commit
# step c8 -> c9 is real, and weighed again at the end its four back-to-back pairs each show it
# (1.25-1.37x). With the pairs' noise read as the session's (0.23 there: a configuration's
# launches of a busy period pooled as its core) they held it at 93% and it was said, not
# named; the pairs' noise is now that of launches near each configuration's best.
def test_a_real_step_weighed_again_on_a_busy_machine_keeps_its_name() -> None:
    bench = _bench("multiaxis_bench")
    s, rng = next((s, r) for s, r in bench.worlds(1, 36) if s.name.startswith("two stacked"))
    run = bench.run(s, rng, "model", busy_p=0.05)
    assert run.correct and not run.sure_wrong, run


def test_a_set_whose_axes_have_no_named_step_says_so() -> None:
    # Busy trial 77 (above): ddmin held commit+nccl+launch needed together, and only the
    # launch method's step holds once weighed again; the message must not leave the commit
    # and NCCL axes implied.
    bench = _bench("multiaxis_bench")
    s, rng = next((s, r) for s, r in bench.worlds(1, 77) if s.name.startswith("launch-method"))
    engine = bench.drive(s, rng, "model", busy_p=0.05)
    assert engine.outcome is not None
    assert [c.first_bad.config.get("launch") for c in engine.outcome.steps] == ["ssh"]
    assert "no step named on commit or nccl" in engine.outcome.message, engine.outcome.message


# Quiet worlds of multiaxis_bench.py (seed 1, two patches that regress only together) where
# ddmin's first run, steered by answers on one launch, took a wrong turn: p6 read past on one
# slow outlier launch (7: its minimal set {p6}, asked at the target, is not past, and ddmin runs
# again at the target), and p1 read past on two outlier launches in a row (502: with its set's
# question at the target left out, {} -> {p1} was named at 99.98% on those two launches).
STEERED_WRONG = [7, 502]


@pytest.mark.parametrize("trial", STEERED_WRONG)
def test_a_ddmin_run_steered_wrong_by_an_outlier_still_names_the_right_pair(trial: int) -> None:
    bench = _bench("multiaxis_bench")
    s, rng = next((s, r) for s, r in bench.worlds(1, trial) if s.name.startswith("two patches"))
    run = bench.run(s, rng, "model", busy_p=0.0)
    assert run.correct and not run.sure_wrong, (trial, run)


def test_a_ddmin_set_of_two_is_named_only_when_each_member_shows_back_to_back() -> None:
    # Two patches that regress only together: the set is right, and each member's step (the
    # set without it -> the set) ran back to back before it was named.
    bench = _bench("multiaxis_bench")
    from perfbisect.bisect.axis_sets import split_set
    from perfbisect.bisect.search.attribution import ModelMultiAxis

    rng = random.Random(11)
    s = next(x for x in bench.scenarios(rng) if x.name.startswith("two patches"))
    engine = ModelMultiAxis(Configuration.of(s.good), Configuration.of(s.bad), s.plans, Policy())
    while batch := engine.next_batch():
        engine.feed([LaunchResult(bench.launch(s.level(r.config.as_dict()), rng)) for r in batch])
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome
    members = set(s.truth["patches"].split("+"))
    named = split_set(outcome.steps[0].first_bad.config.get("patches") or "")
    assert set(named) == members, named

    def patches(position: int) -> frozenset[str]:
        return frozenset(split_set(engine.path[position].get("patches") or ""))

    pairs = {(patches(lo), patches(hi)) for lo, hi in engine._pairs.seqs}
    for member in members:
        assert (frozenset(members - {member}), frozenset(members)) in pairs, (member, pairs)


def test_an_axis_judged_to_regress_whose_step_no_pair_showed_is_said_not_counted() -> None:
    # multiaxis_bench --load, seed 1, trial 11 (one NCCL version among 6, commit held good):
    # the attribution judged the commit alone past the threshold in a busy period, its step
    # search named nothing, and the message said "2 independent regressions: commit and nccl"
    # (trials 9, 11 and 26 did; trial 9 ends ambiguous since the third machine chain).
    bench = _bench("multiaxis_bench")
    from perfbisect.bisect.search.attribution import ModelMultiAxis

    s, rng = next((s, r) for s, r in bench.worlds(1, 11) if s.name.startswith("one NCCL"))
    engine = ModelMultiAxis(Configuration.of(s.good), Configuration.of(s.bad), s.plans, Policy())
    machine = bench.Machine(rng, 0.05)
    while batch := engine.next_batch():
        engine.feed(
            [
                LaunchResult(bench.launch(s.level(r.config.as_dict()) * machine.slowdown(), rng))
                for r in batch
            ]
        )
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome
    named = {
        a for st in outcome.steps for a in st.last_good.config.differing_axes(st.first_bad.config)
    }
    assert named == {"nccl"} and engine.culprit_sets == [("nccl",)], engine.culprit_sets
    assert "independent regressions" not in outcome.message, outcome.message
    assert outcome.message.endswith("no step on it pinned down: commit"), outcome.message
