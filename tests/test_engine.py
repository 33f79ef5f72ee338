"""The engine with scripted launch values: no I/O, every branch of the search plan."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from perfbisect.bisect.rules.engine import Engine, LaunchResult, Policy, Purpose, Status
from perfbisect.bisect.stats import Verdict
from perfbisect.config import Configuration

Script = Callable[[int, int], float | None]  # (position, launch number) -> value or None = fail


def path(n: int) -> list[Configuration]:
    return [Configuration.of({"commit": f"{i:040x}"}) for i in range(n + 1)]


def drive(engine: Engine, script: Script) -> list[tuple[int, Purpose]]:
    seen: dict[int, int] = {}
    order = []
    for _ in range(1000):
        batch = engine.next_batch()
        if not batch:
            return order
        results = []
        for request in batch:
            k = seen.get(request.position, 0)
            seen[request.position] = k + 1
            order.append((request.position, request.purpose))
            value = script(request.position, k)
            results.append(
                LaunchResult(value) if value is not None else LaunchResult(reason="build: exit 2")
            )
        engine.feed(results)
    raise AssertionError("engine did not finish")


def step(culprit: int, good: float = 18.0, bad: float = 29.0) -> Script:
    return lambda pos, k: (bad if pos >= culprit else good) * (1 + 0.01 * ((k % 3) - 1))


@pytest.mark.parametrize("culprit", [1, 2, 17, 63, 64])
def test_finds_culprit_with_binary_search(culprit: int) -> None:
    engine = Engine(path(64))
    drive(engine, step(culprit))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert outcome.culprit is not None
    assert outcome.culprit.first_bad.position == culprit
    assert outcome.culprit.last_good.position == culprit - 1
    assert outcome.culprit.verified
    effect = outcome.culprit.effect
    assert 0 < effect.lo < effect.delta < effect.hi
    assert effect.delta == pytest.approx(11.0, rel=0.05)
    # 2 endpoints + log2(64) = 6 search points, plus nothing else when values are clean
    assert len(engine.verdicts) <= 2 + 6
    assert outcome.threshold == pytest.approx((18 * 29) ** 0.5, rel=0.02)  # geometric midpoint


def test_endpoints_are_interleaved_and_verification_targets_the_worse_side() -> None:
    engine = Engine(path(8))
    order = drive(engine, step(5))
    endpoints = [p for p, purpose in order if purpose is Purpose.ENDPOINT]
    assert endpoints[:3] == [8, 0, 8]  # B G B: the bad endpoint gets the extra launch
    # Crossing first, the bracket's two sides are launched back to back (A B): a busy period
    # of the machine that covered the first bad point's search launch and its re-launch would
    # confirm a wrong verdict; the last good point's launch next to it shows the period.
    verify = [p for p, purpose in order if purpose is Purpose.VERIFY]
    assert verify == [4, 5]
    # the engine's state says which launches verified (for the report), in launch order
    position_of = {i: p for p, seqs in engine.seq.items() for i in seqs}
    verified_by = [
        position_of[i]
        for i, purpose in enumerate(engine.launch_purposes)
        if purpose is Purpose.VERIFY
    ]
    assert verified_by == [4, 5]
    assert engine.outcome is not None and engine.outcome.culprit is not None
    assert engine.outcome.culprit.verified
    assert engine.outcome.culprit.confidence is not None
    assert engine.outcome.culprit.confidence >= 0.99
    both = Engine(path(8), Policy(verify_both=True))
    order = drive(both, step(5))
    assert [p for p, purpose in order if purpose is Purpose.VERIFY][:2] == [4, 5]


def test_skip_next_to_culprit_is_reported_not_blamed() -> None:
    # Position 9 (the culprit's parent) never builds: the culprit cannot be isolated.
    script_ok = step(10)
    engine = Engine(path(32))
    drive(engine, lambda pos, k: None if pos == 9 else script_ok(pos, k))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.AMBIGUOUS
    assert outcome.unresolved == ((8, 10),)
    assert engine.verdicts[9] is Verdict.SKIP
    assert outcome.culprit is None


def test_skips_away_from_culprit_are_routed_around() -> None:
    script_ok = step(20)
    engine = Engine(path(32))
    drive(engine, lambda pos, k: None if pos in (16, 17, 24) else script_ok(pos, k))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 20
    assert engine.verdicts[16] is Verdict.SKIP


def test_unclear_point_is_never_blamed() -> None:
    # Position 10's launches disagree (bimodal, like a flaky NCCL ring: half of them at the
    # slow level, so they are not outlier launches): its interval never leaves the threshold,
    # so it stays UNCLEAR.
    base = step(11)

    def script(pos: int, k: int) -> float:
        return (22.85, 18.0, 29.0, 29.0)[k % 4] if pos == 10 else base(pos, k)

    engine = Engine(path(16), Policy(max_launches=4))
    drive(engine, script)
    assert engine.verdicts[10] is Verdict.UNCLEAR
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.AMBIGUOUS
    assert outcome.unresolved == ((9, 11),)


@pytest.mark.parametrize("first,second", [(5, 40), (30, 31), (1, 64)])
def test_two_step_regression_reports_both_steps(first: int, second: int) -> None:
    # 19 -> 23 -> 29 ms: the 23 ms plateau sits next to the threshold (23.47), where a
    # threshold-only search would spend its launches in vain; it is a level of its own.
    def script(pos: int, k: int) -> float:
        level = 19.0 if pos < first else 23.0 if pos < second else 29.0
        return level * (1 + 0.01 * ((k % 3) - 1))

    engine = Engine(path(64), Policy(all_steps=True))
    drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome
    assert [s.first_bad.position for s in outcome.steps] == [first, second]
    assert all(s.last_good.position == s.first_bad.position - 1 for s in outcome.steps)
    # 23 -> 29 crosses the geometric midpoint of 19 and 29
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == second
    assert "2 steps" in outcome.message
    assert engine.launch_count <= 40


@pytest.mark.parametrize(("first", "second"), [(5, 40), (30, 33), (1, 64), (20, 50)])
def test_crossing_first_names_the_crossing_and_the_rest_as_seen(first: int, second: int) -> None:
    def script(pos: int, k: int) -> float:
        level = 19.0 if pos < first else 23.0 if pos < second else 29.0
        return level * (1 + 0.01 * ((k % 3) - 1))

    default = Engine(path(64))
    drive(default, script)
    mapped = Engine(path(64), Policy(all_steps=True))
    drive(mapped, script)
    outcome = default.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome.message
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == second
    assert [s.first_bad.position for s in outcome.steps] == [second]  # only what was asked
    # the 19 -> 23 step is named as seen when the search's launches show it, at no cost
    for a, b in outcome.seen:
        assert a < first <= b
    if outcome.seen:
        assert "seen, not searched" in outcome.message
    assert default.launch_count < mapped.launch_count


def test_single_step_reports_one_step() -> None:
    engine = Engine(path(64))
    drive(engine, step(20))
    assert engine.outcome is not None
    assert [s.first_bad.position for s in engine.outcome.steps] == [20]


def test_outlier_launch_is_corrected_by_verification() -> None:
    # The first launch of position 12 (truly good) is an outlier at 2x: it is judged BAD at
    # first, and the interleaved verification must correct it and resume the search.
    base = step(14)

    def script(pos: int, k: int) -> float:
        value = base(pos, k)
        return value * 2 if pos == 12 and k == 0 else value

    engine = Engine(path(16))
    drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 14


def test_fixed_threshold_endpoint_not_reproduced() -> None:
    engine = Engine(path(8), threshold=10.0)
    drive(engine, step(4))  # good measures 18 > 10: the good endpoint is not good
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.NOT_REPRODUCED
    assert "good endpoint is bad" in outcome.message


def test_endpoints_that_do_not_differ_are_not_reproduced() -> None:
    engine = Engine(path(8))
    order = drive(engine, lambda pos, k: 18.0 * (1 + 0.01 * ((k % 3) - 1)))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.NOT_REPRODUCED
    assert "do not differ significantly" in outcome.message
    assert "two levels" not in outcome.message  # one level each: nothing more to say
    # the decision took more than the minimum launches: a negative result needs evidence
    assert len(order) >= 2 * Policy().endpoint_confirm_launches


def test_a_good_endpoint_measured_mostly_in_bursts_is_judged_on_its_fast_launches() -> None:
    # Six of the good endpoint's ten launches ran 1.5-1.9x slow (a busy machine, as in seeded
    # real-history worlds 73, 502, 1094 and 1947): its median sits at the bad level, and until
    # the endpoints were read in the order they ran the search said they "do not differ". The
    # bad endpoint's launches ran slow at the same times (the endpoints are interleaved): a
    # burst of the machine, not a flaky good endpoint (test_posterior.py has that one). The
    # slow launches of both ends are set aside and the search goes on.
    values = {  # world 73's endpoint launches, in order (the true levels: 50 and 78 ms)
        0: [83.0, 75.0, 90.0, 86.0, 52.0, 51.0, 96.0, 87.0, 50.0, 52.0],
        8: [80.0, 141.0, 137.0, 78.0, 80.0, 75.0, 76.0, 149.0, 125.0, 81.0, 75.0],
    }

    def script(pos: int, k: int) -> float:
        if pos in values and k < len(values[pos]):
            return values[pos][k]
        return 50.0 if pos < 5 else 78.0

    engine = Engine(path(8))
    drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome.message
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 5
    assert sorted(engine.set_aside[0]) == [75.0, 83.0, 86.0, 87.0, 90.0, 96.0]
    assert sorted(engine.set_aside[8]) == [125.0, 137.0, 141.0, 149.0]
    assert outcome.threshold == pytest.approx(math.sqrt(51.0 * 78.0), rel=0.03)


def test_failed_endpoint_stops_with_reason() -> None:
    engine = Engine(path(8))
    drive(engine, lambda pos, k: None if pos == 0 else 29.0)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.NOT_REPRODUCED
    assert "good endpoint could not be measured: build: exit 2" in outcome.message


def test_higher_is_better_metric() -> None:
    engine = Engine(path(16), Policy(higher_is_better=True))
    drive(engine, lambda pos, k: 60.0 if pos >= 7 else 94.0)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 7
    assert outcome.culprit.effect.delta == pytest.approx(-34.0)


def test_adaptive_launches_only_near_the_threshold() -> None:
    # Point 6 is at 22 with threshold ~23.5: its interval straddles, so it gets extra launches;
    # points far from the threshold get exactly one.
    def script(pos: int, k: int) -> float:
        if pos == 6:
            return 22.0 * (1 + 0.01 * ((k % 3) - 1))
        return 29.0 if pos >= 7 else 18.0

    engine = Engine(path(8))
    drive(engine, script)
    assert len(engine.launches[6]) > 1
    assert len(engine.launches[4]) == 1


def test_replay_reconstructs_the_same_state() -> None:
    values: list[float | None] = []
    first = Engine(path(32))
    while batch := first.next_batch():
        results = [LaunchResult(18.0 if r.position < 9 else 29.0) for r in batch]
        values.extend(r.value for r in results)
        first.feed(results)
    second = Engine(path(32))
    it = iter(values)
    while batch := second.next_batch():
        second.feed([LaunchResult(next(it)) for _ in batch])
    assert first.outcome == second.outcome


def test_feed_checks_batch_size() -> None:
    engine = Engine(path(4))
    with pytest.raises(ValueError, match="expected 3 results"):
        engine.feed([LaunchResult(1.0)])


def test_slow_outlier_launches_are_set_aside_flaky_ones_are_not() -> None:
    from perfbisect.bisect.stats import core_launches

    assert core_launches([18.2, 36.4], 0.05) == [18.2]  # one of two, 2x slower
    assert core_launches([27.5, 19.3, 19.3, 17.8], 0.05) == [19.3, 19.3, 17.8]
    # As many slow launches as fast ones: a flaky configuration, every launch counts.
    assert core_launches([18.0, 29.0, 18.1, 29.2], 0.05) == [18.0, 29.0, 18.1, 29.2]
    assert core_launches([31.5, 18.0, 33.9], 0.05) == [31.5, 18.0, 33.9]
    assert core_launches([18.4, 18.9, 17.6], 0.05) == [18.4, 18.9, 17.6]
    # Most launches slow, but spread as no level's are (a busy machine's bursts, 1.5-2x each,
    # over the good endpoint of seeded real-history world 502) while three fast ones agree:
    # the fast ones say the level. A slow mode at a level of its own stays flaky.
    bursts = [80.0, 98.0, 49.0, 50.0, 73.0, 101.0, 74.0, 96.0, 50.0]
    assert core_launches(bursts, 0.04) == [49.0, 50.0, 50.0]
    flaky = [80.0, 78.0, 49.0, 50.0, 81.0, 79.0, 77.0, 80.0, 50.0]
    assert core_launches(flaky, 0.04) == flaky
    # Higher is better (tokens/s): outliers are the low ones.
    assert core_launches([1000.0, 520.0, 990.0], 0.05, higher_is_better=True) == [1000.0, 990.0]


def _flaky_verification(culprit: int, failures: int) -> tuple[Engine, list[tuple[int, Purpose]]]:
    """The culprit's verification launches crash ``failures`` times in a row (the server died
    during the workload); every other launch is clean."""
    clean = step(culprit)
    crashed: list[int] = []

    def script(pos: int, k: int) -> float | None:
        if pos == culprit and k >= 1 and len(crashed) < failures:
            crashed.append(k)
            return None
        return clean(pos, k)

    engine = Engine(path(32))
    order = drive(engine, script)
    assert crashed, "the script never reached the culprit's verification"
    return engine, order


def test_flaky_verification_launch_is_retried_and_the_culprit_stays_named() -> None:
    engine, order = _flaky_verification(culprit=11, failures=1)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 11
    assert outcome.culprit.verified and outcome.culprit.note is None
    assert engine.failures[11] == ["build: exit 2"]  # the failure stays listed
    assert 11 not in engine.skip_reason  # a measured configuration never turns SKIP by itself
    assert engine.verdicts[11] is Verdict.BAD
    # launches counts the failed one too; evaluations are distinct configurations
    assert outcome.launches == len(order) and outcome.evaluations == len(engine.verdicts)
    assert outcome.evaluations <= outcome.launches


def test_verification_that_never_runs_is_not_called_verified() -> None:
    engine, _ = _flaky_verification(culprit=11, failures=10)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND  # not `ambiguous`
    culprit = outcome.culprit
    assert culprit is not None and culprit.first_bad.position == 11
    assert not culprit.verified
    assert (
        culprit.note is not None and "verification launches of position 11 failed" in culprit.note
    )
    # bounded: the first try plus two retries, then it gives up
    assert len(engine.failures[11]) == 1 + Policy().launch_retries
    assert engine.verdicts[11] is Verdict.BAD


def test_step_search_out_of_launches_is_unresolved_not_silent() -> None:
    # A plateau (23 ms) too noisy to bisect within a step search's budget, between 19 and 29:
    # with this seed the search of one level gap runs out of launches. Its bracket must be in
    # `unresolved` with the cost of finishing it, not dropped without a word.
    import random

    rng = random.Random(78)

    def script(pos: int, k: int) -> float:
        level = 19.0 if pos < 10 else 23.0 if pos < 40 else 29.0
        spread = 0.15 if 10 <= pos < 40 else 0.03
        return level * rng.uniform(1 - spread, 1 + spread)

    engine = Engine(path(63), Policy(all_steps=True))
    drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND
    assert engine.unresolved_why, "the starved step search left no trace"
    for pair, why in engine.unresolved_why.items():
        assert pair in outcome.unresolved
        assert "ran out of its" in why and "more launches" in why
    assert "could not be pinned down" in outcome.message


def test_message_claims_crossing_only_when_medians_straddle() -> None:
    engine = Engine(path(32), threshold=25.0)
    drive(engine, lambda pos, k: 19.0 if pos < 8 else 23.0 if pos < 20 else 29.0)
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert engine.straddles(outcome.culprit)
    if len(outcome.steps) > 1:
        assert "crosses the threshold" in outcome.message
        low = next(c for c in outcome.steps if c.first_bad.position == 8)
        assert not engine.straddles(low)


def test_one_point_on_the_threshold_is_unresolved_never_blamed() -> None:
    # 19 -> 23 -> 29 with the 23 level at one commit only, 1% below the derived threshold: the
    # crossing is at 30 or 31 and no launch budget tells which; it is never named wrongly.
    def script(pos: int, k: int) -> float:
        level = 19.0 if pos < 30 else 23.0 if pos < 31 else 29.0
        return level * (1 + 0.01 * ((k % 3) - 1))

    engine = Engine(path(64))
    drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None
    if outcome.status is Status.FOUND:
        assert outcome.culprit is not None and outcome.culprit.first_bad.position == 31
    else:
        assert outcome.status is Status.AMBIGUOUS and outcome.unresolved == ((29, 31),)


def _bursty(culprit: int, burst_at: int, length: int = 3) -> tuple[Script, list[int]]:
    """A step at ``culprit`` on a shared machine: from the first launch of ``burst_at`` on,
    ``length`` launches in a row (whatever they measure) run 2.5x slow."""
    state = {"left": 0, "started": False}
    launched: list[int] = []

    def script(pos: int, k: int) -> float:
        launched.append(pos)
        if pos == burst_at and not state["started"]:
            state["started"], state["left"] = True, length
        value = step(culprit, 10.0, 20.0)(pos, k)
        if state["left"] > 0:
            state["left"] -= 1
            value *= 2.5
        return value

    return script, launched


def test_a_burst_of_slow_launches_cannot_fake_the_culprit() -> None:
    """A burst that starts at a good point's first launch and lasts into its verification
    made the single-launch verification confirm a step that is not there. Two defences, each
    enough here: launches slower than the worse end's level are set aside once a launch at a
    possible level is in; and once such launches came in a row, the bracket is verified in
    back-to-back pairs (a burst slows both launches of a pair)."""
    for paired in (False, True):
        script, _ = _bursty(culprit=6, burst_at=5)  # the last point searched, then verified
        engine = Engine(path(8), Policy(paired_verify=paired), threshold=14.0)
        order = drive(engine, script)
        outcome = engine.outcome
        assert outcome is not None and outcome.culprit is not None
        assert outcome.culprit.first_bad.position == 6, (paired, outcome.message)
        assert outcome.culprit.verified, outcome.culprit.note
        lo_verified = [p for p, purpose in order if purpose is Purpose.VERIFY and p == 4]
        assert bool(lo_verified) == paired  # pairs re-measure the good side too


def test_a_quiet_machine_verifies_with_one_back_to_back_pair() -> None:
    # (Before the load-varying machine's benchmark: one launch of the first bad point.)
    engine = Engine(path(8), Policy(), threshold=24.0)
    order = drive(engine, step(5))
    assert [p for p, purpose in order if purpose is Purpose.VERIFY] == [4, 5]


def test_creep_beside_the_step_is_reported_not_claimed_as_a_step() -> None:
    """18 -> 27 ms at position 20, then a creep of 0.5% a commit (+24% by position 64): with
    every step mapped, the step is claimed once and the rise after it is named as creep, not
    as a run of 0.5% "steps" (each one's effect is below the minimum effect)."""

    def creeping(pos: int, k: int) -> float:
        level = 18.0 if pos < 20 else 27.0 * 1.005 ** (pos - 20)
        return level * (1 + 0.005 * ((k % 3) - 1))

    policy = Policy(min_launches=2, good_endpoint_launches=2, all_steps=True)
    engine = Engine(path(64), policy)
    drive(engine, creeping)
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert [(c.first_bad.position, c.verified) for c in outcome.steps] == [(20, True)]
    assert engine.creep(outcome.steps, outcome.seen) == [(20, 64)]
    # a clean step has no creep beside it
    clean = Engine(path(64), policy)
    drive(clean, step(37))
    assert clean.outcome is not None
    assert clean.creep(clean.outcome.steps, clean.outcome.seen) == []


def test_a_step_below_the_minimum_effect_is_not_verified() -> None:
    engine = Engine(path(16), Policy(min_effect=0.05), threshold=18.3)
    drive(engine, step(9, 18.0, 18.6))  # +3.3%: crosses the given threshold, too small a step
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert outcome.culprit.first_bad.position == 9
    assert not outcome.culprit.verified
    assert "below the minimum effect" in (outcome.culprit.note or "")


@pytest.mark.parametrize("culprit", [1, 200, 511, 1024])
def test_k_ary_search_with_slots_needs_fewer_rounds(culprit: int) -> None:
    """With S slots the engine proposes S points per round (the bracket split into S + 1):
    the same culprit in about log_(S+1) N rounds instead of log_2 N."""
    rounds = {}
    for slots in (1, 3, 7):
        engine = Engine(path(1024), Policy(slots=slots))
        order = drive(engine, step(culprit))
        outcome = engine.outcome
        assert outcome is not None and outcome.culprit is not None
        assert outcome.culprit.first_bad.position == culprit, slots
        rounds[slots] = engine.rounds
        if slots > 1:  # a search round asks for several points at once
            assert engine.rounds < len(order)
    assert rounds[7] < rounds[3] < rounds[1]
    assert rounds[3] <= math.ceil(math.log(1024, 4)) + 4
    assert rounds[7] <= math.ceil(math.log(1024, 8)) + 4


def test_two_outlier_launches_at_one_point_do_not_make_it_the_culprit() -> None:
    """Position 5 (good, 10 ms) measures 25 ms twice in a row, slower than the bad end (20 ms)
    ever is: no configuration has that level, so the point is measured on and judged on its
    launches at a possible level."""

    def script(pos: int, k: int) -> float:
        if pos == 5 and k < 2:
            return 25.0
        return step(6, 10.0, 20.0)(pos, k)

    engine = Engine(path(8), Policy(paired_verify=False), threshold=14.0)
    drive(engine, script)
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None
    assert outcome.culprit.first_bad.position == 6
    # Both slow launches stay on record (judged on, or set aside as slow), and a third launch
    # at a possible level decided the point.
    every = engine.launches[5] + engine.set_aside.get(5, [])
    assert every.count(25.0) == 2 and len(every) >= 3
    assert engine.verdicts[5] is Verdict.GOOD


def _slow_launches(script: Script, slow: set[int], factor: float) -> Script:
    """``script`` on a shared machine: the launches whose ordinal (0-based, over the whole
    session) is in ``slow`` run ``factor`` times slower, whatever they measure."""
    count = [0]

    def slowed(pos: int, k: int) -> float | None:
        value = script(pos, k)
        n = count[0]
        count[0] += 1
        return value * factor if value is not None and n in slow else value

    return slowed


def test_a_burst_over_the_endpoint_launches_remeasures_them_and_redoes_the_search() -> None:
    # All three endpoint launches run 1.8x slow: the derived threshold lands above the bad
    # level, every point looks good, and the bad endpoint's verification launch (at its real
    # level) splits its launches into two levels: the endpoints are measured again.
    engine = Engine(path(64))
    drive(engine, _slow_launches(step(40, 10.0, 20.0), {0, 1, 2}, 1.8))
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome.message
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 40
    assert "measured again" in outcome.message
    assert outcome.threshold == pytest.approx(math.sqrt(10 * 20), rel=0.1)


def test_two_configurations_on_a_noisy_machine_are_not_redone_for_a_two_level_end() -> None:
    # The launches of a CI run of the TP=2 reference server on a loaded machine, in order
    # (verify ms): each side's launches spread over 2x, the bad one's at "two levels". With
    # only the two ends there is nothing the threshold judged, so which level is the bad
    # end's own cannot matter: the step is named (the run ended ambiguous, the endpoints
    # measured twice over, before).
    values = {
        0: [24.3, 69.0, 13.4, 12.7, 12.0, 24.8, 23.1, 13.0, 12.5, 24.0],
        1: [45.8, 57.8, 81.9, 109.5, 43.3, 45.2, 53.1, 72.5, 73.6, 72.5],
    }
    engine = Engine(path(1))
    order = drive(engine, lambda pos, k: values[pos][k])
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.FOUND, outcome.message
    assert outcome.culprit is not None and outcome.culprit.first_bad.position == 1
    assert outcome.culprit.verified, outcome.culprit.note
    assert "measured again" not in outcome.message
    assert len(order) <= 8, order


def test_a_burst_that_steers_the_search_has_its_verdicts_set_aside() -> None:
    # Culprit 10 of 64; launches 3-6 run 1.9x slow. Points 32 and 16 (bad) come out slower than
    # any level, two in a row: a burst. Their launches are set aside and re-measured at once,
    # before the burst could push good points into the bad range and steer the bisection
    # (without this, 8 and 4 were judged bad and corrected one verification at a time: 24
    # launches). The bracket is then verified in two back-to-back pairs: one pair inside a
    # burst can show a step that is not there.
    engine = Engine(path(64))
    order = drive(engine, _slow_launches(step(10, 10.0, 20.0), {3, 4, 5, 6}, 1.9))
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None, outcome and outcome.message
    assert outcome.culprit.first_bad.position == 10
    assert {16, 32} <= set(engine.set_aside), engine.set_aside
    assert all(v > 30 for v in engine.set_aside[32])  # the slow launches, not the real ones
    assert len(order) <= 17, order
    assert [p for p, purpose in order if purpose is Purpose.VERIFY] == [9, 10, 9, 10], order


def _search_bench() -> Any:
    """benchmarks/search_bench.py, whose seeded worlds some tests replay."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import search_bench

    return search_bench


def _plateau_world(trial: int) -> Any:
    """The search benchmark's plateau scenario (18 -> 22.2 -> 29 ms, given threshold 23) for one
    seeded trial, searched with the default policy."""
    import random

    search_bench = _search_bench()
    world = search_bench.plateau_below_threshold(
        1024, random.Random(1_000_003 + trial), 0.04, 0.03, False
    )
    return search_bench.run_perfbisect(world, 1024, Policy())


@pytest.mark.parametrize("trial", [33, 162])
def test_a_plateau_at_the_threshold_borrows_launches_from_its_other_points(trial: int) -> None:
    # Seeded worlds of the search benchmark's plateau scenario (18 -> 22.2 -> 29 ms, given
    # threshold 23) that ended ambiguous: a plateau point stayed undecided on all its own
    # launches. The other points of its plateau now launch for it, and the crossing is named.
    result = _plateau_world(trial)
    assert result.correct and not result.phantom


@pytest.mark.parametrize(
    "trial",
    [
        # Two slow outliers among a plateau point's three launches: its one launch at a
        # possible level sat on the threshold, and pooling put the two outliers back in, so the
        # point was judged bad and named as the culprit on the plateau.
        56,
        # A plateau point undecided on its five launches, its two measured plateau mates spent
        # too: an unmeasured point between them joins the pool (the range was called ambiguous).
        133,
    ],
)
def test_plateau_pooling_keeps_outliers_out_and_takes_an_unmeasured_mate(trial: int) -> None:
    result = _plateau_world(trial)
    assert result.correct and not result.phantom
    assert result.launches <= 40


def _real_history_world(trial: int, seed: int = 1) -> tuple[Engine, Any]:
    """The search benchmark's real-history scenario (two real steps, creep, bursts of a shared
    machine, one commit that cannot run; derived threshold) for one seeded trial (of the
    benchmark's ``--seed``), searched with the default policy: the engine after the search and
    the world."""
    return _benchmark_world("real_history", trial, seed)


def _benchmark_world(
    scenario: str, trial: int, seed: int = 1, order: list[int] | None = None
) -> tuple[Engine, Any]:
    """One seeded trial of a search benchmark scenario (its threshold given when the scenario
    gives one), searched with the default policy: the engine after the search and the world;
    ``order`` collects the positions launched, in order."""
    import random

    rng = random.Random(seed * 1_000_003 + trial)
    world = getattr(_search_bench(), scenario)(1024, rng, 0.04, 0.03, False)
    engine = Engine(path(len(world.levels) - 1), threshold=world.threshold)
    launched = drive(engine, lambda pos, k: world.launch(pos))
    if order is not None:
        order.extend(p for p, _ in launched)
    return engine, world


def _named(engine: Engine) -> int | None:
    outcome = engine.outcome
    assert outcome is not None
    return outcome.culprit.first_bad.position if outcome.culprit else None


def test_a_burst_of_four_launches_at_one_point_does_not_use_up_its_launches() -> None:
    # Seeded world 840: five launches of the culprit, 118, ran in or next to bursts (two of
    # them 1.5-1.7x) and were set aside; counted as its launches, they left it unjudged
    # (ambiguous). Launches set aside as beyond any level do not count. (World 83, which this
    # test replayed first, no longer meets a burst there since the engine changed.)
    engine, world = _real_history_world(840)
    assert _named(engine) == world.culprit == 118, engine.outcome and engine.outcome.message
    assert len(engine.launches[118]) + len(engine.set_aside.get(118, [])) > 5


def test_a_plateau_at_a_loosely_derived_threshold_gets_more_endpoint_launches() -> None:
    # Seeded world 472: the threshold derived from three endpoint launches (48, 77, 71 ms) sat
    # next to the plateau below the crossing (59 ms), and point 137 stayed undecided on all
    # five of its launches (ambiguous without more endpoint launches). The endpoints are
    # launched again until the threshold is known well enough to place it. (World 354 was
    # this case until the verification rules changed its launch sequence.)
    engine, world = _real_history_world(472)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    ends = len(engine.launches[0]) + len(engine.launches[len(world.levels) - 1])
    assert ends > 3
    outcome = engine.outcome
    assert outcome is not None and outcome.threshold == pytest.approx(
        math.sqrt(world.levels[0] * world.levels[-1]), rel=0.03
    )


@pytest.mark.parametrize("trial", [56, 583, 876])
def test_a_burst_over_the_first_launches_shows_as_a_point_better_than_the_good_end(
    trial: int,
) -> None:
    # Seeded worlds 56, 583 and 876: the first three or four launches (both endpoints) ran in
    # a burst, the threshold came out far above every level, and an outlier at the
    # verification confirmed a wrong step (56 named the bad endpoint itself). The points
    # between measured clearly better than the good endpoint (in 583 only the points judged
    # good together, 16% below it): the endpoints are measured again.
    # (Since the verification's back-to-back pairs, 583 has the endpoints measured again when
    # the bad end is contradicted, and 876 is named without: the outcome is what is asserted.)
    engine, world = _real_history_world(trial)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message


def test_a_first_bad_point_lifted_onto_a_level_of_its_own_is_measured_until_placed() -> None:
    # Seeded world 139: two launches of 93 (on the plateau below the crossing) came out 12% and
    # 8% high, a level of its own just past the threshold, and it was named as the crossing.
    # Such a first bad point is launched until its own launches place it.
    engine, world = _real_history_world(139)
    assert world.culprit == 94
    assert _named(engine) == 94, engine.outcome and engine.outcome.message
    assert len(engine.launches[93]) >= 4


def test_a_bracket_without_a_step_between_its_sides_is_checked_in_pairs() -> None:
    # Seeded world 1088: the culprit, 166 (74.8 ms), measured 68.8 and 73.2; pooled with 165,
    # a point of the plateau below (59.4 ms) that one launch 11% high had put at a level of
    # its own, it was not past the threshold, and 167 was named, a step of 4% between two
    # points of one level. A bracket whose two sides show no step is verified in back-to-back
    # pairs: no step between them, so 166 is past the threshold too and the search goes on.
    engine, world = _real_history_world(1088)
    assert world.culprit == 166
    assert _named(engine) == 166, engine.outcome and engine.outcome.message


@pytest.mark.parametrize("trial", [412, 453, 571])
def test_a_noisy_history_does_not_cost_hundreds_of_launches(trial: int) -> None:
    # Seeded worlds where a plateau sat on a threshold derived from noisy endpoint launches:
    # every plateau point was launched to its limit before the threshold was known better
    # (412: 237 launches). In a first version of the threshold refinement, 453's threshold was
    # re-derived from endpoint launches that had run slow and landed on the bad level (1226
    # launches), and 571 had a point corrected and re-verified in turn (1149). The threshold
    # is refined as soon as a point is stuck, only from endpoints at one level each, and a
    # first bad point is placed once.
    engine, world = _real_history_world(trial)
    assert _named(engine) == world.culprit, engine.outcome and engine.outcome.message
    assert engine.launch_count <= 80


def test_the_whole_search_has_a_launch_ceiling_and_says_so() -> None:
    # Seeded world 70 of the machine whose load comes and goes: busy periods kept reopening
    # verdicts. The search stops at its ceiling with the range and what finishing it would
    # cost, in the report, not silently. (Real-history world 670, this test's world before,
    # is found since the verification's back-to-back pairs.)
    engine, _ = _benchmark_world("load_comes_and_goes", 70)
    outcome = engine.outcome
    assert outcome is not None and outcome.status is Status.AMBIGUOUS
    assert "ran out of its" in outcome.message and "--min-launches" in outcome.message
    assert outcome.unresolved
    assert engine.launch_count <= 230


def _hump(culprit: int, recovered: int, hump: float) -> Script:
    """18 ms before ``culprit``, ``hump`` ms from it until a later commit, ``recovered``, takes
    back part of the regression: 29 ms from there on."""

    def value(pos: int, k: int) -> float:
        level = 18.0 if pos < culprit else hump if pos < recovered else 29.0
        return level * (1 + 0.01 * ((k % 3) - 1))

    return value


@pytest.mark.parametrize(("hump", "most", "aside"), [(34.8, 12, 0), (40.6, 15, 4)])
def test_a_culprit_slower_than_the_bad_endpoint_is_not_taken_for_a_burst(
    hump: float, most: int, aside: int
) -> None:
    # A later commit took back part of the regression (as in `perfbisect demo`): every point
    # from 10 to 59 measures 20% (40%) above the bad endpoint. Points next to each other at
    # one level, one of them measured again after a burst could have passed, are that level,
    # not slow launches: not set aside and measured again once it shows (the engine before
    # this took 13 (21) launches here, setting aside 0 (8) of them; now 3 endpoint + 6 search
    # launches, the one launch that checks the level, 1 verification (and 4 set aside at 40%,
    # before the level could show); one launch more since the verification launches the last
    # good point back to back with it.
    engine = Engine(path(64))
    order = drive(engine, _hump(10, 60, hump))
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None, outcome and outcome.message
    assert outcome.culprit.first_bad.position == 10
    assert outcome.culprit.verified, outcome.culprit.note
    assert sum(len(v) for v in engine.set_aside.values()) <= aside, engine.set_aside
    assert len(order) <= most, order


def test_a_burst_over_neighbouring_points_is_not_taken_for_a_level_of_their_own() -> None:
    # Culprit 40 of 64 (15 -> 20 ms); launches 5-7 run 1.9x slow and hit 32, 16 and 32 again,
    # both good, at 28.2-28.5 ms: points next to each other in path order, agreeing, beyond
    # the bad endpoint, like a level worse than it. Launched within one burst's length they
    # prove nothing: they are set aside as a burst and the culprit is still found.
    engine = Engine(path(64))
    order = drive(engine, _slow_launches(step(40, 15.0, 20.0), {5, 6, 7}, 1.9))
    outcome = engine.outcome
    assert outcome is not None and outcome.culprit is not None, outcome and outcome.message
    assert outcome.culprit.first_bad.position == 40
    assert {16, 32} <= set(engine.set_aside), engine.set_aside
    # Two back-to-back verification pairs once a burst has shown; 21 launches without the
    # "further apart than a burst" rule.
    assert len(order) <= 20, order


def _two_slow_launches_at(false_bad: int, culprit: int) -> Script:
    """Culprit ``culprit`` of 128 (15 -> 20 ms, 1% launch noise) on a machine with slow
    launches: the good point ``false_bad`` runs 1.9x slow at its first launch (beyond the bad
    level) and 1.35x at its second (at the bad level, nothing tells it apart)."""
    base = step(culprit, 15.0, 20.0)
    factors = {0: 1.9, 1: 1.35}
    return lambda pos, k: base(pos, k) * (factors.get(k, 1.0) if pos == false_bad else 1.0)


def test_a_lone_first_bad_point_on_a_machine_with_slow_launches_gets_one_more_launch() -> None:
    # Point 96 is good; its search launch ran beyond the bad level (set aside) and its one
    # verification launch ran 1.35x slow, at the bad level. Every point the search judged
    # between 64 and 96 was good, the nearest crossed point is the bad end 32 positions on:
    # the odds that the step is right there are about 1 : 32, against two slow launches on a
    # machine that has shown one. One more launch of 96 places it, and the search goes on to
    # the culprit 110. (Named 96 before the rule.)
    engine = Engine(path(128))
    order = drive(engine, _two_slow_launches_at(96, 110))
    assert _named(engine) == 110, engine.outcome and engine.outcome.message
    assert [p for p, purpose in order].count(96) >= 3, order


def test_a_lone_first_bad_point_on_a_clean_machine_is_verified_with_one_launch() -> None:
    # The culprit 96 is as lone as the good point 96 above (the nearest crossed point is the
    # bad end, 32 positions on), but no launch ran slow: one verification pair (A B), as
    # before the rule (on a clean machine two slow launches at one point are too rare to pay
    # for).
    engine = Engine(path(128))
    order = drive(engine, step(96, 15.0, 20.0))
    assert _named(engine) == 96, engine.outcome and engine.outcome.message
    assert [p for p, purpose in order if purpose is Purpose.VERIFY] == [95, 96], order


def test_a_lone_crossing_on_the_real_history_is_verified_again() -> None:
    # Seeded world 1668: good point 91 measured 87 ms (beyond the bad end) at its search
    # launch and 78 (at the bad level) at its verification, every point the search judged
    # below it was good, and it was named as the crossing (13 launches). Weighed with every
    # other launch, its slow launch no longer holds it past the threshold once the points
    # below it come out good: it is judged again (launched once more, or that launch set
    # aside) and the search finds the culprit 161.
    engine, world = _real_history_world(1668)
    assert _named(engine) == world.culprit == 161, engine.outcome and engine.outcome.message
    # its slow launch is out of the evidence (on record in set_aside), nothing holds it bad
    assert any(v > 80 for v in engine.set_aside.get(91, [])), engine.set_aside.get(91)
    assert engine.verdicts.get(91) is not Verdict.BAD


def test_a_slow_launch_and_a_burst_after_it_are_not_a_level_of_their_own() -> None:
    # Seeded world 693: good point 91 (58 ms) measured 120 at its search launch and 114, 113
    # and 101 in a row at its verification: four launches beyond the bad end (78-81), agreeing
    # within the noise, measured apart, so they were taken for a level worse than the bad
    # endpoint and 91 was named (15 launches). Three of them are one burst's: a point alone
    # needs two launches outside its longest run that one burst could cover. Its slow launches
    # are set aside (or it is measured on and comes back at 56-59), and the culprit 123 is found.
    engine, world = _real_history_world(693)
    assert _named(engine) == world.culprit == 123, engine.outcome and engine.outcome.message
    kept = engine.launches.get(91, [])
    assert (kept and min(kept) < 60) or len(engine.set_aside.get(91, [])) >= 2, kept


def test_a_good_endpoint_slowed_by_bursts_on_most_launches_is_judged_on_its_fast_ones() -> None:
    # Seeded world 502: six of the good endpoint's nine launches ran in bursts (73-101 ms against
    # its 50), so its median sat at the bad level and the endpoints "did not differ" (not
    # reproduced, 21 launches). Its three fast launches agree and the slow ones spread as no
    # level's launches do: the endpoint is at 50 ms and the culprit 146 is found.
    engine, world = _real_history_world(502)
    assert _named(engine) == world.culprit == 146, engine.outcome and engine.outcome.message
    outcome = engine.outcome
    assert outcome is not None and outcome.threshold is not None
    assert outcome.threshold == pytest.approx(math.sqrt(50 * world.levels[-1]), rel=0.05)


def test_a_point_whose_only_launch_is_set_aside_is_launched_again_at_once() -> None:
    # Seeded given-threshold world 78 (1024 commits, 18 -> 29 ms, --threshold-ms 22.85): the
    # culprit 832's first launch read 25.8 (a 3-sigma low launch, between the levels), so it
    # was judged past the threshold; every point below it then came out good, and weighed with
    # them that launch read like a good point's slow one and was set aside. Left without
    # launches, 832 waited while the search bisected the wider bracket above it (863, 846,
    # 838, 834: 18 launches in all). It is launched again at once instead.
    launched: list[int] = []
    engine, world = _benchmark_world("given_threshold_slow_outliers", 78, order=launched)
    assert _named(engine) == world.culprit == 832, engine.outcome and engine.outcome.message
    assert 25 < engine.set_aside[832][0] < 27, engine.set_aside  # the launch set aside
    first = launched.index(832)
    after = launched[first + 1 :]
    again = after.index(832)
    # between its two launches only the points below it (where its verdict sent the search)
    assert all(p < 832 for p in after[:again]), launched
    assert len(launched) <= 15, launched  # one more: the verification's A B pair


def test_a_crossed_point_in_doubt_is_launched_again_before_the_search_builds_on_it() -> None:
    # Seeded given-threshold world 163 (1024 commits, 18 -> 29 ms, --threshold-ms 22.85):
    # position 128 sits on the good level, and its one launch read 32.85 ms (a 1.8x slow
    # outlier), so it was judged past the threshold. Once 64 below it came out good, every
    # launch weighed together held 128 past the threshold at under 40% (a crossing right at
    # 65..128 against a good point's slow launch), and it is launched again there: good, the
    # search goes on above it. At the old 20% the search bisected 65..128 first and 128's
    # own verification caught it (19 launches in all).
    launched: list[int] = []
    engine, world = _benchmark_world("given_threshold_slow_outliers", 163, order=launched)
    assert _named(engine) == world.culprit == 186, engine.outcome and engine.outcome.message
    # (Which launch comes next is no longer asserted: with the machine's state kept over time
    # the posterior holds 128 past at over 40% until more launches are in; the verification's
    # back-to-back pairs cost this world 21 launches, not 15.)
    assert engine.verdicts[128] is Verdict.GOOD
    assert len(launched) <= 21, launched
