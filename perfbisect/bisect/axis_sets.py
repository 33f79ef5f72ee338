"""The vocabulary of a multi-axis search: how each differing axis is walked (``AxisPlan``), the
values of a set axis (patches: a ``+``-joined subset), and delta debugging over such a set."""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from perfbisect.bisect.stats import Verdict, median
from perfbisect.config import Configuration

B = TypeVar("B")  # what a measuring generator yields (a batch of launch requests)
R = TypeVar("R")  # what it is sent back (their results)

SET_SEPARATOR = "+"


@dataclass(frozen=True)
class AttributionRow:
    """One configuration the attribution (or its ddmin) measured: the axes it takes at their
    bad values, its verdict, and its median minus the good endpoint's."""

    axes: tuple[str, ...]
    position: int
    verdict: Verdict
    effect: float | None


def mixed(
    good: Configuration, bad: Configuration, bad_axes: Sequence[str], **override: str
) -> Configuration:
    """The configuration that takes ``bad``'s values on ``bad_axes`` and ``good``'s elsewhere
    (``override``: values of its own for some axes)."""
    values = {}
    for axis, good_value in good.values:
        value = bad.get(axis) if axis in bad_axes else good_value
        values[axis] = override.get(axis, value or "")
    return Configuration.of(values, good.context)


class MeasuredConfigurations:
    """What both multi-axis engines keep beside their search (a mixin on their ``EngineState``):
    the two ends and the axis plans, the configurations measured as positions in the order first
    measured (the path grows past both ends), and one attribution row per configuration."""

    in_path_order: ClassVar[bool] = False
    path: list[Configuration]  # the engine's
    launches: dict[int, list[float]]  # the engine's

    def _start_axes(
        self, good: Configuration, bad: Configuration, plans: Sequence[AxisPlan]
    ) -> None:
        self.good, self.bad = good, bad
        self.plans = {p.name: p for p in plans}
        self.attribution: list[AttributionRow] = []
        self.culprit_sets: list[tuple[str, ...]] = []
        self._positions = {good.fingerprint: 0, bad.fingerprint: 1}

    @property
    def bad_end(self) -> int:
        return 1

    def _position_of(self, config: Configuration) -> int:
        """The configuration's position (appended to the path when new)."""
        known = self._positions.get(config.fingerprint)
        if known is not None:
            return known
        self.path.append(config)
        self._positions[config.fingerprint] = len(self.path) - 1
        return len(self.path) - 1

    def _add_row(self, axes: Sequence[str], position: int, verdict: Verdict) -> None:
        if any(row.position == position for row in self.attribution):
            return  # ddmin asks about some subsets again; one row each
        values = self.launches.get(position)
        effect = median(values) - median(self.launches[0]) if values else None
        self.attribution.append(AttributionRow(tuple(axes), position, verdict, effect))


def join_sets(axis_sets: Sequence[Sequence[str]]) -> str:
    """``commit and nccl+launch``: axis sets as a message names them."""
    return " and ".join("+".join(s) for s in axis_sets)


def summary(
    culprit_sets: Sequence[Sequence[str]], steps: int, stepped: Collection[str] | None = None
) -> str:
    """The outcome's message: the culprit axis sets (and how many steps were named);
    ``stepped``: the axes a named step lies on, where known: a set's axes without one are
    said (ddmin held them needed, but no step on them was shown back to back)."""
    names = join_sets(culprit_sets)
    message = (
        f"the regression needs {names}"
        if any(len(s) > 1 for s in culprit_sets)
        else f"culprit axis: {names}"
    )
    if len(culprit_sets) > 1:
        message = f"{len(culprit_sets)} independent regressions: {names}"
    if steps > sum(len(s) for s in culprit_sets):
        message += f" ({steps} steps)"
    bare = [] if stepped is None else [a for s in culprit_sets for a in s if a not in stepped]
    if bare:
        message += f"; no step named on {' or '.join(bare)}"
    return message


@dataclass(frozen=True)
class AxisPlan:
    """How one differing axis is walked from its good to its bad value.

    ``path`` axes list every value from good to bad inclusive (two values for a categorical
    axis). ``set`` axes (patches) hold a ``+``-joined subset: ``items`` are the members that the
    bad value adds to the good one, searched by ddmin."""

    name: str
    kind: str  # "path" | "set"
    values: tuple[str, ...] = ()
    items: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "values": list(self.values),
            "items": list(self.items),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> AxisPlan:
        return cls(
            str(data["name"]),
            str(data["kind"]),
            tuple(str(v) for v in data.get("values", [])),  # type: ignore[attr-defined]
            tuple(str(v) for v in data.get("items", [])),  # type: ignore[attr-defined]
        )


def join_set(members: Sequence[str], order: Sequence[str]) -> str:
    """A set axis value: members in the experiment's order (patches apply in list order)."""
    wanted = set(members)
    return SET_SEPARATOR.join(m for m in order if m in wanted)


def split_set(value: str) -> list[str]:
    return [m for m in value.split(SET_SEPARATOR) if m]


def ddmin(
    items: Sequence[str], fails: Callable[[list[str]], Generator[B, R, bool]]
) -> Generator[B, R, list[str]]:
    """Zeller's delta debugging: a 1-minimal subset of ``items`` for which ``fails`` holds
    (``items`` itself is known to fail). ``fails`` is a generator (it measures)."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        size = len(current)
        chunks = [current[i * size // n : (i + 1) * size // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for chunk in chunks:
            if (yield from fails(chunk)):
                current, n, reduced = chunk, 2, True
                break
        if not reduced and n > 2:
            for chunk in chunks:
                complement = [x for x in current if x not in chunk]
                if (yield from fails(complement)):
                    current, n, reduced = complement, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current
