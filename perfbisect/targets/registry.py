"""Target kinds by name, made from their declarations (targets/kinds.py). Imports are lazy so
that `perfbisect --help` stays fast."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import cast

from perfbisect.errors import ExperimentError
from perfbisect.experiment import Experiment
from perfbisect.targets.base import Target
from perfbisect.targets.kinds import KINDS


def make_target(experiment: Experiment, cache_dir: Path) -> Target:
    """The experiment's target kind, launching where perfbisect runs (or on its ``[host]``);
    ``executors/registry.py`` wraps it for executors that launch elsewhere."""
    kind = KINDS.get(experiment.target.kind)
    if kind is None:
        raise ExperimentError(
            f"{experiment.path}: target kind {experiment.target.kind!r} is not available"
        )
    module, _, name = kind.factory.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cast(Target, cls(experiment, cache_dir))
