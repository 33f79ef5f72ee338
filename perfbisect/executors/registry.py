"""The target a session launches through: the experiment's target kind itself, or, for an
executor that runs each launch elsewhere (Slurm), a target that sends it there. Above
``targets/registry.py``, so the executors can make the kind's target on their nodes without an
import circle."""

from __future__ import annotations

from pathlib import Path

from perfbisect.experiment import Experiment
from perfbisect.targets.base import Target
from perfbisect.targets.registry import make_target as make_kind_target


def make_target(experiment: Experiment, cache_dir: Path) -> Target:
    if experiment.executor.kind == "slurm":  # each launch a Slurm job running the target there
        from perfbisect.executors.slurm import SlurmTarget

        return SlurmTarget(experiment, cache_dir)
    return make_kind_target(experiment, cache_dir)
