"""``ssh``: ``ssh host 'cd DIR && VAR=... exec sh -c CMD'`` run by the user's own OpenSSH
client, so what reaches the server is what the user's ``ssh host cmd`` delivers: the variables
``SendEnv`` forwards (and sshd's ``AcceptEnv`` keeps), ProxyJump, ControlMaster, Match blocks,
and the remote shell's start-up files (Debian's ``~/.bashrc`` returns at once when not
interactive). From the local host it goes to ``[launch] ssh_address`` (default
``ssh://localhost``). Process control (poll, stop, logs) goes through the paramiko host."""

from __future__ import annotations

import shlex

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host, HostProcess
from perfbisect.hosts.ssh import SshHost, SshOptions, SshProcess
from perfbisect.launch.base import LaunchOptions, LaunchSpec, Method

SHELL = "/bin/sh"


def ssh_command(spec: LaunchSpec, env: dict[str, str], prefix: str = "") -> str:
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    return (
        f"cd {shlex.quote(spec.cwd)} && {prefix}{assigns + ' ' if assigns else ''}"
        f"exec {SHELL} -c {shlex.quote(spec.command)}"
    )


class _OwnedSshProcess(SshProcess):
    """A process on a connection opened only for it: stopping it closes the connection."""

    def stop(self, grace_s: float = 5.0) -> None:
        try:
            super().stop(grace_s)
        finally:
            self.host.close()


class SshLauncher:
    method = Method.SSH

    def __init__(self, options: LaunchOptions) -> None:
        self.options = options

    def ssh_host(self, host: Host) -> tuple[SshHost, bool]:
        """The ssh host to go through, and whether it was opened for this launch."""
        if isinstance(host, SshHost):
            return host, False
        options = SshOptions(
            ssh_config=self.options.ssh_config,
            known_hosts=self.options.known_hosts,
            accept_new_host_key=self.options.accept_new_host_key,
            retry_s=10.0,
        )
        return SshHost(self.options.ssh_address, options), True

    def start_with(
        self, host: Host, spec: LaunchSpec, env: dict[str, str], prefix: str = ""
    ) -> HostProcess:
        target, owned = self.ssh_host(host)
        client = target.openssh()
        if not client.available():
            raise StepFailed(
                "launch",
                "the OpenSSH client `ssh` is not installed (apt-get install openssh-client)",
            )
        try:
            process = target.spawn_shell(
                ssh_command(spec, env, prefix), log_path=spec.log_path, client=client
            )
        except BaseException:
            if owned:
                target.close()
            raise
        if owned:
            process = _OwnedSshProcess(target, process.pid, process.log_path, process.exit_path)
            process.notes.append(f"started through {target.address}")
        process.notes.append(f"command delivered by the OpenSSH client: {client.describe()}")
        return process

    def start(self, host: Host, spec: LaunchSpec) -> HostProcess:
        return self.start_with(host, spec, {**spec.plain_env, **spec.tuning_env})
