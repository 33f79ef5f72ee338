"""Whether two levels differ, for the searches of the model: the endpoints' rule (the
crossing-first search starts only when its ends read apart), ``--all-steps``' first look at a
level gap and its confirmation with interleaved pairs, and whether a named step is big enough
to be a step (else the level crept). A position's level is read from its own launches: the
fastest agreeing ones (``level``) or the median without slow outliers (``core_level``).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable

import numpy as np

from perfbisect.bisect.engine_state import EngineState, _Batch
from perfbisect.bisect.search.hypotheses import point_level
from perfbisect.bisect.search.pairs import Pairs
from perfbisect.bisect.stats import (
    Verdict,
    classify,
    fastest_launches,
    launch_times,
    median,
)
from perfbisect.bisect.values import Culprit, LaunchResult, Policy, Purpose

_CONFIRM_PAIRS = 3  # interleaved pairs that confirm two levels differ, at most


def time_values(state: EngineState) -> list[float]:
    times = launch_times(state.in_order, state.policy.higher_is_better)
    assert times is not None, "launch values must be positive"
    return times


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


def _own_spread(state: EngineState, positions: Iterable[int]) -> float:
    """The pooled sample spread (log time) of the positions' launches near their best
    (``fastest_launches``: slow outliers, ``OUTLIER_RATIO`` times the fastest or slower, left
    out); the session's noise where there are too few. Not their core launches, which leave a
    point's slower launches out once two agree near its best (a good end's 15.1, 17.2, 16.6
    and 19.2 ms keep the first three: a spread of 6.7% where the four spread 9.9%)."""
    hib = state.policy.higher_is_better
    squares, df = 0.0, 0
    for p in positions:
        times = launch_times(fastest_launches(state.launches[p], hib), hib)
        assert times is not None, "launch values must be positive"
        logs = np.log(np.asarray(times))
        squares, df = squares + float(((logs - logs.mean()) ** 2).sum()), df + len(logs) - 1
    return math.sqrt(squares / df) if df >= 2 else state.rel_sd()


def _level_noise(state: EngineState, lo: int, hi: int, own: bool = False) -> float:
    """How far two levels read from their launches may differ by noise alone (log time).
    ``own``: the session's noise or the two levels' own spread, whichever is wider. The
    session's reads the launches near each point's best, and read 5% where one step's
    launches spread 8%: ``--all-steps`` then confirmed level gaps that were noise and
    searched them to the end of their budget (185 launches in one world)."""
    n_lo, n_hi = len(state.launches[lo]), len(state.launches[hi])
    sd = state.rel_sd()
    if own:
        sd = max(sd, _own_spread(state, (lo, hi)))
    return state.policy.noise.z * sd * math.sqrt(1 / n_lo + 1 / n_hi)


def apart(state: EngineState, lo: int, hi: int, strict: bool, probe: bool = False) -> bool:
    """``hi``'s level is worse than ``lo``'s by the minimum effect and beyond the noise of
    both levels; ``strict``: the whole interval past the minimum effect, the noise at least
    the two levels' own spread; ``probe``: by the minimum effect alone (a first look)."""
    if not state.launches.get(lo) or not state.launches.get(hi):
        return False
    floor = min_step(state.policy)
    # both readings of the two levels must show the gap
    gap = min(core_level(state, hi) - core_level(state, lo), level(state, hi) - level(state, lo))
    if probe:
        return gap >= floor
    noise = _level_noise(state, lo, hi, own=strict)
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
    times = time_values(state)
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
