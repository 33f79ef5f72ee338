"""``--all-steps`` on the model: every step of the path, not only the crossing.

Once the crossing-first search (searcher.py) has named the crossing, the levels on either side
of it say where other steps remain: a stretch whose two ends sit at levels apart by the minimum
effect (confirmed with interleaved pairs, two_levels.py's ``level_gap``) holds a step of its own,
and it is searched by the same posterior, launch rule and stop rule as the whole path, with the
threshold midway between its ends' levels (segment.py's ``search``). Every step found opens
the stretches on either side of it again, up to four steps. A stretch whose one "step" is below
the minimum effect is creep; one whose search runs out of launches is an unresolved range with
its posterior and what finishing it would cost. Points read at a level between the session's
two are INTERMEDIATE.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from perfbisect.bisect.engine_state import _MAX_STEPS, EngineState, _Batch
from perfbisect.bisect.search.pairs import Pairs
from perfbisect.bisect.search.segment import culprit, search
from perfbisect.bisect.search.two_levels import big_enough, level_gap
from perfbisect.bisect.stats import Verdict, posterior_percent
from perfbisect.bisect.values import Culprit, LaunchResult, Status


def every_step(engine: EngineState, pairs: Pairs) -> Generator[_Batch, list[LaunchResult], None]:
    """Search the level gaps beside the named crossing (``engine.outcome``'s culprit) and
    finish with every step. ``pairs``: brackets already launched back to back."""
    assert engine.outcome is not None and engine.outcome.culprit is not None
    crossing = engine.outcome.culprit
    order = list(range(engine.bad_end + 1))
    steps, unresolved = yield from gap_steps(engine, order, crossing, pairs)
    engine._finish(
        Status.FOUND,
        _message(engine, crossing, steps, unresolved),
        crossing,
        tuple(unresolved),
        tuple(steps),
    )


def gap_steps(
    engine: EngineState, order: Sequence[int], crossing: Culprit, pairs: Pairs
) -> Generator[_Batch, list[LaunchResult], tuple[list[Culprit], list[tuple[int, int]]]]:
    """Every step of ``order`` (engine positions, the better level first): ``crossing`` and
    the steps of the level gaps beside it, in ``order``'s order; and the ranges left open."""
    index = {p: i for i, p in enumerate(order)}
    last = len(order) - 1
    steps: list[Culprit] = [crossing]
    unresolved: list[tuple[int, int]] = []
    queue = [(0, index[crossing.last_good.position], index[crossing.first_bad.position], last)]
    while queue and len(steps) < _MAX_STEPS:
        a, lo, hi, z = queue.pop(0)
        for s_lo, s_hi in ((a, lo), (hi, z)):
            if s_lo == s_hi or len(steps) >= _MAX_STEPS:
                continue
            # A gap is looked at whenever one end reads worse by the minimum effect: the last
            # good's few launches against the good end's one are too few to show it beyond
            # the noise (two steps 19 -> 23 -> 29: 93% named against 98% on 100 worlds).
            if not (yield from level_gap(engine, order[s_lo], order[s_hi], pairs, probe=True)):
                continue
            below = Verdict.GOOD if s_lo == 0 else Verdict.INTERMEDIATE
            past = Verdict.BAD if s_hi == last else Verdict.INTERMEDIATE
            stretch = order[s_lo : s_hi + 1]
            answer = yield from search(engine, stretch, None, pairs, (below, past))
            if not answer.named:
                unresolved.append((answer.lo, answer.hi))
                engine.unresolved_why[(answer.lo, answer.hi)] = answer.why
                continue
            step = culprit(engine, answer)
            if not big_enough(engine, step):
                engine.creep_gaps.append((order[s_lo], order[s_hi]))  # its ends differ, not it
                continue
            steps.append(step)
            queue.append((s_lo, index[answer.lo], index[answer.hi], s_hi))
    steps.sort(key=lambda c: index[c.first_bad.position])
    return steps, unresolved


def _message(
    engine: EngineState,
    crossing: Culprit,
    steps: list[Culprit],
    unresolved: list[tuple[int, int]],
) -> str:
    message = engine.steps_headline(
        crossing,
        steps,
        engine.bad_end,
        "is the crossing the posterior named (no step's medians straddle the threshold)",
    )
    message += (
        f" (posterior {posterior_percent(crossing.confidence)})" if crossing.confidence else ""
    )
    if unresolved:
        message += f"; {len(unresolved)} further level change(s) could not be pinned down"
    return message
