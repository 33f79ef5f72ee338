"""Warnings about one launch's samples (pyperf-style): used where a launch is measured, stored
and shown, below every searcher."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


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


def sample_stats(samples: Sequence[float], noted: Sequence[Any] = ()) -> dict[str, Any]:
    """One launch's spread as every view shows it: n, median, p10, p90, min, max, and the
    warnings (those ``noted`` when it ran, then the ones its samples raise now)."""
    stats: dict[str, Any] = {"n": len(samples)}
    if samples:
        ordered = sorted(samples)
        stats.update(
            median=float(statistics.median(ordered)),
            min=ordered[0],
            max=ordered[-1],
            p10=ordered[int(0.1 * (len(ordered) - 1))],
            p90=ordered[int(0.9 * (len(ordered) - 1))],
            flags=list(dict.fromkeys([*noted, *instability_flags(samples)])),
        )
    return stats
