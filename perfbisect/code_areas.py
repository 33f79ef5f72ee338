"""The areas of an LLM server's code that a performance change is read against: the
speculative/verify path, CUDA graphs, the distributed (all-reduce) path. A file or function
lies on an area when its name matches the area's pattern. `bisect explain` flags the touched
files with them; `bisect start --prior-area` gives the commits touching one half of the
search's prior."""

from __future__ import annotations

import re

AREAS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("speculative/verify", re.compile(r"specul|eagle|verify|draft|spec_", re.I)),
    ("CUDA graph", re.compile(r"cuda_?graph|graph_runner|capture|replay", re.I)),
    (
        "distributed",
        re.compile(r"distributed|all_?reduce|nccl|parallel_state|custom_ar|gloo", re.I),
    ),
)
# What a user names on the command line (--prior-area) -> the area's label
AREA_NAMES = {
    "verify": "speculative/verify",
    "cuda-graph": "CUDA graph",
    "distributed": "distributed",
}


def flags_of(*names: str) -> tuple[str, ...]:
    """The areas any of ``names`` (paths, function names) lies on."""
    return tuple(label for label, pattern in AREAS if any(pattern.search(n) for n in names))


__all__ = ["AREAS", "AREA_NAMES", "flags_of"]
