"""Which engine searches a path: the one a session chose (``--engine``), built alike wherever a
search of that session is built, so that the session, its searches inside merges and its
provisional report (which replays the stored launches into a new engine) ask for the same
launches in the same order."""

from __future__ import annotations

from typing import Any, cast

from perfbisect.bisect.axis_sets import AxisPlan
from perfbisect.bisect.multiaxis import MultiAxisEngine
from perfbisect.bisect.rules.engine import Engine
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
) -> Engine:
    """One path: the binary search (or, with ``kind="model"``, the search as one posterior,
    crossing first or every step, with ``prior`` over the path's positions); several axes (or
    a patch set): the multi-axis search."""
    if plans:
        axis_plans = [AxisPlan.from_json(p) for p in plans]
        if kind == "model":
            return cast(Engine, ModelMultiAxis(path[0], path[-1], axis_plans, policy, threshold))
        return MultiAxisEngine(path[0], path[-1], axis_plans, policy, threshold)
    if kind == "model":
        # Duck-typed: ModelEngine has every attribute the driver and the report read
        # (tests/test_model_engine.py runs a whole session through it).
        weights, note = (prior.weights(), prior.note()) if prior else (None, "")
        return cast(Engine, ModelEngine(path, policy, threshold, weights, note))
    return Engine(path, policy, threshold)
