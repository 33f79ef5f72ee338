"""A real one-node Slurm cluster for the tests (Debian's slurmctld/slurmd 22.05), as root and
without munge or accounting: `AuthType=auth/none`, `CredType=cred/none`, state, spool, pid and
log files in a temporary directory, ports of its own. The node declares 3 CPUs whatever the
machine has (`SlurmdParameters=config_overrides`), so three one-CPU jobs run at once. Both
daemons run in the foreground under this process and are stopped at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NODE = "pbnode"
PARTITION = "pbtest"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    daemons: list[subprocess.Popen[bytes]]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def squeue(self) -> list[str]:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        return [line for line in out.stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.terminate()
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def available() -> str | None:
    if os.geteuid() != 0:
        return "the one-node Slurm test cluster runs as root"
    for tool in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (apt-get install slurmctld slurmd slurm-client)"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start() -> SlurmCluster:
    root = Path(tempfile.mkdtemp(prefix="pb-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=pbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
InactiveLimit=0
KillWait=5
MinJobAge=2
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=3 State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = open(root / "daemons.log", "ab")  # noqa: SIM115 - closed with the processes
    ctld = subprocess.Popen(
        ["slurmctld", "-D", "-i", "-f", str(conf)], env=env, stdout=logs, stderr=logs
    )
    time.sleep(1.0)
    slurmd = subprocess.Popen(
        ["slurmd", "-D", "-f", str(conf), "-N", NODE], env=env, stdout=logs, stderr=logs
    )
    cluster = SlurmCluster(root, conf, [slurmd, ctld])
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sinfo", "-h", "-n", NODE, "-o", "%T"], env=env, capture_output=True, text=True
        )
        state = out.stdout.strip()
        if state == "idle":
            return cluster
        if any(d.poll() is not None for d in cluster.daemons):
            break
        time.sleep(0.5)
    log = (
        (root / "slurmctld.log").read_text(errors="replace")[-2000:]
        if (root / "slurmctld.log").exists()
        else ""
    )
    cluster.stop()
    raise RuntimeError(f"the test Slurm cluster did not come up (node state {state!r}): {log}")
