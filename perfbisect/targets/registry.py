"""Target kinds by name. Imports are lazy so that `perfbisect --help` stays fast."""

from __future__ import annotations

from pathlib import Path

from perfbisect.errors import ExperimentError
from perfbisect.experiment import Experiment
from perfbisect.targets.base import Target


def make_target(experiment: Experiment, cache_dir: Path) -> Target:
    if experiment.executor.kind == "slurm":  # each launch a Slurm job running the target there
        from perfbisect.executors.slurm import SlurmTarget

        return SlurmTarget(experiment, cache_dir)
    kind = experiment.target.kind
    if kind == "command":
        from perfbisect.targets.command import CommandTarget

        return CommandTarget(experiment, cache_dir)
    if kind == "reference":
        from perfbisect.targets.reference.target import ReferenceTarget

        return ReferenceTarget(experiment, cache_dir)
    if kind == "sglang":
        from perfbisect.targets.sglang.target import SglangTarget

        return SglangTarget(experiment, cache_dir)
    raise ExperimentError(f"{experiment.path}: target kind {kind!r} is not available")
