"""The launch protocol: a spec of what to start, and the methods that start it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from perfbisect.experiment import Experiment
from perfbisect.hosts.base import Host, HostProcess
from perfbisect.launch.method import Method

# Set on the machine, never to be lost on the way to a process we start (NVLink multicast
# can take a shared host's GPUs out of service): passed explicitly with every launch.
PRESERVED_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")

__all__ = [
    "PRESERVED_ENV",
    "CleanedUpProcess",
    "LaunchOptions",
    "LaunchSpec",
    "Launcher",
    "Method",
    "launch_options",
]


@dataclass(frozen=True)
class LaunchSpec:
    """What to start. ``tuning_env`` is the experiment's ``[env]``, delivered the method's way;
    ``plain_env`` (perfbisect's own ``PERFBISECT_*`` values) is set on the command for every
    method, because it carries placeholders, not tuning."""

    command: str  # shell text, placeholders already substituted and quoted
    cwd: str
    log_path: str  # on the host
    tag: str  # short unique name (tmux session, generated directories)
    tuning_env: Mapping[str, str] = field(default_factory=dict)
    plain_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchOptions:
    """Method settings from the experiment's ``[launch]`` table or the probe's flags."""

    ssh_address: str = "ssh://localhost"  # where the ssh method goes from the local host
    python: str = "python3"  # the Python the sitecustomize check runs
    ssh_config: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False


class CleanedUpProcess:
    """A started process plus generated files (holding delivered values, secrets among them)
    that are deleted when it is stopped, whatever else happens."""

    def __init__(self, inner: HostProcess, host: Host, paths: list[str]) -> None:
        self.inner = inner
        self.host = host
        self.paths = paths
        self.pid = inner.pid
        self.log_path = inner.log_path
        self.notes = inner.notes  # the same list: notes added later show in both

    def poll(self) -> int | None:
        return self.inner.poll()

    def log_tail(self, lines: int = 20) -> str:
        return self.inner.log_tail(lines)

    def tree_alive(self) -> list[int]:
        return self.inner.tree_alive()

    def stop(self, grace_s: float = 5.0) -> None:
        try:
            self.inner.stop(grace_s)
        finally:
            self.host.run(["rm", "-rf", *self.paths], timeout_s=30)


class Launcher(Protocol):
    method: Method

    def start(self, host: Host, spec: LaunchSpec) -> HostProcess:
        """Start ``spec`` on ``host``; raises ``StepFailed`` when it cannot be started."""
        ...


def launch_options(experiment: Experiment) -> LaunchOptions:
    return LaunchOptions(
        ssh_address=experiment.launch.ssh_address,
        python=experiment.launch.python,
        ssh_config=experiment.host.ssh_config,
        known_hosts=experiment.host.known_hosts,
        accept_new_host_key=experiment.host.accept_new_host_key,
    )
