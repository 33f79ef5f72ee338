"""The search as one model (perfbisect/bisect/search/, `--engine model`): outcomes on simulated
worlds (the search benchmark's, a test double for GPU launches) and a whole session through the
CLI on a real repository with real processes."""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Cli
from test_one_truth import scripted_repo

from perfbisect.bisect.search.model import believe
from perfbisect.bisect.search.planner import _states_given_side
from perfbisect.bisect.search.searcher import ModelEngine
from perfbisect.bisect.search.stop import stop_at
from perfbisect.bisect.values import LaunchResult, Policy, Purpose, Status
from perfbisect.config import Configuration


def _bench() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import search_bench

    return search_bench


def _path(n: int) -> list[Configuration]:
    return [Configuration.of({"commit": str(i)}) for i in range(n + 1)]


def _run(engine: ModelEngine, value: Any) -> list[tuple[int, Purpose]]:
    order = []
    while batch := engine.next_batch():
        order.extend((r.position, r.purpose) for r in batch)
        engine.feed([value(r.position) for r in batch])
    return order


def test_a_clean_step_is_named_verified_with_its_posterior() -> None:
    rng = random.Random(3)
    engine = ModelEngine(_path(200), Policy())
    order = _run(engine, lambda p: LaunchResult((10.0 if p < 77 else 14.0) * rng.gauss(1, 0.02)))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert outcome.culprit is not None
    assert outcome.culprit.first_bad.position == 77 and outcome.culprit.verified
    assert outcome.culprit.confidence is not None and outcome.culprit.confidence >= 0.99
    # verified: its two sides launched back to back, the pair in the posterior
    verify = [p for p, purpose in order if purpose is Purpose.VERIFY]
    assert verify[-2:] == [76, 77]
    assert len(order) <= 16, order  # 3 endpoint launches, ~8 halvings, the pair


def test_endpoints_that_do_not_differ_are_not_reproduced() -> None:
    rng = random.Random(4)
    engine = ModelEngine(_path(50), Policy())
    _run(engine, lambda p: LaunchResult(10.0 * rng.gauss(1, 0.02)))
    assert engine.outcome is not None
    assert engine.outcome.status is Status.NOT_REPRODUCED
    assert "not clearly worse" in engine.outcome.message


def test_unbuildable_neighbours_leave_a_range_with_its_probability() -> None:
    engine = ModelEngine(_path(64), Policy())
    broken = {30, 31, 33}

    def value(p: int) -> LaunchResult:
        if p in broken:
            return LaunchResult(reason="build failed")
        return LaunchResult(10.0 if p < 32 else 13.0)

    _run(engine, value)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.AMBIGUOUS
    assert outcome.unresolved == ((29, 32),)  # 32 measured past, 30 and 31 cannot run
    assert "probability" in outcome.message and "cannot be launched" in outcome.message
    assert engine.verdicts[30].value == engine.verdicts[31].value == "skip"


def test_a_higher_is_better_metric_is_searched_in_its_direction() -> None:
    engine = ModelEngine(_path(100), Policy(higher_is_better=True))
    _run(engine, lambda p: LaunchResult(90.0 if p < 40 else 70.0))
    assert engine.outcome is not None and engine.outcome.culprit is not None
    assert engine.outcome.culprit.first_bad.position == 40


def _clean_step_in_rounds(slots: int) -> tuple[ModelEngine, list[int]]:
    """A search of a clean step (18 -> 29 ms at position 600 of 1024) with ``slots``; the
    engine and its batches' sizes, after it named 600."""
    engine = ModelEngine(_path(1024), Policy(slots=slots))
    sizes = []
    while batch := engine.next_batch():
        sizes.append(len(batch))
        engine.feed([LaunchResult(18.0 if r.position < 600 else 29.0) for r in batch])
    assert engine.outcome is not None and engine.outcome.culprit is not None
    assert engine.outcome.culprit.first_bad.position == 600
    return engine, sizes


def test_slots_launch_several_points_per_round() -> None:
    engine, sizes = _clean_step_in_rounds(4)
    assert 4 in sizes and engine.rounds < 12  # fewer rounds than binary search's ~13


def test_a_slot_beyond_the_first_launches_only_where_it_tells() -> None:
    # Eight slots on a clean step: once the posterior's mass sits on a few positions, an even
    # split left seven slots launches that told next to nothing (37 launches in 6 rounds);
    # slots left idle cost a round's wall time, not launches.
    engine, sizes = _clean_step_in_rounds(8)
    assert max(sizes) >= 4 and engine.rounds <= 6  # still several per round, as few rounds
    assert sum(sizes) <= 28, sizes


def test_a_busy_machine_is_read_from_the_launch_order() -> None:
    # Launches 4-9 ran in a busy period (1.7x): the good points measured in it read like bad
    # ones, but the chain over the launch order makes "a busy period" the likelier reading than
    # "the crossing is before them" once the later launches run normally.
    ends = [(100, 29.0), (0, 18.0), (100, 29.5)]
    in_busy_period = [(50, 30.6), (25, 30.4), (12, 30.9), (6, 30.2)]
    after = [(75, 18.2), (87, 18.0), (93, 29.2), (90, 18.3), (91, 28.7)]
    busy = believe([*ends, *in_busy_period, *after], 100, None, 0.03)
    assert busy.crossing_at(91) > 0.5
    quiet = believe([(100, 29.0), (0, 18.0), (100, 29.5), (50, 18.1), (75, 29.1)], 100, None, 0.03)
    assert quiet.busy_next[0] > 0.9 and quiet.crossing_at(51) < 0.2


# Seeded worlds of the search benchmark's "load comes and goes" scenario (busy periods of 5-20
# launches 1.5-3x slower) in which the rule engine named a wrong configuration (it said so with
# a near-zero posterior, but named it): the model names the right one.
LOAD_WRONG_BY_RULES = [13, 44, 73, 79, 80, 82, 95, 96, 116]


@pytest.mark.parametrize("trial", LOAD_WRONG_BY_RULES)
def test_load_worlds_the_rules_named_wrong_are_named_right(trial: int) -> None:
    bench = _bench()
    world = _load_world("load_comes_and_goes", 1_000_003 + trial)
    result = bench.run_perfbisect(world, 1024, Policy(), model=True)
    assert result.status is Status.FOUND and result.correct, (result.named, world.culprit)
    assert result.confidence is not None and result.confidence >= 0.99


def test_the_rules_named_a_wrong_configuration_in_the_first_of_those_worlds() -> None:
    # What the test above guards against, on today's rule engine (one world: it runs slowly).
    bench = _bench()
    world = _load_world("load_comes_and_goes", 1_000_003 + 13)
    result = bench.run_perfbisect(world, 1024, Policy())
    assert result.status is Status.FOUND and not result.correct


def test_a_lower_confidence_target_stops_no_later() -> None:
    bench = _bench()
    launches = {}
    for confidence in (0.9, 0.999):
        world = bench.single_step(1024, random.Random(1_000_003 + 5), 0.04, 0.03, False)
        result = bench.run_perfbisect(world, 1024, Policy(confidence=confidence), model=True)
        assert result.correct
        launches[confidence] = result.launches
    assert launches[0.9] <= launches[0.999]


def test_a_session_with_the_model_engine_names_the_culprit(cli: Cli, tmp_path: Path) -> None:
    # A real repository measured by real processes: the first bad commit's first launch runs
    # 1.5x slow; the session, its report and a resume-safe record of the engine chosen.
    shas = scripted_repo(tmp_path, [10.0] * 6 + [40.0] * 6, {"6": [1.5]})
    report = cli.bisect(shas[0], shas[-1], "--engine", "model")
    assert report["culprit"]["first_bad"] == {"commit": shas[6]}
    assert report["culprit"]["verified"] is True
    assert report["culprit"]["confidence"] >= 0.99
    text = cli.run("bisect", "report").stdout
    assert shas[6][:10] in text
    # The posterior reads alike in the outcome line (status) and the report: never "100%"
    status = cli.run("bisect", "status").stdout
    shown = ">99.9%" if report["culprit"]["confidence"] > 0.999 else None
    if shown:
        assert f"(posterior {shown}" in report["message"] and f"(posterior {shown}" in status
        assert f"confidence: {shown}" in text
    assert "100.0%" not in report["message"] + status


def test_a_session_and_every_view_run_without_the_rule_engine(cli: Cli, tmp_path: Path) -> None:
    # The rule engine is kept for comparison only: with its package unimportable (as if
    # bisect/rules/ were deleted), a default session, its report, status and log still work.
    shas = scripted_repo(tmp_path, [10.0] * 5 + [40.0] * 5, {})
    blocked = "import sys; sys.modules['perfbisect.bisect.rules'] = None; "
    main = "from perfbisect.cli.main import run; sys.argv[0] = 'perfbisect'; run()"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", blocked + main, *args],
            cwd=cli.cwd,
            env=cli.env,
            capture_output=True,
            text=True,
            timeout=240,
        )

    start = run("bisect", "start", "--good", shas[0], "--bad", shas[-1], "--json")
    assert start.returncode == 0, start.stderr
    assert json.loads(start.stdout)["culprit"]["first_bad"] == {"commit": shas[5]}
    for view in (("bisect", "report"), ("bisect", "status"), ("bisect", "log")):
        shown = run(*view)
        assert shown.returncode == 0, (view, shown.stderr)
        assert shas[5][:10] in shown.stdout, view
    # and the block is real: asking for the rule engine now fails to import it
    rules = run("bisect", "start", "--good", shas[0], "--bad", shas[-1], "--engine", "rules")
    assert rules.returncode != 0
    assert "perfbisect.bisect.rules" in rules.stderr


def test_an_unknown_engine_is_an_input_error(cli: Cli, tmp_path: Path) -> None:
    shas = scripted_repo(tmp_path, [10.0, 40.0], {})
    result = cli.run("bisect", "start", "--good", shas[0], "--bad", shas[1], "--engine", "fast")
    assert result.returncode == 2
    assert "--engine fast" in result.stderr + result.stdout


# Seeded worlds of the same scenario in which the model itself named a wrong configuration with
# a posterior of 99% or more before it verified on a shared machine with two back-to-back pairs
# (A B A B) and weighed each endpoint's own slow-down: a busy period over the one verification
# pair, which read no step and was taken for a period ending between its two launches.
LOAD_WRONG_BY_THE_MODEL = [47, 166]


@pytest.mark.parametrize("trial", LOAD_WRONG_BY_THE_MODEL)
def test_load_worlds_the_model_named_wrong_at_99_are_named_right(trial: int) -> None:
    bench = _bench()
    world = _load_world("load_comes_and_goes", 1_000_003 + trial)
    result = bench.run_perfbisect(world, 1024, Policy(), model=True)
    assert result.status is Status.FOUND and result.correct, (result.named, world.culprit)


def _named_right_at_99(scenario: str, seed: int) -> None:
    """A seeded world of a load scenario (``random.Random(seed)``) named right at >= 99%."""
    _world_named_right_at_99(_load_world(scenario, seed))


def _named_wrong_never(scenario: str, seed: int) -> Any:
    """A seeded world of a load scenario searched by the model: no wrong configuration named
    (ambiguous or not reproduced may be said). Its result."""
    world = _load_world(scenario, seed)
    result = _bench().run_perfbisect(world, 1024, Policy(), model=True)
    assert result.status is not Status.FOUND or result.correct, (result.named, world.culprit)
    return result


def _load_world(scenario: str, seed: int) -> Any:
    """A seeded world of a load scenario (``random.Random(seed)``), 1024 commits."""
    return getattr(_bench(), scenario)(1024, random.Random(seed), 0.04, 0.03, False)


def _world_named_right_at_99(world: Any) -> None:
    """A benchmark world searched by the model: its culprit named, at >= 99%."""
    result = _bench().run_perfbisect(world, 1024, Policy(), model=True)
    assert result.status is Status.FOUND and result.correct, (result.named, world.culprit)
    assert result.confidence is not None and result.confidence >= 0.99


# Seeded worlds (random.Random(seed)) of the two load scenarios in which the model named a wrong
# configuration at >= 99% (or none) before it weighed plateaus against none and a busy period
# whose launches are each slowed by a factor of their own. 1031: the bad end's five launches all
# ran in busy periods, its slow launches took for a plateau worse than the bad end; 1067: each
# busy launch slowed alike-but-not-equally, read as lone outliers of a quiet machine.
LOAD_WRONG_BEFORE_PLATEAU_DOUBT = [
    ("load_comes_and_goes", 1031),
    ("load_comes_and_goes", 1037),
    ("load_comes_and_goes", 1043),
    ("load_comes_and_goes", 1063),
    ("load_comes_and_goes", 1081),
    ("load_comes_and_goes_per_launch", 1067),
    ("load_comes_and_goes_per_launch", 1136),
]


@pytest.mark.parametrize(("scenario", "seed"), LOAD_WRONG_BEFORE_PLATEAU_DOUBT)
def test_load_worlds_with_slow_points_scattered_by_busy_periods_are_named_right(
    scenario: str, seed: int
) -> None:
    _named_right_at_99(scenario, seed)


# Seeded worlds of the load table (`search_bench.py --load --seed 2|3`: seed S, trial t draws
# from S * 1_000_003 + t) in which the model named a wrong configuration at >= 99% while a
# back-to-back pair counted as verification whatever it showed: a busy period that began
# between the pair's two launches made the step (18 of 1200 worlds then, 7 now). A pair counts
# now only when its bad side ran slower than its good side by the step.
LOAD_WRONG_BEFORE_PAIRS_SHOWED_THE_STEP = [
    ("load_comes_and_goes", 2_000_122),
    ("load_comes_and_goes", 3_000_054),
    ("load_comes_and_goes", 3_000_068),
    ("load_comes_and_goes", 3_000_110),
    ("load_comes_and_goes", 3_000_138),
    ("load_comes_and_goes", 3_000_153),
    ("load_comes_and_goes_per_launch", 2_000_088),
]


@pytest.mark.parametrize(("scenario", "seed"), LOAD_WRONG_BEFORE_PAIRS_SHOWED_THE_STEP)
def test_a_pair_verifies_only_when_it_shows_the_step(scenario: str, seed: int) -> None:
    _named_right_at_99(scenario, seed)


# Worlds whose bad end was read only in busy periods, at a factor between the end-shift grid's.
# Seed 3, trial 188 of the load table (culprit 721): named wrong at >= 99% before a pair had to
# show the step, then right. The endpoints and the first 13 launches ran in one 2.7x period,
# and the bad end's later launches in another of 2.2x: its level is read at 63 ms against a
# true 29, a factor between the grid's 2x and 2.5x, so the points at 29 read as a plateau below
# the threshold. Since plateaus pay their Occam factor the search ends without a name (its
# bracket's pairs do not show the step), and states the crossing at (1023, 1024]: wrong, said
# as the posterior's, not named. Seed 4, trial 44 of each launch its own factor (culprit 374):
# the bad end read 88, 46 and 57-76 ms (true 29), the good end 39 (true 18); named right at
# 99% on the session's noise from every launch, ambiguous in the same way since the noise is
# read from launches near each point's best (a surer model holds the wrong ends' levels more
# surely). Both named right since the machine chains include one busy most of the time
# (search/machine.py; its search takes other launches: 50 and 65).
BAD_END_READ_ONLY_IN_BUSY_PERIODS = [
    ("load_comes_and_goes", 3_000_191),
    ("load_comes_and_goes_per_launch", 4_000_047),
]


@pytest.mark.parametrize(("scenario", "seed"), BAD_END_READ_ONLY_IN_BUSY_PERIODS)
def test_a_bad_end_read_only_in_busy_periods_is_named_right(scenario: str, seed: int) -> None:
    _named_right_at_99(scenario, seed)


# A machine busy most of the time, launch by launch (`search_bench.py --load`, "busy launch by
# launch": two launches in three 1.5-2.5x slow, each independently; seed 7_000_003 + trial t).
# With a quiet and a shared chain alone the slow launches read as levels, and 14 of 40 such
# worlds were named wrong at >= 99%: trial 9 (culprit 625) named 647 at 99.9994% after 21
# launches, trial 38 (culprit 623) 601 at 99.999998%. A third chain, busy most of the time,
# and the ends' shifts weighed about as likely as their levels as read where it holds half of
# the posterior: neither named wrong (trial 9 ends ambiguous after 160 launches, trial 38 is
# named right after 37; wrong names still left in this scenario: docs/benchmarks.md).
BUSY_LAUNCH_BY_LAUNCH_WRONG_BEFORE_THIRD_CHAIN = [
    # 163 launches, each posterior over every launch before it: ~50 s alone on a CI-like
    # machine (130 s before the forward algorithm's matrix product), past the suite's 300 s
    # where other work shared its two cores.
    pytest.param("busy_launch_by_launch", 7_000_012, marks=pytest.mark.timeout(900)),
    ("busy_launch_by_launch", 7_000_041),
]


@pytest.mark.parametrize(("scenario", "seed"), BUSY_LAUNCH_BY_LAUNCH_WRONG_BEFORE_THIRD_CHAIN)
def test_a_machine_slow_two_launches_in_three_is_no_level(scenario: str, seed: int) -> None:
    _named_wrong_never(scenario, seed)


# Seeded worlds of the load table (seed S, trial t draws from S * 1_000_003 + t; seeds 3 and
# 6-10, the latter never tuned on) that the model named wrong at >= 99%: a point good but read
# past in a long busy period was launched again and again inside it (the planner took each
# launch as a fresh reading; given that point below, the period that made its launches goes on,
# so its next launch errs alike), and worlds whose bad end's launches all ran in busy periods
# (its level set twice the points' past the step, which read as a plateau below the threshold).
LOAD_WRONG_BEFORE_STATES_GIVEN_SIDE = [
    ("load_comes_and_goes", 3_000_106),
    ("load_comes_and_goes", 9_000_189),
    ("load_comes_and_goes", 10_000_100),
    ("load_comes_and_goes", 10_000_200),
    ("load_comes_and_goes_per_launch", 10_000_085),
    ("load_comes_and_goes_per_launch", 10_000_223),
]


@pytest.mark.parametrize(("scenario", "seed"), LOAD_WRONG_BEFORE_STATES_GIVEN_SIDE)
def test_a_point_read_past_inside_a_busy_period_is_not_named_from_its_launches_alone(
    scenario: str, seed: int
) -> None:
    _named_right_at_99(scenario, seed)


# Seeded worlds of the load table (seed S, trial t draws from S * 1_000_003 + t) that the
# model named wrong at >= 99% while a plateau's level, fitted to its own launches, paid nothing
# for the fit: a steady 2.3x busy period over launches 10-18 read as a past plateau at 41 ms
# (2_000_121: the pair 972/973 named at 99.94%, the crossing 983), and bad ends whose every
# launch ran in one of the periods of a machine slowed launch by launch.
LOAD_WRONG_BEFORE_PLATEAUS_PAID = [
    ("load_comes_and_goes", 2_000_121),
    ("load_comes_and_goes_per_launch", 1_000_023),
    ("load_comes_and_goes_per_launch", 1_000_146),
]


@pytest.mark.parametrize(("scenario", "seed"), LOAD_WRONG_BEFORE_PLATEAUS_PAID)
def test_a_busy_period_is_no_plateau_for_free(scenario: str, seed: int) -> None:
    _named_right_at_99(scenario, seed)


# Worlds of the search table (seed 1) named wrong at >= 99.9% by the Occam factor alone or
# before it, each a hypothesis the model could not hold: shift 8% trial 54, a bad-end launch 26%
# fast (3.3 sd; no fast launch but the normal noise's, so the bad end's level was read low and
# the points past the step as a plateau worse than it); real history 3, a real plateau below
# the threshold tied to a busy "plateau" past it; real history 198, an end whose launches all
# ran in bursts, 12% off its level on every factor of a 1.5x/2x/2.5x grid; two steps 34, 143
# and 150, points of the middle level pooled with the bad end, which pulled the threshold under
# the middle level (34 and 143 were named wrong before the Occam factor too).
SEARCH_WRONG_BEFORE_WIDE_LAUNCHES = [
    ("single step, shift 8% (harsher), outliers 3%", 54),
    ("real history: 2 steps, creep, bursts, 1 commit cannot run (N=366)", 3),
    ("real history: 2 steps, creep, bursts, 1 commit cannot run (N=366)", 198),
    ("two steps 19 -> 23 -> 29, shift 4%", 34),
    ("two steps 19 -> 23 -> 29, shift 4%", 143),
    ("two steps 19 -> 23 -> 29, shift 4%", 150),
]


@pytest.mark.parametrize(("scenario", "trial"), SEARCH_WRONG_BEFORE_WIDE_LAUNCHES)
def test_a_fast_launch_or_an_end_read_off_its_level_names_no_wrong_step(
    scenario: str, trial: int
) -> None:
    _, make, shift, outliers, failures = next(s for s in _bench().SCENARIOS if s[0] == scenario)
    _world_named_right_at_99(
        make(1024, random.Random(1_000_003 + trial), shift, outliers, failures)
    )


def test_the_next_launchs_state_is_read_given_the_side_it_tests() -> None:
    # 40 read past just now, and the good end then read as slow as the bad end: a busy period.
    # Were 40 below, that period made its launch, and the next launch likely runs in it too;
    # were it past, the machine may have been normal then.
    launches = [(64, 13.0), (0, 10.0), (64, 13.0), (40, 13.0), (0, 13.1)]
    b = believe(launches, 64, None, 0.02)
    if_below, if_past = _states_given_side(b, b.cdf())
    assert if_below[40, 0] < if_past[40, 0] - 0.1, (if_below[40, 0], if_past[40, 0])
    # a position with nothing measured near it reads the machine alike either way
    assert abs(if_below[10, 0] - if_past[10, 0]) < 0.05, (if_below[10, 0], if_past[10, 0])


@pytest.mark.parametrize(("culprit", "busy", "told_apart"), [(20, 40.0, False), (77, 60.0, True)])
def test_a_bracket_whose_pairs_keep_disagreeing_is_said_not_named(
    culprit: int, busy: float, told_apart: bool
) -> None:
    # Every back-to-back launch runs in a busy period that reads both sides alike (40 or 60 ms
    # against 18 -> 29): no pair shows the step the search launches show. The search says
    # where the posterior puts the crossing and why it does not name it: after two more pairs
    # than needed, or, where the planner's own pairs mid-search read alike too (40 ms is within
    # both sides' busy reach, 18 x 2.2 and 29 x 1.4, so a busy period explains every pair), at
    # the launch budget with the likeliest range's probability short of the target. At 60 ms
    # the good side's reading is past its busy reach (18 x 3.3): the bracket's pairs decide.
    rng = random.Random(3)

    def launch(position: int, purpose: Purpose) -> LaunchResult:
        level = busy if purpose is Purpose.VERIFY else 18.0 if position < culprit else 29.0
        return LaunchResult(level * rng.gauss(1, 0.02))

    engine = ModelEngine(_path(128), Policy())
    while batch := engine.next_batch():
        engine.feed([launch(r.position, r.purpose) for r in batch])
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.AMBIGUOUS, outcome
    assert outcome.culprit is None, outcome
    if told_apart or "back-to-back pairs show the step" in outcome.message:
        assert "back-to-back pairs show the step" in outcome.message, outcome.message
        assert f"({culprit - 1}, {culprit}]" in outcome.message, outcome.message
    else:
        said = re.search(
            r"the launch budget \(\d+\) is spent: .* with probability (\d+)%", outcome.message
        )
        assert said is not None and int(said.group(1)) < 99, outcome.message


def test_a_world_whose_pairs_disagreed_at_99_is_named_at_the_stop_rules_margin() -> None:
    # A seeded busy world (culprit 467) whose pairs kept disagreeing when the stop rule named at
    # 99%: it ended ambiguous. The stop rule asks the posterior for 99.9% now (stop.py's
    # margin), and the launches that takes name the culprit.
    bench = _bench()
    world = _load_world("load_comes_and_goes", 2_000_013)
    result = bench.run_perfbisect(world, 1024, Policy(), model=True)
    assert result.status is Status.FOUND and result.correct, (result.named, world.culprit)
    assert result.confidence is not None and result.confidence >= 0.999


def test_on_a_shared_machine_the_named_bracket_runs_back_to_back_twice() -> None:
    # The busy world of the first seed above: the machine is read as shared, so the bracket
    # named is launched A B A B (its pairs may come from the planner too) before it is named.
    world = _load_world("load_comes_and_goes", 1_000_003 + 166)
    engine = ModelEngine(_path(1024), Policy())
    order = _run(engine, lambda p: LaunchResult(world.launch(p)))
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert engine.belief is not None and engine.belief.shared >= 0.5
    lo, hi = outcome.culprit.last_good.position, outcome.culprit.first_bad.position
    pairs = sum(
        1
        for (a, pa), (b, pb) in itertools.pairwise(order)
        if (a, b) == (lo, hi) and pa is pb is Purpose.VERIFY
    )
    assert pairs >= 2, order


def test_on_a_quiet_machine_one_pair_verifies() -> None:
    bench = _bench()
    world = bench.single_step(1024, random.Random(1_000_003 + 5), 0.04, 0.03, False)
    engine = ModelEngine(_path(1024), Policy())
    order = _run(engine, lambda p: LaunchResult(world.launch(p)))
    assert engine.outcome is not None and engine.outcome.culprit is not None
    assert engine.belief is not None and engine.belief.shared < 0.5
    assert sum(1 for _, purpose in order if purpose is Purpose.VERIFY) == 2


# A real session of benchmarks/live_load_bench.py on the 2-core development machine while CPU
# burners came and went (n = 31 commits, the program 25% slower from position 12 on: 5.4 ->
# 6.7 ms when the machine is quiet). A busy period squeezes both levels to ~9.3 ms, so a good
# point launched only in busy periods reads like a level of its own. Launches in the order
# they ran: (position, verify ms).
LIVE_BUSY = [
    (31, 6.607), (0, 5.344), (31, 6.734), (16, 6.6), (8, 7.426), (5, 5.266), (7, 9.354),
    (6, 7.378), (6, 9.276), (6, 5.463), (7, 9.241), (6, 5.384), (7, 5.35), (8, 5.305),
    (12, 6.731), (10, 9.389), (9, 5.282), (9, 9.196), (10, 9.191), (9, 9.271), (10, 9.225),
    (10, 9.288), (10, 9.34), (10, 9.24),
]  # fmt: skip


def test_a_good_point_slowed_by_a_busy_machine_is_no_plateau_of_its_own() -> None:
    """The model named position 10 at 99.5% (99.7% after its first launch alone): its one
    point's launches set a past plateau at their own level. At no prefix of the real sequence
    may a position other than 11 or 12 (the crossing lies in (10, 12]) reach 90%."""
    from perfbisect.bisect.search.model import believe

    for k in range(4, len(LIVE_BUSY) + 1):
        belief = believe(LIVE_BUSY[:k], 31, None, 0.017)
        for position in range(1, 32):
            if position not in (11, 12):
                assert belief.crossing_at(position) < 0.9, (k, position)
    assert belief.crossing_at(11) + belief.crossing_at(12) > 0.9


def test_a_given_threshold_starts_with_one_launch_of_each_end() -> None:
    # A given threshold does not move with a slow outlier at the bad end, so its second launch
    # buys nothing there: B G, then the search; the bracket's pair is due before the name, so it
    # comes as soon as one configuration holds 97% (a clean step: no single launch more).
    rng = random.Random(11)
    engine = ModelEngine(_path(200), Policy(), threshold=12.0)
    order = _run(engine, lambda p: LaunchResult((10.0 if p < 77 else 14.0) * rng.gauss(1, 0.02)))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND and outcome.culprit is not None
    assert outcome.culprit.first_bad.position == 77 and outcome.culprit.verified
    assert [p for p, purpose in order if purpose is Purpose.ENDPOINT] == [200, 0]
    assert [p for p, purpose in order if purpose is Purpose.VERIFY] == [76, 77]
    assert len(order) <= 2 + 8 + 2 + 1, order  # the ends, ~8 halvings, the pair, one spare


def test_a_search_out_of_launches_says_the_target_and_what_the_stop_rule_asks() -> None:
    # A machine where nine launches in ten run 1.6-2.2x as slow, over a 1.28x step: the search
    # spends its budget and says where the posterior puts the crossing, the user's target and
    # the posterior the stop rule asks (its margin), and what reaching it would cost. (At
    # three launches in four slow, over the bad end's 1.6x, the model now names this world's
    # crossing right: a machine busy most of the time is one of its chains.)
    rng = random.Random(13)
    engine = ModelEngine(_path(64), Policy())
    while batch := engine.next_batch():
        engine.feed(
            [
                LaunchResult(
                    (18.0 if r.position < 30 else 23.0)
                    * rng.choice([1] + [1.6, 1.9, 2.2] * 3)  # this launch's slow-down
                    * rng.gauss(1, 0.05)
                )
                for r in batch
            ]
        )
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.AMBIGUOUS, outcome
    assert "the launch budget" in outcome.message, outcome.message
    assert "reaching 99% (the stop rule asks 99.9%) would take about" in outcome.message


def test_the_forward_step_is_each_chains_transition() -> None:
    # search/machine.py's _step (one matrix product per chain) is the sum it replaced:
    # new[h, d, g, r] = sum_s states[h, d, g, s] * trans[h, s, r], and the backward pass's with
    # the matrices transposed.
    from perfbisect.bisect.search.machine import _TRANS, _step

    rng = np.random.default_rng(3)
    states = rng.random((len(_TRANS), 5, 7, _TRANS.shape[1]))
    forward = np.einsum("hdgs,hsr->hdgr", states, _TRANS)
    backward = np.einsum("hsr,hdgr->hdgs", _TRANS, states)
    assert np.allclose(_step(states, _TRANS), forward, rtol=1e-12, atol=0)
    assert np.allclose(_step(states, _TRANS.transpose(0, 2, 1)), backward, rtol=1e-12, atol=0)


def _emissions_per_gap(emit_below: Any, emit_past: Any, past: Any, t: int) -> Any:
    """Launch ``t``'s emissions copied per gap (its point below or past there): the form the
    fast passes avoid exponentiating gap by gap."""
    return np.where(past[None, :, t, None], emit_past[:, None, t, :], emit_below[:, None, t, :])


def _forward_per_gap(
    emit_below: Any, emit_past: Any, idx: Any, gaps: int
) -> tuple[Any, Any, list[Any]]:
    """The forward pass as written before its speed-ups: every gap's copy of a launch's
    emissions exponentiated, the transition by einsum (the reference the fast one must equal)."""
    from perfbisect.bisect.search.machine import _INIT, _TRANS

    past = idx[None, :] >= np.arange(1, gaps + 1)[:, None]
    h, d, k = len(_TRANS), emit_below.shape[0], _TRANS.shape[1]
    alpha = np.broadcast_to(_INIT[:, None, None, :], (h, d, gaps, k)).copy()
    loglik, filtered = np.zeros((h, d, gaps)), []
    for t in range(len(idx)):
        e = _emissions_per_gap(emit_below, emit_past, past, t)
        top = e.max(axis=2, keepdims=True)
        if t > 0:
            alpha = np.einsum("hdgs,hsr->hdgr", alpha, _TRANS)
        f = alpha * np.exp(e - top)[None]
        c = f.sum(axis=3)
        loglik += np.log(c) + top[None, ..., 0]
        alpha = f / c[..., None]
        filtered.append(alpha)
    return loglik, alpha, filtered


def test_the_forward_pass_is_the_per_gap_one() -> None:
    # The forward pass exponentiates a launch's two rows (below, past) and picks one per gap;
    # it must give what exponentiating every gap's copy gives, and the backward pass's states
    # must be the per-gap filtered ones re-weighed by what came after.
    from perfbisect.bisect.search.machine import _STATES, _forward, _machine_states

    rng = np.random.default_rng(5)
    shifts, launches, gaps = 4, 25, 6
    emit_below = rng.normal(size=(shifts, launches, _STATES)) * 3
    emit_past = rng.normal(size=(shifts, launches, _STATES)) * 3
    idx = np.sort(rng.integers(0, gaps + 1, size=launches))
    loglik, alpha, filtered = _forward_per_gap(emit_below, emit_past, idx, gaps)
    fast_loglik, fast_alpha = _forward(emit_below, emit_past, idx, gaps)
    assert np.allclose(fast_loglik, loglik, rtol=1e-12, atol=1e-12)
    assert np.allclose(fast_alpha, alpha, rtol=1e-12, atol=1e-12)
    # the backward pass as written before: every gap's copy exponentiated, einsum
    from perfbisect.bisect.search.machine import _TRANS

    past = idx[None, :] >= np.arange(1, gaps + 1)[:, None]
    beta, expected = np.ones_like(filtered[-1]), [filtered[-1]]
    for t in range(launches - 1, 0, -1):
        e = _emissions_per_gap(emit_below, emit_past, past, t)
        step = beta * np.exp(e - e.max(axis=2, keepdims=True))[None]
        beta = np.einsum("hsr,hdgr->hdgs", _TRANS, step)
        beta = beta / beta.sum(axis=3, keepdims=True)
        post = filtered[t - 1] * beta
        expected.append(post / post.sum(axis=3, keepdims=True))
    states = _machine_states(emit_below, emit_past, idx, gaps, len(filtered[0]))
    assert np.allclose(states, np.asarray(expected[::-1]), rtol=1e-12, atol=1e-12)
    assert np.allclose(states.sum(axis=-1), 1.0)


def test_a_point_launched_often_reads_past_beside_a_bad_end_launched_twice() -> None:
    # The launches of trial 756's question (multiaxis_bench, quiet, seed 1), in the order they
    # ran: the good end (0), `nccl 2.26.2` alone (1), the bad end (2), one good launch 1.8x slow.
    # The configuration's 15 launches sit 5% below the bad end's two: it is past the threshold
    # (22.5 ms), not a good point slowed at each of its launches.
    order = [2, 0, 2, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 0, 1]
    values = [29.95, 16.95, 29.60, 27.16, 27.26, 32.66, 26.60, 19.79, 27.66, 28.87, 29.68]
    values += [27.68, 18.96, 28.89, 16.56, 27.21]
    belief = believe(list(zip(order, values)), 2, None, 0.028)
    assert belief.cdf()[1] > 0.99, belief.gap  # the crossing at or before the configuration


# The launches of the load table's seed 3, trial 194 (each busy launch its own factor) up to
# where the stop rule first named a crossing: the good end's two launches both ran slow (32.2
# and 42.2 ms for 18), its level was pooled with the points at the bad level (~29.5 ms), and
# no launch contradicted the ends' levels as read, so their busy shifts were not weighed: the
# bad end itself was the crossing at 1 - 1e-11. With the ends' levels in doubt (their shifts
# weighed, as the stop rule asks before it names) the bad end holds 89%, short of the 99% the
# stop rule asks of that posterior.
ENDS_READ_SLOW = [
    (1024, 54.32), (0, 32.16), (1024, 46.38), (542, 66.47), (607, 75.08), (287, 29.81),
    (422, 29.51), (486, 31.0), (517, 26.69), (531, 28.54), (538, 44.17), (535, 30.28),
    (537, 31.34), (538, 30.03), (541, 26.73), (589, 30.44), (797, 43.51), (676, 52.09),
    (613, 57.52), (676, 56.49), (797, 75.75), (756, 72.73), (676, 79.45), (756, 64.3),
    (792, 84.07), (795, 54.02), (913, 71.59), (905, 44.95), (773, 44.95), (723, 87.79),
    (736, 70.32), (0, 42.22), (973, 69.78), (962, 59.94), (980, 29.69), (1004, 29.03),
    (1015, 29.29), (1020, 28.66), (1022, 29.98), (1023, 30.92), (1023, 28.8), (1024, 60.82),
    (1023, 28.81), (1024, 62.13),
]  # fmt: skip


def test_a_claim_must_hold_with_the_ends_levels_in_doubt() -> None:
    target = stop_at(Policy().confidence)
    as_read = believe(ENDS_READ_SLOW, 1024, None, 0.0797)
    assert as_read.crossing_at(1024) >= target  # the plain posterior would name the bad end
    doubted = believe(ENDS_READ_SLOW, 1024, None, 0.0797, ends_doubted=True)
    assert doubted.crossing_at(1024) < Policy().confidence, doubted.best()  # not named


# Seeded worlds of the load table (seed S, trial t draws from S * 1_000_003 + t) named wrong at
# >= 99% before the stop rule asked the posterior with the ends' levels in doubt: seed 3 trial
# 194 (above: the bad end named; 52 now, after 86 launches) and seed 3 trial 99 of the machine
# busy most of the time (the good end launched once, in a busy period, its level pooled with the
# points at the bad one: the bad end named at 99.9999%; now ambiguous after its budget).
LOAD_WRONG_BEFORE_ENDS_DOUBTED = [
    ("load_comes_and_goes_per_launch", 3_000_203),
    ("busy_most_of_the_time", 3_000_108),
]


@pytest.mark.parametrize(("scenario", "seed"), LOAD_WRONG_BEFORE_ENDS_DOUBTED)
def test_an_end_read_only_slow_names_no_wrong_crossing(scenario: str, seed: int) -> None:
    assert _named_wrong_never(scenario, seed).status in (Status.FOUND, Status.AMBIGUOUS)
