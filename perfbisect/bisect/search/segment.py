"""One stretch of configurations searched by the posterior, for the searches beyond the
crossing-first one: a level gap of ``--all-steps`` (steps.py), a culprit axis's values or a
subset question of the multi-axis search and its ddmin (attribution.py).

A segment is an ordered list of the engine's positions, its first at the better level, its last
at the worse one; the model (model.py) reads it as a path 0..m from the launches of those
positions, in the order they ran (so a busy period that slowed a launch elsewhere still counts
as the machine's state). The same rules as the whole path's search decide: the planner
(planner.py) picks the next launch(es), the stop rule (stop.py) names the crossing at the target
once its two sides have run back to back, and a launch budget ends it with the likeliest range.
Whether two levels differ at all (before a gap is searched) is two_levels.py's question.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from perfbisect.bisect.engine_state import EngineState, _Batch
from perfbisect.bisect.search.machine import CHAINS, IN_PERIODS
from perfbisect.bisect.search.model import Belief, believe
from perfbisect.bisect.search.pairs import MORE_PAIRS, PAIR_FROM, Pairs, pairs_needed
from perfbisect.bisect.search.planner import plan
from perfbisect.bisect.search.stop import Named, launches_to_target, likeliest, named, stop_at
from perfbisect.bisect.search.two_levels import level, min_step, time_values
from perfbisect.bisect.stats import Verdict, difference, posterior_percent
from perfbisect.bisect.values import Culprit, LaunchResult, Purpose

SURE = 0.9  # a point's verdict: its side at this posterior (as the crossing-first search reads)
_BUDGET = 12  # launches per halving
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
    times = time_values(state)
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
                    return Answer(
                        lo,
                        hi,
                        probability,
                        False,
                        f"{head}; positions {lo + 1}..{hi - 1} cannot be launched",
                    )
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
                # On a machine that reads shared, the ends' levels in doubt too.
                doubted = None
                if b.reads_shared:
                    doubted = belief(state, order, threshold, prior, ends_doubted=True)
                if doubted is None or _holds_with_ends_doubted(
                    doubted, found, policy.confidence, unlaunchable
                ):
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
