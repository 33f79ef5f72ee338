"""Turning ``--good``/``--bad`` specs into configurations and the search path (driver side: git)."""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.bisect.axis_sets import SET_SEPARATOR, AxisPlan, join_set, split_set
from perfbisect.bisect.space import AxisValues, staircase_path
from perfbisect.config import (
    COMMIT_AXIS,
    DRIVER_AXIS,
    LAUNCH_AXIS,
    NCCL_AXIS,
    PATCHES_AXIS,
    Configuration,
    parse_spec,
)
from perfbisect.errors import UsageError
from perfbisect.experiment import LAUNCH_METHODS, Experiment
from perfbisect.targets.gitrepo import GitRepo


def _patch_value(given: str, experiment: Experiment, text: str, which: str) -> str:
    """``a.patch+b.patch`` (names as listed) or ``none`` -> content-keyed tokens, list order."""
    names = [] if given == "none" else [n for n in given.split(SET_SEPARATOR) if n]
    by_name = {p.name: p for p in experiment.patches}
    for name in names:
        if name not in by_name:
            listed = ", ".join(by_name) or "none"
            raise UsageError(
                f"--{which} {text!r}: patch {name!r} is not listed in [axes.patches] ({listed})"
            )
    return join_set([by_name[n].token for n in names], [p.token for p in experiment.patches])


@dataclass(frozen=True)
class Endpoints:
    good: Configuration
    bad: Configuration
    path: list[Configuration]  # the staircase for one axis; [good, bad] for a multi-axis search
    plans: list[AxisPlan]

    @property
    def multi_axis(self) -> bool:
        return (
            len(self.path) == 2
            and bool(self.plans)
            and (len(self.plans) > 1 or self.plans[0].kind == "set")
        )


def resolve_spec(
    text: str, experiment: Experiment, repo: GitRepo | None, which: str
) -> Configuration:
    given = parse_spec(text)
    known = experiment.axis_names()
    for axis in given:
        if axis not in known:
            raise UsageError(
                f"--{which} {text!r}: unknown axis {axis!r} "
                f"(this experiment has: {', '.join(known) or 'none'})"
            )
    values: dict[str, str] = {}
    if repo is not None:
        if COMMIT_AXIS not in given:
            raise UsageError(
                f"--{which} {text!r} names no commit (e.g. '{COMMIT_AXIS}=v1.2' or 'v1.2')"
            )
        values[COMMIT_AXIS] = repo.resolve(given[COMMIT_AXIS])
    if PATCHES_AXIS in given:
        values[PATCHES_AXIS] = _patch_value(given[PATCHES_AXIS], experiment, text, which)
    if DRIVER_AXIS in given:
        listed = experiment.driver.values if experiment.driver else ()
        if given[DRIVER_AXIS] not in listed:
            raise UsageError(
                f"--{which} {text!r}: driver {given[DRIVER_AXIS]!r} is not listed in "
                f"[axes.driver] ({', '.join(listed) or 'none'})"
            )
        values[DRIVER_AXIS] = given[DRIVER_AXIS]
    if NCCL_AXIS in given:
        if given[NCCL_AXIS] not in experiment.nccl:
            raise UsageError(
                f"--{which} {text!r}: NCCL {given[NCCL_AXIS]!r} is not listed in [axes.nccl] "
                f"({', '.join(experiment.nccl) or 'none'})"
            )
        values[NCCL_AXIS] = given[NCCL_AXIS]
    if LAUNCH_AXIS in given:
        if given[LAUNCH_AXIS] not in LAUNCH_METHODS:
            raise UsageError(
                f"--{which} {text!r}: unknown launch method {given[LAUNCH_AXIS]!r} "
                f"(known: {', '.join(LAUNCH_METHODS)})"
            )
        values[LAUNCH_AXIS] = given[LAUNCH_AXIS]
    for custom in experiment.custom_axes:
        value = given.get(custom.name, custom.values[0])
        if value not in custom.values:
            raise UsageError(
                f"--{which} {text!r}: value {value!r} is not listed for axis "
                f"{custom.name!r} (listed: {', '.join(custom.values)})"
            )
        values[custom.name] = value
    return Configuration.of(values, experiment.context())


def resolve_endpoints(good_text: str, bad_text: str, experiment: Experiment) -> Endpoints:
    repo = GitRepo(experiment.target.repo) if experiment.target.repo else None
    good = resolve_spec(good_text, experiment, repo, "good")
    bad = resolve_spec(bad_text, experiment, repo, "bad")
    # The launch method is part of a configuration only when a spec names it; the other
    # endpoint then uses the experiment's default method.
    for axis in (NCCL_AXIS, DRIVER_AXIS):
        if (good.get(axis) is None) != (bad.get(axis) is None):
            raise UsageError(f"name the {axis} value in both --good and --bad ({axis}=...)")
    for axis, default in ((LAUNCH_AXIS, experiment.launch.method), (PATCHES_AXIS, "")):
        # An axis named by one spec only: the other endpoint takes its default value.
        if (good.get(axis) is None) != (bad.get(axis) is None):
            if good.get(axis) is None:
                good = Configuration.of({**good.as_dict(), axis: default}, good.context)
            else:
                bad = Configuration.of({**bad.as_dict(), axis: default}, bad.context)
    differing = good.differing_axes(bad)
    if not differing:
        raise UsageError(f"--good and --bad name the same configuration ({good.label()})")
    plans = [_plan(axis, good, bad, experiment, repo) for axis in differing]
    if len(plans) > 1 or any(p.kind == "set" for p in plans):
        return Endpoints(good, bad, [good, bad], plans)
    segments = {p.name: list(p.values) for p in plans}
    return Endpoints(good, bad, staircase_path(good, bad, segments), plans)


def _plan(
    axis: str, good: Configuration, bad: Configuration, experiment: Experiment, repo: GitRepo | None
) -> AxisPlan:
    g, b = good.get(axis) or "", bad.get(axis) or ""
    if axis == COMMIT_AXIS:
        assert repo is not None
        return AxisPlan(axis, "path", tuple(repo.first_parent_path(g, b)))
    if axis == PATCHES_AXIS:
        have, want = split_set(g), split_set(b)
        if not set(have) <= set(want):
            raise UsageError(
                "--good's patches must be a subset of --bad's (the search adds patches)"
            )
        return AxisPlan(axis, "set", (g, b), tuple(t for t in want if t not in have))
    if axis in (NCCL_AXIS, DRIVER_AXIS):  # ordered as listed
        driver = experiment.driver.values if experiment.driver else ()
        listed = experiment.nccl if axis == NCCL_AXIS else driver
        return AxisPlan(axis, "path", tuple(AxisValues(axis, listed, True).segment(g, b)))
    spec = experiment.custom_axis(axis)
    if spec is None:  # launch: categorical
        return AxisPlan(axis, "path", (g, b))
    return AxisPlan(
        axis, "path", tuple(AxisValues(spec.name, spec.values, spec.ordered).segment(g, b))
    )
