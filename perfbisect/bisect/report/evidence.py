"""Which launches of each configuration count, and why the others do not: the kept launches
make a configuration's median, interval and launch count in every view; a launch set aside
(slow, or in a burst of the machine) stays listed with its reason. Read from the engine's final
state and matched to the session's stored launches, so ``bisect log`` can say it per launch."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.report.report_model import LaunchUse
from perfbisect.bisect.stats import core_launches
from perfbisect.store.history import LaunchView

# Why a measured launch is not in its configuration's numbers (every view says it per row).
SLOW_LAUNCH = "slower than its launches that agree on one level"
IN_BURST = "slow launch in a burst"
NEXT_TO_BURST = "ran next to a burst of slow launches"
HELD_SLOW = "slow by the posterior: a busy period of the machine or a lone outlier"


@dataclass(frozen=True)
class Evidence:
    """A configuration's launches as the report counts them: the kept values (its median,
    interval and launch count come from these) and every launch with what became of it."""

    kept: list[float]
    uses: tuple[LaunchUse, ...]
    seqs: list[int]  # the kept launches' indices into the engine's launch order


def engine_views(views: list[LaunchView], engine: EngineState) -> list[LaunchView | None]:
    """The stored launch behind each of the engine's measured launches, in its launch order:
    the session's measured launches of the engine's configurations, in sequence (a phase
    after the search, like the baseline, comes later; a proxy search's configurations have
    their own fingerprints). None where the values disagree (nothing is guessed)."""
    prints = {c.fingerprint for c in engine.path}
    mine = [v for v in views if v.value is not None and v.fingerprint in prints]
    out: list[LaunchView | None] = []
    for i, value in enumerate(engine.in_order):
        view = mine[i] if i < len(mine) else None
        out.append(view if view is not None and view.value == value else None)
    return out


def evidence_of(engine: EngineState, by_seq: list[LaunchView | None]) -> dict[int, Evidence]:
    hib = engine.policy.higher_is_better
    past_end = engine.beyond_bad_end()

    def use(i: int, value: float, kept: bool, why: str | None) -> tuple[int, LaunchUse]:
        view = by_seq[i] if i < len(by_seq) else None
        launch_id = view.id if view is not None else None
        return i, LaunchUse(launch_id, value, kept, why, engine.slow_probability.get(i))

    out: dict[int, Evidence] = {}
    for p in sorted(engine.launches.keys() | engine.set_aside.keys()):
        values = engine.launches.get(p, [])
        # The same launches the engine's estimate (and so the median shown) is made of.
        core = Counter(core_launches(values, engine.rel_sd(), hib))
        rows: list[tuple[int, LaunchUse]] = []
        kept: list[tuple[int, float]] = []
        for i, v in zip(engine.seq.get(p, []), values, strict=True):
            if core[v] > 0:
                core[v] -= 1
                kept.append((i, v))
                rows.append(use(i, v, True, None))
            else:
                rows.append(use(i, v, False, SLOW_LAUNCH))
        for i, v in zip(engine.set_aside_seq.get(p, []), engine.set_aside.get(p, []), strict=True):
            slow = past_end is not None and past_end(v)
            why = HELD_SLOW if i in engine.held_slow else IN_BURST if slow else NEXT_TO_BURST
            rows.append(use(i, v, False, why))
        rows.sort(key=lambda r: r[0])
        out[p] = Evidence([v for _, v in kept], tuple(u for _, u in rows), [i for i, _ in kept])
    return out
