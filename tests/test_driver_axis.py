"""The driver axis on the ssh test host. No NVIDIA driver can exist on this machine, so the
host's NVML is a *test double*: a `pynvml` module in the test user's site-packages that reports
the version written in ~/.fake_driver. Everything else is real: the switch hook runs through
ssh, the hardware probe runs with the host's Python, the bisect goes through the CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Cli
from sshd_fixture import SshServer

FAKE_NVML = '''\
"""Test double of NVML (pynvml): the driver version is the content of ~/.fake_driver."""
import os

PATH = os.path.expanduser("~/.fake_driver")


class NVMLError(Exception):
    pass


def nvmlInit():
    if not os.path.exists(PATH):
        raise NVMLError("test double: no ~/.fake_driver")


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    with open(PATH) as fh:
        return fh.read().strip()


def nvmlSystemGetCudaDriverVersion_v2():
    return 12080


def nvmlDeviceGetCount():
    return 0
'''

MEASURE = r"""
import os
driver = open(os.path.expanduser("~/.fake_driver")).read().strip()
value = 30.0 if driver.startswith("580") else 10.0
for i in range(5):
    print(f"verify_ms={value * (1 + 0.01 * ((i % 3) - 1)):.4f}")
"""


@pytest.fixture
def fake_nvml(ssh_server: SshServer) -> None:
    site = ssh_server.as_user("python3", "-c", "import site; print(site.getusersitepackages())")
    folder = Path(site.stdout.strip())
    ssh_server.as_user("mkdir", "-p", str(folder))
    (folder / "pynvml.py").write_text(FAKE_NVML)
    subprocess.run(
        ["chown", "-R", f"{ssh_server.user}:", str(ssh_server.home / ".local")], check=True
    )
    ssh_server.as_user("sh", "-c", "echo 570.86.15 > ~/.fake_driver")


def experiment(tmp_path: Path, server: SshServer, driver: str, retry: int = 30) -> Path:
    folder = tmp_path / "exp"
    folder.mkdir(exist_ok=True)
    (folder / "measure.py").write_text(MEASURE)
    path = folder / "perfbisect.toml"
    path.write_text(
        f"""
[target]
kind = "command"
measure = "python3 measure.py"
timeout_s = 60

[metric]
name = "verify_ms"
pattern = 'verify_ms=([0-9.]+)'

[host]
address = "{server.address}"
ssh_config = "{server.ssh_config}"
retry_s = {retry}

[axes.driver]
values = ["570.86.15", "580.65.06"]
{driver}
"""
    )
    return path


SPECS = ("--good", "driver=570.86.15", "--bad", "driver=580.65.06")


def test_switch_hook_then_bisect(
    cli: Cli, ssh_server: SshServer, fake_nvml: None, tmp_path: Path
) -> None:
    exp = experiment(tmp_path, ssh_server, 'switch = "echo {driver} > ~/.fake_driver"\nwait_s = 30')
    report = cli.json("bisect", "start", "-c", str(exp), *SPECS, "--json")
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["axis"] == "driver"
    assert report["culprit"]["first_bad"] == {"driver": "580.65.06"}
    launch = cli.json("query", "history", "--json")[-1]
    notes = cli.json("query", "show", str(launch["id"]), "--json")["snapshot"]["launch"]["notes"]
    assert any("NVML" in n for n in notes), notes


def test_failing_hook_mismatch_and_unreachable_host(
    cli: Cli, ssh_server: SshServer, fake_nvml: None, tmp_path: Path
) -> None:
    exp = experiment(tmp_path, ssh_server, 'switch = "echo no such driver >&2; exit 7"\nwait_s = 5')
    result = cli.run("bisect", "start", "-c", str(exp), *SPECS)
    assert result.returncode == 3, result.stderr
    assert "switch command failed" in result.stdout and "(exit 7)" in result.stdout
    # Both versions mapped to the one host that runs 570: the other cell is refused.
    both = (
        f'hosts = {{ "570.86.15" = "{ssh_server.address}", "580.65.06" = "{ssh_server.address}" }}'
    )
    exp = experiment(tmp_path, ssh_server, both)
    result = cli.run("bisect", "start", "-c", str(exp), *SPECS)
    assert result.returncode == 3
    assert "reports driver 570.86.15, not 580.65.06" in result.stdout
    # A host that does not answer: retried, then named.
    gone = f'hosts = {{ "570.86.15" = "{ssh_server.address}", "580.65.06" = "ssh://{ssh_server.user}@127.0.0.1:1" }}'
    exp = experiment(tmp_path, ssh_server, gone, retry=2)
    result = cli.run("bisect", "start", "-c", str(exp), *SPECS)
    assert result.returncode == 3
    assert "no answer for 2s" in result.stdout
