"""``direct``: the command spawned with an explicit environment (the controller's, plus the
experiment's ``[env]``). On a remote host the process starts through the ssh channel's
non-interactive shell, so there ``direct`` and ``ssh`` deliver alike."""

from __future__ import annotations

from perfbisect.hosts.base import Host, HostProcess
from perfbisect.launch.base import LaunchSpec, Method

SHELL = "/bin/sh"


class DirectLauncher:
    method = Method.DIRECT

    def start(self, host: Host, spec: LaunchSpec) -> HostProcess:
        env = {**spec.plain_env, **spec.tuning_env}
        return host.spawn(
            [SHELL, "-c", spec.command], cwd=spec.cwd, env=env, log_path=spec.log_path
        )
