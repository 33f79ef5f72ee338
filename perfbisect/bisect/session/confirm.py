"""Confirming a proxy search's culprits on the full model (``confirm = "full"``).

The search ran on proxy launches (random weights, fewer layers): cheap, but a proxy's step is a
claim about the full model only once the full model shows it. Each culprit pair is launched on
the full model interleaved (last good, first bad, last good, ...), so that drift hits both
sides alike, until the difference is decided at the engine's confidence or the pair budget is
spent. Like the engine it is a pure state machine (``next_batch``/``feed``); the session driver
runs its launches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfbisect.bisect.stats import Difference, core_launches, difference, median, own_rel_sd
from perfbisect.bisect.values import LaunchRequest, LaunchResult, PointResult, Policy, Purpose
from perfbisect.config import Configuration
from perfbisect.errors import lead_with_error

MIN_PAIRS = 2  # interleaved pairs before the difference is judged
MAX_PAIRS = 4  # and at most


@dataclass(frozen=True)
class PairToConfirm:
    last_good: Configuration  # full-model configurations
    first_bad: Configuration
    lo: int  # their positions on the session's path
    hi: int


@dataclass(frozen=True)
class ConfirmedPair:
    pair: PairToConfirm
    good_values: tuple[float, ...]
    bad_values: tuple[float, ...]
    effect: Difference | None  # first bad minus last good, on the full model
    confirmed: bool
    note: str  # what the full model showed, in words


class Confirmation:
    """Interleaved full-model launches of each pair, one pair after another."""

    def __init__(
        self,
        pairs: Sequence[PairToConfirm],
        policy: Policy,
        threshold: float | None = None,
    ) -> None:
        self.pairs = list(pairs)
        self.policy = policy
        self.threshold = threshold  # a given threshold, in the full model's units
        self.results: list[ConfirmedPair] = []
        self.launch_count = 0
        self._values: tuple[list[float], list[float]] = ([], [])
        self._failed: list[str] = []
        self._rounds = 0
        self._pending: list[LaunchRequest] = self._round() if self.pairs else []

    # ---- the driver's interface (as the engine's) -------------------------------------------

    def next_batch(self) -> list[LaunchRequest]:
        return list(self._pending)

    def take_verdicts(self) -> list[PointResult]:
        return []  # a confirmation judges pairs, not points: its result is in ``results``

    def feed(self, results: Sequence[LaunchResult]) -> None:
        if len(results) != len(self._pending):
            raise ValueError(f"expected {len(self._pending)} results, got {len(results)}")
        self.launch_count += len(results)
        for side, result in enumerate(results):
            if result.ok:
                assert result.value is not None
                self._values[side].append(result.value)
            else:
                self._failed.append(result.reason or "failed")
        self._rounds += 1
        done = self._judge()
        if done is not None:
            self.results.append(done)
            self.pairs.pop(0)
            self._values, self._failed, self._rounds = ([], []), [], 0
        self._pending = self._round() if self.pairs else []

    # ---- internals --------------------------------------------------------------------------

    def _round(self) -> list[LaunchRequest]:
        pair = self.pairs[0]
        return [
            LaunchRequest(pair.lo, pair.last_good, Purpose.CONFIRM),
            LaunchRequest(pair.hi, pair.first_bad, Purpose.CONFIRM),
        ]

    def _effect(self) -> Difference | None:
        good, bad = self._values
        if not good or not bad:
            return None
        hib = self.policy.higher_is_better
        good, bad = core_launches(good, 0.0, hib), core_launches(bad, 0.0, hib)
        rel = max(self.policy.noise.floor_rel_sd, own_rel_sd(good), own_rel_sd(bad))
        if min(len(good), len(bad)) < 2:
            rel = max(rel, self.policy.noise.prior_rel_sd)
        return difference(good, bad, rel, self.policy.noise.z)

    def _judge(self) -> ConfirmedPair | None:
        """The pair's result once decided (or out of launches), else None."""
        pair = self.pairs[0]
        good, bad = self._values
        if len(self._failed) > 2 * self.policy.launch_retries:
            note = (
                f"the full-model launches failed ({lead_with_error(self._failed[-1])}): "
                "not confirmed"
            )
            return ConfirmedPair(pair, tuple(good), tuple(bad), self._effect(), False, note)
        effect = self._effect()
        if effect is None or self._rounds < MIN_PAIRS:
            return None
        sign = -1.0 if self.policy.higher_is_better else 1.0
        worse = Difference(sign * effect.delta, *sorted((sign * effect.lo, sign * effect.hi)))
        floor = self.policy.min_effect * abs(median(good))
        confirmed = worse.lo > 0 and worse.delta >= floor
        refuted = (
            worse.hi < floor
        )  # whatever the step is on the full model, it is below the minimum
        if not (confirmed or refuted) and self._rounds < MAX_PAIRS:
            return None
        levels = f"{median(good):.4g} -> {median(bad):.4g}"
        if confirmed:
            note = f"the full model shows the step: {levels} ({effect.delta:+.4g})"
            if self.threshold is not None:
                straddles = (median(good) - self.threshold) * (median(bad) - self.threshold) < 0
                note += (
                    f"; its medians straddle the given threshold {self.threshold:.4g}"
                    if straddles
                    else f"; its medians do not straddle the given threshold {self.threshold:.4g}"
                )
        elif refuted:
            note = (
                f"the full model does not show the step: {levels}, interval "
                f"[{effect.lo:+.4g}, {effect.hi:+.4g}] below the minimum effect "
                f"{self.policy.min_effect:.0%}"
            )
        else:
            note = (
                f"undecided after {self._rounds} interleaved pairs: {levels}, interval "
                f"[{effect.lo:+.4g}, {effect.hi:+.4g}]"
            )
        return ConfirmedPair(pair, tuple(good), tuple(bad), effect, confirmed, note)
