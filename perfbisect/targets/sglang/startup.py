"""Where an SGLang launch's time to ready went, read from the server's own log.

Every SGLang process logs through ``configure_logger``: ``[%Y-%m-%d %H:%M:%S] message`` in
0.4.x-0.5.x, with a rank prefix at TP > 1 (``[2026-12-03 09:42:50 TP0] ...``) and milliseconds
when ``SGLANG_LOG_MS`` is set (``[2026-12-03 09:42:50.123] ...``, 0.5.1x; perfbisect sets it).
The serve command's first line is perfbisect's own start mark (``START_MARK``, written by
``date`` on the host, so in the host's time zone as SGLang's lines are). The milestones, in the
order the released versions (0.4.6.post5, 0.5.5, 0.5.12) print them:

* ``server_args=ServerArgs(...)``: the launching process has imported SGLang and parsed its args
* ``Init torch distributed begin.`` (``Init parallel begin.`` in 0.5.2x): a model worker (the
  scheduler process) has started and imported; printed again by the EAGLE draft worker
* ``Load weight end.``, ``Memory pool end.`` (after ``KV Cache is allocated.``): weights, KV cache
* ``Capture cuda graph end.`` (``Capture piecewise CUDA graph end.`` in 0.5.x): target graphs
* ``Capture draft cuda graph end.``, ``Capture draft extend cuda graph end.``: the draft's graphs
* ``Started server process`` / ``Uvicorn running``: the HTTP server is up
* ``The server is fired up and ready to roll!``: after SGLang's own warm-up request

A phase is the time from the milestone before it to its own; a milestone a version does not
print (no graphs with ``--disable-cuda-graph``, no draft without speculation) leaves its time to
the next phase, so the phases always add up to the launch's ready time (``health`` is what
remains after the ready line: perfbisect's own readiness check).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from statistics import median
from typing import Any

START_MARK = "perfbisect: serve command started"
# The shell line that writes it (GNU date's %3N: milliseconds; another date prints what it can
# and the parser reads the seconds).
START_COMMAND = f"date '+[%Y-%m-%d %H:%M:%S.%3N] {START_MARK}' >&2; "
PREFIX = "startup."  # the launch timings' keys: numbers, not stage times (no "_s" suffix)
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)?[^\]]*\] ?(.*)$")

# (phase, what ends it, which occurrence: 0 the first, 1 the second, -1 the last before the
# next phase's milestone)
_TARGET_GRAPHS = re.compile(r"Capture (cuda graph|piecewise CUDA graph) end")
_DRAFT_GRAPHS = re.compile(r"Capture draft (extend )?cuda graph end")
_WORKER_INIT = re.compile(r"Init (torch distributed|parallel) begin")  # the latter: 0.5.2x
PHASES: tuple[tuple[str, str], ...] = (
    ("imports", "the launching process imports SGLang and parses its args"),
    ("workers", "the model worker processes start and import"),
    ("weights", "distributed init, model init, target weights"),
    ("kv_cache", "the target's KV cache"),
    ("graphs", "the target's CUDA graphs"),
    ("draft", "the draft model's init, weights and KV cache"),
    ("draft_graphs", "the draft's CUDA graphs"),
    ("server", "the HTTP server starts"),
    ("warmup", "SGLang's own warm-up request"),
    ("health", "perfbisect's readiness check after the ready line"),
    ("other", "before the first log line and after the ready line (a log without the mark)"),
)
PHASE_NAMES = tuple(name for name, _ in PHASES)


@dataclass(frozen=True)
class _Line:
    at: datetime
    text: str


def _lines(log: str) -> list[_Line]:
    out = []
    for raw in log.splitlines():
        found = _STAMP.match(raw)
        if not found:
            continue
        try:
            at = datetime.fromisoformat(found.group(1) + (found.group(2) or ""))
        except ValueError:
            continue
        out.append(_Line(at, found.group(3)))
    return out


def _first(lines: list[_Line], needle: str | re.Pattern[str], start: int = 0) -> int | None:
    for i in range(start, len(lines)):
        text = lines[i].text
        if (needle in text) if isinstance(needle, str) else needle.search(text):
            return i
    return None


def _last(lines: list[_Line], needle: re.Pattern[str], start: int, end: int) -> int | None:
    found = None
    for i in range(start, end):
        if needle.search(lines[i].text):
            found = i
    return found


def _milestones(lines: list[_Line]) -> dict[str, int]:
    """The index of the line that ends each phase (phases a log does not show are absent)."""
    at: dict[str, int] = {}
    ready = _first(lines, "The server is fired up and ready to roll")
    end = ready if ready is not None else len(lines)
    start = _first(lines, START_MARK)
    if start is not None:
        at["start"] = start
    args = _first(lines, "server_args=")
    if args is not None:
        at["imports"] = args
    target = _first(lines, _WORKER_INIT)
    if target is not None:
        at["workers"] = target
    # The draft worker's init follows the target's graphs (or, without graphs, its KV cache);
    # with TP > 1 every rank prints its own init line first, so "the second one" is not it.
    draft_init = None
    if target is not None:
        anchor = _first(lines, _TARGET_GRAPHS, target)
        if anchor is None:
            anchor = _first(lines, "Memory pool end", target)
        if anchor is not None:
            draft_init = _first(lines, _WORKER_INIT, anchor)
    target_end = draft_init if draft_init is not None else end
    if target is not None:
        if (w := _first(lines, "Load weight end", target)) is not None and w < target_end:
            at["weights"] = w
        pool = _first(lines, "Memory pool end", target)
        if pool is None:
            pool = _first(lines, "KV Cache is allocated", target)
        if pool is not None and pool < target_end:
            at["kv_cache"] = pool
        if (g := _last(lines, _TARGET_GRAPHS, target, target_end)) is not None:
            at["graphs"] = g
    if draft_init is not None:
        pool = _first(lines, "Memory pool end", draft_init)
        if pool is not None and pool < end:
            at["draft"] = pool
        if (g := _last(lines, _DRAFT_GRAPHS, draft_init, end)) is not None:
            at["draft_graphs"] = g
    after = max(at.values(), default=0)
    for needle in ("Started server process", "Uvicorn running", "Application startup complete"):
        found = _first(lines, needle, after)
        if found is not None and found <= end:
            at["server"] = min(found, at.get("server", found))
    if ready is not None:
        at["warmup"] = ready
    return at


def startup_phases(log: str, ready_s: float | None) -> dict[str, float]:
    """Seconds per start-up phase of one launch (``PHASE_NAMES`` order; those the log shows),
    adding up to ``ready_s`` when the log has perfbisect's start mark and the ready line.
    Empty when the log has no SGLang timestamps at all."""
    lines = _lines(log)
    at = _milestones(lines)
    if not at:
        return {}
    phases: dict[str, float] = {}
    previous = lines[at["start"]].at if "start" in at else None
    for name in PHASE_NAMES:
        index = at.get(name)
        if index is None:
            continue
        when = lines[index].at
        if previous is not None:
            phases[name] = round(max(0.0, (when - previous).total_seconds()), 3)
        previous = when
    if ready_s is not None and "warmup" in at:
        first = at.get("start", min(at.values()))
        spent = (lines[at["warmup"]].at - lines[first].at).total_seconds()
        # Without perfbisect's mark (another launcher, an older perfbisect's log) the time
        # before SGLang's first line is not known apart from the readiness check's.
        phases["health" if "start" in at else "other"] = round(max(0.0, ready_s - spent), 3)
    return phases


def as_timings(phases: Mapping[str, float]) -> dict[str, float]:
    return {PREFIX + name: value for name, value in phases.items()}


def from_timings(timings: Mapping[str, Any]) -> dict[str, float]:
    """A stored launch's phases (its timings' ``startup.*`` numbers), in phase order."""
    found = {
        k[len(PREFIX) :]: float(v)
        for k, v in timings.items()
        if k.startswith(PREFIX) and isinstance(v, (int, float))
    }
    return {name: found[name] for name in PHASE_NAMES if name in found}


def phases_text(timings: Mapping[str, Any], at_least: float = 0.5) -> str:
    """``imports 19.4s, workers 17.0s, graphs 50.0s, ...``: the phases of a launch that took
    ``at_least`` seconds (the rest summed as ``other``); "" when none were recorded."""
    phases = from_timings(timings)
    if not phases:
        return ""
    shown = [f"{k} {v:.1f}s" for k, v in phases.items() if v >= at_least]
    rest = sum(v for v in phases.values() if v < at_least)
    if rest >= 0.05:
        shown.append(f"other {rest:.1f}s")
    return ", ".join(shown)


@dataclass(frozen=True)
class StartupSummary:
    """Ready times of one group of launches (the first launch of each pin set, or the later
    ones): how many, the median ready time and the median of each phase."""

    launches: int
    ready_s: float
    phases: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"launches": self.launches, "ready_s": self.ready_s, "phases": dict(self.phases)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StartupSummary:
        return cls(
            int(data["launches"]),
            float(data["ready_s"]),
            {str(k): float(v) for k, v in dict(data.get("phases", {})).items()},
        )

    def text(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in self.phases.items() if v >= 0.5)
        noun = "launch" if self.launches == 1 else "launches"
        return f"ready {self.ready_s:.1f}s (median of {self.launches} {noun})" + (
            f": {parts}" if parts else ""
        )


def summarise(timings: list[Mapping[str, Any]]) -> StartupSummary | None:
    """The median ready time and phases of launches (their stored timings, in order)."""
    ready = [float(t["ready_s"]) for t in timings if isinstance(t.get("ready_s"), (int, float))]
    if not ready:
        return None
    per_phase: dict[str, list[float]] = {}
    for t in timings:
        for name, value in from_timings(t).items():
            per_phase.setdefault(name, []).append(value)
    phases = {name: round(median(per_phase[name]), 3) for name in PHASE_NAMES if name in per_phase}
    return StartupSummary(len(ready), round(median(ready), 3), phases)


def session_startup(launches: list[tuple[list[Any], Mapping[str, Any]]]) -> dict[str, Any] | None:
    """A session's start-up summary from its launches' (flags, timings), in launch order: the
    first launch of each pin set (its compile caches cold, its environment new) and the later
    ones apart. None when no launch recorded start-up phases (not an SGLang session)."""
    if not any(from_timings(timings) for _, timings in launches):
        return None
    seen: set[str] = set()
    first: list[Mapping[str, Any]] = []
    later: list[Mapping[str, Any]] = []
    for flags, timings in launches:
        if "ready_s" not in timings:
            continue
        pin_set = next(
            (str(f).split()[2] for f in flags if str(f).startswith("pin set ")), "installed"
        )
        (later if pin_set in seen else first).append(timings)
        seen.add(pin_set)
    out: dict[str, Any] = {}
    for name, group in (("first", first), ("later", later)):
        summary = summarise(group)
        if summary is not None:
            out[name] = summary.to_json()
    return out or None


def summary_text(startup: Mapping[str, Any]) -> list[str]:
    """The report's lines for a session's start-up summary."""
    lines = []
    for name, label in (("first", "first launch of a pin set"), ("later", "later launches")):
        if name in startup:
            lines.append(f"{label}: {StartupSummary.from_json(startup[name]).text()}")
    return lines


def ready_brief(timings: Mapping[str, Any]) -> str:
    """``44.1s: imports 19, workers 17, graphs 1`` (whole seconds, phases of 1 s or more) for
    a launch's row; ``-`` when it has no ready time."""
    ready = timings.get("ready_s")
    if not isinstance(ready, (int, float)):
        return "-"
    big = [f"{k} {v:.0f}" for k, v in from_timings(timings).items() if v >= 1.0]
    return f"{ready:.1f}s" + (": " + ", ".join(big) if big else "")


# Python's import profile (`PYTHONPROFILEIMPORTTIME=1` in the experiment's [env], or -X
# importtime): "import time: <self us> | <cumulative us> | <name>", the name indented two
# spaces per nesting level; one header line per process.
_IMPORT_HEADER = "import time: self [us] | cumulative | imported package"
_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")


def import_note(log: str, top: int = 6) -> str | None:
    """Where the processes' imports went, by top-level package (their outermost imports'
    cumulative times, summed over the processes): the phase perfbisect cannot shorten itself
    and a user may (a lighter import path, fewer backends). None without an import profile."""
    processes = 0
    by_package: dict[str, int] = {}
    for line in log.splitlines():
        if line.startswith(_IMPORT_HEADER):
            processes += 1
            continue
        found = _IMPORT.match(line)
        if found is None:
            continue
        package = found.group(2).split(".")[0]
        by_package[package] = by_package.get(package, 0) + int(found.group(1))
    if not by_package:
        return None
    total = sum(by_package.values()) / 1e6
    ranked = sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
    parts = ", ".join(f"{name} {us / 1e6:.1f}s" for name, us in ranked)
    noun = "process" if processes == 1 else "processes"
    return f"import profile: {total:.1f}s of imports in {processes} {noun}: {parts}"


def reached(log: str) -> str | None:
    """How far a server that never became ready got: the last start-up phase its log shows
    done, and the last time-stamped line after it (``start-up reached: graphs done (the
    target's CUDA graphs); last line: Capture draft cuda graph begin...``)."""
    lines = _lines(log)
    at = _milestones(lines)
    at.pop("start", None)
    if not at:
        return None
    name = max(at, key=lambda k: at[k])
    what = dict(PHASES)[name]
    last = lines[-1].text.strip()[:160]
    return f"start-up reached: {name} done ({what}); its last line: {last}"
