"""Per-cycle verify timings as JSON lines ``{"t", "ms", "bs", "graph"}`` (one file per rank).

The reference server writes them itself; for SGLang a boot hook writes them (docs/design.md
section 5). Either way a measure stage prints them as ``verify {...}`` lines, and this module
turns those into samples: one per cycle, the slowest rank's time (a TP cycle waits for it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class VerifyRecord:
    t: float
    ms: float
    bs: int
    graph: bool
    rank: int


def parse_lines(lines: Iterable[str]) -> list[VerifyRecord]:
    records = []
    for line in lines:
        text = line.strip()
        if text.startswith("verify "):
            text = text[len("verify ") :]
        if not text.startswith("{"):
            continue
        try:
            data = json.loads(text)
            records.append(
                VerifyRecord(
                    float(data["t"]),
                    float(data["ms"]),
                    int(data.get("bs", 1)),
                    bool(data.get("graph", False)),
                    int(data.get("rank", 0)),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return records


def per_cycle_ms(records: Sequence[VerifyRecord]) -> list[float]:
    """Cycle i's time is the maximum over ranks of each rank's i-th record (in time order)."""
    by_rank: dict[int, list[VerifyRecord]] = {}
    for record in sorted(records, key=lambda r: r.t):
        by_rank.setdefault(record.rank, []).append(record)
    if not by_rank:
        return []
    cycles = min(len(v) for v in by_rank.values())
    return [max(v[i].ms for v in by_rank.values()) for i in range(cycles)]


def graph_fraction(records: Sequence[VerifyRecord]) -> float:
    return sum(r.graph for r in records) / len(records) if records else 0.0


_ACCEPT = re.compile(r"accept_length=([0-9.]+)")
_TOKENS = re.compile(r"tokens_per_s=([0-9.]+)")


def client_tokens_per_s(output: str) -> float | None:
    """The workload's client-side tokens/s (its ``summary`` line), if it printed one."""
    tokens = _TOKENS.search(output)
    return float(tokens.group(1)) if tokens else None


def verify_samples(output: str) -> tuple[list[float], list[str]]:
    """Samples (one per cycle) and notes from a measure stage's output: ``verify {...}`` lines
    plus an optional ``summary ... accept_length=A tokens_per_s=T`` line."""
    records = parse_lines(output.splitlines())
    notes = []
    if records:
        notes.append(f"verify in CUDA graphs: {graph_fraction(records):.0%} of cycles")
    accept = _ACCEPT.search(output)
    if accept:
        notes.append(f"accept length {float(accept.group(1)):.2f}")
    tokens = _TOKENS.search(output)
    if tokens:
        notes.append(f"client tokens/s {float(tokens.group(1)):.1f}")
    return per_cycle_ms(records), notes
