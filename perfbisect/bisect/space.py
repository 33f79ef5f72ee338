"""The search space: axes, the values between a good and a bad value, and the search path.

Pure: commit segments are computed by the driver (git) and handed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfbisect.config import Configuration


@dataclass(frozen=True)
class AxisValues:
    """A user-declared axis: ordered axes have an interior to search, categorical ones do not."""

    name: str
    values: tuple[str, ...]
    ordered: bool

    def segment(self, good: str, bad: str) -> list[str]:
        """Values from good to bad inclusive, in search order."""
        if not self.ordered:
            return [good, bad]
        i, j = self.values.index(good), self.values.index(bad)
        step = 1 if j >= i else -1
        return list(self.values[i : j + step if j + step >= 0 else None : step])


def staircase_path(
    good: Configuration,
    bad: Configuration,
    segments: Mapping[str, Sequence[str]],
) -> list[Configuration]:
    """A monotone path from good to bad that changes one differing axis at a time.

    Axes change in the order of ``good``'s axes; each axis walks its segment while the axes
    already walked hold their bad value and the others their good value. Binary search on this
    path finds the first step (axis and value) at which the configuration turns bad.
    """
    differing = good.differing_axes(bad)
    path = [good]
    current = good
    for axis in differing:
        segment = list(segments[axis])
        if segment[0] != good.get(axis) or segment[-1] != bad.get(axis):
            raise ValueError(f"segment of {axis} does not run from the good to the bad value")
        for value in segment[1:]:
            current = current.with_value(axis, value)
            path.append(current)
    return path
