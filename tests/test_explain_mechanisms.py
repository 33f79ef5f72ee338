"""`bisect explain`'s mechanism findings: how the verify ran (a CUDA graph replay or eager
kernel launches, a host synchronisation before the replay, a running batch above the captured
graph sizes), from GPU traces (a real one from the H200, and test doubles of PyTorch's trace
format where no GPU exists here) and from the stand-in SGLang's real processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Cli
from test_sglang_e2e import served_python  # noqa: F401 (a fixture)

from perfbisect.explain.evidence import LaunchEvidence
from perfbisect.explain.findings import rank
from perfbisect.explain.mechanisms import batch_findings, graph_findings, sync_findings
from perfbisect.explain.sides import fold
from perfbisect.explain.trace import summarise
from perfbisect.explain.trace_read import hta_available

REAL_TRACE = (
    Path(__file__).parents[1]
    / "docs/examples/explain_gpu/out_h200_tp1/trace.0000-good.rank0.json.gz"
)


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid}
    event.update(ts=ts, dur=dur)
    if args:
        event["args"] = args
    return event


def gpu_trace(path: Path, mode: str) -> Path:
    """A test double of a GPU profile (no GPU here), in the shapes PyTorch's profiler writes:
    three verify ranges (the first left out as warm-up), each also drawn on the GPU timeline
    (``gpu_user_annotation``, as the real profiler does), 48 kernels per verify launched as
    one CUDA graph (``graph``), one by one (``eager``), or as a graph after a ``.item()``: a
    device-to-host copy and a stream synchronize, the GPU idle until the host launches the
    graph (``sync``)."""
    events: list[dict[str, Any]] = []
    corr = 0
    for start in (0.0, 10_000.0, 20_000.0):
        events.append(_x("user_annotation", "perfbisect.verify", start, 5_000.0))
        events.append(_x("gpu_user_annotation", "perfbisect.verify", start, 4_000.0, tid=7))
        host, gpu = start + 10.0, start + 100.0
        # the draft's last kernel, launched before the verify, runs until the verify's first
        corr += 1
        events.append(_x("cuda_runtime", "cudaLaunchKernel", start - 150, 5.0, correlation=corr))
        events.append(_x("kernel", "draft_kernel", start - 100, 200.0, 7, correlation=corr))
        if mode == "sync":
            corr += 1
            events.append(_x("cpu_op", "aten::_local_scalar_dense", host, 90.0))
            events.append(_x("cuda_runtime", "cudaMemcpyAsync", host + 1, 5.0, correlation=corr))
            events.append(
                _x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", gpu, 5.0, 7, correlation=corr)
            )
            events.append(_x("cuda_runtime", "cudaStreamSynchronize", host + 10, 80.0))
            host, gpu = host + 100.0, gpu + 5.0 + 50.0  # the GPU waits 50 us for the launch
        if mode == "eager":
            launches = [("cudaLaunchKernel", ["gemm_kernel"])] * 48
        else:
            launches = [("cudaGraphLaunch", ["gemm_kernel"] * 48)]
        for runtime, kernels in launches:
            corr += 1
            events.append(_x("cpu_op", "aten::mm", host, 8.0))
            events.append(_x("cuda_runtime", runtime, host + 1, 5.0, correlation=corr))
            for name in kernels:
                events.append(_x("kernel", name, gpu, 20.0, 7, correlation=corr))
                gpu += 20.0 if mode != "eager" else 30.0
            host += 10.0
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _side(label: str, trace: Path, tmp_path: Path, graph_fraction: float | None = None) -> Any:
    summary = summarise(trace)
    assert summary is not None
    launch = LaunchEvidence(1, 1.0, tmp_path, (summary,), (), (), graph_fraction)
    return fold(label, {}, [launch])


def test_a_real_h200_trace_counts_one_graph_replay_per_verify() -> None:
    """The reference server's verify on the H200, in its CUDA graph: one cudaGraphLaunch per
    verify replays 295 kernels; the profiler's GPU-timeline copies of the ranges are not
    counted as verifies of their own (they halved every per-verify number before)."""
    summary = summarise(REAL_TRACE)
    assert summary is not None and summary.device == "cuda"
    assert summary.verifies == 7  # 8 profiled, the first left out; not 15
    assert summary.kernels_per_verify == 295
    host = summary.host
    assert host is not None
    assert (host.graph_launches, host.kernel_launches, host.launches) == (1.0, 0.0, 1.0)
    assert host.syncs == 1.0 and host.d2h_copies == 1.0  # the server reads its tokens back
    assert host.idle_before_replay_ms is not None and host.idle_before_replay_ms > 0


def test_host_calls_tell_a_graph_replay_from_eager_launches_and_find_the_sync(
    tmp_path: Path,
) -> None:
    graph = summarise(gpu_trace(tmp_path / "graph.json", "graph"))
    eager = summarise(gpu_trace(tmp_path / "eager.json", "eager"))
    synced = summarise(gpu_trace(tmp_path / "sync.json", "sync"))
    assert graph is not None and eager is not None and synced is not None
    assert graph.verifies == eager.verifies == synced.verifies == 2
    assert graph.host is not None and eager.host is not None and synced.host is not None
    assert (graph.host.launches, graph.host.graph_launches) == (1.0, 1.0)
    assert (eager.host.launches, eager.host.graph_launches) == (48.0, 0.0)
    assert eager.host.idle_before_replay_ms is None  # no replay to wait for
    assert graph.host.syncs == 0.0 and synced.host.syncs == 1.0
    assert synced.host.d2h_copies == 1.0 and synced.host.sync_ms == pytest.approx(0.080)
    assert synced.host.sync_calls == (("cudaStreamSynchronize", 1.0),)
    # the replay's first kernel follows the draft's at once without the sync (the host had
    # launched it ahead), and 50 us after the copy with it
    assert graph.host.idle_before_replay_ms == pytest.approx(0.0)
    assert synced.host.idle_before_replay_ms == pytest.approx(0.050)


def test_verify_eager_reads_as_kernels_per_verify_and_the_groups_that_grew(
    tmp_path: Path,
) -> None:
    good = _side("good", gpu_trace(tmp_path / "g.json", "graph"), tmp_path, 1.0)
    bad = _side("bad", gpu_trace(tmp_path / "b.json", "eager"), tmp_path, 0.0)
    profiled = 0.5
    (finding,) = graph_findings(good, bad, profiled)
    assert finding.title.startswith(
        "verify eager: kernels per verify 1 -> 48 (CUDA graph replays 1 -> 0, kernel launches "
        "0 -> 48), +0.470 ms in host gaps"
    ), finding.title
    assert finding.title.endswith("; verify in CUDA graphs 100% -> 0% of cycles")
    assert finding.share == pytest.approx(0.470 / profiled)
    assert not sync_findings(good, bad, profiled)  # eager is not a sync
    # a mechanism ranks above an operator with a larger share
    from perfbisect.explain.model import Finding

    op = Finding("operator", "aten::mm", 0.99, 0.5, "traces")
    assert rank([op, finding])[0] is finding


def test_a_sync_before_the_replay_reads_as_synchronisation_with_its_share(
    tmp_path: Path,
) -> None:
    good = _side("good", gpu_trace(tmp_path / "g.json", "graph"), tmp_path, 1.0)
    bad = _side("bad", gpu_trace(tmp_path / "b.json", "sync"), tmp_path, 1.0)
    (finding,) = sync_findings(good, bad, profiled=0.2)
    assert finding.kind == "synchronisation"
    assert finding.title == (
        "host synchronisation in the verify: syncs per verify 0.0 -> 1.0 "
        "(cudaStreamSynchronize 1.0), device-to-host copies 0.0 -> 1.0, host blocked "
        "0.000 -> 0.080 ms; GPU idle before the graph replay 0.000 -> 0.050 ms"
    )
    assert finding.share == pytest.approx(0.080 / 0.2)
    assert not graph_findings(good, bad, 0.2)  # both replayed their graph
    assert not sync_findings(good, bad, profiled=-0.1)[0].share  # no share without a delta


def test_a_batch_above_the_captured_sizes_is_named_from_records_and_the_log(
    tmp_path: Path,
) -> None:
    def side(label: str, captured: tuple[int, ...], graph: bool) -> Any:
        launch = LaunchEvidence(
            1, 1.0, tmp_path, (), (), (), None, verifies=((4, graph),) * 10, captured=captured
        )
        return fold(label, {}, [launch])

    good, bad = side("good", (1, 2, 4, 8), True), side("bad", (1, 2), False)
    (finding,) = batch_findings(good, bad)
    assert finding.title == (
        "verify batch above the captured CUDA-graph sizes: running batch up to 4 against "
        "captured sizes up to 2 on the bad side; 100% of its verifies above them, 0% of those "
        "in a graph (the rest eager); good side captured up to 8, running batch up to 4, 0% above"
    )
    assert not batch_findings(good, good)


STANDIN_EXPERIMENT = """
[target]
kind = "sglang"
build = "installed"
python = "{python}"
model = "{models}/target"
draft_model = "{models}/draft"
tp = 1
ready = "health"
requests = 4
concurrency = 2
max_new_tokens = 16
warmup_requests = 1
timeout_s = 60
extra_args = ["--stand-in-batch", "4"]

[target.axis_args.graph_bs]
covers = ["--cuda-graph-max-bs", "8"]
below = ["--cuda-graph-max-bs", "2"]

[axes.custom.graph_bs]
values = ["covers", "below"]
ordered = false

[explain]
launches = 1
cycles = 4
skip = 2
"""


def test_the_stand_in_sglang_names_the_batch_above_the_captured_sizes(
    cli: Cli,
    tmp_path: Path,
    served_python: str,  # noqa: F811 (the fixture)
) -> None:
    """The DeepSeek-V3 proxy's mechanism, on CPU: --cuda-graph-max-bs 2 below a running batch
    of 4 (the stand-in runs such verifies eagerly, as SGLang does); the explanation names it
    from the verify timer's records and the server's capture line."""
    models = tmp_path / "models"
    for name in ("target", "draft"):
        (models / name).mkdir(parents=True)
    (tmp_path / "perfbisect.toml").write_text(
        STANDIN_EXPERIMENT.format(python=served_python, models=models)
    )
    why = cli.json(
        "bisect",
        "explain",
        "--good",
        "graph_bs=covers",
        "--bad",
        "graph_bs=below",
        "--json",
        timeout=300,
    )
    kinds = [f["kind"] for f in why["findings"]]
    assert kinds[:2] == ["batch", "graph"], why["findings"]
    assert "running batch up to 4 against captured sizes up to 2" in why["findings"][0]["title"]
    assert "verify in CUDA graphs 100% -> 0% of cycles" in why["findings"][1]["title"]
    assert why["bad"]["batches"]["captured"] == [1, 2]
    assert why["good"]["batches"]["verifies_by_bs"]["4"][1] > 0  # in graphs on the good side
    assert why["delta"] > 0


@pytest.mark.skipif(not hta_available(), reason="HolisticTraceAnalysis is not installed")
def test_holistic_trace_analysis_and_the_json_reader_give_the_same_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTA parses the traces where it is installed (the explain extra); the JSON reader stays
    for where it is not (the GPU machine's carried wheels): both read a real H200 trace and a
    CPU trace of the reference server to the same per-verify numbers."""
    import perfbisect.explain.trace as trace_module
    from perfbisect.explain.trace_read import HTA, JSON_READER, read_events

    cpu = gpu_trace(tmp_path / "cpu.json", "eager")
    for path in (REAL_TRACE, cpu):
        by_hta = summarise(path)
        monkeypatch.setattr(trace_module, "read_events", lambda p: read_events(p, False))
        by_json = summarise(path)
        monkeypatch.undo()
        assert by_hta is not None and by_json is not None
        assert (by_hta.reader, by_json.reader) == (HTA, JSON_READER)
        assert by_hta.verifies == by_json.verifies
        assert by_hta.kernels_per_verify == by_json.kernels_per_verify
        assert by_hta.verify_ms == pytest.approx(by_json.verify_ms, rel=1e-6)
        for group, ms in by_json.groups.items():
            assert by_hta.groups[group] == pytest.approx(ms, rel=1e-6, abs=1e-9), group
        assert by_hta.host == by_json.host or (
            by_hta.host is not None
            and by_json.host is not None
            and by_hta.host.launches == by_json.host.launches
            and by_hta.host.sync_ms == pytest.approx(by_json.host.sync_ms, rel=1e-6)
        )


# NCCL's INFO lines as NCCL 2.18-2.28 print them (format of NVIDIA/nccl issues #1038, #1646):
# one process, a first communicator made without NCCL_PROTO, a second made after it was set.
LATE_LOG = """\
gpu:7001:7001 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
gpu:7001:7001 [0] NCCL INFO comm 0x1111 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 commId 0xaa - Init START
gpu:7001:7001 [0] NCCL INFO ncclCommInitRankConfig comm 0x1111 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 commId 0xaa - Init COMPLETE
gpu:7001:7001 [0] NCCL INFO comm 0x2222 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 commId 0xbb - Init START
gpu:7001:7001 [0] NCCL INFO NCCL_PROTO set by environment to LL
gpu:7001:7001 [0] NCCL INFO ncclCommInitRankConfig comm 0x2222 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 commId 0xbb - Init COMPLETE
"""


def test_nccl_says_per_communicator_what_it_took(tmp_path: Path) -> None:
    """A variable set in the process after its first communicator was made: the process as a
    whole 'took' it, the first communicator did not, and the finding names that one."""
    from perfbisect.explain.findings import nccl_findings
    from perfbisect.explain.nccl_log import parse, uneven

    (process,) = parse(LATE_LOG.splitlines())
    first, second = process.communicators
    assert (first.comm, dict(first.taken)) == ("0x1111", {})
    assert (second.comm, dict(second.taken)) == ("0x2222", {"NCCL_PROTO": "LL"})
    assert uneven(process) == [("NCCL_PROTO", "LL", ["0x1111"])]
    launch = LaunchEvidence(1, 1.0, tmp_path, (), (), (process,), None)
    bad, good = fold("bad", {}, [launch]), fold("good", {}, [])
    titles = [f.title for f in nccl_findings(good, bad)]
    assert titles[0].startswith(
        "NCCL_PROTO=LL taken by some NCCL communicators of pid 7001 (bad side) but not by 0x1111"
    ), titles


def test_a_failing_hta_leaves_the_json_reader_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import perfbisect.explain.trace_read as trace_read

    def broken(path: Path) -> list[Any]:
        raise AttributeError("module 'pandas' has no attribute 'x'")  # a version not tried here

    monkeypatch.setattr(trace_read, "_hta_events", broken)
    monkeypatch.setattr(trace_read, "hta_available", lambda: True)
    summary = summarise(gpu_trace(tmp_path / "g.json", "graph"))
    assert summary is not None and summary.kernels_per_verify == 48
    assert summary.reader == (
        "perfbisect's JSON reader (HolisticTraceAnalysis failed: AttributeError: module "
        "'pandas' has no attribute 'x')"
    )


def test_a_profiled_delta_inside_the_verifies_spread_apportions_nothing(tmp_path: Path) -> None:
    """One launch a side on a busy machine: a delta the verifies' own spread covers is said,
    and no share is stated against it."""
    from dataclasses import replace

    from perfbisect.explain.judge import within_noise

    side = _side("good", gpu_trace(tmp_path / "g.json", "graph"), tmp_path)
    noisy = replace(side, verify_ms_error=0.05)
    assert within_noise(0.1, noisy, noisy) is not None and "+-0.071 ms" in str(
        within_noise(0.1, noisy, noisy)
    )
    assert within_noise(0.2, noisy, noisy) is None  # 2.8 standard errors: it apportions
    assert "do not show it" in str(within_noise(-0.2, noisy, noisy))
    assert side.verify_ms_error == 0.0  # the double's verifies are all 5 ms


def test_nccl_kernels_per_call_site_and_a_changed_algorithm(tmp_path: Path) -> None:
    """The NCCL kernels' names (algorithm, protocol) per call site are kept per side, and a
    change at the same call site is a finding."""
    from dataclasses import replace

    from test_explain import _gpu_trace

    from perfbisect.explain.findings import nccl_kernel_findings

    good = _side("good", _gpu_trace(tmp_path / "g.json", graph=False), tmp_path)
    assert good.nccl_kernels == (
        {
            "call_site": "nccl:all_reduce",
            "operation": "AllReduce",
            "algorithm": "TREE",
            "protocol": "SIMPLE",
            "calls_per_verify": 8.0,
        },
    )
    ring = replace(good, nccl_kernels=({**good.nccl_kernels[0], "algorithm": "RING"},))
    (finding,) = nccl_kernel_findings(good, ring)
    assert (
        finding.title
        == "NCCL AllReduce at nccl:all_reduce: TREE/SIMPLE -> RING/SIMPLE (algorithm/protocol)"
    )
    assert not nccl_kernel_findings(good, good)


REAL_NCCL = Path(__file__).parent / "data" / "nccl_h200"


def _real(mode: str) -> tuple[Any, dict[str, str]]:
    from perfbisect.explain.nccl_log import parse

    (log,) = REAL_NCCL.glob(f"nccl.{mode}.*")
    (env,) = REAL_NCCL.glob(f"env.{mode}.*.json")
    (process,) = parse(log.read_text().splitlines())
    return process, json.loads(env.read_text())


def test_real_nccl_logs_of_one_rank_communicators_from_the_h200() -> None:
    """NCCL 2.28.9's own log (tests/data/nccl_h200): version, communicators (the second made by
    ncclCommSplit), what each took, and what a one-rank log cannot tell."""
    from perfbisect.explain.nccl_log import not_taken, uneven, untold_at_one_rank

    env_mode, env = _real("env")
    assert env_mode.version == "2.28.9+cuda13.0" and env_mode.host == "vm"
    (comm,) = env_mode.communicators
    assert (comm.rank, comm.nranks, comm.cuda_dev, comm.tid) == (0, 1, 0, env_mode.pid)
    # the parameter's line ends with a period; the value does not
    assert env_mode.taken == {"NCCL_NVLS_ENABLE": "0"} == dict(comm.taken)
    assert env_mode.tuning == ()  # no tuning at one rank
    assert env["NCCL_PROTO"] == "LL" and env["NCCL_VERSION"] == "2.28.3-1"
    # NCCL_PROTO / NCCL_ALGO: not said either way at one rank; NCCL_VERSION is no setting
    assert untold_at_one_rank(env_mode, env) == ["NCCL_ALGO", "NCCL_PROTO"]
    assert not_taken(env_mode, env) == []

    late, late_env = _real("late")
    first, second = late.communicators
    assert (first.comm, second.comm) == ("0xfc61200", "0x1809bd60")  # the split's child
    assert dict(first.taken) == {"NCCL_NVLS_ENABLE": "0"} and dict(second.taken) == {}
    assert uneven(late) == []  # NCCL_NVLS_ENABLE is read once a process, not per communicator
    assert untold_at_one_rank(late, late_env) == ["NCCL_ALGO", "NCCL_PROTO"]

    stripped, stripped_env = _real("stripped")
    assert "NCCL_PROTO" not in stripped_env and untold_at_one_rank(stripped, stripped_env) == []


def test_a_one_rank_process_says_what_its_log_cannot_tell(tmp_path: Path) -> None:
    from perfbisect.explain.findings import nccl_findings

    process, env = _real("env")
    record = {"rank": 0, "pid": process.pid, "env": env}
    launch = LaunchEvidence(1, 1.0, tmp_path, (), (record,), (process,), None)
    bad, good = fold("bad", {}, [launch]), fold("good", {}, [])
    finding, *others = nccl_findings(good, bad)
    assert [f.title for f in others] == [
        "NCCL took NCCL_NVLS_ENABLE=0 on the bad side, (unset) on the good side"
    ]
    assert finding.title == (
        f"NCCL_ALGO, NCCL_PROTO in the environment of pid {process.pid} (bad side): its NCCL "
        "communicators have one rank, which NCCL does not tune, so its log cannot say whether "
        "they were taken"
    )


SGLANG_H200 = Path(__file__).parents[1] / "docs/examples/explain_gpu/out_h200_sglang"


def _real_side(label: str, name: str, graph_fraction: float) -> Any:
    summary = summarise(SGLANG_H200 / name)
    assert summary is not None and summary.device == "cuda" and summary.verifies == 15
    launch = LaunchEvidence(1, 1.0, SGLANG_H200, (summary,), (), (), graph_fraction)
    return fold(label, {}, [launch])


def test_real_sglang_verify_out_of_graphs_reads_as_verify_eager() -> None:
    """SGLang at 3117415c9bcd on the H200, target-verify kept out of its CUDA graph (patch 04):
    one graph replay of 114 kernels per verify became 112 kernel launches, the added time in
    host gaps (the GPU waiting for the launches), 92% of the profiled delta."""
    good = _real_side("good", "eager.good.json.gz", 1.0)
    bad = _real_side("bad", "eager.bad.json.gz", 0.0)
    assert good.verify_ms_profiled is not None and bad.verify_ms_profiled is not None
    profiled = bad.verify_ms_profiled - good.verify_ms_profiled
    assert profiled == pytest.approx(6.653, abs=0.001)
    (finding,) = graph_findings(good, bad, profiled)
    assert finding.title == (
        "verify eager: kernels per verify 1 -> 112 (CUDA graph replays 1 -> 0, kernel launches "
        "0 -> 112), +6.092 ms in host gaps; verify in CUDA graphs 100% -> 0% of cycles"
    )
    assert finding.share == pytest.approx(0.916, abs=0.001)


def test_real_sglang_host_sync_reads_as_synchronisation_of_a_host_bound_verify() -> None:
    """Patch 05 (a .item() at the start of CudaGraphRunner.replay) on the H200: one stream
    synchronize and one device-to-host copy more per verify, the host blocked 0.008 ms, since
    the GPU already waited 0.2 ms for the replay without it (this tiny model's verify is
    host-bound); the profiled verifies show no delta, so no share is stated."""
    good = _real_side("good", "eager.good.json.gz", 1.0)
    bad = _real_side("bad", "sync.bad.json.gz", 1.0)
    assert good.verify_ms_profiled is not None and bad.verify_ms_profiled is not None
    profiled = bad.verify_ms_profiled - good.verify_ms_profiled
    assert profiled < 0
    (finding,) = sync_findings(good, bad, profiled)
    assert finding.kind == "synchronisation" and finding.share is None
    assert finding.title == (
        "host synchronisation in the verify: syncs per verify 0.0 -> 1.0 (cudaStreamSynchronize "
        "1.0), device-to-host copies 0.0 -> 1.0, host blocked 0.000 -> 0.008 ms; GPU idle before "
        "the graph replay 0.201 -> 0.166 ms; host-bound already: the GPU waited 0.201 ms for the "
        "replay without the sync, so the sync found its queue drained"
    )
    assert not graph_findings(good, bad, profiled)  # one reduction kernel more is no mode change


def test_per_launch_and_per_worktree_values_are_no_environment_finding(tmp_path: Path) -> None:
    """Seen on the H200: SGLang's per-launch SGLANG_RUN_ID and a PYTHONPATH into each
    configuration's own worktree came out as 'environment' findings; a real difference stays."""
    from perfbisect.explain.findings import environment_findings

    def launch(worktree: str, run: str, proto: str) -> LaunchEvidence:
        env = {
            "PYTHONPATH": f"/c/worktrees/6c16c88ea6/{worktree}/python:/work/main:/tmp/site",
            "SGLANG_RUN_ID": run,
            "NCCL_PROTO": proto,
        }
        record = {"rank": 0, "pid": 1, "env": env}
        return LaunchEvidence(1, 1.0, tmp_path, (), (record,), (), None)

    good = launch("3117415c9bcd00ec", "sglang-run-1", "Simple")
    bad = launch("3117415c9bcd00ec-p2e48209163", "sglang-run-2", "LL")
    (finding,) = environment_findings([good], [bad], "patches: none -> 04")
    assert finding.title.startswith("NCCL_PROTO=LL in the bad side's rank process(es) 0")


def test_readings_of_a_moment_are_no_machine_finding() -> None:
    """From the H200 run: the snapshots' power, temperature and current clocks differed between
    the two launches (when each was taken); a changed power limit is a finding."""
    from perfbisect.explain.findings import machine_findings

    def snapshot(power: float, clock: int, limit: float) -> dict[str, Any]:
        gpu = {"power_w": power, "sm_clock_mhz": clock, "temperature_c": 33}
        return {"gpus": [{**gpu, "power_limit_w": limit, "sm_clock_max_mhz": 1980}]}

    assert machine_findings([snapshot(78.3, 345, 700.0)], [snapshot(125.4, 1980, 700.0)]) == []
    (finding,) = machine_findings([snapshot(78.3, 345, 700.0)], [snapshot(78.3, 345, 500.0)])
    assert "power_limit_w: 700.0 -> 500.0" in finding.title


LIVE = Path(__file__).parent / "data" / "explain_h200"


def _reread(name: str, direction: int = 1) -> tuple[Any, Any, Any]:
    """A diagnostic pair of the H200 run (tests/data/explain_h200: its logs and one trace a
    side) judged again by the current rules."""
    from perfbisect.explain.judge import reread

    folder = LIVE / name
    launches = sorted(p for p in folder.iterdir() if p.is_dir())
    return reread(
        launches, [folder / f"{name}.good.json.gz", folder / f"{name}.bad.json.gz"], direction
    )


def test_real_upstream_speedup_is_apportioned_like_a_slowdown() -> None:
    """The culprit of the real upstream range (docs/examples/sglang_real, run 2), explained on
    the H200: upstream #25464 (28c1a3cb45) made the verify FASTER (the experiment's
    ``higher_is_better = true`` on verify_ms, so its "bad" side is the faster one). The good
    side's V1 worker launches 15 kernels outside the verify's graph replay; #25464's V2 worker
    none. The old rules apportioned only a positive delta, so every share read "n/a" and the
    launch finding named "+0.000 ms in GEMM"."""
    from perfbisect.explain.judge import verify_direction

    direction = verify_direction("verify_ms", higher_is_better=True)
    assert direction == -1
    assert verify_direction("verify_ms", higher_is_better=False) == 1
    assert verify_direction("tokens_per_s", higher_is_better=True) == 1  # a rate: slower verify
    good, bad, judged = _reread("spec25464", direction)
    assert good.host["kernel_launches"] == 15 and bad.host["kernel_launches"] == 0
    assert judged.measured == pytest.approx(-0.358, abs=0.002)
    first = judged.findings[0]
    assert first.title.startswith(
        "verify launches: kernels per verify 16 -> 1 (CUDA graph replays 1 -> 1, kernel "
        "launches 15 -> 0), -0.275 ms in host gaps"
    ), first.title
    assert first.share == pytest.approx(0.77, abs=0.01)
    assert not any("do not show it" in n for n in judged.not_measured)
    # Read as a slow-down search, the same traces apportion nothing: the verify got faster.
    _, _, as_slowdown = _reread("spec25464", 1)
    assert any("do not show it" in n for n in as_slowdown.not_measured)
    assert all(f.share is None for f in as_slowdown.findings)


def test_real_dsv3_proxy_names_the_batch_above_the_captured_sizes() -> None:
    """The DeepSeek-V3-style proxy (MLA + MoE, 8 layers, random weights) at running batch 8 on
    the H200: --cuda-graph-max-bs 2 on the bad side, 8 on the good."""
    good, bad, judged = _reread("dsv3")
    batch, eager = judged.findings[:2]
    assert batch.kind == "batch" and batch.title == (
        "verify batch above the captured CUDA-graph sizes: running batch up to 8 against "
        "captured sizes up to 2 on the bad side; 100% of its verifies above them, 0% of those "
        "in a graph (the rest eager); good side captured up to 8, running batch up to 8, 0% above"
    )
    assert eager.title.startswith(
        "verify eager: kernels per verify 1 -> 231 (CUDA graph replays 1 -> 0, kernel launches "
        "0 -> 231), +22.880 ms in host gaps"
    ) and eager.share == pytest.approx(0.838, abs=0.001)
    assert good.batches["captured"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert bad.groups["MoE"] == pytest.approx(good.groups["MoE"], abs=0.01)  # same kernels


def test_real_reference_nccl_launch_axis_on_a_one_rank_communicator() -> None:
    """The reference target at TP=1 on a one-rank NCCL group (--group always), launched
    direct vs in tmux whose server carried NCCL_PROTO=Simple NCCL_ALGO=Ring: the variables
    are named where they reached, NCCL's own log gives the version, the library, the
    communicator, what it took; and it cannot tell about NCCL_PROTO/NCCL_ALGO at one rank."""
    good, bad, judged = _reread("refnccl")
    titles = [f.title for f in judged.findings]
    assert any(
        t.startswith(
            "NCCL_ALGO, NCCL_PROTO in the environment of pid 3891 (bad side): its NCCL "
            "communicators have one rank"
        )
        for t in titles
    ), titles
    assert any(
        t.startswith("NCCL_PROTO=Simple in the bad side's rank process(es) 0") for t in titles
    )
    assert not any("NCCL_VERSION" in t for t in titles)  # the image's label is no setting
    (process,) = bad.nccl
    assert process["version"] == "2.28.9+cuda13.0" and process["taken"] == {"NCCL_NVLS_ENABLE": "0"}
    assert process["library"] == [
        "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    ]
    assert [(c["rank"], c["nranks"]) for c in process["communicators"]] == [(0, 1)]
    assert process["not_taken"] == [] and process["untold"] == ["NCCL_ALGO", "NCCL_PROTO"]
    assert good.host["graph_launches"] == bad.host["graph_launches"] == 1.0
