"""An SGLang launch's start-up: its phases read from the server's own log (real logs of the H200
runs kept in tests/data/sglang_startup, and the formats of SGLang's released wheels), the
compile caches kept per pin set, and the server args that shorten it (the CUDA-graph sizes
the workload needs, SGLang's own warm-up skipped)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from test_sglang_timer import VERSIONS, _sources, sglang_wheels  # noqa: F401 (a fixture)

from perfbisect.hosts.local import LocalHost
from perfbisect.targets.sglang.caches import CACHE_VARS, installed_key, prepare
from perfbisect.targets.sglang.kind import SglangOptions
from perfbisect.targets.sglang.launch_args import declared_flags, graph_sizes
from perfbisect.targets.sglang.startup import (
    START_COMMAND,
    StartupSummary,
    import_note,
    phases_text,
    reached,
    ready_brief,
    session_startup,
    startup_phases,
    summary_text,
)
from perfbisect.targets.sglang.startup_args import Startup, startup_args

DATA = Path(__file__).with_name("data") / "sglang_startup"


# ---- phases from real logs ----------------------------------------------------------------------


def test_phases_of_the_real_range_first_launch_show_the_kernel_compilation() -> None:
    """Launch 0000 of docs/examples/sglang_real (upstream source, 0.5.12's wheels, one H200):
    ready after 101.1 s, 50 s of it capturing the target's CUDA graphs (Triton compiling)."""
    phases = startup_phases((DATA / "range_cold.log").read_text(), 101.093)
    assert phases["workers"] == 17.0  # server_args 09:39:30 -> Init torch distributed 09:39:47
    assert phases["graphs"] == 50.0  # 09:39:50 -> 09:40:40 ("Time elapsed: 49.19 s")
    assert phases["draft_graphs"] == 8.0  # draft 6.54 s + draft extend 1.77 s
    assert phases["warmup"] == 0.0  # --skip-server-warmup: ready in the same second
    # The log has no start mark (an older perfbisect): the time before SGLang's first line
    # and after its ready line is not split, and the phases still add up to ready.
    assert "imports" not in phases and "health" not in phases
    assert phases["other"] == pytest.approx(101.093 - 78.0)
    assert sum(phases.values()) == pytest.approx(101.093)


def test_phases_of_a_later_launch_of_the_same_pin_set() -> None:
    """Launch 0002, the same commit again: graphs in 1 s, the start-up is the processes."""
    phases = startup_phases((DATA / "range_warm.log").read_text(), 43.9)
    assert phases["graphs"] == 1.0
    assert phases["draft_graphs"] == 3.0
    assert phases["workers"] == 17.0
    assert sum(phases.values()) == pytest.approx(43.9)
    assert phases_text({f"startup.{k}": v for k, v in phases.items()}).startswith("workers 17.0s")


def test_sglangs_own_warm_up_shows_as_its_phase() -> None:
    """SGLang 0.5.12's wheel without --skip-server-warmup (docs/examples/sglang_gpu, tiny
    proxy run): the warm-up request between the HTTP server and the ready line took 2 s."""
    phases = startup_phases((DATA / "release_0.5.12_warmup.log").read_text(), 45.34)
    assert phases["warmup"] == 2.0  # Uvicorn 11:13:53, POST /generate and ready 11:13:55
    # decode graphs 11:13:46-48, then the piecewise (prefill) ones until 11:13:50
    assert phases["graphs"] == 4.0 and phases["draft_graphs"] == 3.0
    assert sum(phases.values()) == pytest.approx(45.34)


def test_start_mark_milliseconds_and_rank_prefixes() -> None:
    """With perfbisect's start mark the first phase is the imports and the last the readiness
    check; SGLANG_LOG_MS's milliseconds and TP > 1's rank prefixes are read; every rank's own
    init line comes before the target's graphs, and the draft's is the one after them."""
    log = "\n".join(
        [
            "[2026-12-03 09:00:00.250] perfbisect: serve command started",
            "some warning without a time stamp",
            "[2026-12-03 09:00:19.500] server_args=ServerArgs(model_path='/m')",
            "[2026-12-03 09:00:36.000 TP0] Init torch distributed begin.",
            "[2026-12-03 09:00:36.100 TP1] Init torch distributed begin.",
            "[2026-12-03 09:00:38.000 TP0] Load weight end. elapsed=0.11 s",
            "[2026-12-03 09:00:38.100 TP1] Load weight end. elapsed=0.11 s",
            "[2026-12-03 09:00:38.500 TP0] Memory pool end. avail mem=104.37 GB",
            "[2026-12-03 09:00:39.500 TP0] Capture cuda graph end. Time elapsed: 1.00 s.",
            "[2026-12-03 09:00:39.600 TP0] Init torch distributed begin.",
            "[2026-12-03 09:00:39.900 TP0] Memory pool end. avail mem=99.86 GB",
            "[2026-12-03 09:00:42.000 TP0] Capture draft cuda graph end. Time elapsed: 2 s.",
            "[2026-12-03 09:00:42.400 TP0] Capture draft extend cuda graph end. Time elapsed",
            "[2026-12-03 09:00:42.500] INFO:     Started server process [2156]",
            "[2026-12-03 09:00:42.600] The server is fired up and ready to roll!",
        ]
    )
    phases = startup_phases(log, 43.0)
    assert phases == {
        "imports": 19.25,
        "workers": 16.5,
        "weights": 2.0,
        "kv_cache": 0.5,
        "graphs": 1.0,
        "draft": 0.4,
        "draft_graphs": 2.5,
        "server": 0.1,
        "warmup": 0.1,
        "health": pytest.approx(0.65),
    }


def test_a_log_without_sglangs_lines_has_no_phases() -> None:
    assert startup_phases("Traceback (most recent call last):\nboom\n", 3.0) == {}
    assert ready_brief({"build_s": 1.0}) == "-"


def test_session_summary_splits_each_pin_sets_first_launch_from_the_later_ones() -> None:
    cold = {"ready_s": 100.0, "startup.workers": 17.0, "startup.graphs": 50.0}
    warm = {"ready_s": 44.0, "startup.workers": 17.0, "startup.graphs": 1.0}
    warm2 = {"ready_s": 46.0, "startup.workers": 19.0, "startup.graphs": 1.0}
    other = {"ready_s": 80.0, "startup.workers": 18.0, "startup.graphs": 30.0}
    a, b = ["pin set aaaa (made from x): torch==2.11.0"], ["pin set bbbb (reused): torch==2.9.1"]
    summary = session_startup([(a, cold), (a, warm), (b, other), (a, warm2)])
    assert summary is not None
    first, later = (StartupSummary.from_json(summary[k]) for k in ("first", "later"))
    assert (first.launches, first.ready_s, first.phases["graphs"]) == (2, 90.0, 40.0)
    assert (later.launches, later.ready_s, later.phases["workers"]) == (2, 45.0, 18.0)
    lines = summary_text(summary)
    assert lines[0].startswith("first launch of a pin set: ready 90.0s (median of 2 launches)")
    assert "graphs 1.0s" in lines[1]
    # not an SGLang session: no summary at all
    assert session_startup([([], {"ready_s": 3.0, "measure_s": 1.0})]) is None


# ---- the formats of SGLang's released wheels ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_released_sglang_prints_the_milestones_and_declares_the_flags(
    sglang_wheels: Path,  # noqa: F811
    version: str,
) -> None:
    srt = _sources(sglang_wheels, version, ("sglang/srt/",))
    args = _sources(sglang_wheels, version, ("sglang/srt/server_args.py", "sglang/srt/arg_groups"))
    assert 'f"{server_args=}"' in srt or "server_args=" in srt
    assert "Load weight end. " in srt and "Memory pool end. " in srt
    assert "The server is fired up and ready to roll!" in srt
    assert 'format=format,\n        datefmt="%Y-%m-%d %H:%M:%S"' in srt  # configure_logger
    declared = declared_flags(args)
    if version == "0.5.23":  # a rewrite: graphs per phase, the worker init renamed
        assert '"Init parallel begin."' in srt
        assert declared == {"--cuda-graph-bs-decode", "--skip-server-warmup"}
        return
    assert '"Init torch distributed begin."' in srt
    assert "Capture draft cuda graph end. Time elapsed" in srt
    # the target's graphs: "Capture cuda graph end." on NVIDIA, a literal in 0.4, chosen by
    # device later (an expression in 0.5.2-0.5.5, a defaultdict whose default it is from 0.5.9)
    assert (
        "Capture cuda graph end. Time elapsed" in srt
        or "Capture {'cpu graph' if self.device == 'cpu' else 'cuda graph'} end. Time elapsed"
        in srt
        or (
            "Capture {graph_backend[self.device]} end. Time elapsed" in srt
            and re.search(r'graph_backend = defaultdict\(\s*lambda: "cuda graph"', srt)
        )
    )
    if version == "0.4.6.post5":  # no --skip-server-warmup yet (it came in 0.4.10)
        assert declared == {"--cuda-graph-bs"}
    else:
        assert declared == {"--cuda-graph-bs", "--skip-server-warmup"}
    if version in ("0.5.9", "0.5.10.post1"):
        assert "SGLANG_LOG_MS" in srt  # milliseconds in the time stamps (0.5.9 and later)


@pytest.mark.slow
def test_graph_sizes_follow_sglangs_own_grid_for_speculative_decoding(
    sglang_wheels: Path,  # noqa: F811
) -> None:
    args = _sources(sglang_wheels, "0.5.12", ("sglang/srt/server_args.py",))
    grid = (
        "list(range(1, 9, 1))\n                + list(range(10, 33, 2))\n"
        "                + list(range(40, 65, 4))\n                + list(range(72, 257, 8))"
    )
    assert grid in args
    assert "capture_bs = server_args.cuda_graph_bs" in _sources(
        sglang_wheels, "0.5.12", ("sglang/srt/model_executor/cuda_graph_runner.py",)
    )
    # the draft's and draft-extend's graphs read the same list
    draft = _sources(sglang_wheels, "0.5.12", ("sglang/srt/speculative/eagle_draft",))
    assert draft.count("get_batch_sizes_to_capture(model_runner)") == 2


# ---- the server args ----------------------------------------------------------------------------


def test_graph_sizes_cover_the_workloads_concurrency_on_sglangs_grid() -> None:
    assert graph_sizes(4) == [1, 2, 3, 4]
    assert graph_sizes(1) == [1]
    assert graph_sizes(12) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]
    assert graph_sizes(13) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 13]  # the top itself too


def _opts(**kw: object) -> SglangOptions:
    return SglangOptions(model="/m", draft_model="/d", concurrency=4, **kw)  # type: ignore[arg-type]


def test_startup_args_add_graph_sizes_and_skip_the_warm_up_unless_told_otherwise() -> None:
    both = Startup({"--cuda-graph-bs", "--skip-server-warmup"}, None)
    extra, note = startup_args(_opts(), ["--mem-fraction-static", "0.25"], both)
    assert extra == ["--cuda-graph-bs", "1", "2", "3", "4", "--skip-server-warmup"]
    assert "CUDA graphs for batch sizes 1-4 only (--cuda-graph-bs" in note
    assert "the workload sends 2 warm-up requests itself" in note
    # the experiment's own graph flag wins, and is named; its own warm-up flag is not doubled
    extra, note = startup_args(_opts(), ["--cuda-graph-max-bs=8", "--skip-server-warmup"], both)
    assert extra == []
    assert "CUDA-graph sizes left to the experiment's own --cuda-graph-max-bs" in note
    # turned off
    extra, note = startup_args(_opts(fit_cuda_graphs=False, skip_server_warmup=False), [], both)
    assert extra == [] and note == ""
    # no warm-up requests of perfbisect's own: SGLang's warm-up stays
    extra, _ = startup_args(_opts(warmup_requests=0), [], both)
    assert extra == ["--cuda-graph-bs", "1", "2", "3", "4"]
    # 0.5.2x names the flag differently; 0.4.6 has no --skip-server-warmup
    extra, _ = startup_args(_opts(), [], Startup({"--cuda-graph-bs-decode"}, None))
    assert extra == ["--cuda-graph-bs-decode", "1", "2", "3", "4"]
    # a version that declares neither: nothing added, and said
    extra, note = startup_args(_opts(), [], Startup(set(), None))
    assert extra == [] and "SGLang's own (this version has no --cuda-graph-bs)" in note


# ---- compile caches per pin set -----------------------------------------------------------------


def test_compile_caches_per_pin_set_warm_after_the_first_launch_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFBISECT_CACHE", str(tmp_path / "cache"))
    host = LocalHost()
    first = prepare(host, "aaaa", {}, keep=2)
    assert not first.warm and "cold: the pin set's first launch" in first.note()
    assert first.path == f"{host.cache_dir()}/sglang-compile/aaaa"
    triton = dict(first.variables)["TRITON_CACHE_DIR"]
    Path(triton).mkdir(parents=True)
    (Path(triton) / "kernel.cubin").write_text("x")
    again = prepare(host, "aaaa", {}, keep=2)
    assert again.warm and again.files == 1 and "(warm: 1 files)" in again.note()
    # another pin set never sees it
    other = prepare(host, "bbbb", {}, keep=2)
    assert not other.warm and dict(other.variables)["TRITON_CACHE_DIR"] != triton
    # the least recently used beyond `keep` goes (one not used for the last 10 minutes)
    old = time.time() - 3600
    os.utime(Path(first.path) / ".perfbisect-deps-ok", (old, old))
    prepare(host, "cccc", {}, keep=2)
    assert not Path(first.path).exists() and Path(other.path).exists()


def test_a_cache_variable_the_user_set_is_never_overridden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFBISECT_CACHE", str(tmp_path / "cache"))
    host = LocalHost()
    cache = prepare(host, installed_key("/usr/bin/python3", "0.5.12"), {"CUDA_CACHE_PATH": "/x"}, 4)
    assert "CUDA_CACHE_PATH" not in dict(cache.variables)
    assert "left to the experiment's [env]: CUDA_CACHE_PATH" in cache.note()
    assert {name for name, _ in cache.variables} == {n for n, _ in CACHE_VARS} - {"CUDA_CACHE_PATH"}
    # the served process's own environment wins too: the serve command sets only unset ones
    script = (
        START_COMMAND + cache.shell_prefix() + "printenv TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR"
    )
    env = {"PATH": os.environ["PATH"], "TRITON_CACHE_DIR": str(tmp_path / "mine")}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    mine, inductor = done.stdout.split()
    assert mine == str(tmp_path / "mine")
    assert inductor == f"{cache.path}/inductor"
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] perfbisect: serve", done.stderr)


def test_an_import_profile_in_the_log_is_summed_by_top_level_package() -> None:
    """`PYTHONPROFILEIMPORTTIME=1` in [env]: every process prints its imports; the note sums
    the outermost ones by package over the processes (the real lines of python3 -X importtime,
    from a run of `python3 -X importtime -c "import json"` and the same shape for torch)."""
    one = [
        "import time: self [us] | cumulative | imported package",
        "import time:        87 |         87 |   _io",
        "import time:       179 |        475 | _frozen_importlib_external",
        "import time:    400000 |    9000000 | torch",
        "import time:      5000 |    2000000 |   torch._C",
        "import time:       100 |    3000000 | sglang.srt.managers.scheduler",
    ]
    two = [*one[:1], "import time:       100 |    4000000 | sglang.srt.server_args"]
    log = "\n".join([*one, "[2026-12-03 09:42:33] server_args=ServerArgs(model_path='/m')", *two])
    note = import_note(log)
    assert note == (
        "import profile: 16.0s of imports in 2 processes: torch 9.0s, sglang 7.0s, "
        "_frozen_importlib_external 0.0s"
    )
    assert import_note("[2026-12-03 09:42:33] no profile here") is None


def test_a_server_that_never_became_ready_says_how_far_it_got() -> None:
    log = (DATA / "range_cold.log").read_text().split("Capture cuda graph end")[0]
    note = reached(log.rsplit("\n", 1)[0])
    assert note is not None
    assert note.startswith("start-up reached: kv_cache done (the target's KV cache); its last")
    assert "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]" in note
    assert reached("Traceback (most recent call last):\n") is None
