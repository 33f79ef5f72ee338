"""The ``driver`` axis: a driver version cannot change inside a process, so a configuration
either runs on the host mapped to its version (``[axes.driver.hosts]``), or a switch hook runs
on the host (``switch = "sudo /opt/drivers/use {driver} && sudo reboot"``) and perfbisect waits
for the host to come back. Either way NVML must report the expected driver before anything is
measured; a mismatch is an error, never a measurement of the wrong cell."""

from __future__ import annotations

import shlex
import time

from perfbisect.errors import HostError, StepFailed
from perfbisect.hosts.base import Host
from perfbisect.probes.hardware import hardware_snapshot

POLL_S = 5.0


def reported(host: Host) -> str | None:
    snapshot = hardware_snapshot(host, timeout_s=60)
    driver = snapshot.get("driver")
    return str(driver) if driver else None


def ensure_driver(host: Host, wanted: str, switch: str | None, wait_s: float) -> str:
    """Make ``host`` run driver ``wanted`` (or fail); returns a note for the launch."""
    current = reported(host)
    if current == wanted:
        return f"driver {wanted} confirmed by NVML on {host.address}"
    if not switch:
        raise StepFailed(
            "driver",
            f"{host.address} reports driver {current or 'none (no NVML)'}, not {wanted}; map the "
            "version to a host in [axes.driver.hosts] or give [axes.driver] switch",
        )
    command = switch.replace("{driver}", shlex.quote(wanted))
    try:
        result = host.run(["sh", "-c", command], timeout_s=wait_s)
        if not result.ok:
            raise StepFailed(
                "driver",
                f"switch command failed on {host.address} (exit {result.returncode}): "
                f"{result.tail(5)}",
            )
    except HostError:
        pass  # the hook rebooted the host: the connection went with it
    host.close()
    deadline = time.monotonic() + wait_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            current = reported(host)
        except HostError as exc:
            last = exc.reason
        else:
            if current == wanted:
                return f"driver switched to {wanted} on {host.address} (NVML confirms)"
            last = f"reports driver {current or 'none'}"
        time.sleep(POLL_S)
    raise StepFailed("driver", f"{host.address} after the switch to {wanted}: {last}")
