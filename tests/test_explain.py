"""`perfbisect bisect explain`: diagnostic launches of the reference server (real torch on
CPU, real profiler traces, real git history, real tmux), the NCCL log parser, the change's
functions from git, kernel-name grouping."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cli, make_repo

from perfbisect.explain.change import parse_diff
from perfbisect.explain.groups import group_of, nccl_kernel
from perfbisect.explain.nccl_log import not_taken, parse
from perfbisect.targets.reference.target import SERVER

DATA = Path(__file__).parent / "data"

EXPERIMENT = """
[target]
kind = "reference"
repo = "repo"
tp = {tp}
hidden = 256
max_seq = 640
prompt = 320
cycles = 14
warmup = 2
timeout_s = 180

[explain]
launches = 1
cycles = 6
skip = 3
"""

# The planted work: extra matrix products inside Rank.verify's timed region (on CPU).
VERIFY_HEAD = "            t0 = time.perf_counter_ns()\n"
EXTRA_MATMULS = (
    "            t0 = time.perf_counter_ns()\n"
    "            spare = self.model.layers[0]['up']\n"
    "            probe = self.model.embed[:64]\n"
    "            for _ in range({count}):  # a debug consistency check left in\n"
    "                probe = (probe @ spare)[:, :256]\n"
)


def _server(extra: str) -> str:
    text = SERVER.read_text()
    assert VERIFY_HEAD in text
    return text.replace(VERIFY_HEAD, extra, 1)


# ---- parsers and classifiers (no launch) ----------------------------------------------------


def test_nccl_log_parser_reads_versions_variables_and_communicators() -> None:
    processes = parse((DATA / "nccl_info_tp2.log").read_text().splitlines())
    assert [p.pid for p in processes] == [4101, 4102]
    first, second = processes
    assert first.version == "2.21.5+cuda12.4"
    assert second.version == "2.21.5+cuda12.4"  # from rank 0's bare line: it printed none
    assert first.taken == {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_HCA": "mlx5_0"}
    assert second.taken["NCCL_PROTO"] == "LL"
    (comm,) = first.communicators
    assert (comm.rank, comm.nranks, comm.cuda_dev, comm.tid) == (0, 2, 0, 4101)
    assert len(second.communicators) == 2  # two communicators in one process
    # the seed's failure: NCCL_PROTO in rank 0's environment, not taken by its communicator
    env = {"NCCL_PROTO": "LL", "NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO"}
    assert not_taken(first, env) == ["NCCL_PROTO"]
    assert not_taken(second, env) == []


def test_kernel_names_group_and_nccl_names_give_algorithm_and_protocol() -> None:
    assert group_of("aten::mm") == "GEMM"
    assert group_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "GEMM"
    assert (
        group_of("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
        == "all-reduce"
    )
    assert group_of("cross_device_reduce_1stage<__nv_bfloat16, 2>") == "all-reduce"
    assert group_of("fused_moe_kernel") == "MoE"
    assert group_of("flash_fwd_kernel") == "attention"
    assert group_of("Memcpy DtoH (Device -> Pinned)") == "memcpy"
    assert group_of("aten::_local_scalar_dense") == "synchronisation"
    assert group_of("aten::gelu") == "elementwise"
    ring = nccl_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert ring is not None and (ring.operation, ring.algorithm, ring.protocol) == (
        "AllReduce",
        "RING",
        "LL",
    )
    tree = nccl_kernel("ncclDevKernel_AllReduce_Sum_f32_TREE_SIMPLE")
    assert tree is not None and (tree.algorithm, tree.protocol) == ("TREE", "SIMPLE")
    assert nccl_kernel("aten::mm") is None


def test_the_change_names_the_functions_it_touched(tmp_path: Path) -> None:
    from perfbisect.targets.gitrepo import GitRepo

    repo = make_repo(
        tmp_path / "repo",
        [
            {"server.py": SERVER.read_text(), "README": "x\n"},
            {"server.py": _server(EXTRA_MATMULS.format(count=2)), "README": "y\n"},
        ],
    )
    git = GitRepo(repo.path)
    files = parse_diff(git.diff(*repo.shas), lambda path: git.show(repo.shas[1], path))
    by_path = {f.path: f for f in files}
    assert by_path["server.py"].functions == ("Rank.verify",)
    assert by_path["server.py"].added == 4 and by_path["server.py"].removed == 0
    assert "speculative/verify" in by_path["server.py"].flags
    assert by_path["README"].flags == ()


# ---- through the CLI, real launches ---------------------------------------------------------

torch_missing = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)


@torch_missing
def test_an_extra_matmul_in_verify_is_the_top_finding(cli: Cli, tmp_path: Path) -> None:
    """bisect start finds the commit, explains it by default (one diagnostic launch a side),
    and the top finding is the operator the commit added, with its share of the delta (with
    more launches a side where the default's were too noisy to apportion)."""
    repo = make_repo(
        tmp_path / "repo",
        [{"server.py": SERVER.read_text()}, {"server.py": _server(EXTRA_MATMULS.format(count=40))}],
    )
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT.format(tp=1))
    report = cli.bisect(repo.shas[0], repo.shas[1], timeout=900)
    assert report["status"] == "found", report["message"]
    first = report["why"]
    assert first is not None and report["report_version"] == 5
    assert report["culprit"]["first_bad"]["commit"] == repo.shas[1]
    # The default explanation (one diagnostic launch a side) names the planted operator, or,
    # where the machine's load makes the profiled verifies too noisy to apportion (a fresh-clone
    # CI run, 4 workers on 2 cores: +0.56 ms within +-2.34 ms), says so instead of guessing.
    declined = any("within 2 standard errors" in line for line in first["not_measured"])
    assert declined or (
        first["findings"][0]["kind"] == "operator" and "aten::mm" in first["findings"][0]["title"]
    ), (first["findings"], first["not_measured"])
    assert any(
        f["kind"] == "change" and "Rank.verify" in f["title"] and "speculative/verify" in f["title"]
        for f in first["findings"]
    ), first["findings"]
    for side in ("good", "bad"):
        assert first[side]["traces"] and all(Path(t).exists() for t in first[side]["traces"])
    assert any("NCCL" in line for line in first["not_measured"])  # CPU: said, not guessed
    assert first["cost"]["extra_s_per_launch"] is not None  # against the search's own launches
    # the diagnostic launches are in the history with their purpose, outside every verdict
    explained = [v for v in cli.json("bisect", "log", "--json") if v["purpose"] == "explain"]
    assert len(explained) == 2
    status = cli.json("bisect", "status", "--json")
    assert status["explain_launches"] == 2 and status["launches"] == report["launches"]
    # Explaining the session again with more launches a side (what a user does when it said
    # "too noisy") replaces its why with the new launches', and names the operator with its share.
    why = cli.json("bisect", "explain", "--launches", "3", "--json", timeout=600)
    assert why["session_id"] == report["session"]
    top = why["findings"][0]
    assert top["kind"] == "operator" and "aten::mm" in top["title"], (
        why["findings"],
        why["not_measured"],
    )
    assert top["share"] > 0.3, top  # the planted products dominate the verify delta
    assert why["bad"]["groups"]["GEMM"] > why["good"]["groups"]["GEMM"]
    assert len([v for v in cli.json("bisect", "log", "--json") if v["purpose"] == "explain"]) == 8
    stored = cli.json("bisect", "report", "--json")
    assert stored["why"]["good"]["launch_ids"] == why["good"]["launch_ids"]
    text = cli.run("bisect", "report")
    assert text.returncode == 0, text.stderr
    assert "why (" in text.stdout and "aten::mm (GEMM)" in text.stdout
    page = tmp_path / "report.html"
    assert cli.run("bisect", "report", "--html", str(page)).returncode in (0,)
    assert "Why (bisect explain)" in page.read_text() and "aten::mm" in page.read_text()


@torch_missing
@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")
def test_a_launch_axis_difference_names_the_variable_and_where_it_reached(
    cli: Cli, tmp_path: Path
) -> None:
    """Same commit, launched directly (good) and in tmux (bad): the tmux server's global
    environment, frozen when it started, carries REF_VERIFY_EXTRA into the bad side's ranks."""
    server = _server(EXTRA_MATMULS.format(count="int(os.environ.get('REF_VERIFY_EXTRA', '0'))"))
    repo = make_repo(tmp_path / "repo", [{"server.py": server}])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT.format(tp=2))
    sockets = tmp_path / "tmux"
    sockets.mkdir()
    env = {**cli.env, "TMUX_TMPDIR": str(sockets)}
    env.pop("TMUX", None)
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", "keeper"],
        env={**env, "REF_VERIFY_EXTRA": "40"},
        check=True,
        timeout=30,
    )
    try:
        result = Cli(env, cli.cwd).run(
            "bisect",
            "explain",
            "--good",
            f"commit={repo.shas[0]},launch=direct",
            "--bad",
            f"commit={repo.shas[0]},launch=tmux",
            "--json",
            timeout=900,
        )
    finally:
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    why = json.loads(result.stdout)
    named = [f for f in why["findings"] if "REF_VERIFY_EXTRA" in f["title"]]
    assert named and named[0]["kind"] == "environment", why["findings"]
    assert "REF_VERIFY_EXTRA=40 in the bad side's rank process(es) 0, 1" in named[0]["title"]
    assert why["good"]["allreduce_paths"] == ["gloo"]  # TP=2 on CPU: gloo, read from the trace
    assert "no REF_VERIFY_EXTRA in the good side's" in named[0]["title"]
    assert "launch: direct -> tmux" in named[0]["title"]
    assert why["cost"]["extra_s_per_launch"] is None  # no ordinary launch to compare with
    history = cli.json("query", "history", "--json")
    assert [h["purpose"] for h in history] == ["explain", "explain"]
    # the text view: the same finding, on one line, with its evidence
    text = Cli(env, cli.cwd).run("bisect", "explain", "--good", "x", timeout=60)
    assert text.returncode == 2 and "--good and --bad" in text.stderr
    assert os.environ.get("REF_VERIFY_EXTRA") is None


def test_explain_refuses_bad_input_with_one_line(cli: Cli, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", [{"server.py": SERVER.read_text()}, {"x": "1"}])
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(tp=1).replace("launches = 1", "launches = 0")
    )
    bad = cli.run("bisect", "explain", "--good", repo.shas[0], "--bad", repo.shas[1])
    assert bad.returncode == 2 and "explain.launches" in bad.stderr and "at least 1" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT.format(tp=1))
    none = cli.run("bisect", "explain")  # no session in this database
    assert none.returncode != 0 and "session" in none.stderr
    assert cli.json("query", "history", "--json") == []  # nothing half-written


def _gpu_trace(path: Path, graph: bool) -> Path:
    """A test double for a GPU profile (no GPU here): the event shapes PyTorch's profiler
    writes for CUDA (cpu_op, cuda_runtime launches, kernels joined by correlation id), two
    verify ranges, the first of which is left out as the profiler's warm-up."""
    events: list[dict[str, object]] = []
    corr = 0
    for start in (0.0, 10_000.0, 20_000.0):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "perfbisect.verify",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": 5_000.0,
            }
        )
        if graph:
            launches = [
                (
                    "cudaGraphLaunch",
                    "aten::copy_",
                    ["gemm_kernel"] * 40 + ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] * 8,
                )
            ]
        else:
            launches = [
                (
                    "cudaLaunchKernel",
                    "nccl:all_reduce",
                    ["ncclDevKernel_AllReduce_Sum_bf16_TREE_SIMPLE"],
                )
            ] * 8 + [("cudaLaunchKernel", "aten::mm", ["gemm_kernel"])] * 40
        gpu_t = start + 100.0
        host_t = start + 10.0
        for runtime, op, kernels in launches:
            corr += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    "pid": 1,
                    "tid": 1,
                    "ts": host_t,
                    "dur": 8.0,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": runtime,
                    "pid": 1,
                    "tid": 1,
                    "ts": host_t + 1,
                    "dur": 5.0,
                    "args": {"correlation": corr},
                }
            )
            for name in kernels:
                events.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": name,
                        "pid": 0,
                        "tid": 7,
                        "ts": gpu_t,
                        "dur": 20.0,
                        "args": {"correlation": corr},
                    }
                )
                gpu_t += 20.0 if graph else 30.0  # eager: 10 us idle between kernels
            host_t += 10.0
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_operators_on_one_side_only_are_compared_with_zero(tmp_path: Path) -> None:
    from perfbisect.explain.evidence import LaunchEvidence
    from perfbisect.explain.findings import operator_findings
    from perfbisect.explain.trace import OpStat, TraceSummary

    def launch(*ops: OpStat) -> LaunchEvidence:
        trace = TraceSummary("t.json", "cpu", 2, 1.0, {}, ops, {}, 1.0, None)
        return LaunchEvidence(1, 1.0, tmp_path, (trace,), (), (), None)

    good = launch(
        OpStat("aten::mm", "GEMM", 1.0, 4), OpStat("aten::only_good", "elementwise", 0.5, 1)
    )
    bad = launch(
        OpStat("aten::mm", "GEMM", 1.2, 4), OpStat("aten::item", "synchronisation", 2.0, 3)
    )
    found = operator_findings([good], [bad], profiled_delta=1.7)
    assert [f.title.split(" ")[0] for f in found] == ["aten::item", "aten::mm"]
    assert found[0].share == pytest.approx(2.0 / 1.7) and "0.0 -> 3.0 calls" in found[0].title


def test_gpu_trace_summary_counts_kernels_idle_time_and_nccl_per_call_site(tmp_path: Path) -> None:
    from perfbisect.explain.trace import summarise

    graph = summarise(_gpu_trace(tmp_path / "graph.json", graph=True))
    eager = summarise(_gpu_trace(tmp_path / "eager.json", graph=False))
    assert graph is not None and eager is not None
    assert graph.device == eager.device == "cuda" and graph.verifies == eager.verifies == 2
    assert graph.kernels_per_verify == eager.kernels_per_verify == 48
    assert graph.gpu_idle_ms_per_verify == 0.0
    assert eager.gpu_idle_ms_per_verify == pytest.approx(47 * 0.010)  # 47 gaps of 10 us
    (replayed,) = graph.nccl
    assert (replayed.call_site, replayed.algorithm, replayed.protocol) == (
        "aten::copy_",
        "RING",
        "LL",
    )
    (eager_ar,) = eager.nccl
    assert (eager_ar.call_site, eager_ar.algorithm, eager_ar.protocol) == (
        "nccl:all_reduce",
        "TREE",
        "SIMPLE",
    )
    assert eager_ar.calls_per_verify == 8
    assert graph.groups["all-reduce"] == pytest.approx(8 * 0.020)
    assert graph.groups["GEMM"] == pytest.approx(40 * 0.020)
    assert graph.allreduce_paths == ("NCCL via pynccl or a CUDA graph replay",)
    assert eager.allreduce_paths == ("NCCL via torch.distributed",)


def test_a_command_target_without_a_profile_says_what_was_not_measured(
    cli: Cli, tmp_path: Path
) -> None:
    """--no-explain keeps bisect start to the search; explaining afterwards a target that
    loads no profiler names what could not be measured and states no operator finding."""
    from conftest import EXPERIMENT as COMMAND_EXPERIMENT
    from conftest import value_repo

    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(COMMAND_EXPERIMENT)
    report = cli.bisect(repo.shas[0], repo.shas[-1], "--no-explain")
    assert report["status"] == "found" and report["why"] is None
    assert all(v["purpose"] != "explain" for v in cli.json("bisect", "log", "--json"))
    why = cli.json("bisect", "explain", "--json")
    assert not [f for f in why["findings"] if f["kind"] == "operator"]
    assert any("kernel/operator profile of the bad side" in n for n in why["not_measured"])
    assert [f["kind"] for f in why["findings"]] == ["change"]
    assert "value" in why["findings"][0]["title"]


SGLANG_CYCLES = """
import site, sys
sys.path.insert(0, sys.argv[2])
site.addsitedir(sys.argv[1])  # processes the .pth, as site-packages would at start-up
from sglang.srt.model_executor.model_runner import ModelRunner

class Mode:
    def __init__(self, verify, extend=False): self.verify, self.extend = verify, extend
    def is_target_verify(self): return self.verify
    def is_draft_extend(self): return self.extend

class Batch:
    def __init__(self, verify, extend=False): self.batch_size, self.forward_mode = 2, Mode(verify, extend)

target, draft = ModelRunner(0), ModelRunner(0, is_draft_worker=True)
for cycle in range(4):  # draft, verify, draft-extend: EAGLE's cycle
    draft.forward(Batch(False))
    target.forward(Batch(True))
    draft.forward(Batch(False, extend=True))
"""


@torch_missing
def test_the_sglang_boot_hook_profiles_whole_cycles_with_their_stages(tmp_path: Path) -> None:
    """The verify timer's boot module (installed by .pth, as in an SGLang build) runs the
    profiler from verify skip+1 for K cycles and marks draft, verify and draft-extend, against
    a module at SGLang's import path (the stand-in test_sglang_timer uses)."""
    from test_sglang_timer import _fake_sglang

    from perfbisect.explain.trace import summarise
    from perfbisect.hosts.local import LocalHost
    from perfbisect.targets.sglang.timer import install_timer

    site_dir = tmp_path / "site"
    install_timer(LocalHost(), str(site_dir))
    fake = _fake_sglang(tmp_path, "object")
    profile = tmp_path / "profile"
    env = {
        **os.environ,
        "PERFBISECT_VERIFY_TIMER_DIR": str(tmp_path / "timing"),
        "PERFBISECT_PROFILE_DIR": str(profile),
        "PERFBISECT_PROFILE_SKIP": "1",
        "PERFBISECT_PROFILE_CYCLES": "2",
        "PERFBISECT_TEST_SECRET_TOKEN": "hunter2",
    }
    result = subprocess.run(
        [sys.executable, "-c", SGLANG_CYCLES, str(site_dir), str(fake)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    (trace,) = profile.glob("trace.rank0.*.json")
    summary = summarise(trace)
    assert summary is not None and summary.device == "cpu"
    # verifies 2 and 3 profiled (the first left out as warm-up): one whole cycle remains
    assert summary.verifies == 1
    assert set(summary.stage_ms) == {"verify", "draft", "draft_extend"}
    (process,) = profile.glob("process.rank0.*.json")
    record = json.loads(process.read_text())
    assert record["env"]["PERFBISECT_TEST_SECRET_TOKEN"] == "<withheld>"  # never the value
    assert record["affinity"] and "hunter2" not in process.read_text()
    # the NCCL libraries the rank had mapped (none in a CPU build of torch)
    assert isinstance(record["nccl_library"], list)
    assert all(p.startswith("/") and "libnccl" in p for p in record["nccl_library"])
    # the timer kept timing every verify meanwhile
    (timing,) = (tmp_path / "timing").glob("verify.rank0.*.jsonl")
    assert len(timing.read_text().splitlines()) == 4


def test_the_metric_delta_sets_outlier_launches_aside_as_the_report_does(tmp_path: Path) -> None:
    # `perfbisect demo`'s session set aside the last good's slow search launch (21.2 ms against
    # 12.1), and its report gave +89.68; the explanation's delta, from the same launches taken
    # raw, said +85.10. Both now read them alike.
    from conftest import EXPERIMENT as COMMAND_EXPERIMENT

    from perfbisect.config import Configuration
    from perfbisect.experiment import load_experiment
    from perfbisect.explain.run import metric_delta
    from perfbisect.store.database import Store
    from perfbisect.store.records import LaunchRecord, record_launch

    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    (tmp_path / "repo").mkdir()
    (tmp_path / "perfbisect.toml").write_text(COMMAND_EXPERIMENT)
    experiment = load_experiment(tmp_path / "perfbisect.toml")
    good = Configuration.of({"commit": "a" * 40}, "ctx")
    bad = Configuration.of({"commit": "b" * 40}, "ctx")
    launches = [(good, 21.233626), (good, 12.076766), (bad, 107.4420045), (bad, 96.075478)]
    for seq, (config, value) in enumerate(launches):
        record_launch(
            store,
            LaunchRecord(None, seq, config.fingerprint, dict(config.values), "ctx", 0, "search",
                         "verify_ms", [value], value),
        )  # fmt: skip
    delta, basis = metric_delta(store, experiment, good, bad, None, None)  # type: ignore[arg-type]
    assert delta == pytest.approx(101.7587 - 12.0768, abs=1e-3)
    assert basis == "1+2 ordinary launches (1 outlier launch set aside)"
