"""An SGLang session's start-up end to end, without a GPU: the stand-in server
(tests/standin_sglang) prints SGLang's start-up lines in its format, compiles a "kernel" into
TRITON_CACHE_DIR when it is empty and captures the graph sizes it is given; perfbisect records
each launch's phases, keeps the compile cache per pin set and passes only the graph sizes the
workload needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import Cli
from test_sglang_e2e import served_python  # noqa: F401 (a fixture)

pytestmark = pytest.mark.xdist_group("sglang_e2e")

EXPERIMENT = """
[target]
kind = "sglang"
build = "installed"
python = "{python}"
model = "{models}/target"
draft_model = "{models}/draft"
tp = 1
requests = 4
concurrency = 2
max_new_tokens = 16
warmup_requests = 1
timeout_s = 60

[target.axis_args.graphs]
off = ["--disable-cuda-graph"]

[axes.custom.graphs]
values = ["on", "off"]
ordered = false
"""


def test_phases_caches_and_graph_sizes_of_each_launch(
    cli: Cli,
    tmp_path: Path,
    served_python: str,  # noqa: F811
) -> None:
    models = tmp_path / "models"
    for name in ("target", "draft"):
        (models / name).mkdir(parents=True)
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(python=served_python, models=models)
    )
    report = cli.json("bisect", "start", "--good", "graphs=on", "--bad", "graphs=off", "--json")
    assert report["status"] == "found", report["message"]
    entries = cli.json("bisect", "log", "--json")
    every = entries if isinstance(entries, list) else entries["launches"]
    # the search's launches (a found culprit's `bisect explain` diagnostic launches, with a
    # profiler on, are another module's and are left out here)
    launches = [v for v in every if v["purpose"] != "explain"]
    assert len(launches) >= 3
    assert all(v["status"] == "ok" for v in launches), [
        (v["status"], v["reason"]) for v in launches
    ]
    for launch in launches:
        timings = launch["timings"]
        # every phase the stand-in's log shows, from perfbisect's start mark to its check
        for phase in ("imports", "workers", "weights", "kv_cache", "server", "health"):
            assert f"startup.{phase}" in timings, (phase, timings)
        spent = sum(v for k, v in timings.items() if k.startswith("startup."))
        assert spent == pytest.approx(timings["ready_s"], abs=0.01)
        assert "startup.warmup" in timings and timings["startup.warmup"] < 0.2  # skipped
        serve = (Path(launch["log"]) / "serve.log").read_text()
        argv = json.loads(serve.split("[stand-in] argv: ", 1)[1].splitlines()[0])
        assert "--skip-server-warmup" in argv
        notes = [f for f in launch["flags"] if str(f).startswith("start-up: ")]
        assert len(notes) == 1, launch["flags"]
        if launch["config"]["graphs"] == "on":
            # concurrency 2: graphs for batch sizes 1 and 2, not the stand-in's own 1-24
            assert argv[argv.index("--cuda-graph-bs") :][:3] == ["--cuda-graph-bs", "1", "2"]
            assert "Capture cuda graph bs [1, 2]" in serve
            assert "CUDA graphs for batch sizes 1-2 only (--cuda-graph-bs" in notes[0]
            assert "startup.graphs" in timings
        else:
            assert "--cuda-graph-bs" not in argv
            assert "left to the experiment's own --disable-cuda-graph" in notes[0]
    # One compile cache for the installed interpreter: cold until the first graphs=on launch
    # compiled its kernel there, warm for every launch after it.
    cache = list((tmp_path / "cache" / "sglang-compile").glob("installed-*"))
    assert len(cache) == 1
    assert (cache[0] / "triton" / "target_verify.cubin").exists()
    compiled = next(i for i, v in enumerate(launches) if v["config"]["graphs"] == "on")
    for i, launch in enumerate(launches):
        note = next(f for f in launch["flags"] if str(f).startswith("start-up: "))
        assert f"compile caches {cache[0]}" in note
        if i <= compiled:
            assert "(cold: the pin set's first launch)" in note
        else:
            assert "(warm: 1 files)" in note
    # The session's summary: the first launch of the (one) pin set against the later ones.
    startup = report["startup"]
    assert startup["first"]["launches"] == 1
    assert startup["later"]["launches"] == len(launches) - 1
    assert startup["first"]["ready_s"] == pytest.approx(
        launches[0]["timings"]["ready_s"], abs=0.001
    )
    text = cli.run("bisect", "report").stdout
    assert "start-up, first launch of a pin set: ready " in text
    assert "start-up, later launches: ready " in text
    # Per launch: query history's stages and bisect log's ready column.
    wide = Cli({**cli.env, "COLUMNS": "250"}, cli.cwd)
    history = wide.run("query", "history").stdout
    # the stand-in's phases are under the 0.5 s shown one by one: summed as "other"
    assert re.search(r"ready \d+\.\ds \((\w+ \d+\.\ds, )*other \d+\.\ds\)", history), history
    shown = cli.run("query", "show", str(launches[0]["id"])).stdout
    assert re.search(r"timings: .*ready \d+\.\ds \(", shown), shown
    # (piped without COLUMNS: whole rows; a narrower layout heads the column "ready")
    log = Cli({k: v for k, v in cli.env.items() if k != "COLUMNS"}, cli.cwd).run("bisect", "log")
    assert "ready (s)" in log.stdout, log.stdout
