"""Speculation against no speculation at the endpoints (``baseline = true``).

The team's symptom was that EAGLE-3 became slower than serving without speculation. This phase
launches each endpoint with speculative decoding and without it, back to back (so that a
drifting machine hits both alike), and the report gives the speed-up of speculation (client
tokens/s with over without) at the good and the bad end, each side's tokens/s read as the
search reads a level: the median of its launches within 15% of its fastest, since a launch the
machine slowed is never fast (on a loaded CI machine one of two launches with speculation ran
25% slow and the median of both put the speed-up at 1.18x against 1.35x). A pure state
machine, as the engine: the session driver runs its launches and reads the tokens/s they
recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfbisect.bisect.values import LaunchRequest, LaunchResult, PointResult, Purpose
from perfbisect.config import Configuration

ROUNDS = 2  # with/without pairs per endpoint


def _level(tokens_s: Sequence[float]) -> float:
    """Tokens/s as a level (``search.model.point_level`` on the time per token)."""
    # Imported here: numpy is a tenth of a second of every `bisect report` / `status` / `log`,
    # which import this module for SpeedupRow alone.
    import numpy as np

    from perfbisect.bisect.search.hypotheses import point_level

    return math.exp(-point_level(-np.log(np.asarray(tokens_s, dtype=np.float64))))


@dataclass(frozen=True)
class SpeedupRow:
    end: str  # "good" | "bad"
    config: dict[str, str]
    with_tokens_s: tuple[float, ...]
    without_tokens_s: tuple[float, ...]

    @property
    def speedup(self) -> float | None:
        if not self.with_tokens_s or not self.without_tokens_s:
            return None
        return _level(self.with_tokens_s) / _level(self.without_tokens_s)

    def to_json(self) -> dict[str, object]:
        return {
            "end": self.end,
            "config": self.config,
            "with_speculation_tokens_s": list(self.with_tokens_s),
            "without_speculation_tokens_s": list(self.without_tokens_s),
            "speedup": self.speedup,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> SpeedupRow:
        return cls(
            str(data["end"]),
            dict(data["config"]),  # type: ignore[call-overload]
            tuple(float(v) for v in data.get("with_speculation_tokens_s", [])),  # type: ignore[attr-defined]
            tuple(float(v) for v in data.get("without_speculation_tokens_s", [])),  # type: ignore[attr-defined]
        )


class BaselineRuns:
    """With and without speculation, interleaved, at each endpoint."""

    def __init__(self, ends: Sequence[tuple[int, Configuration]], rounds: int = ROUNDS) -> None:
        self._batches: list[list[LaunchRequest]] = [
            [
                LaunchRequest(position, config.as_full(), Purpose.BASELINE),
                LaunchRequest(position, config.as_baseline(), Purpose.BASELINE),
            ]
            for position, config in ends
            for _ in range(max(1, rounds))
        ]
        self.launch_count = 0

    def next_batch(self) -> list[LaunchRequest]:
        return list(self._batches[0]) if self._batches else []

    def feed(self, results: Sequence[LaunchResult]) -> None:
        self.launch_count += len(results)
        self._batches.pop(0)

    def take_verdicts(self) -> list[PointResult]:
        return []
