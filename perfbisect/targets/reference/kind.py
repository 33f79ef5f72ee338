"""The ``reference`` target kind's declaration: the embedded reference server (server.py here,
or the server.py of the commit when ``repo`` is set, as in the demo)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfbisect.targets.kind import KindCheck, TargetKind, schema_of


def check_reference(ctx: KindCheck) -> None:
    if ctx.target.get("device", "cpu") not in ("cpu", "cuda"):
        raise ctx.checker.fail(("target",), "device", "must be 'cpu' or 'cuda'")


@dataclass(frozen=True)
class ReferenceOptions:
    """The ``[target]`` table of ``kind = "reference"``. Server flags left unset take the
    server's own defaults."""

    repo: str | None = None  # a repository holding server.py (the demo); else the packaged one
    tp: int | None = None  # tensor-parallel ranks (gloo on CPU, NCCL on GPU)
    device: str | None = None  # "cpu" or "cuda" (draft and verify in CUDA graphs)
    layers: int | None = None  # transformer layers
    hidden: int | None = None  # hidden size
    heads: int | None = None  # attention heads
    draft_tokens: int | None = None  # tokens the draft proposes per cycle
    max_seq: int | None = None  # longest sequence (KV cache size)
    threads: int | None = None  # torch threads per rank
    server_args: tuple[Any, ...] = ()  # more server flags; {placeholders} work (axes)
    python: str | None = None  # the interpreter that runs the server (default: the host's)
    cycles: int = 40  # measured speculative cycles per launch: one sample each
    warmup: int = 5  # cycles run before the measured ones
    prompt: int = 16  # prompt length in tokens
    timeout_s: float = 600.0  # seconds per stage: build, readiness, measure


REFERENCE = TargetKind(
    name="reference",
    schema=schema_of(ReferenceOptions),
    factory="perfbisect.targets.reference.target:ReferenceTarget",
    default_metric=("verify_ms", r"verify_ms=([0-9.]+)"),
    check=check_reference,
)
