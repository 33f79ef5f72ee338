"""A real OpenSSH server on 127.0.0.1 for a throwaway test user (root needed; skipped if not).

Everything is generated per test session: host key, client key, sshd config, a user created with
`useradd -m` (Debian's skeleton: `.bashrc` with the non-interactive guard, `.profile` sourcing
it) whose home lives in a directory the tests own. At the end sshd is stopped, every process of
the user is killed (their tmux server included) and the user is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    home: Path
    ssh_config: Path
    known_hosts: Path
    root: Path

    @property
    def address(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    @property
    def root_address(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    @property
    def dropins(self) -> Path:
        return self.root / "sshd_config.d"

    def reload(self) -> None:
        """SIGHUP: sshd re-reads its configuration (drop-ins included) for new connections."""
        pid = int((self.root / "sshd.pid").read_text().strip())
        os.kill(pid, 1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # it re-executes itself, then listens again
            time.sleep(0.2)
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
        raise RuntimeError("sshd did not come back after SIGHUP")

    def as_user(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        # Not the tests' own tmux socket directory: the user's tmux is the one ssh sessions see.
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX_TMPDIR", "TMUX")}
        return subprocess.run(
            ["runuser", "-u", self.user, "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.home,
            env={**env, "HOME": str(self.home), "USER": self.user, "LOGNAME": self.user},
        )


def available() -> str | None:
    """Why the fixture cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (sshd switches users)"
    for tool in (SSHD, shutil.which("ssh-keygen"), shutil.which("useradd")):
        if not tool or not Path(tool).exists():
            return f"missing {tool or 'ssh-keygen/useradd'} (apt-get install openssh-server)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _user_database_lock() -> Iterator[None]:
    """One useradd/userdel at a time on this machine: the suite's parallel workers each start
    a server, and useradd can fail ("cannot lock /etc/passwd; try again later") while another
    one holds the lock."""
    with open("/tmp/perfbisect-test-users.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start() -> SshServer:
    root = Path(f"/tmp/perfbisect-sshd-{secrets.token_hex(4)}")
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    user = f"pbt{secrets.token_hex(3)}"
    home = root / "home" / user
    (root / "home").mkdir(mode=0o755)
    with _user_database_lock():
        subprocess.run(
            ["useradd", "-m", "-d", str(home), "-s", "/bin/bash", user], check=True, timeout=30
        )
        subprocess.run(["usermod", "-p", "*", user], check=True, timeout=30)  # no password
    keys = root / "keys"
    keys.mkdir(mode=0o755)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host")], check=True
    )
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "client")], check=True
    )
    auth = root / "authorized_keys"
    auth.mkdir(mode=0o755)
    pub = (keys / "client.pub").read_text()
    for name in (user, "root"):
        (auth / name).write_text(pub)
        (auth / name).chmod(0o644)
    port = _free_port()
    config = root / "sshd_config"
    # As Debian and Ubuntu ship it: drop-ins first (the first value of a keyword wins, AcceptEnv
    # accumulates). The site's drop-in accepts NCCL_* (what GPU clusters commonly add).
    dropins = root / "sshd_config.d"
    dropins.mkdir(mode=0o755)
    (dropins / "10-nccl.conf").write_text("AcceptEnv NCCL_*\n")
    config.write_text(
        f"Include {dropins}/*.conf\n"
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
        f"PidFile {root / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        # StrictModes no: sshd refused the keys under /tmp ("bad ownership or modes").
        f"UsePAM no\nPermitRootLogin prohibit-password\nAuthorizedKeysFile {auth}/%u\n"
        "StrictModes no\nAcceptEnv LANG LC_*\nSubsystem sftp internal-sftp\n"
        "PermitUserEnvironment no\nLogLevel VERBOSE\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    subprocess.run([SSHD, "-t", "-f", str(config)], check=True, timeout=30)
    subprocess.run([SSHD, "-f", str(config), "-E", str(root / "sshd.log")], check=True, timeout=30)
    deadline = time.monotonic() + 20
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd did not listen on {port}: {(root / 'sshd.log').read_text()}")
        time.sleep(0.1)
    host_pub = (keys / "host.pub").read_text().split()
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    known.chmod(0o644)
    client_config = root / "ssh_config"
    client_config.write_text(
        f"Host *\n  IdentityFile {keys / 'client'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n"
    )
    return SshServer(port, user, home, client_config, known, root)


def stop(server: SshServer) -> None:
    pid_file = server.root / "sshd.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().strip()), 15)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["pkill", "-KILL", "-u", server.user], capture_output=True, timeout=30)
    time.sleep(0.2)
    with _user_database_lock():
        subprocess.run(["userdel", "-r", "-f", server.user], capture_output=True, timeout=30)
    shutil.rmtree(server.root, ignore_errors=True)
