"""The report contract: one typed object per finished (or stopped) session.

Built once from the engine's final state; the JSON (``to_json``), the terminal tables, the plot,
the exit code and ``bisect status`` all read this object, so every view names the same culprit
with the same numbers and verdicts. ``report_version`` changes whenever a field changes meaning;
``from_json`` reads every stored version (version 1: the untyped dict of earlier releases;
version 2: no per-launch evidence, no legend, no verification description).

Counting, as the README defines it: *evaluations* are distinct configurations judged, *launches*
are server launches attempted (failed ones included; ``failed_launches`` of them failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from perfbisect.bisect.session.baseline import SpeedupRow
from perfbisect.bisect.stats import Difference, Verdict
from perfbisect.targets.gitrepo import CommitInfo

# 3: launches kept and set aside per point, verification, legend, remaining (provisional);
# 4: `why`, the explanation of the culprit (bisect explain);
# 5: `descent` and `inside_culprit` (the search inside a merge the culprit is); `path` then also
# holds the branch's commits, at positions numbered on after the session's path (>= path_length)
REPORT_VERSION = 5

# What each verdict word means, for the legend every view prints with the verdicts it shows.
VERDICT_MEANINGS = {
    "good": "its interval lies wholly on the good side of the threshold",
    "bad": "its interval lies wholly on the bad side of the threshold",
    "intermediate": (
        "a level of its own, clearly apart from both endpoints' levels: the regression came in "
        "more than one step (crossing first, it counts on the side of the threshold its median "
        "is on)"
    ),
    "unclear": (
        "its interval still reached the threshold when its launches ran out, or it was not "
        "judged again after launches of it were set aside: never blamed"
    ),
    "skip": "could not be built, launched or measured (the reason is shown): never blamed",
}


class ReportStatus(str, Enum):
    FOUND = "found"
    NOT_REPRODUCED = "endpoints-not-reproduced"
    AMBIGUOUS = "ambiguous"
    # An interrupted (or still running) session: what its launches show so far, not an answer.
    PROVISIONAL = "provisional"

    @property
    def exit_code(self) -> int:
        codes = {"found": 0, "endpoints-not-reproduced": 3, "ambiguous": 4, "provisional": 5}
        return codes[self.value]


def counted(n: int, noun: str) -> str:
    """``1 launch``, ``3 launches``, ``1 configuration``: a count with its noun, never
    ``launch(es)`` (every view writes counts through this)."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith(("ch", "sh", "s", "x")) else f"{n} {noun}s"


def times(n: int) -> str:
    """``once``, ``twice``, ``3 times``."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


@dataclass(frozen=True)
class Interval:
    """A configuration's value: median of per-launch values, its interval, how many launches."""

    median: float
    lo: float
    hi: float
    launches: int

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "ci": [self.lo, self.hi], "launches": self.launches}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Interval | None:
        if not data:
            return None
        lo, hi = data["ci"]
        return cls(float(data["median"]), float(lo), float(hi), int(data.get("launches", 0)))


@dataclass(frozen=True)
class Step:
    """A level change between two adjacent configurations of one axis."""

    axis: str
    position: int  # of the first bad configuration on the session's path
    last_good: dict[str, str]
    first_bad: dict[str, str]
    last_good_ms: Interval | None
    first_bad_ms: Interval | None
    effect_ms: Difference | None
    verified: bool
    verify_note: str | None = None
    crosses_threshold: bool = False
    commit: CommitInfo | None = None
    # The posterior that this is the first configuration past the threshold (crossing first;
    # None where it was not computed).
    confidence: float | None = None
    # What the verification launched ("first bad launched again twice; last good not
    # re-launched: its earlier launch used"), and which launches the effect comes from.
    verification: str = ""
    effect_basis: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "position": self.position,
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "last_good_ms": self.last_good_ms.to_json() if self.last_good_ms else None,
            "first_bad_ms": self.first_bad_ms.to_json() if self.first_bad_ms else None,
            "effect_ms": self.effect_ms.as_json() if self.effect_ms else None,
            "verified": self.verified,
            "verify_note": self.verify_note,
            "crosses_threshold": self.crosses_threshold,
            "commit": asdict(self.commit) if self.commit else None,
            "confidence": self.confidence,
            "verification": self.verification,
            "effect_basis": self.effect_basis,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        commit = data.get("commit")
        return cls(
            axis=str(data.get("axis", "commit")),
            position=int(data.get("position", -1)),
            last_good=dict(data["last_good"]),
            first_bad=dict(data["first_bad"]),
            last_good_ms=Interval.from_json(data.get("last_good_ms")),
            first_bad_ms=Interval.from_json(data.get("first_bad_ms")),
            effect_ms=Difference.from_json(data.get("effect_ms")),
            verified=bool(data.get("verified")),
            verify_note=data.get("verify_note"),
            crosses_threshold=bool(data.get("crosses_threshold")),
            commit=CommitInfo(**commit) if commit else None,
            confidence=data.get("confidence"),
            verification=str(data.get("verification", "")),
            effect_basis=str(data.get("effect_basis", "")),
        )


@dataclass(frozen=True)
class LaunchUse:
    """One measured launch of a configuration and whether its value counts: kept launches make
    the configuration's median, interval and launch count; a launch set aside says why."""

    launch_id: int | None  # the stored launch (None where it could not be matched)
    value: float
    kept: bool
    why: str | None = None  # why it was set aside ("slow launch in a burst", ...)
    # The model's final posterior probability that this launch ran slow (a busy period or a
    # lone outlier); None from the rule engine, which has no such number.
    slow: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.launch_id, "value": self.value, "kept": self.kept, "why": self.why}
        return out if self.slow is None else {**out, "slow": round(self.slow, 4)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchUse:
        launch_id = data.get("id")
        return cls(
            int(launch_id) if launch_id is not None else None,
            float(data["value"]),
            bool(data.get("kept", True)),
            data.get("why"),
            float(data["slow"]) if data.get("slow") is not None else None,
        )


@dataclass(frozen=True)
class PathPoint:
    position: int
    config: dict[str, str]
    verdict: Verdict
    ms: Interval | None
    reason: str | None = None
    launch_values: tuple[float, ...] = ()  # kept and slow-but-not-burst launches (version 2)
    failures: tuple[str, ...] = ()  # failed launches of this configuration, with their reasons
    # Every measured launch of it, kept or set aside (with why), in launch order (version 3).
    launches: tuple[LaunchUse, ...] = ()
    # How the verdict relates to the threshold shown, when it is not plain (judged against an
    # earlier threshold, or with the launches of its plateau).
    judged: str | None = None

    @property
    def set_aside(self) -> tuple[LaunchUse, ...]:
        return tuple(u for u in self.launches if not u.kept)

    @property
    def set_aside_note(self) -> str:
        """``1 of 3 set aside: slow launch in a burst``: the launches not in its numbers, and
        why, the same words in every view ("" when none)."""
        aside = self.set_aside
        if not aside:
            return ""
        whys: dict[str, int] = {}
        for u in aside:
            whys[u.why or "set aside"] = whys.get(u.why or "set aside", 0) + 1
        reasons = (
            next(iter(whys))
            if len(whys) == 1
            else "; ".join(f"{why} ({n})" for why, n in whys.items())
        )
        return f"{len(aside)} of {len(self.launches)} set aside: {reasons}"

    @property
    def note(self) -> str:
        """The row's note in every view: why it was skipped, its failed launches, the launches
        set aside, how its verdict relates to the threshold shown."""
        parts = []
        if self.reason:
            parts.append(self.reason)
        elif self.failures:
            last = self.failures[-1]
            parts.append(f"{counted(len(self.failures), 'failed launch')}, last: {last}")
        if self.set_aside_note:
            parts.append(self.set_aside_note)
        if self.judged:
            parts.append(self.judged)
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "config": self.config,
            "verdict": self.verdict.value,
            "ms": self.ms.to_json() if self.ms else None,
            "reason": self.reason,
            "launch_values": list(self.launch_values),
            "failures": list(self.failures),
            "launches": [u.to_json() for u in self.launches],
            "set_aside": len(self.set_aside),
            "judged": self.judged,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PathPoint:
        return cls(
            position=int(data["position"]),
            config=dict(data["config"]),
            verdict=Verdict(data["verdict"]),
            ms=Interval.from_json(data.get("ms")),
            reason=data.get("reason"),
            launch_values=tuple(float(v) for v in data.get("launch_values", [])),
            failures=tuple(data.get("failures", [])),
            launches=tuple(LaunchUse.from_json(u) for u in data.get("launches", [])),
            judged=data.get("judged"),
        )


@dataclass(frozen=True)
class AttributionRow:
    axes: tuple[str, ...]
    config: dict[str, str]
    verdict: Verdict
    effect_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "axes": list(self.axes),
            "config": self.config,
            "verdict": self.verdict.value,
            "effect_ms": self.effect_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttributionRow:
        effect = data.get("effect_ms")
        return cls(
            tuple(data["axes"]),
            dict(data["config"]),
            Verdict(data["verdict"]),
            float(effect) if effect is not None else None,
        )


@dataclass(frozen=True)
class Unresolved:
    good: dict[str, str]
    bad: dict[str, str]
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"good": self.good, "bad": self.bad, "why": self.why}

    @classmethod
    def from_json(cls, data: Any) -> Unresolved:
        if isinstance(data, Sequence) and not isinstance(data, Mapping):  # version 1: a pair
            return cls(dict(data[0]), dict(data[1]))
        return cls(dict(data["good"]), dict(data["bad"]), str(data.get("why", "")))


@dataclass(frozen=True)
class FullModelCheck:
    """A proxy search's step launched on the full model, interleaved (``confirm = "full"``)."""

    last_good: dict[str, str]
    first_bad: dict[str, str]
    position: int  # of the first bad configuration on the session's path
    good_values: tuple[float, ...]
    bad_values: tuple[float, ...]
    effect_ms: Difference | None
    confirmed: bool
    note: str

    def to_json(self) -> dict[str, Any]:
        return {
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "position": self.position,
            "good_values": list(self.good_values),
            "bad_values": list(self.bad_values),
            "effect_ms": self.effect_ms.as_json() if self.effect_ms else None,
            "confirmed": self.confirmed,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FullModelCheck:
        return cls(
            dict(data["last_good"]),
            dict(data["first_bad"]),
            int(data["position"]),
            tuple(float(v) for v in data.get("good_values", [])),
            tuple(float(v) for v in data.get("bad_values", [])),
            Difference.from_json(data.get("effect_ms")),
            bool(data["confirmed"]),
            str(data.get("note", "")),
        )


@dataclass(frozen=True)
class Fidelity:
    """Proxy launches: what the proxy was, where the search ran, what the full model said."""

    proxy: str  # "4 layers, random weights (--load-format dummy)"
    searched_on: str  # "proxy", or "full" after a fallback
    proxy_launches: int
    full_launches: int
    fallback: str | None = None  # why the search left the proxy
    confirm: str = "full"
    checks: tuple[FullModelCheck, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "proxy": self.proxy,
            "searched_on": self.searched_on,
            "proxy_launches": self.proxy_launches,
            "full_launches": self.full_launches,
            "fallback": self.fallback,
            "confirm": self.confirm,
            "checks": [c.to_json() for c in self.checks],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Fidelity | None:
        if not data:
            return None
        return cls(
            str(data["proxy"]),
            str(data["searched_on"]),
            int(data["proxy_launches"]),
            int(data["full_launches"]),
            data.get("fallback"),
            str(data.get("confirm", "full")),
            tuple(FullModelCheck.from_json(c) for c in data.get("checks", [])),
        )


@dataclass(frozen=True)
class MergeDescent:
    """One branch of a merge the crossing lies at, searched inside (or why not): the branch's
    commits from the merge base to the merge's parent, in that branch's first-parent order,
    at ``positions`` of the report's path."""

    depth: int  # 1: the session's culprit is the merge; 2: a merge inside that branch; ...
    merge: dict[str, str]  # the merge's configuration
    merge_position: int
    parent: int  # which parent's line was searched: 2, or 3 and on in an octopus merge
    base: str  # merge-base(first parent, this parent): the inside search's good end
    head: str  # this parent: the inside search's bad end
    commits: int  # commits the branch brought in (the merge base not counted)
    # "found", "branch-alone-does-not-cross", "base-crosses", "ambiguous", "nothing-to-search",
    # "under-way" (a provisional report)
    outcome: str
    message: str
    positions: tuple[int, int] | None = None  # the report path's positions of base and head
    culprit: Step | None = None
    merge_commit: CommitInfo | None = None
    launches: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "merge": self.merge,
            "merge_position": self.merge_position,
            "merge_commit": asdict(self.merge_commit) if self.merge_commit else None,
            "parent": self.parent,
            "base": self.base,
            "head": self.head,
            "commits": self.commits,
            "outcome": self.outcome,
            "message": self.message,
            "positions": list(self.positions) if self.positions else None,
            "culprit": self.culprit.to_json() if self.culprit else None,
            "launches": self.launches,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MergeDescent:
        positions = data.get("positions")
        culprit, commit = data.get("culprit"), data.get("merge_commit")
        return cls(
            depth=int(data["depth"]),
            merge=dict(data["merge"]),
            merge_position=int(data["merge_position"]),
            parent=int(data["parent"]),
            base=str(data["base"]),
            head=str(data["head"]),
            commits=int(data["commits"]),
            outcome=str(data["outcome"]),
            message=str(data.get("message", "")),
            positions=(int(positions[0]), int(positions[1])) if positions else None,
            culprit=Step.from_json(culprit) if culprit else None,
            merge_commit=CommitInfo(**commit) if commit else None,
            launches=int(data.get("launches", 0)),
        )


@dataclass(frozen=True)
class Report:
    session: int
    status: ReportStatus
    message: str
    metric: str
    higher_is_better: bool
    threshold_ms: float | None
    culprit: Step | None
    steps: tuple[Step, ...]
    path: tuple[PathPoint, ...]
    evaluations: int
    launches: int
    failed_launches: int = 0
    noise_rel_sd: float = 0.0
    path_length: int = 0
    attribution: tuple[AttributionRow, ...] = ()
    culprit_axes: tuple[tuple[str, ...], ...] = ()
    unresolved: tuple[Unresolved, ...] = ()
    drift: tuple[dict[str, Any], ...] = ()
    log_dir: str | None = None
    threshold_interval: tuple[float, float] | None = None  # for a derived threshold
    threshold_basis: str = ""  # "given", or how many launches of each endpoint it rests on
    warnings: tuple[str, ...] = ()  # what a reader must know to trust the answer
    time_spent_s: float = 0.0  # the launches' stage times, summed: the time to this answer
    rounds: int = 0  # batches of launches (run at once with several slots)
    # "crossing first" (the default) or "all steps" (--all-steps), then "; " and the prior's
    # note where --prior-path weighed the commits
    search: str = "all steps"
    reused_launches: tuple[int, ...] = ()  # this session's launches that reused earlier ones
    seen: tuple[Unresolved, ...] = ()  # level changes seen on the way, not searched
    creep: tuple[Unresolved, ...] = ()  # level movement outside the steps, in no one step
    speculation: tuple[SpeedupRow, ...] = ()  # baseline = true: with/without speculation
    fidelity: Fidelity | None = None  # proxy launches: what they were, what the full model said
    # A provisional report (interrupted or running session): what remains to be launched.
    remaining: str | None = None
    # `bisect explain`'s result as JSON (perfbisect/explain/model.py `Explanation.to_json`,
    # versioned by its own `explanation_version`); None until the culprit is explained.
    why: dict[str, Any] | None = None
    # SGLang launches: the median time to ready and its phases, for the first launch of each
    # pin set and the later ones (targets/sglang/startup.py session_startup); None otherwise.
    startup: dict[str, Any] | None = None
    # The culprit is a merge: the branches searched inside it, outermost first (version 5).
    descent: tuple[MergeDescent, ...] = ()
    report_version: int = REPORT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a newer version, kept

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    @property
    def inside_culprit(self) -> Step | None:
        """The commit inside the merge(s) that crosses, as `git bisect` would name it: the
        innermost branch's culprit (None when the culprit is no merge, or no commit inside
        it crosses alone)."""
        found = [d.culprit for d in self.descent if d.culprit is not None]
        return found[-1] if found else None

    def point(self, position: int) -> PathPoint | None:
        return next((p for p in self.path if p.position == position), None)

    @property
    def legend(self) -> dict[str, str]:
        """The meaning of every verdict word this report shows."""
        shown = {p.verdict.value for p in self.path} | {a.verdict.value for a in self.attribution}
        return {word: text for word, text in VERDICT_MEANINGS.items() if word in shown}

    def to_json(self) -> dict[str, Any]:
        steps = [s.to_json() for s in self.steps]
        return {
            "report_version": self.report_version,
            "session": self.session,
            "status": self.status.value,
            "message": self.message,
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "threshold_ms": self.threshold_ms,
            "culprit": self.culprit.to_json() if self.culprit else None,
            "steps": steps,
            # Multi-axis searches: which axis sets were switched, and the culprit of each axis.
            "attribution": [a.to_json() for a in self.attribution],
            "culprit_axes": [list(a) for a in self.culprit_axes],
            "culprits": steps,
            "unresolved": [u.to_json() for u in self.unresolved],
            "evaluations": self.evaluations,
            "launches": self.launches,
            "failed_launches": self.failed_launches,
            "noise_rel_sd": self.noise_rel_sd,
            "path_length": self.path_length,
            "path": [p.to_json() for p in self.path],
            "drift": list(self.drift),
            "log_dir": self.log_dir,
            "threshold_interval": list(self.threshold_interval)
            if self.threshold_interval
            else None,
            "threshold_basis": self.threshold_basis,
            "warnings": list(self.warnings),
            "time_spent_s": self.time_spent_s,
            "rounds": self.rounds,
            "search": self.search,
            "reused_launches": list(self.reused_launches),
            "seen_not_searched": [u.to_json() for u in self.seen],
            "creep": [u.to_json() for u in self.creep],
            "speculation": [r.to_json() for r in self.speculation],
            "fidelity": self.fidelity.to_json() if self.fidelity else None,
            "remaining": self.remaining,
            "legend": self.legend,
            "why": self.why,
            "startup": self.startup,
            "descent": [d.to_json() for d in self.descent],
            "inside_culprit": self.inside_culprit.to_json() if self.inside_culprit else None,
            **self.extra,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"} | {
            "culprits",
            "seen_not_searched",
            "legend",
            "inside_culprit",
        }
        culprit = data.get("culprit")
        return cls(
            session=int(data["session"]),
            status=ReportStatus(data["status"]),
            message=str(data.get("message", "")),
            metric=str(data.get("metric", "value")),
            higher_is_better=bool(data.get("higher_is_better")),
            threshold_ms=data.get("threshold_ms"),
            culprit=Step.from_json(culprit) if culprit else None,
            steps=tuple(Step.from_json(s) for s in data.get("steps", [])),
            path=tuple(PathPoint.from_json(p) for p in data.get("path", [])),
            evaluations=int(data.get("evaluations", 0)),
            launches=int(data.get("launches", 0)),
            failed_launches=int(data.get("failed_launches", 0)),
            noise_rel_sd=float(data.get("noise_rel_sd", 0.0)),
            path_length=int(data.get("path_length", 0)),
            attribution=tuple(AttributionRow.from_json(a) for a in data.get("attribution", [])),
            culprit_axes=tuple(tuple(a) for a in data.get("culprit_axes", [])),
            unresolved=tuple(Unresolved.from_json(u) for u in data.get("unresolved", [])),
            drift=tuple(data.get("drift", [])),
            log_dir=data.get("log_dir"),
            threshold_interval=(
                (float(data["threshold_interval"][0]), float(data["threshold_interval"][1]))
                if data.get("threshold_interval")
                else None
            ),
            threshold_basis=str(data.get("threshold_basis", "")),
            warnings=tuple(data.get("warnings", [])),
            time_spent_s=float(data.get("time_spent_s", 0.0)),
            rounds=int(data.get("rounds", 0)),
            search=str(data.get("search", "all steps")),
            reused_launches=tuple(int(i) for i in data.get("reused_launches", [])),
            seen=tuple(Unresolved.from_json(u) for u in data.get("seen_not_searched", [])),
            creep=tuple(Unresolved.from_json(u) for u in data.get("creep", [])),
            speculation=tuple(SpeedupRow.from_json(r) for r in data.get("speculation", [])),
            fidelity=Fidelity.from_json(data.get("fidelity")),
            remaining=data.get("remaining"),
            why=data.get("why"),
            startup=data.get("startup"),
            descent=tuple(MergeDescent.from_json(d) for d in data.get("descent", [])),
            report_version=int(data.get("report_version", 1)),
            extra={k: v for k, v in data.items() if k not in known},
        )
