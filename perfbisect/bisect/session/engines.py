"""Which engine searches a path: the one a session chose (``--engine``), built alike wherever a
search of that session is built, so that the session, its searches inside merges and its
provisional report (which replays the stored launches into a new engine) ask for the same
launches in the same order."""

from __future__ import annotations

from typing import Any

from perfbisect.bisect.axis_sets import AxisPlan
from perfbisect.bisect.engine_state import EngineState
from perfbisect.bisect.search.attribution import ModelMultiAxis
from perfbisect.bisect.search.searcher import ModelEngine
from perfbisect.bisect.session.prior import PathPrior
from perfbisect.bisect.values import Policy
from perfbisect.config import Configuration


def make_engine(
    path: list[Configuration],
    plans: list[dict[str, Any]] | None,
    policy: Policy,
    threshold: float | None,
    kind: str = "model",
    prior: PathPrior | None = None,
) -> EngineState:
    """One path: the binary search (or, with ``kind="model"``, the search as one posterior,
    crossing first or every step, with ``prior`` over the path's positions); several axes (or
    a patch set): the multi-axis search."""
    # The rule engine (`--engine rules`, kept for comparison) is imported only when asked for:
    # no other module of a session or report names it (tests/test_architecture.py).
    if plans:
        axis_plans = [AxisPlan.from_json(p) for p in plans]
        if kind == "model":
            return ModelMultiAxis(path[0], path[-1], axis_plans, policy, threshold)
        from perfbisect.bisect.rules.multiaxis import MultiAxisEngine

        return MultiAxisEngine(path[0], path[-1], axis_plans, policy, threshold)
    if kind == "model":
        weights, note = (prior.weights(), prior.note()) if prior else (None, "")
        return ModelEngine(path, policy, threshold, weights, note)
    from perfbisect.bisect.rules.engine import Engine

    return Engine(path, policy, threshold)
