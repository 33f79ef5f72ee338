"""The sglang target end to end through the CLI, without a GPU: perfbisect installs its verify
timer into a real Python environment, launches `python -m sglang.launch_server`, waits for
readiness, runs its workload, reads the timer and the server log, and tears down.

The server is a test double (tests/standin_sglang: SGLang itself needs a GPU). It is served
from a real environment (`build = "installed"`), its ModelRunner.forward is wrapped by the real
timer, and it really spends the verify time on the CPU. The GPU run of real SGLang is in
docs/examples/sglang_gpu.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import Cli, layered_env

from perfbisect.experiment import load_experiment
from perfbisect.hosts.local import LocalHost
from perfbisect.targets.sglang.target import SglangTarget

# One worker runs this module under pytest-xdist: its fixture is set up once, not per worker.
pytestmark = pytest.mark.xdist_group("sglang_e2e")

STANDIN = Path(__file__).with_name("standin_sglang") / "sglang"

EXPERIMENT = """
[target]
kind = "sglang"
build = "installed"
python = "{python}"
model = "{models}/target"
draft_model = "{models}/draft"
tp = 2
ready = "{ready}"
requests = 6
concurrency = 2
max_new_tokens = 16
warmup_requests = 1
timeout_s = {timeout}

[target.axis_args.graphs]
off = ["--disable-cuda-graph"]

[target.axis_args.fault]
never_ready = ["--stand-in-never-ready"]
http_error = ["--stand-in-http-error"]

[axes.custom.graphs]
values = ["on", "off"]
ordered = false

[axes.custom.fault]
values = ["none", "never_ready", "http_error"]
ordered = false
"""


@pytest.fixture(scope="module")
def served_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real environment whose site-packages holds the stand-in `sglang` package."""
    # Layered as perfbisect layers its own environments: the test runner's venv (torch) shows.
    python, site_dir = layered_env(sys.executable, tmp_path_factory.mktemp("sglang-env") / "venv")
    site = str(site_dir)
    assert site != sysconfig.get_paths()["purelib"]  # never the test runner's own
    shutil.copytree(STANDIN, Path(site) / "sglang")
    return str(python)


def _experiment(
    tmp_path: Path, python: str, ready: str = "health", timeout: int = 60, layers: int = 0
) -> None:
    """The experiment; ``layers`` (the stand-in's num_hidden_layers; 8 without a config.json)
    scales its forward times: 2 ms verify per 8 layers with graphs, 6 ms without."""
    models = tmp_path / "models"
    for name in ("target", "draft"):
        (models / name).mkdir(parents=True, exist_ok=True)
    if layers:
        (models / "target" / "config.json").write_text(json.dumps({"num_hidden_layers": layers}))
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(python=python, models=models, ready=ready, timeout=timeout)
    )


def test_bisect_names_the_axis_that_took_verify_out_of_cuda_graphs(
    cli: Cli, tmp_path: Path, served_python: str
) -> None:
    # 32 layers: 8 ms verify with graphs (a sleep: a replay leaves the CPU idle), 24 ms without
    # (work on the CPU). Fresh-clone CI on 2 loaded cores, when graphs were a 2 ms busy wait:
    # one 4 ms time slice made a good launch read the bad level (the load's cost a quantum
    # added, not a factor: back-to-back pairs read no step, "ambiguous"), and the launch
    # method read as a regression of its own (8 -> 12 ms, named beside graphs).
    _experiment(tmp_path, served_python, ready="log", layers=32)
    # Two axes differ (the launch method too, as on the GPU run): attribution must name graphs.
    report = cli.json(
        "bisect",
        "start",
        "--good",
        "graphs=on,launch=direct",
        "--bad",
        "graphs=off,launch=tmux",
        "--json",
        timeout=300,
    )
    assert report["status"] == "found", report["message"]
    assert report["culprit_axes"] == [["graphs"]]
    assert report["culprit"]["first_bad"]["graphs"] == "off"
    assert report["culprit"]["last_good"]["graphs"] == "on"
    assert report["culprit"]["effect_ms"]["delta"] > 8  # 8 ms -> 24 ms per rank and cycle
    log = cli.run("bisect", "log", "--json").stdout
    launches = json.loads(log)["launches"] if log.startswith("{") else json.loads(log)
    flags = {f for launch in launches for f in launch.get("flags", [])}
    assert "verify in CUDA graphs: 100% of cycles" in flags
    # the bad side, flagged as what it is: none of its cycles ran in a graph (not "some")
    assert "verify ran outside CUDA graphs in every cycle" in flags
    assert "verify left CUDA graphs in some cycles" not in flags
    assert "accept length 4.00" in flags  # from /server_info
    assert any(f.startswith("decode log: ") and "accept len 4.00" in f for f in flags)
    assert "server reports NCCL 2.27.7" in flags
    # The timer went into the served environment, never into the test runner's.
    assert not (Path(sysconfig.get_paths()["purelib"]) / "perfbisect_verify_timer.pth").exists()


@pytest.mark.parametrize(
    "fault,message",
    [
        ("never_ready", "did not answer 200 within 8s"),
        ("http_error", "answered HTTP 400 to /generate: "),
    ],
)
def test_a_failing_server_is_a_clear_skip_not_a_hang(
    cli: Cli, tmp_path: Path, served_python: str, fault: str, message: str
) -> None:
    _experiment(tmp_path, served_python, timeout=8)
    result = cli.run(
        "bisect",
        "start",
        "--good",
        "fault=none",
        "--bad",
        f"fault={fault}",
        "--json",
        timeout=120,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert message in report["message"], report["message"]
    assert "stand-in refuses" in report["message"] or fault != "http_error"
    if fault == "never_ready":  # where it got: its HTTP server up, never ready
        assert "start-up reached: server done (the HTTP server starts)" in report["message"]


def test_a_model_path_missing_on_the_host(cli: Cli, tmp_path: Path, served_python: str) -> None:
    _experiment(tmp_path, served_python)
    shutil.rmtree(tmp_path / "models" / "draft")
    result = cli.run("bisect", "start", "--good", "graphs=on", "--bad", "graphs=off", "--json")
    assert result.returncode == 3
    report = json.loads(result.stdout)
    assert (
        f"draft_model {tmp_path / 'models' / 'draft'} does not exist on local"
        in (report["message"])
    )


def test_an_axis_value_in_axis_args_must_be_listed(cli: Cli, tmp_path: Path) -> None:
    _experiment(tmp_path, sys.executable)
    text = (tmp_path / "perfbisect.toml").read_text().replace("\noff = [", "\noof = [")
    (tmp_path / "perfbisect.toml").write_text(text)
    result = cli.run("bisect", "start", "--good", "graphs=on", "--bad", "graphs=off")
    assert result.returncode == 2  # a malformed experiment file, as everywhere
    assert "perfbisect.toml:17: key 'target.axis_args.graphs.oof'" in result.stderr
    assert "oof" in result.stderr and "is not a value of axis 'graphs'" in result.stderr


class _PortsHost(LocalHost):
    """A real local host whose kernel would hand out the given ports first."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__()
        self.ports = ports

    def free_port(self) -> int:
        return self.ports.pop(0) if self.ports else super().free_port()


def test_the_port_leaves_room_for_the_ports_sglang_derives(tmp_path: Path) -> None:
    _experiment(tmp_path, sys.executable)
    experiment = load_experiment(tmp_path / "perfbisect.toml")
    with socket.socket() as busy:  # a port whose derived gRPC port (+10000) is taken
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        host = _PortsHost([60999, 55536, taken - 10000, 40000])
        target = SglangTarget(experiment, tmp_path / "cache", host)
        assert target._free_port() == 40000


def test_dry_run_of_an_installed_sglang(cli: Cli, tmp_path: Path, served_python: str) -> None:
    _experiment(tmp_path, served_python)
    result = cli.json(
        "bisect", "start", "--good", "graphs=off", "--bad", "graphs=on", "--dry-run", "--json"
    )
    commands = result["commands"]
    assert commands["sglang_version"] == "0.5.12"  # what the environment's sglang says
    assert "no build: build = installed" in commands["build"][0]
    # The first configuration's args; its own graph flag leaves the graph sizes alone, and
    # SGLang's warm-up is skipped (the workload warms up itself).
    assert commands["serve"].endswith("--disable-cuda-graph --skip-server-warmup")
    assert "--cuda-graph-bs" not in commands["serve"]
    assert "left to the experiment's own --disable-cuda-graph" in commands["startup"]
    assert commands["ready"].endswith("/health_generate")
    assert not (tmp_path / "cache" / "logs").exists()  # nothing ran
    assert not (tmp_path / "cache" / "sglang-compile").exists()  # nor made: a dry run


PROXY_EXPERIMENT = """
[target]
kind = "sglang"
build = "installed"
python = "{python}"
model = "{models}/target"
draft_model = "{models}/draft"
tp = 1
ready = "log"
requests = 4
concurrency = 2
max_new_tokens = 16
warmup_requests = 1
timeout_s = 60
proxy = {{ layers = 2 }}

[target.axis_args.graphs]
off = ["--disable-cuda-graph"]

[target.axis_args.weights]
slow = ["--stand-in-slow-weights"]

[axes.custom.graphs]
values = ["on", "off"]
ordered = false

[axes.custom.weights]
values = ["fast", "slow"]
ordered = false
"""


def _proxy_experiment(tmp_path: Path, python: str) -> Path:
    """A model folder as a user has it: config, tokenizer, and weights a proxy must not touch."""
    models = tmp_path / "models"
    for name, layers in (("target", 16), ("draft", 1)):
        folder = models / name
        folder.mkdir(parents=True, exist_ok=True)
        config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers}
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "tokenizer.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "perfbisect.toml").write_text(PROXY_EXPERIMENT.format(python=python, models=models))
    return models


def _launches(cli: Cli) -> list[dict]:
    log = json.loads(cli.run("bisect", "log", "--json").stdout)
    return log["launches"] if isinstance(log, dict) else log


def test_proxy_launches_search_and_the_full_model_confirms(
    cli: Cli, tmp_path: Path, served_python: str
) -> None:
    models = _proxy_experiment(tmp_path, served_python)
    report = cli.json(
        "bisect", "start", "--good", "graphs=on", "--bad", "graphs=off", "--json", timeout=300
    )
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["first_bad"]["graphs"] == "off"
    fidelity = report["fidelity"]
    assert fidelity["searched_on"] == "proxy" and fidelity["fallback"] is None
    assert fidelity["proxy_launches"] >= 3 and fidelity["full_launches"] >= 4
    [check] = fidelity["checks"]
    assert check["confirmed"] is True, check["note"]
    assert "the full model confirmed it" in report["message"]
    # What the server received: proxy launches served a 2-layer config copy with dummy weights.
    launches = _launches(cli)
    proxy = [v for v in launches if any(f.startswith("proxy launch:") for f in v["flags"])]
    full = [v for v in launches if v["purpose"] == "confirm"]
    assert len(proxy) == fidelity["proxy_launches"] and len(full) == fidelity["full_launches"]
    proxy_log = (Path(proxy[0]["log"]) / "serve.log").read_text()
    argv = json.loads(proxy_log.split("[stand-in] argv: ")[1].splitlines()[0])
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--speculative-draft-load-format") + 1] == "dummy"
    served = Path(argv[argv.index("--model-path") + 1])
    assert served != models / "target" and "proxy-models" in str(served)
    assert json.loads((served / "config.json").read_text())["num_hidden_layers"] == 2
    assert (served / "tokenizer.json").resolve() == models / "target" / "tokenizer.json"
    assert not (served / "model.safetensors").exists()  # never the weights
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(models / "draft")
    full_log = (Path(full[0]["log"]) / "serve.log").read_text()
    full_argv = json.loads(full_log.split("[stand-in] argv: ")[1].splitlines()[0])
    assert "--load-format" not in full_argv
    assert full_argv[full_argv.index("--model-path") + 1] == str(models / "target")
    # 2 layers against 16: the proxy's verify is cheaper, and both show the step.
    assert max(check["good_values"]) > 2 * min(v["value"] for v in proxy)
    text = cli.run("bisect", "report").stdout
    print(text)
    assert "proxy launches: 2 layers, random weights" in text
    assert "full model, interleaved:" in text and "confirmed" in text


def test_a_regression_the_proxy_cannot_show_falls_back_to_full_launches(
    cli: Cli, tmp_path: Path, served_python: str
) -> None:
    _proxy_experiment(tmp_path, served_python)
    report = cli.json(
        "bisect", "start", "--good", "weights=fast", "--bad", "weights=slow", "--json", timeout=300
    )
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["first_bad"]["weights"] == "slow"
    fidelity = report["fidelity"]
    assert fidelity["searched_on"] == "full"
    assert "do not show the regression" in fidelity["fallback"]
    assert fidelity["proxy_launches"] >= 2 and fidelity["full_launches"] >= 3
    assert any("it may depend on the weights" in w for w in report["warnings"])
    # The proxy launches came first; every launch after them served the real config.
    launches = _launches(cli)
    n = fidelity["proxy_launches"]
    assert all(any(f.startswith("proxy launch:") for f in v["flags"]) for v in launches[:n])
    assert not any(f.startswith("proxy launch:") for v in launches[n:] for f in v["flags"])


def test_a_proxy_needs_a_model_folder(cli: Cli, tmp_path: Path) -> None:
    _proxy_experiment(tmp_path, sys.executable)
    path = tmp_path / "perfbisect.toml"
    hub = path.read_text().replace(f'model = "{tmp_path}/models/target"', 'model = "org/Kimi-K2"')
    path.write_text(hub)
    result = cli.run("bisect", "start", "--good", "graphs=on", "--bad", "graphs=off")
    assert result.returncode == 2
    assert "target.proxy" in result.stderr and "is a hub id" in result.stderr
    text = path.read_text().replace("proxy = { layers = 2 }", 'confirm = "full"')
    path.write_text(text)
    result = cli.run("bisect", "start", "--good", "graphs=on", "--bad", "graphs=off")
    assert result.returncode == 2 and "needs a proxy" in result.stderr


def test_baseline_shows_speculation_against_no_speculation(
    cli: Cli, tmp_path: Path, served_python: str
) -> None:
    """``baseline = true``: each endpoint is also served without the speculative flags; the
    report gives the speed-up of speculation at both ends. In the stand-in a decode token costs
    1 ms and a verify cycle (4 tokens) 2 ms with graphs, 6 ms without: speculation wins 2x at
    the good end and loses at the bad one, the team's symptom."""
    _experiment(tmp_path, served_python, ready="log")
    path = tmp_path / "perfbisect.toml"
    text = path.read_text().replace("tp = 2\n", "tp = 1\nbaseline = true\n")
    path.write_text(text.replace("max_new_tokens = 16", "max_new_tokens = 64"))
    report = cli.json(
        "bisect", "start", "--good", "graphs=on", "--bad", "graphs=off", "--json", timeout=300
    )
    assert report["status"] == "found", report["message"]
    good, bad = report["speculation"]
    assert good["end"] == "good" and bad["end"] == "bad"
    assert len(good["with_speculation_tokens_s"]) == len(good["without_speculation_tokens_s"]) == 2
    assert good["speedup"] > 1.2, good
    assert bad["speedup"] < 1.0, bad
    launches = _launches(cli)
    nospec = [
        v
        for v in launches
        if v["purpose"] == "baseline"
        and v["config"]
        and any(f.startswith("baseline launch:") for f in v["flags"])
    ]
    assert len(nospec) == 4
    argv = json.loads(
        (Path(nospec[0]["log"]) / "serve.log")
        .read_text()
        .split("[stand-in] argv: ")[1]
        .splitlines()[0]
    )
    assert not any(a.startswith("--speculative") for a in argv)
    text = cli.run("bisect", "report").stdout
    assert "speculation at the bad end" in text and "speculation is slower" in text
