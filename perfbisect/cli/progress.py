"""Live progress of a session on stderr.

On a terminal each stage (checkout, build, serve, measure) shows a spinner with its elapsed
time, so a model whose readiness takes ten minutes visibly lives; when the stage ends, one line
with its duration stays. Not on a terminal (CI logs, pipes) only the finished lines are printed.
The counter is configurations judged so far against an estimate that grows when the search
needs more (``[12/~12]``, never ``[21/9]``).
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
        self.launches = 0
        self.started_at = time.monotonic()
        self._stage: tuple[str, float] | None = None
        self._live: Progress | None = None
        self._task: TaskID | None = None

    # ---- the Progress protocol of the session driver ---------------------------------------

    def started(self, session_id: int, path_length: int, expected_steps: int) -> None:
        self.expected = expected_steps
        self.started_at = time.monotonic()
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
        what = (
            num(result.value)
            if result.ok
            else f"failed: {escape(lead_with_error(str(result.reason)))}"
        )
        tag = " (stored)" if replayed else ""
        self.console.print(
            f"  {escape(request.config.label())} ({request.purpose.value}) -> {what}{tag}"
        )

    def verdict(self, point: Any) -> None:
        self.judged.add(point.position)
        total = max(self.expected, len(self.judged))
        style = VERDICT_STYLE.get(point.verdict.value, "")
        est = point.estimate
        value = f"{num(est.median)} [{num(est.lo)}, {num(est.hi)}]" if est else "-"
        elapsed = time.monotonic() - self.started_at
        left = (total - len(self.judged)) * elapsed / max(len(self.judged), 1)
        eta = f", about {clock(left)} left" if left >= 1 else ""
        self.console.print(
            f"\\[{len(self.judged)}/~{total}] {escape(point.config.label())}: "
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
