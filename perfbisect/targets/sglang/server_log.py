"""What an SGLang server's own log says: readiness, the NCCL version, and the decode batches.

The formats, as printed by the released versions (checked against their wheels in
tests/test_sglang_timer.py):

* ready:  ``The server is fired up and ready to roll!`` (every version)
* NCCL:   ``sglang is using nccl==2.21.5`` (pynccl, rank 0, TP > 1 only)
* decode: ``Decode batch. #running-req: 1, #token: 55, token usage: 0.00, accept len: 3.17,
  cuda graph: True, gen throughput (token/s): 62.54, #queue-req: 0`` (0.4.x; ``Decode
  batch,`` with ``accept rate:`` from 0.5.5, ``block accept len:`` in 0.5.2x; the graph label
  is ``cuda graph`` on NVIDIA GPUs in every version).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from statistics import fmean

READY_LINE = "The server is fired up and ready to roll!"
_NCCL = re.compile(r"sglang is using nccl==([0-9.]+)")
_DECODE = re.compile(r"Decode batch[.,\s\[]")
_ACCEPT = re.compile(r"(?<!block )accept len: ([0-9.]+)")
_GRAPH = re.compile(r"cuda graph: (True|False)")
_THROUGHPUT = re.compile(r"gen throughput \(token/s\): ([0-9.]+)")


@dataclass(frozen=True)
class DecodeStats:
    lines: int
    accept_len: float | None  # mean over the logged decode batches
    graph_fraction: float | None  # of logged decode batches that ran in a CUDA graph
    gen_tokens_per_s: float | None  # mean of the server's own throughput reports


def nccl_version(log: str) -> str | None:
    found = _NCCL.search(log)
    return found.group(1) if found else None


def decode_stats(log: str) -> DecodeStats:
    accept: list[float] = []
    graph: list[bool] = []
    throughput: list[float] = []
    lines = 0
    for line in log.splitlines():
        if not _DECODE.search(line):
            continue
        lines += 1
        if found := _ACCEPT.search(line):
            accept.append(float(found.group(1)))
        if found := _GRAPH.search(line):
            graph.append(found.group(1) == "True")
        if found := _THROUGHPUT.search(line):
            throughput.append(float(found.group(1)))
    return DecodeStats(
        lines=lines,
        accept_len=fmean(accept) if accept else None,
        graph_fraction=sum(graph) / len(graph) if graph else None,
        gen_tokens_per_s=fmean(throughput) if throughput else None,
    )


def log_notes(log: str) -> list[str]:
    """Secondary metrics from the server log, as notes for the measurement's flags."""
    notes = []
    version = nccl_version(log)
    if version:
        notes.append(f"server reports NCCL {version}")
    stats = decode_stats(log)
    if stats.lines:
        parts = [f"decode log: {stats.lines} batches"]
        if stats.accept_len is not None:
            parts.append(f"accept len {stats.accept_len:.2f}")
        if stats.graph_fraction is not None:
            parts.append(f"decode in CUDA graphs {stats.graph_fraction:.0%}")
        if stats.gen_tokens_per_s is not None:
            parts.append(f"server gen tokens/s {stats.gen_tokens_per_s:.1f}")
        notes.append(", ".join(parts))
    return notes


# Why a server died before it was ready, in the words an environment mismatch uses: a module
# the commit imports that the environment lacks, a name a package no longer exports, or a flag
# this commit's argument parser does not know.
_CAUSES = (
    (re.compile(r"ModuleNotFoundError: No module named '([^']+)'"), "missing import {}"),
    (re.compile(r"ImportError: cannot import name '([^']+)'"), "missing name {} in an import"),
    (re.compile(r"ImportError: (.+)"), "import failed: {}"),
    (re.compile(r"error: unrecognized arguments: (.+)"), "flag not known to this commit: {}"),
    (re.compile(r"error: argument (--\S+): (.+)"), "flag refused: {}"),
)


def failure_cause(log: str) -> str | None:
    """The first import or flag error in a server log, with its line number and line."""
    lines = log.splitlines()
    for pattern, what in _CAUSES:
        for number, line in enumerate(lines, 1):
            found = pattern.search(line)
            if found:
                return f"{what.format(found.group(1))} (serve.log line {number}: {line.strip()})"
    return None
