"""Installing the verify timer into a build's environment (a ``.pth`` + the boot module)."""

from __future__ import annotations

from perfbisect.hosts.base import Host
from perfbisect.remote import program

BOOT = program("verify_timer_boot.py")
MODULE = "perfbisect_verify_timer"
PTH_LINE = f"import {MODULE}\n"  # only the import: the module itself stays torch-free


def install_timer(host: Host, site_packages: str) -> list[str]:
    """Write the boot module and its .pth into ``site_packages`` on ``host``; the paths."""
    module = f"{site_packages}/{MODULE}.py"
    pth = f"{site_packages}/{MODULE}.pth"
    host.write_file(module, BOOT.read_bytes())
    host.write_file(pth, PTH_LINE.encode())
    return [module, pth]
