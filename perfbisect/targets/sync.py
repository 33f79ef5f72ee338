"""Copying a source tree to a remote host, once per tree (keyed by its local path)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host

DONE = ".perfbisect-synced"


def _exclude_git(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if "/.git" in f"/{info.name}" else info


def sync_tree(host: Host, local: Path) -> str:
    """The tree's directory on ``host``, copied there (without .git) if not yet present.
    Worktrees are per commit and never change, so the local path identifies the content."""
    key = hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:16]
    remote = f"{host.cache_dir()}/trees/{key}"
    if host.read_text(f"{remote}/{DONE}") is not None:
        return remote
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(str(local), arcname=".", filter=_exclude_git)
    archive = f"{remote}.tar.gz"
    host.write_file(archive, buffer.getvalue())
    result = host.run(
        [
            "sh",
            "-c",
            'rm -rf "$1" && mkdir -p "$1" && tar -xzf "$2" -C "$1" && rm -f "$2" && touch "$1/$3"',
            "sync",
            remote,
            archive,
            DONE,
        ],
        timeout_s=600,
    )
    if not result.ok:
        raise StepFailed("checkout", f"copying {local} to {host.address} failed: {result.tail(5)}")
    return remote
