"""What one diagnostic launch left in its log folder, read back: the profiler traces and the
rank processes' records (``profile/``), NCCL's own logs (``nccl.<host>.<pid>``), and the verify
timer's share of cycles in CUDA graphs (the launch's flags)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfbisect.explain import nccl_log
from perfbisect.explain.trace import TraceSummary, summarise
from perfbisect.probes.verify_timer import parse_lines

PROFILE_FOLDER = "profile"
NCCL_FILES = "nccl.*"
_GRAPHS = re.compile(r"verify in CUDA graphs: (\d+)% of cycles")
# SGLang's log line when it captures the target's decode graphs (the draft's says "draft")
_CAPTURED = re.compile(r"Capture cuda graph bs \[(?P<sizes>[\d, ]*)\]")


@dataclass(frozen=True)
class LaunchEvidence:
    launch_id: int
    value: float | None
    log_dir: Path
    traces: tuple[TraceSummary, ...]
    processes: tuple[dict[str, Any], ...]  # rank, pid, env, affinity, numa
    nccl: tuple[nccl_log.ProcessNccl, ...]
    graph_fraction: float | None
    timings: dict[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    verifies: tuple[tuple[int, bool], ...] = ()  # (batch size, replayed a graph) per verify
    captured: tuple[int, ...] | None = None  # CUDA-graph batch sizes the server captured


def read_launch(
    launch_id: int,
    value: float | None,
    log_dir: Path,
    flags: Sequence[str],
    timings: dict[str, float],
) -> LaunchEvidence:
    problems: list[str] = []
    folder = log_dir / PROFILE_FOLDER
    traces = []
    for path in sorted(folder.glob("trace.rank*.json")):
        try:
            summary = summarise(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable trace ({exc})")
            continue
        if summary is None:
            problems.append(f"{path}: no verify range in the trace")
        else:
            traces.append(summary)
    for path in sorted(folder.glob("profile-error.*.txt")):
        problems.append(f"profiler failed ({path.name}): {path.read_text().strip()}")
    processes = []
    for path in sorted(folder.glob("process.rank*.json")):
        try:
            processes.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            problems.append(f"{path}: unreadable process record")
    lines: list[str] = []
    for path in sorted(log_dir.glob(NCCL_FILES)):
        lines += path.read_text(errors="replace").splitlines()
    serve = _text(log_dir / "serve.log")
    lines += serve.splitlines()  # without NCCL_DEBUG_FILE (or before it applies) NCCL prints here
    graphs = next((m for f in flags if (m := _GRAPHS.search(str(f)))), None)
    records = parse_lines(_text(log_dir / "measure.log").splitlines())
    found = _CAPTURED.search(serve)
    captured = (
        tuple(int(x) for x in found.group("sizes").replace(" ", "").split(",") if x)
        if found is not None
        else None
    )
    return LaunchEvidence(
        launch_id,
        value,
        log_dir,
        tuple(traces),
        tuple(processes),
        tuple(nccl_log.parse(lines)),
        int(graphs.group(1)) / 100 if graphs else None,
        dict(timings),
        tuple(problems),
        tuple((r.bs, r.graph) for r in records),
        captured,
    )


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
