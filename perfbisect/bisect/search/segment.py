"""One stretch of configurations searched by the posterior, for the searches beyond the
crossing-first one: a level gap of ``--all-steps`` (steps.py), a culprit axis's values or a
subset question of the multi-axis search and its ddmin (attribution.py).

A segment is an ordered list of the engine's positions, its first at the better level, its last
at the worse one; the model (model.py) reads it as a path 0..m from the launches of those
positions, in the order they ran (so a busy period that slowed a launch elsewhere still counts
as the machine's state). The same rules as the whole path's search decide: the planner
(planner.py) picks the next launch(es), the stop rule (stop.py) names the crossing at the target
once its two sides have run back to back, and a launch budget ends it with the likeliest range.
Whether two levels differ at all (before a gap is searched) is the model's endpoint question:
their own levels differ by the minimum effect beyond the noise, confirmed with interleaved
launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.engine_state import EngineState, _Batch
from perfbisect.bisect.search.hypotheses import point_level
from perfbisect.bisect.search.machine import CHAINS, IN_PERIODS
from perfbisect.bisect.search.model import Belief, believe
from perfbisect.bisect.search.pairs import MORE_PAIRS, PAIR_FROM, Pairs, pairs_needed
from perfbisect.bisect.search.planner import plan
from perfbisect.bisect.search.stop import Named, launches_to_target, likeliest, named, stop_at
from perfbisect.bisect.stats import (
    Verdict,
    classify,
    difference,
    launch_times,
    median,
    posterior_percent,
)
from perfbisect.bisect.values import Culprit, LaunchResult, Policy, Purpose

SURE = 0.9  # a point's verdict: its side at this posterior (as the crossing-first search reads)
_BUDGET = 12  # launches per halving
_CONFIRM_PAIRS = 3  # interleaved pairs that confirm two levels differ, at most
# A back-to-back pair shows a step when its bad side reads slower by at least this share of
# the step (log time): a busy period slows both launches alike, so their ratio keeps the step;
# 1/3 leaves a 1.3x step 2.2 launch noises of margin. The step is the smaller of the two
# sides' own levels apart and the bad end's level over the level below: with two steps the
# crossing's is the smaller one; one side launched once in a busy period reads far apart.
PAIR_SHARE_OF_STEP = 1 / 3

_Gen = Generator[_Batch, list[LaunchResult], "Answer"]


def side_verdict(
    below: float, sides: tuple[Verdict, Verdict] = (Verdict.GOOD, Verdict.BAD)
) -> Verdict:
    """A point's verdict from its posterior of being below: ``sides[0]`` (below) or
    ``sides[1]`` (past) where that side has ``SURE``, else UNCLEAR."""
    return sides[0] if below >= SURE else sides[1] if below <= 1 - SURE else Verdict.UNCLEAR


@dataclass(frozen=True)
class Answer:
    """What a search found: ``lo`` the last position below, ``hi`` the first past (engine
    positions); ``named``: one configuration at the target (``verified``: with its pairs
    back to back showing the step; not when a side failed past its retries, the state's
    ``verify_notes`` say why), else the likeliest range when the search stopped (``why``)."""

    lo: int
    hi: int
    probability: float
    named: bool
    why: str = ""
    verified: bool = False


def budget(state: EngineState, points: int) -> int:
    """A search's launch budget, by its length: 12 launches per halving (3 per halving, x4:
    the rule engine's), x the policy's launches per point."""
    return _BUDGET * state.policy.min_launches * (math.ceil(math.log2(max(2, points - 1))) + 3)


def _times(state: EngineState) -> list[float]:
    times = launch_times(state.in_order, state.policy.higher_is_better)
    assert times is not None, "launch values must be positive"
    return times


def _threshold(state: EngineState, threshold: float | None) -> float | None:
    """A threshold in the metric's unit, in time terms (larger is worse)."""
    if threshold is not None and state.policy.higher_is_better:
        return 1 / threshold
    return threshold


def belief(
    state: EngineState,
    order: Sequence[int],
    threshold: float | None,
    prior: Sequence[float] | None = None,
    per_launch: bool = False,
    ends_doubted: bool = False,
) -> Belief:
    """The posterior over ``order`` (read as a path 0..m) from its positions' launches, in the
    order they ran (set aside or not: the posterior weighs each itself). ``threshold``: in
    the metric's unit; None: derived from the ends' levels. ``prior``: each index's weight of
    being the crossing; ``per_launch``: with each launch's probability of having run slow."""
    index = {p: i for i, p in enumerate(order)}
    at = sorted(
        (i, index[p])
        for seqs in (state.seq, state.set_aside_seq)
        for p, indices in seqs.items()
        if p in index
        for i in indices
    )
    times = _times(state)
    launches = [(j, times[i]) for i, j in at]
    t = _threshold(state, threshold)
    chains = len(CHAINS) if state.busy_most_weighed else IN_PERIODS
    return believe(
        launches, len(order) - 1, t, state.rel_sd(), prior, per_launch, chains, ends_doubted
    )


def costs(state: EngineState, order: Sequence[int]) -> NDArray[np.float64]:
    """What a launch of each of ``order``'s positions costs, relative to a first launch: a
    position launched before reuses its build (``EngineState.launch_costs``)."""
    _, again = state.launch_costs()
    return np.asarray([again if p in state.launches else 1.0 for p in order], dtype=np.float64)


def sides(b: Belief) -> dict[int, float]:
    """Each measured point's (index into the segment) probability of lying below."""
    cdf = b.cdf()
    return {int(p): 1 - float(cdf[int(p)]) for p in b.points}


def search(
    state: EngineState,
    order: Sequence[int],
    threshold: float | None,
    pairs: Pairs,
    verdicts: tuple[Verdict, Verdict] = (Verdict.GOOD, Verdict.BAD),
    prior: Sequence[float] | None = None,
    read: Callable[[Belief], None] | None = None,
) -> _Gen:
    """The crossing of ``order`` by the posterior (its ends measured and apart): the one loop
    of every search of the model. After each launch: the posterior; the bracket it names at
    the target once its pairs show the step (launched back to back first: one pair, two on a
    shared machine, up to ``MORE_PAIRS`` more for pairs that do not show it, then said, not
    named); else what the planner says tells most per launch, until the budget is spent.
    ``pairs``: the session's brackets launched back to back. ``verdicts``: what a point read
    below and past is (in a level gap, one side is the level between the session's two:
    INTERMEDIATE). ``prior``: each index's weight of being the crossing. ``read``: what the
    caller takes from each posterior (default: the segment's inner points' verdicts)."""
    policy = state.policy
    target = stop_at(policy.confidence)  # the target with the stop rule's margin
    start, limit = state.launch_count, budget(state, len(order))
    while True:
        b = belief(state, order, threshold, prior)
        if read is not None:
            read(b)
        else:
            _read(state, order, b, verdicts)
        unlaunchable = {
            i for i, p in enumerate(order) if p in state.skip_reason or p in state.gave_up
        }
        need = pairs_needed(b)
        # What a pair's bad side must read above its good side: the threshold's distance from
        # the level below, and never less than half the smallest regression looked for (an
        # axis's ends judged apart by other questions can read inverted here, and a step of
        # zero or less was shown by any pair), nor than a share of the step (PAIR_SHARE_OF_STEP:
        # a plateau just below the threshold left 2.5% to show where the bracket's sides read
        # 29 and 47 ms, its bad side's launches all in two busy periods; a pair at 44.9 and
        # 48.3 ms showed it, and it was named at 1 - 1e-14).
        floor = max(b.threshold - b.below, min_step(policy) / 2)
        ends = b.bad - b.below

        def shown(f: Named, floor: float = floor, ends: float = ends) -> int:
            lo, hi = order[f.lo], order[f.hi]
            own = min(level(state, hi) - level(state, lo), ends)
            return pairs.showing(state, lo, hi, max(floor, own * PAIR_SHARE_OF_STEP))

        # One configuration likelier than not the crossing: its pairs are due before it can
        # be named anyway, and a pair is as informative now as a single launch of either side
        # (the planner's usual pick there), so they come first.
        found = named(b, PAIR_FROM, unlaunchable)
        if found is None or not found.one or shown(found) >= need:
            found = named(b, target, unlaunchable)
        if found is not None:
            lo, hi, probability = order[found.lo], order[found.hi], found.probability
            showing, failed = shown(found), bool({lo, hi} & state.gave_up)
            if showing < need and not failed and pairs.tried[(lo, hi)] < need + MORE_PAIRS:
                # Its two sides back to back (the pairs enter the posterior, which must still
                # name it after them): a busy period slows both alike.
                yield from pairs.launch(state, lo, hi)
                continue
            if probability >= target:
                head = f"the crossing is in ({lo}, {hi}] with probability {posterior_percent(probability)}"
                if not found.one:
                    return Answer(lo, hi, probability, False, f"{head}; positions {lo + 1}..{hi - 1} cannot be launched")
                if showing < need and not failed:
                    # Its pairs keep disagreeing with its step: not the launches' to claim.
                    return Answer(
                        lo,
                        hi,
                        probability,
                        False,
                        f"{head}, but only {showing} of its {len(pairs.seqs.get((lo, hi), []))} "
                        "back-to-back pairs show the step: the machine's load may have made it; "
                        "run again on a quieter machine",
                    )
                doubted = b  # on a machine that reads shared, the ends' levels in doubt too
                if b.reads_shared:
                    doubted = belief(state, order, threshold, prior, ends_doubted=True)
                if _holds_with_ends_doubted(doubted, found, policy.confidence, unlaunchable):
                    # (a side failed past its retries: named on the launches it had, unverified)
                    return Answer(lo, hi, probability, True, verified=showing >= need)
                b = doubted  # not named: the planner goes on with this posterior
        ok = np.asarray(
            [
                i not in unlaunchable and len(state.launches.get(p, [])) < 3 * policy.max_launches
                for i, p in enumerate(order)
            ]
        )
        if state.launch_count - start > limit or not ok.any():
            best = likeliest(b)
            lo, hi = order[best.lo], order[best.hi]
            why = f"the launch budget ({limit}) is spent" if ok.any() else "nothing left to launch"
            return Answer(
                lo,
                hi,
                best.probability,
                False,
                f"{why}: the crossing is in ({lo}, {hi}] with probability "
                f"{posterior_percent(best.probability)}; reaching {100 * policy.confidence:g}% "
                f"(the stop rule asks {100 * target:g}%) would take about "
                f"{launches_to_target(b, target)} more launches",
            )
        picked = plan(b, ok, policy.slots, costs(state, order))
        positions = [order[i] for i in picked.positions]
        if picked.pair:
            yield from pairs.launch(state, positions[0], positions[1])
        else:
            yield state._request(positions, Purpose.SEARCH)


def _holds_with_ends_doubted(
    doubted: Belief,
    found: Named,
    target: float,
    unlaunchable: set[int],
) -> bool:
    """On a machine that reads shared, the stop rule's last question before it names ``found``:
    does the posterior with the ends' busy shifts weighed (``doubted``: ``believe(...,
    ends_doubted=True)``) name it at the target too? The model weighs them only where a launch
    contradicts the ends' levels as read, and an end whose one or two launches all ran slow
    contradicts nothing: its level (and a threshold midway) is what every later launch is
    judged against (the load table's seed 3, trial 194: the good end's two launches 1.8x and
    2.3x slow, its level pooled with the points at the bad one, the bad end named at 1 - 1e-11).
    Where it does not hold, the search goes on with that posterior, whose planner weighs what
    the ends' doubt is worth (``Belief.level_bits``: launching an end again is a candidate). On
    a quiet machine the ends' shifts are not asked (with 8% noise they held half the crossing's
    posterior off a step named right, and searches took 60% more launches)."""
    again = named(doubted, target, unlaunchable)
    return again is not None and again.hi == found.hi


def _read(
    state: EngineState, order: Sequence[int], b: Belief, verdicts: tuple[Verdict, Verdict]
) -> None:
    """Verdicts of the segment's measured inner points, from the posterior: a sure side sets
    it; an unsure one leaves UNCLEAR only where there was none."""
    for i, below in sides(b).items():
        if i in (0, len(order) - 1):
            continue
        p = order[i]
        verdict = side_verdict(below, verdicts)
        if state.verdicts.get(p) is not verdict and (
            verdict is not Verdict.UNCLEAR or p not in state.verdicts
        ):
            state._set_verdict(p, verdict)


def level(state: EngineState, position: int) -> float:
    """A position's own level (log time) as the model reads it: the fastest agreeing launches."""
    times = launch_times(state.launches[position], state.policy.higher_is_better)
    assert times is not None, "launch values must be positive"
    return point_level(np.log(np.asarray(times)))


def core_level(state: EngineState, position: int) -> float:
    """A position's level (log time) for comparing two levels: the median of its launches
    without its slow outliers. (The fastest agreeing launches, ``level``, sit lower the more
    launches a point has: on 8% noise two points of one level read 5-7% apart.)"""
    times = launch_times(state._core(state.launches[position]), state.policy.higher_is_better)
    assert times is not None, "launch values must be positive"
    return math.log(median(times))


def min_step(policy: Policy) -> float:
    """The smallest regression the session looks for (``min_effect``), in log time."""
    return math.log(1 + policy.min_effect)


def _level_noise(state: EngineState, lo: int, hi: int) -> float:
    """How far two levels read from their launches may differ by noise alone (log time)."""
    n_lo, n_hi = len(state.launches[lo]), len(state.launches[hi])
    return state.policy.noise.z * state.rel_sd() * math.sqrt(1 / n_lo + 1 / n_hi)


def apart(state: EngineState, lo: int, hi: int, strict: bool, probe: bool = False) -> bool:
    """``hi``'s level is worse than ``lo``'s by the minimum effect and beyond the noise of
    both levels; ``strict``: the whole interval past the minimum effect; ``probe``: by the
    minimum effect alone (a first look on one launch)."""
    if not state.launches.get(lo) or not state.launches.get(hi):
        return False
    # both readings of the two levels must show the gap
    gap = min(core_level(state, hi) - core_level(state, lo), level(state, hi) - level(state, lo))
    floor = min_step(state.policy)
    if probe:
        return gap >= floor
    noise = _level_noise(state, lo, hi)
    return gap - noise >= floor if strict else gap >= max(floor, noise)


def level_gap(
    state: EngineState,
    lo: int,
    hi: int,
    pairs: Pairs | None = None,
    probe: bool = False,
) -> Generator[_Batch, list[LaunchResult], bool]:
    """Do ``lo`` and ``hi`` sit at two levels (``hi`` the worse by the minimum effect)? A gap
    opens a whole search, so one seen on few launches is confirmed with interleaved pairs (a
    busy period slows both launches of a pair alike) until both levels have three launches and
    their difference stands beyond the noise, or it falls below the minimum effect.
    ``pairs``: the brackets launched back to back, which these pairs join. ``probe``: look
    closer whenever ``hi`` reads worse by the minimum effect (else only when that is beyond
    the noise already)."""
    if not apart(state, lo, hi, strict=False, probe=probe):
        return False
    for _ in range(_CONFIRM_PAIRS):
        if min(len(state.launches[lo]), len(state.launches[hi])) >= 3 and apart(
            state, lo, hi, strict=True
        ):
            return True
        if pairs is not None:
            yield from pairs.launch(state, lo, hi)
        else:
            yield state._request([lo, hi], Purpose.VERIFY)
        if {lo, hi} & (state.skip_reason.keys() | state.gave_up):
            return False
        if not apart(state, lo, hi, strict=False, probe=True):
            return False
    return apart(state, lo, hi, strict=True)


def culprit(state: EngineState, answer: Answer) -> Culprit:
    """The step an answer names, with its effect (the two sides' agreeing launches)."""
    a, b = state.launches.get(answer.lo, []), state.launches.get(answer.hi, [])
    if a and b:
        effect = difference(state._core(a), state._core(b), state.rel_sd(), state.policy.noise.z)
    else:
        effect = difference([1.0], [1.0], 0.0, 0.0)
    note = state.verify_notes.get((answer.lo, answer.hi)) if answer.named else answer.why
    return Culprit(
        state.point(answer.lo),
        state.point(answer.hi),
        effect,
        answer.verified,
        note,
        answer.probability,
    )


def big_enough(state: EngineState, step: Culprit) -> bool:
    """The step's two sides differ by the minimum effect (else the level crept)."""
    return apart(state, step.last_good.position, step.first_bad.position, False, probe=True)


def ends_apart(state: EngineState, lo: int, hi: int) -> bool:
    """The crossing-first search's endpoint rule for any two positions: their levels (the
    fastest agreeing launches) differ by the minimum effect beyond the noise, or so do their
    launches back to back (a busy period slows both launches of a pair alike), or they fall
    on either side of a given threshold."""
    if not state.launches.get(lo) or not state.launches.get(hi):
        return False
    g, b = level(state, lo), level(state, hi)
    hib = state.policy.higher_is_better
    if state.fixed_threshold:
        assert state.threshold is not None
        return g < math.log(1 / state.threshold if hib else state.threshold) <= b
    floor, noise = min_step(state.policy), _level_noise(state, lo, hi)
    if b - g >= max(floor, noise):
        return True
    at = {i: p for p in (lo, hi) for i in state.seq.get(p, [])}
    times = _times(state)
    ratios = [
        math.log(times[i + 1] / times[i]) * (1 if at[i] == lo else -1)
        for i in range(len(times) - 1)
        if i in at and i + 1 in at and at[i] != at[i + 1]
    ]
    if len(ratios) < 3:
        return False
    noise = state.policy.noise.z * state.rel_sd() * math.sqrt(2 / len(ratios))
    return float(np.median(ratios)) >= max(floor, noise)


def endpoints(state: EngineState, lo: int, hi: int) -> Generator[_Batch, list[LaunchResult], str]:
    """The endpoints launched interleaved (B G B per the policy's counts, then G B pairs)
    until ``ends_apart``; "" then, else why the search cannot start."""
    p = state.policy
    # The bad end's extra launch guards a derived threshold against one slow outlier there; a
    # given threshold does not move with it (the planner launches an end again when it pays).
    n_bad = p.good_endpoint_launches if state.fixed_threshold else p.bad_endpoint_launches
    first = [hi, lo] * max(n_bad, p.good_endpoint_launches)
    first = [
        x
        for i, x in enumerate(first)
        if (x == hi and i // 2 < n_bad) or (x == lo and i // 2 < p.good_endpoint_launches)
    ]
    yield state._request(first, Purpose.ENDPOINT)
    extra = 0
    while True:
        broken = [e for e in (lo, hi) if e in state.skip_reason]
        if broken:
            which = "good" if broken[0] == lo else "bad"
            return f"the {which} endpoint could not be measured: {state.skip_reason[broken[0]]}"
        if ends_apart(state, lo, hi):
            return ""
        if extra >= p.endpoint_confirm_launches:
            g = state._estimate(state.launches[lo]).median
            b = state._estimate(state.launches[hi]).median
            for end in (lo, hi):  # the report lists the ends measured, with their side
                side = None
                if state.fixed_threshold:
                    assert state.threshold is not None
                    est = state._estimate(state.launches[end])
                    side = classify(est, state.threshold, p.higher_is_better)
                state._set_verdict(end, side or Verdict.UNCLEAR)
            if state.fixed_threshold:
                return (
                    f"the endpoints do not fall on either side of the threshold "
                    f"{state.threshold:g} (good {g:g}, bad {b:g})"
                )
            return f"the bad endpoint ({b:g}) is not clearly worse than the good one ({g:g})"
        extra += 1
        yield state._request([lo, hi], Purpose.ENDPOINT)
