"""Warnings about one launch's samples (pyperf-style): used where a launch is measured, stored
and shown, below every searcher."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def instability_flags(samples: Sequence[float]) -> list[str]:
    """pyperf-style warnings for one launch's samples: wide spread, or far outliers."""
    flags: list[str] = []
    if len(samples) < 2:
        return flags
    centre = float(statistics.median(samples))
    if centre == 0:
        return flags
    spread = statistics.pstdev(samples) / abs(centre)
    if spread >= 0.10:
        flags.append(f"unstable: std dev is {spread:.0%} of the median")
    outliers = sum(1 for x in samples if abs(x - centre) > 0.5 * abs(centre))
    if outliers:
        flags.append(f"{outliers} sample(s) more than 50% from the median")
    return flags
