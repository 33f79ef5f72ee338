"""The user's own OpenSSH client (``ssh``), for what must happen exactly as the user's
``ssh host cmd``: it reads ``~/.ssh/config`` (or ``--ssh-config``) and so honours ``SendEnv``,
``ProxyJump``, ``ControlMaster`` and ``Match`` blocks, which paramiko does not.

BatchMode is always on (no prompt can hang a search). Host keys follow the same policy as the
paramiko host: the user's config decides, an unknown key is refused (BatchMode turns "ask" into
"no"), and only an explicit ``accept_new_host_key`` adds ``StrictHostKeyChecking=accept-new``.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field

from perfbisect.hosts.base import CommandResult
from perfbisect.hosts.local import LocalHost


@dataclass
class OpenSshClient:
    host: str
    user: str | None = None
    port: int | None = None
    ssh_config: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    connect_timeout_s: float = 10.0
    _effective: dict[str, list[str]] | None = field(default=None, repr=False)

    @staticmethod
    def available() -> bool:
        return shutil.which("ssh") is not None

    def _base(self) -> list[str]:
        argv = ["ssh"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.user:
            argv += ["-l", self.user]
        return argv

    def effective(self) -> dict[str, list[str]]:
        """``ssh -G``: the client's effective configuration for this host (keyword -> values)."""
        if self._effective is None:
            result = LocalHost().run([*self._base(), "-G", "--", self.host], timeout_s=20)
            config: dict[str, list[str]] = {}
            for line in result.output.splitlines() if result.ok else []:
                key, _, value = line.partition(" ")
                config.setdefault(key.lower(), []).append(value.strip())
            self._effective = config
        return self._effective

    def send_env(self) -> list[str]:
        return [p for value in self.effective().get("sendenv", []) for p in value.split()]

    def argv(self, remote_command: str) -> list[str]:
        argv = [
            *self._base(),
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, int(self.connect_timeout_s))}",
        ]
        if self.known_hosts:
            files = self.effective().get("userknownhostsfile", ["~/.ssh/known_hosts"])
            argv += ["-o", f"UserKnownHostsFile={' '.join([*files, self.known_hosts])}"]
        if self.accept_new_host_key:
            argv += ["-o", "StrictHostKeyChecking=accept-new"]
        return [*argv, "--", self.host, remote_command]

    def run(
        self, remote_command: str, timeout_s: float = 60.0, script: str | None = None
    ) -> CommandResult:
        """``ssh host remote_command``; with ``script``, the command is ``/bin/sh -s`` and the
        script goes to its standard input: the login shell (bash, zsh, fish, csh...) then only
        has to start /bin/sh, after reading its start-up files as for any ``ssh host cmd``."""
        if script is not None:
            remote_command = "/bin/sh -s"
        data = script.encode() if script is not None else None
        return LocalHost().run(self.argv(remote_command), timeout_s=timeout_s, input=data)

    def describe(self) -> str:
        """The command line as the launch record shows it."""
        return shlex.join([*self._base(), "-o", "BatchMode=yes", self.host])

    def check(self) -> str | None:
        """Why the client cannot reach the host within seconds, or None when it can."""
        if not self.available():
            return "the OpenSSH client `ssh` is not installed (apt-get install openssh-client)"
        result = self.run("true", timeout_s=self.connect_timeout_s + 10)
        if result.ok:
            return None
        if result.timed_out:
            return f"`{self.describe()} true` did not answer within {self.connect_timeout_s:.0f}s"
        lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
        return f"`{self.describe()} true` failed: {lines[-1] if lines else f'exit {result.returncode}'}"
