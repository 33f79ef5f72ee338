"""A host reached over ssh (fabric/paramiko), honouring ``~/.ssh/config`` and key authentication.

Host keys: an unknown key is refused with a message that shows its fingerprint and says how to
trust it; only an explicit ``accept_new_host_key`` (or ``StrictHostKeyChecking accept-new`` in
the ssh config) adds it, and says so. A changed key is always refused. A host that does not
answer (reboot, network) is retried with exponential back-off up to ``retry_s``, then
``HostUnreachable``.

Long-running processes are started detached (``setsid nohup``) with their pid and exit status
in files next to the log, so they are tracked (and stopped) through later commands, not through
a channel that would die with the connection.
"""

from __future__ import annotations

import base64
import shlex
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from perfbisect.errors import HostError, HostUnreachable, UsageError
from perfbisect.hosts.base import (
    CommandResult,
    read_exit_status,
    shell_line,
    stop_tree,
    tree_of,
)
from perfbisect.hosts.openssh import OpenSshClient

if TYPE_CHECKING:  # fabric is imported lazily: `perfbisect --help` must stay fast
    import fabric
    import paramiko


@dataclass(frozen=True)
class SshAddress:
    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> SshAddress:
        """``ssh://[user@]host[:port]`` (also plain ``[user@]host``)."""
        raw = text if "://" in text else f"ssh://{text}"
        parts = urlsplit(raw)
        if parts.scheme != "ssh" or not parts.hostname:
            raise UsageError(f"host {text!r}: expected ssh://[user@]host[:port] or 'local'")
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"host {text!r}: the port is not a number") from None
        return cls(parts.hostname, parts.username, port)

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"ssh://{user}{self.host}{port}"


@dataclass(frozen=True)
class SshOptions:
    ssh_config: str | None = None  # instead of ~/.ssh/config (and /etc/ssh/ssh_config)
    known_hosts: str | None = None  # extra known_hosts file (also UserKnownHostsFile)
    accept_new_host_key: bool = False
    retry_s: float = 300.0  # how long an unanswering host is retried before HostUnreachable
    connect_timeout_s: float = 10.0


def _fingerprint(key: paramiko.PKey) -> str:
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key


def _policies(save_to: Path | None, announce: bool) -> tuple[Any, Any]:
    import paramiko

    class Refuse(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise _UnknownHostKey(hostname, key)

    class AcceptNew(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            client.get_host_keys().add(hostname, key.get_name(), key)
            if save_to is not None:
                save_to.parent.mkdir(parents=True, exist_ok=True)
                with open(save_to, "a") as fh:
                    fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            if announce:
                print(
                    f"perfbisect: trusting the new host key of {hostname} ({_fingerprint(key)})"
                    + (f", saved to {save_to}" if save_to else ""),
                    file=sys.stderr,
                )

    return Refuse(), AcceptNew()


class SshProcess:
    """A detached process on an ssh host: pid, exit status and log live in files there."""

    def __init__(self, host: SshHost, pid: int, log_path: str, exit_path: str) -> None:
        self.host = host
        self.pid = pid
        self.log_path = log_path
        self.exit_path = exit_path
        self.notes: list[str] = []

    def poll(self) -> int | None:
        status = read_exit_status(self.host, self.exit_path)
        if status is not None:
            return status
        if not self.host.alive([self.pid]):
            return -1  # gone without writing its status (killed)
        return None

    def log_tail(self, lines: int = 20) -> str:
        text = self.host.read_text(self.log_path) or ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        stop_tree(self.host, self.pid, grace_s)

    def tree_alive(self) -> list[int]:
        return self.host.alive([self.pid, *self.host.descendants(self.pid)])


class SshHost:
    is_local = False

    def __init__(self, address: str | SshAddress, options: SshOptions | None = None) -> None:
        self.target = address if isinstance(address, SshAddress) else SshAddress.parse(address)
        self.address = str(self.target)
        self.options = options or SshOptions()
        self._conn: fabric.Connection | None = None
        self._home: str | None = None

    # ---- connection -------------------------------------------------------------------------

    def _new_connection(self) -> fabric.Connection:
        import fabric

        config = (
            fabric.Config(runtime_ssh_path=self.options.ssh_config)
            if self.options.ssh_config
            else fabric.Config()
        )
        conn = fabric.Connection(
            self.target.host,
            user=self.target.user,
            port=self.target.port,
            config=config,
            connect_timeout=int(self.options.connect_timeout_s),
        )
        client = conn.client
        client.load_system_host_keys()
        files = [
            Path(f).expanduser()
            for f in (
                conn.ssh_config.get("userknownhostsfile", "").split()
                + ([self.options.known_hosts] if self.options.known_hosts else [])
            )
        ]
        for f in files:
            if f.is_file():
                client.load_host_keys(str(f))
        strict = str(conn.ssh_config.get("stricthostkeychecking", "")).lower()
        accept = self.options.accept_new_host_key or strict in ("accept-new", "no")
        save_to = files[0] if files else Path("~/.ssh/known_hosts").expanduser()
        refuse, accept_new = _policies(save_to, announce=True)
        client.set_missing_host_key_policy(accept_new if accept else refuse)
        return conn

    def connection(self) -> fabric.Connection:
        if self._conn is not None and self._conn.is_connected:
            return self._conn
        import paramiko

        deadline = time.monotonic() + self.options.retry_s
        delay = 1.0
        last = "no attempt"
        while True:
            conn = self._new_connection()
            try:
                conn.open()
                self._conn = conn
                return conn
            except _UnknownHostKey as exc:
                port = f"-p {self.target.port} " if self.target.port else ""
                raise HostError(
                    self.address,
                    f"unknown host key {_fingerprint(exc.key)} for {exc.hostname}; refused. "
                    f"Check the fingerprint, then trust it with `ssh-keyscan {port}"
                    f"{self.target.host} >> ~/.ssh/known_hosts` or pass --accept-new-host-key "
                    "([host] accept_new_host_key = true)",
                ) from None
            except paramiko.BadHostKeyException as exc:
                raise HostError(
                    self.address,
                    f"the host key changed ({_fingerprint(exc.key)}, expected "
                    f"{_fingerprint(exc.expected_key)}); refused. If the host was reinstalled, "
                    "remove the old key with `ssh-keygen -R`",
                ) from None
            except paramiko.AuthenticationException as exc:
                raise HostError(
                    self.address,
                    f"authentication failed ({exc}); perfbisect uses key authentication: check "
                    "IdentityFile in your ssh config or your ssh-agent",
                ) from None
            except (OSError, EOFError, paramiko.SSHException) as exc:
                last = f"{type(exc).__name__}: {exc}"
                conn.close()
            if time.monotonic() + delay > deadline:
                raise HostUnreachable(
                    self.address, f"no answer for {self.options.retry_s:.0f}s (last: {last})"
                )
            time.sleep(delay)
            delay = min(delay * 2, 30.0)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ---- commands ---------------------------------------------------------------------------

    def run_shell(self, script: str, *, timeout_s: float = 60.0) -> CommandResult:
        """Run shell text through the remote login shell, exactly as ``ssh host 'script'``."""
        import paramiko
        from invoke.exceptions import CommandTimedOut

        conn = self.connection()
        start = time.monotonic()
        try:
            result = conn.run(
                script, hide=True, warn=True, timeout=timeout_s, in_stream=False, pty=False
            )
        except CommandTimedOut as exc:
            out = (exc.result.stdout or "") + (exc.result.stderr or "")
            return CommandResult(-9, out, time.monotonic() - start, True)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self.close()
            raise HostUnreachable(self.address, f"connection lost: {exc}") from None
        output = (result.stdout or "") + (result.stderr or "")
        return CommandResult(result.exited, output, time.monotonic() - start)

    def run_script(self, script: str, *, timeout_s: float = 60.0) -> CommandResult:
        """``/bin/sh -s`` through the login shell with ``script`` on its standard input."""

        import paramiko

        conn = self.connection()
        start = time.monotonic()
        try:
            channel = conn.client.get_transport().open_session()
            channel.settimeout(timeout_s)
            channel.set_combine_stderr(True)
            channel.exec_command("/bin/sh -s")
            channel.sendall(script.encode())
            channel.shutdown_write()
            chunks = []
            while True:
                data = channel.recv(65536)
                if not data:
                    break
                chunks.append(data)
            code = channel.recv_exit_status()
            channel.close()
        except TimeoutError:
            return CommandResult(-9, "", time.monotonic() - start, True)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self.close()
            raise HostUnreachable(self.address, f"connection lost: {exc}") from None
        output = b"".join(chunks).decode(errors="replace")
        return CommandResult(code, output, time.monotonic() - start)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
        log_path: Path | None = None,
    ) -> CommandResult:
        # `timeout` kills the command on the host too: a dropped channel alone would not.
        line = shell_line(["timeout", "-k", "5", f"{max(1, int(timeout_s))}", *argv], cwd, env)
        result = self.run_shell(f"{line} 2>&1", timeout_s=timeout_s + 15)
        if result.returncode == 124 and not result.timed_out:
            result = CommandResult(124, result.output, result.duration_s, True)
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(result.output)
        return result

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        log_path: str,
    ) -> SshProcess:
        return self.spawn_shell(shell_line(argv, cwd, env), log_path=log_path)

    def openssh(self) -> OpenSshClient:
        """The user's OpenSSH client pointed at this host, with this host's ssh settings."""
        return OpenSshClient(
            self.target.host,
            user=self.target.user,
            port=self.target.port,
            ssh_config=self.options.ssh_config,
            known_hosts=self.options.known_hosts,
            accept_new_host_key=self.options.accept_new_host_key,
            connect_timeout_s=self.options.connect_timeout_s,
        )

    def spawn_shell(
        self, script: str, *, log_path: str, client: OpenSshClient | None = None
    ) -> SshProcess:
        """Start shell text detached in its own session; the pid is the group leader. With
        ``client`` the start goes through the user's OpenSSH client (its SendEnv, ProxyJump,
        Match...), so the process gets that world's environment; control stays here."""
        exit_path = f"{log_path}.exit"
        inner = f"{script}\necho $? > {shlex.quote(exit_path)}"
        wrapper = (
            f"mkdir -p {shlex.quote(str(Path(log_path).parent))} && "
            f"rm -f {shlex.quote(exit_path)} && "
            f"(setsid sh -c {shlex.quote(inner)} > {shlex.quote(log_path)} 2>&1 < /dev/null &"
            " echo $!)"
        )
        # Through /bin/sh's standard input: whatever the login shell is (fish, csh), it only
        # starts /bin/sh, and the wrapper's sh syntax never meets it.
        result = (
            client.run("", timeout_s=60, script=wrapper)
            if client
            else self.run_script(wrapper, timeout_s=60)
        )
        try:
            pid = int(result.output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HostError(self.address, f"could not start a process: {result.tail(5)}") from None
        return SshProcess(self, pid, log_path, exit_path)

    # ---- files ------------------------------------------------------------------------------

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        conn = self.connection()
        self.run(["mkdir", "-p", str(Path(path).parent)])
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        sftp = conn.sftp()
        with sftp.open(tmp, "wb") as fh:
            fh.chmod(mode)  # before any byte is written: a 0600 secret file is never readable
            fh.write(data)
        sftp.chmod(tmp, mode)
        sftp.posix_rename(tmp, path)

    def read_text(self, path: str) -> str | None:
        if path.startswith("~/"):
            path = f"{self.home()}/{path[2:]}"
        sftp = self.connection().sftp()
        try:
            with sftp.open(path, "r") as fh:
                data: bytes = fh.read()
        except OSError:
            return None
        return data.decode(errors="replace")

    def home(self) -> str:
        if self._home is None:
            result = self.run_shell('printf %s "$HOME"')
            self._home = result.output.strip() or "/tmp"
        return self._home

    def cache_dir(self) -> str:
        return f"{self.home()}/.cache/perfbisect"

    # ---- ports and processes ----------------------------------------------------------------

    def _python(self, code: str) -> str:
        result = self.run(["python3", "-c", code])
        if not result.ok:
            raise HostError(self.address, f"python3 failed on the host: {result.tail(3)}")
        return result.output.strip()

    def free_port(self) -> int:
        return int(
            self._python(
                "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"
            )
        )

    def port_in_use(self, port: int) -> bool:
        code = (
            "import socket;s=socket.socket();s.settimeout(0.5);"
            f"print(s.connect_ex(('127.0.0.1',{int(port)}))==0)"
        )
        return self._python(code) == "True"

    def _ps(self) -> list[tuple[int, int, str]]:
        result = self.run(["ps", "-e", "-o", "pid=,ppid=,stat="])
        rows = []
        for line in result.output.splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0].isdigit() and fields[1].isdigit():
                rows.append((int(fields[0]), int(fields[1]), fields[2]))
        return rows

    def descendants(self, pid: int) -> list[int]:
        return tree_of(pid, {p: pp for p, pp, _ in self._ps()})

    def alive(self, pids: Sequence[int]) -> list[int]:
        if not pids:
            return []
        live = {p for p, _, stat in self._ps() if not stat.startswith("Z")}
        return [p for p in pids if p in live]

    def signal(self, pids: Sequence[int], signame: str, group: bool = False) -> None:
        if not pids:
            return
        targets = [f"-{int(p)}" if group else str(int(p)) for p in pids]
        self.run(["kill", f"-{signame}", "--", *targets])
