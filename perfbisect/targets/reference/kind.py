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
    tp: int | None = None
    device: str | None = None  # "cpu" (default) or "cuda"
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    draft_tokens: int | None = None
    max_seq: int | None = None
    threads: int | None = None
    server_args: tuple[Any, ...] = ()
    python: str | None = None
    cycles: int = 40
    warmup: int = 5
    prompt: int = 16
    timeout_s: float = 600.0


REFERENCE = TargetKind(
    name="reference",
    schema=schema_of(ReferenceOptions),
    factory="perfbisect.targets.reference.target:ReferenceTarget",
    default_metric=("verify_ms", r"verify_ms=([0-9.]+)"),
    check=check_reference,
)
