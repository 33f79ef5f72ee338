"""On the H200 machine: NVML hardware probe, NCCL's own report in env-propagation, and the
reference server's verify in and out of CUDA graphs. Skipped where there is no NVIDIA GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import GPU_COUNT, Cli

from perfbisect.config import Configuration
from perfbisect.experiment import load_experiment
from perfbisect.targets.reference.target import ReferenceTarget

pytestmark = pytest.mark.gpu


def test_probe_hardware_reports_every_gpu(cli: Cli) -> None:
    snapshot = cli.json("probe", "hardware", "--json")
    assert len(snapshot["gpus"]) == GPU_COUNT
    assert snapshot["driver"] and snapshot["cuda_driver"]
    for gpu in snapshot["gpus"]:
        assert gpu["name"] and gpu["uuid"].startswith("GPU-")
        assert gpu["sm_clock_max_mhz"] and gpu["memory_total_mib"] > 0
        assert gpu["throttle_reasons"] is not None


@pytest.mark.parametrize("method", ["direct", "tmux", "sitecustomize"])
def test_env_propagation_reaches_nccl(cli: Cli, method: str) -> None:
    result = cli.json(
        "probe", "env-propagation", "--gpu", "--method", method, "--env", "NCCL_ALGO=Ring", "--json"
    )
    assert result["errors"] == {}, result["errors"]
    nccl = result["nccl"][method]
    assert nccl["version"] and all(code == 0 for code in nccl["exit_codes"])
    assert len(nccl["ranks"]) == GPU_COUNT
    cells = result["matrix"]["NCCL_ALGO"][method]
    assert cells["nccl"] == {"status": "present", "value": "Ring"}
    assert cells["c_getenv"]["status"] == "present"


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_reference_verify_graph_and_eager(tmp_path: Path, mode: str) -> None:
    tp = min(2, GPU_COUNT)
    path = tmp_path / "perfbisect.toml"
    path.write_text(
        f'[target]\nkind = "reference"\ntp = {tp}\ndevice = "cuda"\nlayers = 8\nhidden = 2048\n'
        f"heads = 16\ncycles = 20\nwarmup = 3\ntimeout_s = 300\n"
        f'server_args = ["--verify-mode", "{mode}"]\n'
    )
    target = ReferenceTarget(load_experiment(path), tmp_path / "cache")
    m = target.launch(Configuration.of({}), str(tmp_path / "logs"))
    assert len(m.samples) == 20
    expected = "100%" if mode == "graph" else "0%"
    assert f"verify in CUDA graphs: {expected} of cycles" in m.flags
    assert m.snapshot["gpus"], "every launch stores the GPU snapshot"
