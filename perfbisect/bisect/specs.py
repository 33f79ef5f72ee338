"""Turning ``--good``/``--bad`` specs into configurations and the search path (driver side: git)."""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.bisect.space import AxisValues, staircase_path
from perfbisect.config import COMMIT_AXIS, Configuration, parse_spec
from perfbisect.errors import UsageError
from perfbisect.experiment import LAUNCH_METHODS, Experiment
from perfbisect.targets.gitrepo import GitRepo

LAUNCH_AXIS = "launch"


@dataclass(frozen=True)
class Endpoints:
    good: Configuration
    bad: Configuration
    path: list[Configuration]


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
    if (good.get(LAUNCH_AXIS) is None) != (bad.get(LAUNCH_AXIS) is None):
        default = {LAUNCH_AXIS: experiment.launch.method}
        if good.get(LAUNCH_AXIS) is None:
            good = Configuration.of({**good.as_dict(), **default}, good.context)
        else:
            bad = Configuration.of({**bad.as_dict(), **default}, bad.context)
    differing = good.differing_axes(bad)
    if not differing:
        raise UsageError(f"--good and --bad name the same configuration ({good.label()})")
    segments: dict[str, list[str]] = {}
    for axis in differing:
        if axis == COMMIT_AXIS:
            assert repo is not None
            segments[axis] = repo.first_parent_path(good.get(axis) or "", bad.get(axis) or "")
        elif axis == LAUNCH_AXIS:
            segments[axis] = [good.get(axis) or "", bad.get(axis) or ""]  # categorical
        else:
            spec = experiment.custom_axis(axis)
            assert spec is not None
            segments[axis] = AxisValues(spec.name, spec.values, spec.ordered).segment(
                good.get(axis) or "", bad.get(axis) or ""
            )
    return Endpoints(good, bad, staircase_path(good, bad, segments))
