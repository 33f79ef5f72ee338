"""A real PostgreSQL server for the tests: Debian's postgresql, a throwaway cluster in a temp
directory, listening on 127.0.0.1 only, stopped at the end. initdb refuses to run as root:
then the cluster belongs to the `postgres` user that Debian's package creates."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class PgServer:
    data: Path
    port: int
    bin: Path
    user: list[str]  # the command prefix that runs as the cluster's owner

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        subprocess.run(
            [
                *self.user,
                str(self.bin / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                name,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            [
                *self.user,
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.data.parent, ignore_errors=True)


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def available() -> str | None:
    """Why a server cannot be started here, or None."""
    if binaries() is None:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]')"
    return None


def start() -> PgServer:
    bin_dir = binaries()
    assert bin_dir is not None
    root = Path(tempfile.mkdtemp(prefix="pb-pg-"))
    data = root / "data"
    user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        os.chmod(root, 0o755)
        user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(
        [
            *user,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [
            *user,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    return PgServer(data, port, bin_dir, user)
