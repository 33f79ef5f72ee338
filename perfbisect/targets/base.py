"""What every target produces for one launch, and the protocol the session driver relies on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfbisect.config import Configuration


@dataclass(frozen=True)
class BuildInfo:
    status: str  # ok | failed | none
    cached: bool
    duration_s: float
    log_tail: str = ""


@dataclass(frozen=True)
class LaunchPlan:
    """The commands one launch runs after its build, with ``{placeholders}`` still in them: what
    the build step hands to the serve, ready and measure stages (a kind whose commands depend on
    the build, like sglang's interpreter and version, computes them there)."""

    measure: str
    serve: str | None = None
    ready: str | None = None
    build: str | None = None  # the build command as the user wrote it, for the record
    notes: tuple[str, ...] = ()  # what the build step says about this launch (its flags)

    def stages(self) -> dict[str, str]:
        """The commands by stage name, those that are set."""
        named = {"build": self.build, "serve": self.serve, "ready": self.ready}
        return {k: v for k, v in {**named, "measure": self.measure}.items() if v}


@dataclass(frozen=True)
class Measurement:
    """One launch's result: raw samples plus everything needed to trust (or doubt) them."""

    samples: list[float]
    timings: dict[str, float] = field(default_factory=dict)
    log_path: str | None = None
    flags: list[str] = field(default_factory=list)
    build: BuildInfo | None = None
    snapshot: dict[str, Any] = field(default_factory=dict)


class Target(Protocol):
    """Builds, serves and measures one configuration per call to ``launch``.

    ``launch`` raises ``StepFailed`` (stage + reason) for anything that prevents samples;
    it must leave no process behind, also on KeyboardInterrupt.
    """

    def launch(
        self, config: Configuration, log_dir: str, on_stage: Callable[[str], None] | None = None
    ) -> Measurement: ...

    def describe(self, config: Configuration) -> dict[str, Any]: ...

    def close(self) -> None:
        """Release connections to hosts (the session driver calls it once, at the end)."""
        ...

    def abort(self) -> None:
        """Stop the server of a launch running in another thread (Ctrl-C with several launches
        at once): that launch then fails and tears down as any failed launch does."""
        ...
