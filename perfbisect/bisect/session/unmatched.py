"""A session whose metric matches nothing at either endpoint stops there, as an input error:
the pattern (or the timer) is wrong, not the code, and every further launch would only print
the same output again."""

from __future__ import annotations

from perfbisect.bisect.session.driver import Progress
from perfbisect.bisect.values import LaunchRequest, LaunchResult, PointResult, Purpose
from perfbisect.errors import NO_SAMPLES, MetricMatchedNothing
from perfbisect.experiment import Experiment


class StopWhenNothingMatches:
    """Passes the driver's progress on, and ends the session as an input error once both
    endpoints ran and neither's output held a sample: the metric pattern (or timer) is wrong,
    and more launches would only print the same output again."""

    def __init__(self, inner: Progress, experiment: Experiment) -> None:
        self.inner, self.experiment = inner, experiment
        self.unmatched: dict[str, tuple[str, str]] = {}  # endpoint -> its label, its reason
        self.matched = False

    def started(
        self, session_id: int, path_length: int, expected: int, spent_s: float = 0.0
    ) -> None:
        self.inner.started(session_id, path_length, expected, spent_s)

    def stage(self, request: LaunchRequest, stage: str) -> None:
        self.inner.stage(request, stage)

    def verdict(self, point: PointResult) -> None:
        self.inner.verdict(point)

    def launched(self, request: LaunchRequest, result: LaunchResult, replayed: bool) -> None:
        self.inner.launched(request, result, replayed)
        if request.purpose is not Purpose.ENDPOINT or self.matched:
            return
        if result.ok or NO_SAMPLES not in str(result.reason):
            self.matched = True  # a sample, or another failure: the search judges it
            return
        self.unmatched[request.config.fingerprint] = (request.config.label(), str(result.reason))
        if len(self.unmatched) < 2:
            return
        label, reason = next(iter(self.unmatched.values()))
        what, _, tail = reason.partition(NO_SAMPLES)[2].partition("; output tail: ")
        raise MetricMatchedNothing(
            f"{self.experiment.path}: both endpoints ran and {what} in either one's output "
            f"(fix [metric] pattern, then start a new session); {label}'s output tail: "
            f"{tail.strip() or '(empty)'}"
        )
