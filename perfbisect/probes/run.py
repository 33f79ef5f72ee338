"""Running a probe for a user: the host opened from flags or the experiment's ``[host]``, the
launch options merged, the probe run, its result stored with the host's snapshot. The CLI only
parses and renders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfbisect.errors import UsageError
from perfbisect.experiment import Experiment, load_experiment
from perfbisect.hosts.base import Host
from perfbisect.hosts.registry import open_host
from perfbisect.launch.base import LaunchOptions, Method, launch_options
from perfbisect.probes.env_propagation import ProbeRequest, run_probe
from perfbisect.probes.hardware import hardware_snapshot
from perfbisect.store.database import Store
from perfbisect.store.records import record_probe


@dataclass(frozen=True)
class HostChoice:
    """Where a probe runs: ``address`` (or the experiment's ``[host]``, else local) and how
    to reach it; flags win over the experiment file."""

    address: str | None = None
    experiment_file: Path | None = None
    ssh_config: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    retry_s: float | None = None


@dataclass(frozen=True)
class EnvPropagationRun:
    host: HostChoice
    methods: str = "direct,tmux,ssh,sitecustomize"  # comma-separated
    env: tuple[str, ...] = ()  # NAME=VALUE delivered by perfbisect
    watch: tuple[str, ...] = ()  # NAME only observed
    gpu: bool = False  # also create a real NCCL communicator
    ssh_address: str | None = None
    python: str | None = None


def open_probe_host(choice: HostChoice) -> Host:
    settings = load_experiment(choice.experiment_file).host if choice.experiment_file else None
    return open_host(
        choice.address or (settings.address if settings else "local"),
        ssh_config=choice.ssh_config or (settings.ssh_config if settings else None),
        known_hosts=choice.known_hosts or (settings.known_hosts if settings else None),
        accept_new_host_key=choice.accept_new_host_key
        or bool(settings and settings.accept_new_host_key),
        retry_s=choice.retry_s
        if choice.retry_s is not None
        else (settings.retry_s if settings else 30.0),
    )


def _pairs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _options(run: EnvPropagationRun, experiment: Experiment | None) -> LaunchOptions:
    base = launch_options(experiment) if experiment else LaunchOptions()
    return LaunchOptions(
        ssh_address=run.ssh_address or base.ssh_address,
        python=run.python or base.python,
        ssh_config=run.host.ssh_config or base.ssh_config,
        known_hosts=run.host.known_hosts or base.known_hosts,
        accept_new_host_key=run.host.accept_new_host_key or base.accept_new_host_key,
    )


def _record(store: Store, kind: str, host: Host, snapshot: dict[str, Any], result: Any) -> int:
    """Store a probe's (already redacted) result with the host's snapshot; its id."""
    name = str(snapshot.get("host", host.address))
    return record_probe(store, kind, name, host.address, snapshot, result)


def run_env_propagation(store: Store, run: EnvPropagationRun) -> dict[str, Any]:
    """Which variables reach each launch method's processes; the stored result (with its
    ``probe_id``)."""
    methods = [Method.parse(m) for m in run.methods.split(",") if m.strip()]
    if not methods:
        raise UsageError("--method names no launch method")
    experiment = load_experiment(run.host.experiment_file) if run.host.experiment_file else None
    deliver = {**(experiment.env if experiment else {}), **_pairs(run.env)}
    options = _options(run, experiment)
    host = open_probe_host(run.host)
    try:
        snapshot = hardware_snapshot(host)
        gpus = len(snapshot.get("gpus", [])) if run.gpu else 0
        if run.gpu and not gpus:
            raise UsageError(f"--gpu: no NVIDIA GPU on {host.address} ({snapshot.get('nvml')})")
        request = ProbeRequest(
            methods=methods, deliver=deliver, watch=list(run.watch), gpus=gpus, python=run.python
        )
        result = run_probe(host, request, options)
    finally:
        host.close()
    result["probe_id"] = _record(store, "env-propagation", host, snapshot, result)
    return result


def run_hardware(store: Store, choice: HostChoice) -> dict[str, Any]:
    """The host's full hardware snapshot, stored; with its ``address`` and ``probe_id``."""
    host = open_probe_host(choice)
    try:
        snapshot = hardware_snapshot(host, full=True)
    finally:
        host.close()
    snapshot["address"] = host.address
    snapshot["probe_id"] = _record(store, "hardware", host, snapshot, snapshot)
    return snapshot
