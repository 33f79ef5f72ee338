"""Speculation's speed-up at an endpoint (``baseline = true``): each side's tokens/s read as a
level, so one launch the machine slowed does not set it (perfbisect/bisect/session/baseline.py)."""

from __future__ import annotations

import math

import pytest

from perfbisect.bisect.session.baseline import SpeedupRow


def test_a_launch_the_machine_slowed_does_not_set_the_speedup() -> None:
    # Seen in a fresh-clone CI run on 2 loaded cores (the stand-in server, 2 launches a side):
    # one launch with speculation ran 25% slow; the median of both read 1.18x.
    row = SpeedupRow("good", {}, (888.3, 1188.9), (868.99, 888.1))
    # (a level is a median in log terms: of two launches, their geometric mean)
    assert row.speedup == pytest.approx(1188.9 / math.sqrt(868.99 * 888.1))


def test_launches_that_agree_give_the_ratio_of_their_medians() -> None:
    row = SpeedupRow("bad", {}, (600.0, 610.0, 590.0), (880.0, 870.0))
    assert row.speedup == pytest.approx(600.0 / math.sqrt(880.0 * 870.0))
    assert row.speedup is not None and row.speedup < 1  # speculation is slower


def test_no_launches_on_a_side_give_no_speedup() -> None:
    assert SpeedupRow("good", {}, (), (880.0,)).speedup is None
