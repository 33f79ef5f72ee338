"""What a launch costs as an input of the model's planner (perfbisect/bisect/search/planner.py):
a measured point launched again reuses its build, so the information rule weighs bits per unit
of cost, the costs read from the launches' stage seconds; a resumed session replays them."""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np

from perfbisect.bisect.search.model import believe
from perfbisect.bisect.search.planner import plan, single_gains
from perfbisect.bisect.search.searcher import ModelEngine
from perfbisect.bisect.session.driver import _replayed, launch_seconds
from perfbisect.bisect.values import LaunchResult, Policy, Status
from perfbisect.config import Configuration
from perfbisect.store.history import LaunchView


def _path(n: int) -> list[Configuration]:
    return [Configuration.of({"commit": str(i)}) for i in range(n + 1)]


def test_the_costs_are_the_median_seconds_of_first_launches_and_launches_again() -> None:
    engine = ModelEngine(_path(40), Policy())
    assert engine.launch_costs() == (1.0, 1.0)  # nothing known yet
    seconds = {40: [80.0, 50.0], 0: [90.0]}  # B G B: two first launches, one again
    batch = engine.next_batch()
    engine.feed(
        [
            LaunchResult(13.0 if r.position else 10.0, seconds=seconds[r.position].pop(0))
            for r in batch
        ]
    )
    first, again = engine.launch_costs()
    assert first == 1.0 and again == 50.0 / 85.0
    # a launch again that cost ten times less is held at a fifth: a warm cache, not the rule
    engine.launch_seconds.append((False, 1.0))
    engine.launch_seconds.append((False, 1.0))
    assert engine.launch_costs()[1] == 0.2


def test_the_planner_weighs_bits_per_cost() -> None:
    # Endpoints and one point measured: the best single launch halves the gap (0, 30]
    launches = [(64, 13.0), (0, 10.0), (64, 13.0), (30, 13.0)]
    b = believe(launches, 64, None, 0.02)
    launchable = np.ones(65, dtype=bool)
    alike = plan(b, launchable, 1)
    assert alike.positions[0] not in (0, 30, 64)  # a new point, the most bits
    # A new commit costing 100 times a launch again (a build from source against a warm
    # relaunch): the rule buys its bits elsewhere. (30 read past once, just now: were it below,
    # a busy period made that launch and likely goes on, so its launch again is worth ~0.017
    # bits, the new point's 0.86.)
    cost = np.full(65, 100.0)
    for measured in (0, 30, 64):
        cost[measured] = 1.0
    dear = plan(b, launchable, 1, cost)
    assert set(dear.positions) <= {0, 30, 64}, dear
    gains = single_gains(b, b.cdf(), launchable)
    assert gains[alike.positions[0]] > max(gains[0], gains[30], gains[64])


def test_told_costs_leave_the_answer_and_the_resumed_plan_alone() -> None:
    # The same world twice: told the seconds or not, the culprit is the same; and a launch
    # replayed from the store carries its stage seconds, so a resume plans as the run did.
    rng_values = random.Random(5)
    values = [rng_values.gauss(1, 0.02) for _ in range(200)]
    for told in (False, True):
        engine = ModelEngine(_path(60), Policy())
        launched: set[int] = set()
        k = 0
        while batch := engine.next_batch():
            out = []
            for r in batch:
                seconds = (30.0 if r.position in launched else 55.0) if told else None
                launched.add(r.position)
                out.append(
                    LaunchResult((10.0 if r.position < 41 else 13.0) * values[k], seconds=seconds)
                )
                k += 1
            engine.feed(out)
        assert engine.outcome is not None and engine.outcome.status is Status.FOUND
        assert engine.outcome.culprit is not None
        assert engine.outcome.culprit.first_bad.position == 41
    assert launch_seconds({"build_s": 20.0, "ready_s": 30.5, "measure_s": 4.5, "note": "x"}) == 55.0
    assert launch_seconds({}) is None


def test_a_replayed_launch_carries_its_seconds() -> None:
    view = LaunchView(
        id=1,
        session_id=1,
        seq=0,
        fingerprint="f",
        axes={"commit": "abc"},
        position=0,
        purpose="search",
        metric="verify_ms",
        status="ok",
        stage=None,
        reason=None,
        value=11.0,
        n_samples=5,
        flags=[],
        timings={"build_s": 12.0, "measure_s": 3.0},
        started_at=datetime(2026, 1, 1),
        log_path=None,
        snapshot_id=None,
    )
    assert _replayed(view).seconds == 15.0 and _replayed(view).value == 11.0
