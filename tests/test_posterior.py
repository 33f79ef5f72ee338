"""The crossing's posterior (perfbisect/bisect/posterior.py) and the audit that asks it before a
crossing is named (perfbisect/bisect/rules/audit.py): each test gives launches whose answer is known
by construction and checks the probability, the slow launches found, or what the engine does."""

from __future__ import annotations

import random

import pytest

from perfbisect.bisect.posterior import TimedLaunch, crossing_posterior
from perfbisect.bisect.rules.engine import Engine, LaunchResult, Policy, Purpose, Status
from perfbisect.bisect.stats import Verdict
from perfbisect.config import Configuration


def _posterior(
    launches: list[tuple[int, float]], gaps: list[int], threshold: float, rel_sd: float = 0.04
):  # type: ignore[no-untyped-def]
    timed = [TimedLaunch(point, value) for point, value in launches]
    return crossing_posterior(timed, len(gaps), gaps, threshold, rel_sd)


def test_a_clean_step_is_named_with_high_confidence() -> None:
    # Points 0..5 at 18 ms, 6..9 at 29 ms, one launch each (the good end and the bad end two),
    # threshold between: the crossing is point 6.
    launches = [(9, 29.3), (0, 18.1), (9, 28.7)]
    launches += [(k, 18.0 * (1 + 0.02 * (-1) ** k)) for k in range(1, 6)]
    launches += [(k, 29.0 * (1 + 0.02 * (-1) ** k)) for k in range(6, 9)]
    post = _posterior(launches, [0] + [1] * 9, threshold=22.85)
    assert post.crossing[6] > 0.99
    assert post.past(5) < 0.01 and post.past(6) > 0.99
    assert max(post.slow) < 0.5  # no launch here ran slow


def test_a_good_point_slowed_by_a_burst_is_not_the_crossing() -> None:
    # Point 3's two launches ran back to back in a burst (1.6x and 1.7x of its 50 ms, the bad
    # level is 78); launches 4-6 before them were slow too (other good points), and point 4,
    # after it on the path, measured 50 later. Levels change only at steps: point 3 is one of
    # the good plateau's, and the chain says which launches ran slow.
    launches = [
        (7, 78.0),  # the bad end
        (0, 50.0),  # the good end
        (6, 77.0),
        (1, 80.0),  # slow (1.6x)
        (2, 86.0),  # slow
        (3, 80.5),  # slow
        (3, 85.0),  # slow: the same burst, a verification launch right after
        (4, 50.5),
        (5, 51.0),
        (2, 50.2),
        (1, 49.8),
    ]
    post = _posterior(launches, [0] + [8] * 7, threshold=62.5)
    assert post.crossing[3] < 0.02
    # Point 6's one launch ran right before the burst's: that the period began one launch
    # earlier (and point 6 is good, 1.54x slow) is weighed too, since a busy period keeps its
    # slow-down (0.82 here; the chain without a kept slow-down said 0.9 and more).
    assert post.crossing[6] > 0.75
    slow = [i for i, q in enumerate(post.slow) if q > 0.5]
    assert slow == [3, 4, 5, 6], slow
    assert post.stay > 0.5  # slow launches came in a run: the chain learnt bursts


def test_lone_outliers_do_not_teach_the_chain_bursts() -> None:
    # Two lone slow launches far apart among forty normal ones: a slow launch after a slow one
    # stays unlikely (the prior's 0.3 at most), a slow one after a normal one is rare.
    rng = random.Random(7)
    launches = [(k % 2 * 3, (18.0 if k % 2 == 0 else 29.0) * rng.gauss(1, 0.03)) for k in range(40)]
    launches[10] = (0, 18.0 * 1.8)
    launches[30] = (3, 29.0 * 1.6)
    post = _posterior(launches, [0, 5, 5, 5], threshold=22.85)
    assert post.start < 0.1
    assert post.stay <= 0.3
    assert post.slow[10] > 0.9 and post.slow[30] > 0.9


def test_a_lone_crossing_needs_more_evidence_than_one_next_to_a_crossed_point() -> None:
    # The same launches of the bracket (last good 18, first bad 29 and 29.5), once with the
    # next crossed point right after the first bad one, once 200 positions after it: the prior
    # odds that the step is exactly there shrink with the room after it.
    def claim(gap_after: int) -> float:
        launches = [(3, 29.0), (0, 18.0), (1, 18.2), (2, 29.0), (2, 29.5), (3, 28.8)]
        return _posterior(launches, [0, 100, 1, gap_after], threshold=22.85).crossing[2]

    near, far = claim(1), claim(200)
    assert far < near
    assert near > 0.99


def test_a_higher_is_better_metric_is_read_in_time_terms() -> None:
    # tokens/s: the regression is a drop. In time terms (1 / value) the audit sees a rise; the
    # engine names the first configuration past the threshold as for a lower-is-better metric.
    def script(pos: int, k: int) -> float:
        return 90.0 if pos < 12 else 60.0

    engine = Engine(
        [Configuration.of({"commit": str(i)}) for i in range(33)],
        Policy(higher_is_better=True),
    )
    _drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert outcome.culprit.first_bad.position == 12
    assert outcome.culprit.confidence is not None and outcome.culprit.confidence > 0.99


def _drive(engine: Engine, script) -> list[tuple[int, Purpose]]:  # type: ignore[no-untyped-def]
    counts: dict[int, int] = {}
    order = []
    while batch := engine.next_batch():
        results = []
        for request in batch:
            k = counts.get(request.position, 0)
            counts[request.position] = k + 1
            order.append((request.position, request.purpose))
            results.append(LaunchResult(script(request.position, k)))
        engine.feed(results)
    return order


@pytest.mark.parametrize("trial", [471, 916, 1412, 1469, 1567, 1729])
def test_seeded_real_history_worlds_the_audit_corrects(
    trial: int,
) -> None:
    # Seeded worlds of the search benchmark's real-history scenario that the engine names wrong
    # without the audit: 471, 916, 1412 and 1729 a point of a good level whose launches ran in
    # bursts (search and verification launches slow alike), 1469 a plateau point just below a
    # threshold derived from low endpoint launches, 1567 the point after the culprit (the
    # culprit's one launch, 10% low, pooled with the plateau below it). Every launch weighed in
    # the order it ran puts the crossing elsewhere; the audit judges the doubted verdicts again.
    # (Since the bracket is verified in back-to-back pairs crossing first, these worlds are
    # also named right without the audit: the outcome is asserted, not which rule gets it.)
    from test_engine import _named, _real_history_world

    engine, world = _real_history_world(trial)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    culprit = engine.outcome.culprit if engine.outcome else None
    assert culprit is not None and culprit.confidence is not None
    assert culprit.confidence >= 0.99


@pytest.mark.parametrize("trial", [73, 1094, 1947])
def test_a_burst_over_the_endpoint_phase_is_set_aside_from_both_ends(trial: int) -> None:
    # Seeded real-history worlds whose endpoint phase ran mostly in bursts (B G B G ...
    # interleaved: both ends slowed alike, the good end's median at the bad level): the search
    # said the endpoints do not differ. Read in the order they ran, the slow launches of both
    # ends are set aside and the ends judged on the others.
    from test_engine import _named, _real_history_world

    engine, world = _real_history_world(trial)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    # (Which launches are set aside on the way is not asserted: with the machine's busy state
    # kept over time the posterior reads these ends' launches without setting them aside.)


def test_a_flaky_good_endpoint_is_not_taken_for_a_burst() -> None:
    # The good endpoint measures at the bad level on two launches of every three (a flaky
    # configuration, the bad endpoint steady): no burst of the machine, which would slow both
    # ends alike, shows; the endpoints stay "not reproduced", nothing set aside.
    def script(pos: int, k: int) -> float:
        if pos == 0:
            return (78.0, 78.0, 50.0)[k % 3] * (1 + 0.01 * (k % 3))
        return 78.0 * (1 + 0.01 * (k % 3))

    engine = Engine([Configuration.of({"commit": str(i)}) for i in range(17)])
    _drive(engine, script)
    assert engine.outcome is not None and engine.outcome.status is Status.NOT_REPRODUCED
    assert not engine.set_aside


@pytest.mark.parametrize("trial", [1701])
def test_an_endpoint_contradicted_twice_by_a_long_burst_is_measured_again(trial: int) -> None:
    # A seeded real-history world: the bad endpoint's first launches, and again its launches
    # when the endpoints were measured again, ran in bursts (1.7-1.9x), so the threshold sat
    # above the bad level and the search ended "ambiguous" when the endpoint measured normal at
    # the end. Read in order, those launches are slow: set aside, the endpoints are measured a
    # second time and the search finds the culprit.
    from test_engine import _named, _real_history_world

    engine, world = _real_history_world(trial)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    # (How: the endpoints measured once more, or, with the verification's back-to-back pairs,
    # another way; the outcome is what is asserted.)


@pytest.mark.parametrize("trial", [1866, 1881])
def test_points_all_better_than_a_slow_good_end_have_the_endpoints_measured_again(
    trial: int,
) -> None:
    # Seeded real-history worlds of the benchmark's seed 3: the first three launches (both
    # endpoints) ran in one burst, the threshold came out above every level, and every point
    # between measured 10-15% better than the good endpoint's one launch: significant together,
    # though not by the whole minimum effect. The endpoints are measured again.
    from test_engine import _named, _real_history_world

    engine, world = _real_history_world(trial, seed=3)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    assert engine.outcome is not None
    # The endpoints are measured again (the good end outdone, or the bad end contradicted at
    # the verification's back-to-back pairs, whichever shows first).
    assert "the endpoints were measured again" in engine.outcome.message


def test_a_crossing_named_below_the_audit_target_is_said_in_the_report() -> None:
    # The audit's launches are bounded (three times --max-launches); a crossing it could not
    # bring to 99% is still named, and the report says how likely the launches make it.
    from perfbisect.bisect.report.report_warnings import _low_confidence
    from perfbisect.bisect.stats import Difference
    from perfbisect.bisect.values import Culprit, Outcome, PointResult

    def point(position: int) -> PointResult:
        return PointResult(position, Configuration.of({"commit": str(position)}), Verdict.BAD, None)

    def outcome(confidence: float | None) -> Outcome:
        culprit = Culprit(point(6), point(7), Difference(10.0, 8.0, 12.0), True, None, confidence)
        return Outcome(Status.FOUND, 22.0, "found", culprit, (), 9, 12, (culprit,))

    warned = _low_confidence(outcome(0.93), 0.99)
    assert len(warned) == 1 and "position 7 93% of being the first configuration" in warned[0]
    assert "--max-launches" in warned[0]
    assert _low_confidence(outcome(0.995), 0.99) == []
    assert _low_confidence(outcome(None), 0.99) == []  # no audit ran (every step mapped)
    # The target is the engine's own (--confidence): 97% is short of a 99.5% target only.
    assert _low_confidence(outcome(0.97), 0.95) == []
    assert len(_low_confidence(outcome(0.97), 0.995)) == 1


def test_a_busy_period_over_a_run_of_points_is_the_machine_not_a_step() -> None:
    # A shared machine's busy period (another job: every launch 1.85x slower while it lasts)
    # began right after the endpoints and covered the whole descent of the search: the ten
    # points it measured, 1 to 512, all read a level above the bad end's, one level alike, as
    # if the step were right after the good end. The verification then launched the good end
    # and point 1 back to back (A B A B) and the good end, whose level is known, read 1.85x
    # slow too. Read in the order they ran, the launches since the endpoints ran slow (the
    # machine's state over time, one slow-down kept over the period): the crossing is not at
    # point 1. (Each launch judged on its own, point 1 was the crossing at 99.99%.)
    gaps = [0, 1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # points 0, 1, 2, 4, ..., 512, 1024
    busy = 1.85
    launches = [(11, 29.5), (0, 16.8), (11, 29.0)]
    launches += [(k, 18.0 * busy * (1 + 0.02 * (-1) ** k)) for k in range(10, 0, -1)]
    launches += [(0, 16.8 * busy), (1, 18.0 * busy * 1.01), (0, 16.8 * busy * 0.99)]
    launches += [(1, 18.0 * busy)]
    post = _posterior(launches, gaps, threshold=22.6)
    assert post.crossing[1] < 0.01
    assert post.past(10) < 0.2  # point 512 too: its one launch ran in the period
    assert all(q > 0.9 for q in post.slow[3:])
    assert max(post.slow[:3]) < 0.1  # the endpoints' first launches did not


@pytest.mark.parametrize("trial", [0, 37, 59, 84, 90])
def test_seeded_load_varying_worlds_are_named_right(trial: int) -> None:
    # Seeded worlds of the search benchmark's machine whose load comes and goes (busy periods
    # of 5-20 launches, 1.5-3x slower each) that the engine named wrong "with 99-100%": a busy
    # period covered the first bad point's search launch and its lone re-launch (37: 73 for
    # 74), or a whole descent of the search (0: position 1 for 656). The bracket is verified
    # in back-to-back pairs now and the posterior keeps the machine's busy state over time.
    from test_engine import _benchmark_world, _named

    engine, world = _benchmark_world("load_comes_and_goes", trial)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    culprit = engine.outcome.culprit if engine.outcome else None
    assert culprit is not None and culprit.confidence is not None
    assert culprit.confidence >= 0.99


@pytest.mark.parametrize("trial", [44, 47, 70])
def test_seeded_load_varying_worlds_are_never_named_wrong_with_confidence(trial: int) -> None:
    # More of those worlds, named wrong at 99.9-100% before (44: 5 for 946, 47: 1 for 992,
    # 70: 353 for 476). Still not found here, but no wrong configuration is claimed at 99%:
    # the search ends ambiguous or names one with the low posterior it has.
    from test_engine import _benchmark_world, _named

    engine, world = _benchmark_world("load_comes_and_goes", trial)
    outcome = engine.outcome
    assert outcome is not None
    if _named(engine) not in (None, world.culprit):
        assert outcome.culprit is not None and outcome.culprit.confidence is not None
        assert outcome.culprit.confidence < 0.99, outcome.message
        # and it is not called verified: verified is the posterior with the verification's
        # launches in it, stated as a number
        assert not outcome.culprit.verified
        assert outcome.culprit.note and "with probability" in outcome.culprit.note
