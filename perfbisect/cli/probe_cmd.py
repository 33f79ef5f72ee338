"""`perfbisect probe ...`: env-propagation and hardware."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from perfbisect.cli.context import ctx_store, emit_json

if TYPE_CHECKING:
    from perfbisect.hosts.base import Host

app = typer.Typer(
    rich_markup_mode=None,  # help texts hold [env], ssh://[user@]host: not markup
    help="Measure the environment: what reaches the processes, what the GPUs are.",
)
JSON = typer.Option(False, "--json", help="Print JSON.")
HOST = typer.Option(None, "--host", help="local (default) or ssh://[user@]host[:port].")
SSH_CONFIG = typer.Option(None, "--ssh-config", help="ssh config file instead of ~/.ssh/config.")
KNOWN_HOSTS = typer.Option(None, "--known-hosts", help="Extra known_hosts file.")
ACCEPT_NEW = typer.Option(
    False, "--accept-new-host-key", help="Trust (and save) an unknown host key. Never silent."
)
RETRY = typer.Option(None, "--retry-s", help="How long an unanswering host is retried.")


def _open_host(
    host: str | None,
    experiment_file: Path | None,
    ssh_config: str | None,
    known_hosts: str | None,
    accept_new: bool,
    retry_s: float | None = None,
) -> Host:
    from perfbisect.experiment import load_experiment
    from perfbisect.hosts.registry import open_host

    settings = load_experiment(experiment_file).host if experiment_file else None
    return open_host(
        host or (settings.address if settings else "local"),
        ssh_config=ssh_config or (settings.ssh_config if settings else None),
        known_hosts=known_hosts or (settings.known_hosts if settings else None),
        accept_new_host_key=accept_new or bool(settings and settings.accept_new_host_key),
        retry_s=retry_s if retry_s is not None else (settings.retry_s if settings else 30.0),
    )


def _record(
    ctx: typer.Context, kind: str, target: Host, snapshot: dict[str, Any], result: dict[str, Any]
) -> int:
    """Store a probe's (already redacted) result with the host's snapshot; its id."""
    from perfbisect.store.records import record_probe

    name = str(snapshot.get("host", target.address))
    return record_probe(ctx_store(ctx), kind, name, target.address, snapshot, result)


def _pairs(items: list[str]) -> dict[str, str]:
    from perfbisect.errors import UsageError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


@app.command("env-propagation")
def env_propagation(
    ctx: typer.Context,
    host: str | None = HOST,
    method: str = typer.Option(
        "direct,tmux,ssh,sitecustomize", "--method", help="Comma-separated launch methods."
    ),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE delivered by perfbisect."),
    watch: list[str] = typer.Option([], "--watch", help="NAME only observed (not delivered)."),
    experiment_file: Path | None = typer.Option(
        None, "-c", "--config", help="Experiment file: its [host], [launch] and [env]."
    ),
    gpu: bool = typer.Option(False, "--gpu", help="Also create a real NCCL communicator."),
    ssh_address: str | None = typer.Option(
        None, "--ssh-address", help="Where the ssh method goes from the local host."
    ),
    python: str | None = typer.Option(None, "--python", help="The host's Python for the probe."),
    ssh_config: str | None = SSH_CONFIG,
    known_hosts: str | None = KNOWN_HOSTS,
    accept_new_host_key: bool = ACCEPT_NEW,
    retry_s: float | None = RETRY,
    as_json: bool = JSON,
) -> None:
    """Which variables reach the shell, the Python parent, a spawn child and C getenv."""
    from perfbisect.cli.render_probe import render_env_propagation
    from perfbisect.errors import UsageError
    from perfbisect.experiment import load_experiment
    from perfbisect.launch.base import LaunchOptions, Method, launch_options
    from perfbisect.probes.env_propagation import ProbeRequest, run_probe
    from perfbisect.probes.hardware import hardware_snapshot

    methods = [Method.parse(m) for m in method.split(",") if m.strip()]
    if not methods:
        raise UsageError("--method names no launch method")
    experiment = load_experiment(experiment_file) if experiment_file else None
    deliver = {**(experiment.env if experiment else {}), **_pairs(env)}
    options = launch_options(experiment) if experiment else LaunchOptions()
    options = LaunchOptions(
        ssh_address=ssh_address or options.ssh_address,
        python=python or options.python,
        ssh_config=ssh_config or options.ssh_config,
        known_hosts=known_hosts or options.known_hosts,
        accept_new_host_key=accept_new_host_key or options.accept_new_host_key,
    )
    target = _open_host(
        host, experiment_file, ssh_config, known_hosts, accept_new_host_key, retry_s
    )
    try:
        snapshot = hardware_snapshot(target)
        gpus = len(snapshot.get("gpus", [])) if gpu else 0
        if gpu and not gpus:
            raise UsageError(f"--gpu: no NVIDIA GPU on {target.address} ({snapshot.get('nvml')})")
        request = ProbeRequest(
            methods=methods, deliver=deliver, watch=watch, gpus=gpus, python=python
        )
        result = run_probe(target, request, options)
    finally:
        target.close()
    result["probe_id"] = _record(ctx, "env-propagation", target, snapshot, result)
    if as_json:
        emit_json(result)
    else:
        render_env_propagation(result)
    if result["errors"] and len(result["errors"]) == len(methods):
        raise typer.Exit(1)


@app.command("hardware")
def hardware(
    ctx: typer.Context,
    host: str | None = HOST,
    ssh_config: str | None = SSH_CONFIG,
    known_hosts: str | None = KNOWN_HOSTS,
    accept_new_host_key: bool = ACCEPT_NEW,
    retry_s: float | None = RETRY,
    as_json: bool = JSON,
) -> None:
    """Driver, GPUs (clocks, PCIe link, power, temperature, throttling, ECC), NCCL, topology."""
    from perfbisect.cli.render_probe import render_hardware
    from perfbisect.probes.hardware import hardware_snapshot

    target = _open_host(host, None, ssh_config, known_hosts, accept_new_host_key, retry_s)
    try:
        snapshot = hardware_snapshot(target, full=True)
    finally:
        target.close()
    snapshot["address"] = target.address
    snapshot["probe_id"] = _record(ctx, "hardware", target, snapshot, snapshot)
    if as_json:
        emit_json(snapshot)
    else:
        render_hardware(snapshot)
