"""Configurations (immutable points of the search space) and the command-line spec syntax.

A configuration maps axis name -> value (the commit as a full SHA) and carries the digest of the
experiment's fixed parameters, so two experiments with different serve commands never share
measurements by accident. The fingerprint keys everything in the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from perfbisect.errors import UsageError

# The built-in axes' names, defined once (the experiment file, the path builder and the targets
# read them from here).
COMMIT_AXIS = "commit"
PATCHES_AXIS = "patches"
NCCL_AXIS = "nccl"
DRIVER_AXIS = "driver"
LAUNCH_AXIS = "launch"
BUILTIN_AXES = (COMMIT_AXIS, PATCHES_AXIS, NCCL_AXIS, DRIVER_AXIS, LAUNCH_AXIS)
# A proxy launch (same code, random weights, fewer layers) is a measurement of another kind: its
# configuration's context carries this mark, so its fingerprint, replay and reuse never mix
# with the full model's.
PROXY_MARK = "+proxy"
# A launch without speculative decoding (``baseline = true``): its value is client tokens/s.
BASELINE_MARK = "+nospec"


@dataclass(frozen=True)
class Configuration:
    """One point in the search space: ordered (axis, value) pairs plus the fixed-parameter digest."""

    values: tuple[tuple[str, str], ...]
    context: str = ""

    @classmethod
    def of(cls, mapping: Mapping[str, str], context: str = "") -> Configuration:
        return cls(tuple((k, str(v)) for k, v in mapping.items()), context)

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)

    def get(self, axis: str) -> str | None:
        for name, value in self.values:
            if name == axis:
                return value
        return None

    def with_value(self, axis: str, value: str) -> Configuration:
        if self.get(axis) is None:
            raise KeyError(axis)
        return Configuration(
            tuple((k, value if k == axis else v) for k, v in self.values), self.context
        )

    @property
    def fingerprint(self) -> str:
        canonical = json.dumps(
            {"axes": dict(sorted(self.values)), "context": self.context},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:20]

    @property
    def is_proxy(self) -> bool:
        return self.context.endswith(PROXY_MARK)

    def as_proxy(self) -> Configuration:
        return self if self.is_proxy else Configuration(self.values, self.context + PROXY_MARK)

    @property
    def is_baseline(self) -> bool:
        return self.context.endswith(BASELINE_MARK)

    def as_baseline(self) -> Configuration:
        full = self.as_full()
        return Configuration(full.values, full.context + BASELINE_MARK)

    def as_full(self) -> Configuration:
        if not self.is_proxy:
            return self
        return Configuration(self.values, self.context[: -len(PROXY_MARK)])

    def differing_axes(self, other: Configuration) -> list[str]:
        mine, theirs = self.as_dict(), other.as_dict()
        return [axis for axis in mine if mine[axis] != theirs.get(axis)]

    def label(self, short: int = 10) -> str:
        """Human-readable form: commit shortened, other axes as name=value."""
        parts = []
        for name, value in self.values:
            if name == COMMIT_AXIS:
                parts.append(value[:short])
            else:
                parts.append(f"{name}={value}")
        return ",".join(parts)


def parse_spec(text: str) -> dict[str, str]:
    """Parse ``commit=v1.2,flag=a`` (a bare token is a commit) into an axis -> value mapping."""
    if not text.strip():
        raise UsageError("empty configuration spec: expected e.g. 'v1.2' or 'commit=v1.2,flag=a'")
    result: dict[str, str] = {}
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            raise UsageError(f"configuration spec {text!r} has an empty item")
        if "=" in token:
            axis, _, value = token.partition("=")
            axis, value = axis.strip(), value.strip()
            if not axis or not value:
                raise UsageError(f"configuration spec {text!r}: item {token!r} needs axis=value")
        else:
            axis, value = COMMIT_AXIS, token
        if axis in result:
            raise UsageError(f"configuration spec {text!r} gives axis {axis!r} twice")
        result[axis] = value
    return result


def context_digest(parts: Iterable[object]) -> str:
    """Digest of the fixed experiment parameters that make measurements comparable."""
    blob = json.dumps(list(parts), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
