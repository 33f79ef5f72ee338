"""The ``reference`` target kind's declaration: the embedded reference server (server.py here,
or the server.py of the commit when ``repo`` is set, as in the demo)."""

from __future__ import annotations

from perfbisect.checks import NUMBER
from perfbisect.targets.kind import KindCheck, TargetKind


def check_reference(ctx: KindCheck) -> None:
    if ctx.target.get("device", "cpu") not in ("cpu", "cuda"):
        raise ctx.checker.fail(("target",), "device", "must be 'cpu' or 'cuda'")


REFERENCE = TargetKind(
    name="reference",
    schema={
        "kind": ((str,), True),
        "repo": ((str,), False),
        "tp": ((int,), False),
        "device": ((str,), False),
        "layers": ((int,), False),
        "hidden": ((int,), False),
        "heads": ((int,), False),
        "draft_tokens": ((int,), False),
        "max_seq": ((int,), False),
        "threads": ((int,), False),
        "server_args": ((list,), False),
        "python": ((str,), False),
        "cycles": ((int,), False),
        "warmup": ((int,), False),
        "prompt": ((int,), False),
        "timeout_s": (NUMBER, False),
    },
    factory="perfbisect.targets.reference.target:ReferenceTarget",
    default_metric=("verify_ms", r"verify_ms=([0-9.]+)"),
    check=check_reference,
)
