"""`perfbisect probe ...`: env-propagation and hardware."""

from __future__ import annotations

from pathlib import Path

import typer

from perfbisect.cli.context import ctx_store, emit_json

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
    from perfbisect.probes.run import EnvPropagationRun, HostChoice, run_env_propagation

    choice = HostChoice(
        host, experiment_file, ssh_config, known_hosts, accept_new_host_key, retry_s
    )
    run = EnvPropagationRun(choice, method, tuple(env), tuple(watch), gpu, ssh_address, python)
    result = run_env_propagation(ctx_store(ctx), run)
    if as_json:
        emit_json(result)
    else:
        render_env_propagation(result)
    if result["errors"] and len(result["errors"]) == len(result.get("methods", [])):
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
    from perfbisect.probes.run import HostChoice, run_hardware

    choice = HostChoice(host, None, ssh_config, known_hosts, accept_new_host_key, retry_s)
    snapshot = run_hardware(ctx_store(ctx), choice)
    if as_json:
        emit_json(snapshot)
    else:
        render_hardware(snapshot)
