"""Live progress of a session on stderr.

On a terminal each stage (checkout, build, serve, measure) shows a spinner with its elapsed
time, so a model whose readiness takes ten minutes visibly lives; when the stage ends, one line
with its duration stays. Not on a terminal (CI logs, pipes) only the finished lines are printed.
The counter is configurations judged so far against an estimate that grows when the search
needs more: one more than judged once it runs past the estimate (``[9/~10]``, never ``[21/9]``
nor ``[8/~8]``, ``[9/~9]``). The elapsed time is the session's, a resumed one's earlier runs
included.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from perfbisect.cli.render import VERDICT_STYLE, console
from perfbisect.errors import lead_with_error
from perfbisect.formatting import clock, num


class ConsoleProgress:
    def __init__(self, out: Console | None = None) -> None:
        self.console = out or console(stderr=True)
        self.expected = 0
        self.judged: set[int] = set()
        self.shown: dict[int, tuple[Any, ...]] = {}  # position -> its verdict line's content
        self.launches = 0
        self.started_at = time.monotonic()
        self.spent_s = 0.0  # the session's time before this run
        self._stage: tuple[str, float] | None = None
        self._live: Progress | None = None
        self._task: TaskID | None = None

    # ---- the Progress protocol of the session driver ---------------------------------------

    def started(
        self, session_id: int, path_length: int, expected_steps: int, spent_s: float = 0.0
    ) -> None:
        self.expected = expected_steps
        self.started_at = time.monotonic()
        self.spent_s = spent_s
        self.console.print(
            f"session {session_id}: {path_length} configurations on the path, "
            f"about {expected_steps} to judge"
        )

    def stage(self, request: Any, stage: str) -> None:
        self._end_stage()
        what = f"{escape(request.config.label())} ({request.purpose.value}): {stage}"
        self._stage = (what, time.monotonic())
        if self.console.is_terminal:
            if self._live is None:
                self._live = Progress(
                    SpinnerColumn(),
                    TextColumn("{task.description}"),
                    TimeElapsedColumn(),
                    console=self.console,
                    transient=True,
                )
                self._live.start()
            self._task = self._live.add_task(f"  {what}", total=None)

    def launched(self, request: Any, result: Any, replayed: bool) -> None:
        self._end_stage()
        self.launches += 1
        what = num(result.value) if result.ok else f"failed: {escape(_one_line(result.reason))}"
        tag = " (stored)" if replayed else ""
        self.console.print(
            f"  {escape(request.config.label())} ({request.purpose.value}) -> {what}{tag}"
        )

    def verdict(self, point: Any) -> None:
        est = point.estimate
        content = (point.verdict.value, est.median, est.lo, est.hi, est.n) if est else None
        if self.shown.get(point.position, ()) == (point.verdict.value, content):
            return  # a verdict judged again to the same numbers (the verified pair): said once
        self.shown[point.position] = (point.verdict.value, content)
        self.judged.add(point.position)
        judged = len(self.judged)
        total = self.expected if judged <= self.expected else judged + 1
        style = VERDICT_STYLE.get(point.verdict.value, "")
        value = f"{num(est.median)} [{num(est.lo)}, {num(est.hi)}]" if est else "-"
        elapsed = self.spent_s + time.monotonic() - self.started_at
        left = (total - judged) * elapsed / max(judged, 1)
        eta = f", about {clock(left)} left" if left >= 1 else ""
        self.console.print(
            f"\\[{judged}/~{total}] {escape(point.config.label())}: "
            f"[{style}]{point.verdict.value.upper()}[/] {value}  "
            f"[dim]({self.launches} launches, {clock(elapsed)}{eta})[/]"
        )

    def close(self) -> None:
        self._end_stage()
        if self._live is not None:
            self._live.stop()
            self._live = None

    # ---- internals --------------------------------------------------------------------------

    def _end_stage(self) -> None:
        if self._stage is None:
            return
        what, t0 = self._stage
        self._stage = None
        if self._live is not None and self._task is not None:
            self._live.remove_task(self._task)
            self._task = None
        self.console.print(f"  [dim]{what} {time.monotonic() - t0:.1f}s[/]")


def _one_line(reason: object) -> str:
    """A failed launch on one line: its error first; the rest (an output tail) is in its log,
    and in the session's end when it decides it."""
    text = lead_with_error(str(reason))
    head, tail_said, tail = text.partition("; output tail: ")
    if tail_said:  # the output itself is no news: it is in the log
        return f"{head} (output: {len(tail.splitlines())} lines, in its log)"
    lines = text.splitlines() or [""]
    return lines[0] + (f" (+{len(lines) - 1} lines in its log)" if len(lines) > 1 else "")
