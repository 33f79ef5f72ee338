"""A prior over where the crossing is, from the change itself: the commits of the path that
touch the paths the user names (``--prior-path``: the verify's code, a kernel's directory) or a
file on an area of the server's code (``--prior-area verify``: the speculative/verify path, by
the same file patterns `bisect explain` flags changes with) hold half of the prior, the other
commits the other half.

Half, whatever their number, bounds what a wrong guess costs: if the crossing is elsewhere, the
search first spends about one launch learning that the named commits are below it (one bit),
then searches the rest as it would have; if it is among them, the search halves only them
(``log2(all/named) - 1`` launches fewer). The prior moves where the search looks first, never
what it may name: every commit keeps a positive weight, and the stop rule is the same
posterior at the same target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfbisect.code_areas import AREA_NAMES, flags_of
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.errors import UsageError

SHARE = 0.5  # the named commits' share of the prior


@dataclass(frozen=True)
class PathPrior:
    """``touched``: the path's positions (1..n) whose commit touches ``paths``."""

    paths: tuple[str, ...]
    touched: tuple[int, ...]
    n: int

    def weights(self) -> list[float]:
        """Each position's prior weight (0..n; position 0 cannot be the crossing)."""
        named = set(self.touched)
        others = self.n - len(named)
        if not named or not others:
            return [0.0] + [1.0] * self.n
        inside, outside = SHARE / len(named), (1 - SHARE) / others
        return [0.0] + [inside if x in named else outside for x in range(1, self.n + 1)]

    def note(self) -> str:
        """What the report says of it."""
        return (
            f"prior: the {len(self.touched)} of {self.n} commits touching "
            f"{', '.join(self.paths)} held half of it"
        )

    def as_json(self) -> dict[str, Any]:
        return {"paths": list(self.paths), "touched": list(self.touched), "n": self.n}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PathPrior | None:
        if not data:
            return None
        return cls(tuple(data["paths"]), tuple(int(x) for x in data["touched"]), int(data["n"]))


def _in_repo(top: Path, given: str) -> str:
    """``given`` as a path relative to the repository's top: as it is, or an absolute path
    inside the repository made relative."""
    text = given.strip()
    if Path(text).is_absolute():
        try:
            text = str(Path(text).resolve().relative_to(top.resolve()))
        except ValueError:
            raise UsageError(f"--prior-path {given}: not inside the repository {top}") from None
    return text.strip("/") or "."


def path_prior(
    repo: Any,
    path: Sequence[Configuration],
    paths: Sequence[str],
    areas: Sequence[str] = (),
) -> PathPrior:
    """The prior of a commit path (``repo``: a ``GitRepo``): which positions touch ``paths``
    (git pathspecs from the repository's top) or a file on one of ``areas`` (code_areas.py's
    names: verify, cuda-graph, distributed). Raises ``UsageError`` where it cannot apply (no
    commit axis, an unknown area, nothing touched, everything touched), naming the option."""
    unknown = [a for a in areas if a not in AREA_NAMES]
    if unknown:
        raise UsageError(
            f"--prior-area {unknown[0]}: unknown; one of {', '.join(sorted(AREA_NAMES))}"
        )
    commits = [c.get(COMMIT_AXIS) for c in path]
    if any(c is None for c in commits) or len(set(commits)) != len(commits):
        raise UsageError(
            "--prior-path and --prior-area weigh commits: they need a search along commits "
            "alone (one commit per configuration)"
        )
    cleaned = tuple(_in_repo(Path(repo.path), p) for p in paths)
    hits = repo.touching(commits[0], commits[-1], list(cleaned)) if cleaned else set()
    labels = [AREA_NAMES[a] for a in dict.fromkeys(areas)]
    if labels:
        for sha, files in repo.files_by_commit(commits[0], commits[-1]).items():
            if any(label in flags_of(*files) for label in labels):
                hits.add(sha)
    touched = tuple(i for i, sha in enumerate(commits) if i > 0 and sha in hits)
    n = len(commits) - 1
    named = (*cleaned, *(f"the {label} path" for label in labels))
    shown = " ".join(
        [*(f"--prior-path {p}" for p in cleaned), *(f"--prior-area {a}" for a in areas)]
    )
    if not touched:
        raise UsageError(
            f"{shown}: no commit between good and bad touches it (a path relative to the "
            "repository's top?)"
        )
    if len(touched) == n:
        raise UsageError(
            f"{shown}: every commit between good and bad touches it; it tells the search nothing"
        )
    return PathPrior(named, touched, n)


__all__ = ["SHARE", "PathPrior", "path_prior"]
