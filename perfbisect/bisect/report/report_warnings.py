"""The report's warnings: what a reader must know to trust the answer. Each states a claim the
kept launches support (the launches the report itself treats as slow prove nothing), or says
how sure it is."""

from __future__ import annotations

from perfbisect.bisect.engine_state import _BURST_REACH, EngineState
from perfbisect.bisect.report.evidence import HELD_SLOW, IN_BURST, NEXT_TO_BURST, Evidence
from perfbisect.bisect.report.report_model import LaunchUse, PathPoint, Step, counted
from perfbisect.bisect.stats import Verdict, median
from perfbisect.bisect.values import Outcome
from perfbisect.store.history import LaunchView


def warnings(
    engine: EngineState,
    outcome: Outcome,
    unit: str,
    path: tuple[PathPoint, ...],
    steps: tuple[Step, ...],
    evidence: dict[int, Evidence],
    by_id: dict[int, LaunchView],
) -> tuple[str, ...]:
    return tuple(
        [
            *overlap_warnings(engine, path, steps, outcome.threshold, evidence),
            *burst_warnings(engine, evidence, by_id),
            *taken_back(engine, outcome, unit, evidence),
            *_low_confidence(outcome, engine.confidence_target),
            *_named_against_threshold(path, steps),
        ]
    )


def _apart(seqs: list[int]) -> bool:
    """Launched further apart than one burst of the machine lasts."""
    return len(seqs) >= 2 and max(seqs) - min(seqs) > _BURST_REACH


def taken_back(
    engine: EngineState, outcome: Outcome, unit: str, evidence: dict[int, Evidence]
) -> list[str]:
    """The first bad configuration measured clearly worse than the bad endpoint: a change
    after it took back part of the regression, so the endpoints' difference understates what
    the culprit did (its own effect is the step's). Claimed only on three kept launches or
    more, measured further apart than a burst lasts; on fewer, a few slow launches explain the
    same numbers, and the warning says so (and what would tell)."""
    step = outcome.culprit
    end = engine.bad_end
    if step is None or step.first_bad.position == end:
        return []
    a, b = evidence.get(end), evidence.get(step.first_bad.position)
    if a is None or b is None or not a.kept or not b.kept:
        return []
    if not engine.measured_worse(a.kept, b.kept):
        return []
    where = step.first_bad.position
    numbers = f"{median(b.kept):.4g} vs {median(a.kept):.4g} {unit}"
    own = "the culprit's own effect is its step's (last good to first bad)"
    if len(b.kept) < 3 or not _apart(b.seqs):
        return [
            f"position {where} measured worse than the bad endpoint ({numbers}) on only "
            f"{counted(len(b.kept), 'launch')}: either a change between it and position {end} "
            "took back part of the regression (not searched), or those launches ran slow; "
            f"launching position {where} again would tell; {own}"
        ]
    return [
        f"position {where} measured worse than the bad endpoint ({numbers}, "
        f"{counted(len(b.kept), 'launch')} and {len(a.kept)}, measured apart): a change between "
        f"it and position {end} took back part of the regression (not searched); {own}, not "
        "the endpoints' difference"
    ]


def _low_confidence(outcome: Outcome, target: float) -> list[str]:
    """The crossing named although the launches as a whole leave it below the engine's target
    (its extra launches were spent): said, with what would add evidence."""
    step = outcome.culprit
    if step is None or step.confidence is None or step.confidence >= target:
        return []
    return [
        f"the launches as a whole give position {step.first_bad.position} "
        f"{step.confidence:.0%} of being the first configuration past the threshold (the "
        f"search asks for {target:.0%}; the launches it may add for that, three times "
        "`--max-launches`, were spent): a larger `--max-launches` buys more"
    ]


def _named_against_threshold(path: tuple[PathPoint, ...], steps: tuple[Step, ...]) -> list[str]:
    """A named step's side whose launches shown lie on the other side of the final threshold
    (its verdict came mid-search): the answer rests on it, so the reader is told."""
    out = []
    for s in steps:
        point = next((p for p in path if p.position == s.position), None)
        if point is not None and point.judged and "against the final threshold" in point.judged:
            out.append(f"position {s.position}, named first bad, was {point.judged}")
    return out


def burst_warnings(
    engine: EngineState, evidence: dict[int, Evidence], by_id: dict[int, LaunchView]
) -> list[str]:
    """Launches the engine took out of the evidence because the machine had a burst, each
    counted for what it was (slow itself, or only next to slow ones), and those reused from
    earlier sessions named as such. A point whose launches all sit beyond the bad endpoint,
    more of them than a burst lasts, was slower than it on every launch: a level of its own as
    likely as a burst, and the warning says so instead of blaming the machine."""
    aside = {p: v for p, v in engine.set_aside.items() if v}
    if not aside:
        return []
    if engine.held_slow:
        return [_held_slow_warning(engine, evidence, by_id, sorted(aside))]
    # Against the bad endpoint's own level, by the engine's margin (not against a level worse
    # than it that the engine may have found: these launches were set aside before it showed).
    past_end = engine.beyond_bad_end()

    def beyond(values: list[float]) -> bool:
        return past_end is not None and bool(values) and all(past_end(v) for v in values)

    # Five launches or more, every one beyond: longer than a burst lasts (2-4 launches in a row).
    steady = {
        p: v
        for p, v in aside.items()
        if len(v) + len(engine.launches.get(p, [])) >= 5
        and beyond([*v, *engine.launches.get(p, [])])
    }
    bursty = [p for p in sorted(aside) if p not in steady]
    out = []
    if bursty:
        uses = [
            u
            for p in bursty
            for u in (evidence[p].uses if p in evidence else ())
            if u.why in (IN_BURST, NEXT_TO_BURST)
        ]
        slow = sum(u.why == IN_BURST for u in uses)
        near = len(uses) - slow
        reused = _reused(uses, by_id)
        parts = [
            *([f"{slow} ran slower than any level between the endpoints"] if slow else []),
            *([f"{near} ran next to such launches (their own values normal)"] if near else []),
        ]
        out.append(
            f"bursts of slow launches, by the look of it: {counted(len(uses), 'launch')} of "
            f"{_positions(bursty)} were set aside ("
            + "; ".join(parts)
            + ") and the configurations measured again; they stay in `bisect log`"
            + (
                f" ({reused} of them reused from earlier sessions: launched there, not here)"
                if reused
                else ""
            )
        )
    if steady:
        count = sum(len(v) for v in steady.values())
        out.append(
            f"{_positions(sorted(steady))} measured worse than the bad endpoint on every launch: "
            f"{counted(count, 'launch')} of them were taken for a burst, set aside and measured "
            "again; the configuration may simply be slower than the bad endpoint (they stay in "
            "`bisect log`)"
        )
    return out


def _reused(uses: list[LaunchUse], by_id: dict[int, LaunchView]) -> int:
    """How many of ``uses`` were reused from earlier sessions (launched there, not here)."""
    return sum(
        1
        for u in uses
        if u.launch_id in by_id
        and any(str(f).startswith("reused from") for f in by_id[u.launch_id].flags)
    )


def _held_slow_warning(
    engine: EngineState, evidence: dict[int, Evidence], by_id: dict[int, LaunchView], at: list[int]
) -> str:
    """The model's reading: the launches its posterior holds slow, counted, and where."""
    uses = [
        u for p in at for u in (evidence[p].uses if p in evidence else ()) if u.why == HELD_SLOW
    ]
    reused = _reused(uses, by_id)
    return (
        f"slow launches, by the posterior: {counted(len(uses), 'launch')} of {_positions(at)} "
        "ran slow (a busy period of the machine, or a lone outlier: even odds or more each) "
        "and are left out of their configurations' medians; the posterior weighed them "
        "itself, and they stay in `bisect log`"
        + (
            f" ({reused} of them reused from earlier sessions: launched there, not here)"
            if reused
            else ""
        )
    )


def _positions(positions: list[int]) -> str:
    """``position 16`` / ``positions 16, 32``."""
    word = "position" if len(positions) == 1 else "positions"
    return f"{word} {', '.join(str(p) for p in positions)}"


def overlap_warnings(
    engine: EngineState,
    path: tuple[PathPoint, ...],
    steps: tuple[Step, ...],
    threshold: float | None,
    evidence: dict[int, Evidence],
) -> list[str]:
    """A level between the endpoints that sits on the threshold makes "which step crosses it"
    a coin toss: say so, name the steps on each side, and what to do about it. Only for a
    level of its own (its kept launches clearly apart from both endpoints'): a point of the
    good or the bad level whose launches spread is no such level."""
    if threshold is None:
        return []
    good, bad = evidence.get(0), evidence.get(engine.bad_end)
    if good is None or bad is None or not good.kept or not bad.kept:
        return []
    out = []
    for p in path:
        # Whatever its verdict: the model's is the posterior's reading of its side, which a
        # level on the threshold can make good or bad at any confidence.
        if p.ms is None or p.verdict is Verdict.SKIP:
            continue
        if not p.ms.lo <= threshold <= p.ms.hi:
            continue
        kept = evidence[p.position].kept if p.position in evidence else []
        if not kept or not (
            engine.measured_worse(good.kept, kept) and engine.measured_worse(kept, bad.kept)
        ):
            continue
        before = [s for s in steps if s.position <= p.position]
        after = [s for s in steps if s.position > p.position]
        sides = ", ".join(
            f"{side} the step at position {s.position}"
            for side, s in (
                ("after", before[-1] if before else None),
                ("before", after[0] if after else None),
            )
            if s is not None
        )
        out.append(
            f"position {p.position} ({p.verdict.value}, {p.ms.median:.4g} [{p.ms.lo:.4g}, "
            f"{p.ms.hi:.4g}]) sits on the threshold {threshold:.4g}: a level between the "
            f"endpoints overlaps it{' (' + sides + ')' if sides else ''}; pass --threshold-ms "
            "to say which crossing you mean, or --all-steps to map every level change"
        )
    return out
