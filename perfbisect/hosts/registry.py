"""Hosts by address: ``local`` (the default) or ``ssh://[user@]host[:port]``."""

from __future__ import annotations

from perfbisect.errors import UsageError
from perfbisect.experiment import Experiment
from perfbisect.hosts.base import Host
from perfbisect.hosts.local import LocalHost


def open_host(address: str | None, **ssh_options: object) -> Host:
    """The host at ``address``; ssh options as in :class:`perfbisect.hosts.ssh.SshOptions`."""
    if not address or address == "local":
        return LocalHost()
    if address.startswith("ssh://") or "@" in address:
        from perfbisect.hosts.ssh import SshHost, SshOptions

        known = {k: v for k, v in ssh_options.items() if v is not None}
        try:
            options = SshOptions(**known)  # type: ignore[arg-type]
        except TypeError as exc:
            raise UsageError(f"host {address!r}: {exc}") from None
        return SshHost(address, options)
    raise UsageError(f"host {address!r}: expected 'local' or ssh://[user@]host[:port]")


def open_experiment_host(experiment: Experiment, address: str | None = None) -> Host:
    """The experiment's ``[host]`` (or ``address``, reached with that table's ssh options)."""
    settings = experiment.host
    return open_host(
        address or settings.address,
        ssh_config=settings.ssh_config,
        known_hosts=settings.known_hosts,
        accept_new_host_key=settings.accept_new_host_key,
        retry_s=settings.retry_s,
    )
