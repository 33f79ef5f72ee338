"""The SGLang verify timer (.pth + boot module) in real Python processes, against a module at
SGLang's import path defined here with each version range's return shape; and compatibility
checks against SGLang's real released wheels (downloaded with --no-deps)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from perfbisect.hosts.local import LocalHost
from perfbisect.remote.verify_timer_boot import graph_flag
from perfbisect.targets.sglang.server_log import (
    READY_LINE,
    decode_stats,
    log_notes,
    nccl_version,
)
from perfbisect.targets.sglang.timer import install_timer

# One worker runs this module under pytest-xdist: its fixture is set up once, not per worker.
pytestmark = pytest.mark.xdist_group("sglang_timer")

RUNNER = """
class ModelRunnerOutput:
    def __init__(self, logits, can_run_graph):
        self.logits_output, self.can_run_graph = logits, can_run_graph


class ModelRunner:
    def __init__(self, tp_rank, is_draft_worker=False):
        self.tp_rank, self.is_draft_worker = tp_rank, is_draft_worker

    def forward(self, forward_batch, skip_attn_backend_init=False, pp_proxy_tensors=None):
        out = sum(range(20000))
        graph = forward_batch.batch_size <= 4
        if SHAPE == "tuple":      # 0.4.6 .. 0.5.5
            return out, graph
        if SHAPE == "object":     # 0.5.9 ..
            return ModelRunnerOutput(out, graph)
        return out                # before 0.4.6
"""

DRIVER = """
import site, sys
sys.path.insert(0, sys.argv[2])
site.addsitedir(sys.argv[1])  # processes the .pth, as site-packages would at start-up
from sglang.srt.model_executor.model_runner import ModelRunner

class Mode:
    def __init__(self, verify): self.verify = verify
    def is_target_verify(self): return self.verify

class Batch:
    def __init__(self, bs, verify): self.batch_size, self.forward_mode = bs, Mode(verify)

ranks = [ModelRunner(0), ModelRunner(1)]
draft = ModelRunner(0, is_draft_worker=True)
for runner in ranks:
    for bs in (2, 3, 8):
        runner.forward(Batch(bs, True))
    runner.forward(Batch(2, False))  # decode: not timed
draft.forward(Batch(2, True))        # the draft model's verify-shaped pass: not timed
print("wrapped" if getattr(ModelRunner.forward, "_perfbisect_timed", False) else "plain")
"""


def _fake_sglang(root: Path, shape: str) -> Path:
    package = root / "fake" / "sglang" / "srt" / "model_executor"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "model_runner.py").write_text(f"SHAPE = {shape!r}\n" + RUNNER)
    return root / "fake"


def _run(tmp_path: Path, shape: str, timer_dir: Path | None) -> tuple[str, dict[str, list[dict]]]:
    site_dir = tmp_path / "site"
    install_timer(LocalHost(), str(site_dir))
    fake = _fake_sglang(tmp_path, shape)
    env = {k: v for k, v in os.environ.items() if k != "PERFBISECT_VERIFY_TIMER_DIR"}
    if timer_dir is not None:
        env["PERFBISECT_VERIFY_TIMER_DIR"] = str(timer_dir)
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, str(site_dir), str(fake)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    files: dict[str, list[dict]] = {}
    for path in sorted((timer_dir or tmp_path / "none").glob("verify.rank*.jsonl")):
        files[path.name.split(".")[1]] = [json.loads(x) for x in path.read_text().splitlines()]
    return result.stdout.strip(), files


@pytest.mark.parametrize(
    "shape,graphs",
    [("tuple", [True, True, False]), ("object", [True, True, False]), ("bare", [None] * 3)],
)
def test_timer_records_verify_per_rank(
    tmp_path: Path, shape: str, graphs: list[bool | None]
) -> None:
    state, files = _run(tmp_path, shape, tmp_path / "timing")
    assert state == "wrapped"
    assert sorted(files) == ["rank0", "rank1"]  # one file per rank (and pid)
    for records in files.values():
        assert [r["bs"] for r in records] == [2, 3, 8]  # verify only: no decode, no draft
        assert [r["graph"] for r in records] == graphs
        assert all(r["ms"] > 0 and r["t"] > 0 for r in records)


def test_timer_is_inert_without_the_variable(tmp_path: Path) -> None:
    state, files = _run(tmp_path, "object", None)
    assert state == "plain" and files == {}


def test_pth_line_does_not_import_torch(tmp_path: Path) -> None:
    install_timer(LocalHost(), str(tmp_path))
    line = (tmp_path / "perfbisect_verify_timer.pth").read_text()
    assert line.strip() == "import perfbisect_verify_timer"
    tree = ast.parse((tmp_path / "perfbisect_verify_timer.py").read_text())
    top_imports = {
        alias.name.split(".")[0]
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "torch" not in top_imports


# ---- compatibility with SGLang's released wheels ------------------------------------------------

VERSIONS = ["0.4.6.post5", "0.5.2", "0.5.5.post3", "0.5.9", "0.5.10.post1", "0.5.23"]
FLAGS = [
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--tp-size",
    "--port",
]


@pytest.fixture(scope="session")
def sglang_wheels() -> Iterator[Path]:
    folder = Path(
        os.environ.get("PERFBISECT_TEST_SGLANG_WHEELS") or tempfile.mkdtemp(prefix="sgl-")
    )
    # 0.5.12 too: the release the GPU runs served, whose CUDA-graph grid test_sglang_startup reads.
    wanted = (*VERSIONS, *(() if "0.5.12" in VERSIONS else ("0.5.12",)))
    missing = [v for v in wanted if not list(folder.glob(f"sglang-{v}-*.whl"))]
    for version in missing:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_34_x86_64",
                "--platform",
                "manylinux2014_x86_64",
                f"sglang=={version}",
                "-d",
                str(folder),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
    yield folder


def _source(wheels: Path, version: str, member: str) -> str:
    wheel = next(wheels.glob(f"sglang-{version}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode()


def _sources(wheels: Path, version: str, prefixes: tuple[str, ...]) -> str:
    wheel = next(wheels.glob(f"sglang-{version}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".py") and n.startswith(prefixes)]
        return "\n".join(z.read(n).decode() for n in names)


def _forward(tree: ast.Module) -> ast.FunctionDef:
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
    return next(n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == "forward")


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_released_sglang_matches_what_the_timer_and_launcher_assume(
    sglang_wheels: Path, version: str
) -> None:
    runner = _source(sglang_wheels, version, "sglang/srt/model_executor/model_runner.py")
    forward = _forward(ast.parse(runner))
    assert [a.arg for a in forward.args.args[:2]] == ["self", "forward_batch"]
    # The return shape the timer's graph_flag reads, per version range.
    returns = ast.unparse(forward.returns) if forward.returns else ""
    if version.startswith("0.4") or version in ("0.5.2", "0.5.5.post3"):
        assert "Tuple" in returns and "bool" in returns, returns
        assert graph_flag(("out", True)) is True
    else:
        assert returns == "ModelRunnerOutput"
        assert "can_run_graph: bool" in runner
    batch_info = _source(sglang_wheels, version, "sglang/srt/model_executor/forward_batch_info.py")
    assert "def is_target_verify(self)" in batch_info
    assert "is_draft_worker" in runner
    # Flags: literal add_argument calls up to 0.5.2x; newer versions derive each flag from a
    # dataclass field (`speculative_eagle_topk: A[...]` in sglang/srt/arg_groups/fields/).
    declarations = _sources(
        sglang_wheels, version, ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")
    )
    for flag in FLAGS:
        field = flag[2:].replace("-", "_")
        assert f'"{flag}"' in declarations or f"    {field}:" in declarations, (version, flag)
    assert "EAGLE3" in declarations


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_released_sglang_logs_what_the_parsers_read(sglang_wheels: Path, version: str) -> None:
    """The log and server-info formats perfbisect parses, in each version's own source."""
    srt = _sources(sglang_wheels, version, ("sglang/srt/",))
    assert READY_LINE in srt
    assert '"sglang is using nccl==%s"' in srt
    assert "Decode batch" in srt and "accept len: {spec_accept_length:.2f}, " in srt
    assert "gen throughput (token/s): {self.last_gen_throughput:.2f}, " in srt
    # The graph label is "cuda graph" on NVIDIA in every version: a literal in 0.4, a choice by
    # device later (an expression, a lambda, `_graph_backend_label`), always before the flag.
    assert ": {can_run_cuda_graph}, " in srt
    assert "cuda graph: {can_run_cuda_graph}" in srt or re.search(r"""["']cuda graph["']""", srt)
    assert "avg_spec_accept_length" in srt
    server = _source(sglang_wheels, version, "sglang/srt/entrypoints/http_server.py")
    assert '"/get_server_info"' in server or '"/server_info"' in server


# One decode-batch line in each format, as those versions print it (see server_log.py).
DECODE_LINES = {
    "0.4.6": "[2026-11-30 07:00:01 TP0] Decode batch. #running-req: 4, #token: 812, token usage: "
    "0.01, accept len: 3.17, cuda graph: True, gen throughput (token/s): 612.54, #queue-req: 0",
    "0.5.2": "[2026-11-30 07:00:02 TP0] Decode batch. #running-req: 4, #token: 812, token usage: "
    "0.01, accept len: 2.83, cuda graph: False, gen throughput (token/s): 301.10, #queue-req: 0",
    "0.5.9": "[2026-11-30 07:00:03 TP0] Decode batch, #running-req: 4, #token: 812, token usage: "
    "0.01, accept len: 3.50, accept rate: 0.83, cuda graph: True, gen throughput (token/s): "
    "640.00, #queue-req: 0",
    "0.5.23": "[2026-11-30 07:00:04 TP0] Decode batch [118], #running-req: 4, #token: 812, token "
    "usage: 0.01, accept len: 3.50, accept rate: 0.83, block accept len: 9.99, cuda graph: True, "
    "gen throughput (token/s): 650.00, #queue-req: 0",
}


def test_decode_log_parser_reads_every_format() -> None:
    log = "\n".join(
        [
            "[2026-11-30 07:00:00] The server is fired up and ready to roll!",
            "[2026-11-30 07:00:00 TP0] sglang is using nccl==2.21.5",
            "[2026-11-30 07:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 12",
            *DECODE_LINES.values(),
        ]
    )
    stats = decode_stats(log)
    assert stats.lines == 4
    assert stats.accept_len == pytest.approx((3.17 + 2.83 + 3.50 + 3.50) / 4)  # not 9.99
    assert stats.graph_fraction == pytest.approx(0.75)
    assert stats.gen_tokens_per_s == pytest.approx((612.54 + 301.10 + 640.00 + 650.00) / 4)
    assert nccl_version(log) == "2.21.5"
    notes = log_notes(log)
    assert notes[0] == "server reports NCCL 2.21.5"
    assert notes[1].startswith("decode log: 4 batches, accept len 3.25, decode in CUDA graphs 75%")
    assert log_notes("no decode lines here") == []


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_released_sglang_has_what_proxy_launches_use(sglang_wheels: Path, version: str) -> None:
    """Proxy launches (targets/sglang/proxy.py) in each release's own source: the dummy load
    format, the draft's load format from 0.5.5 on, and the two facts that make perfbisect write
    a config copy instead of passing --json-model-override-args: that override reaches the
    EAGLE-3 draft's config too, whose layer count the draft refuses (or builds) as its own."""
    from perfbisect.targets.sglang.proxy import FIRST_DRAFT_LOAD_FORMAT

    declarations = _sources(
        sglang_wheels, version, ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")
    )
    assert '"--load-format"' in declarations or "    load_format:" in declarations
    load_config = _source(sglang_wheels, version, "sglang/srt/configs/load_config.py")
    assert 'DUMMY = "dummy"' in load_config
    draft_flag = (
        '"--speculative-draft-load-format"' in declarations
        or "    speculative_draft_load_format:" in declarations
    )
    assert draft_flag == (Version(version) >= FIRST_DRAFT_LOAD_FORMAT), version
    model_config = _source(sglang_wheels, version, "sglang/srt/configs/model_config.py")
    # `server_args.` up to 0.5.2x, a resolved view `cfg.` of it in 0.5.23
    assert re.search(
        r"model_override_args=(server_args|cfg)\.json_model_override_args", model_config
    )
    assert "is_draft_model" in model_config  # one from_server_args builds target and draft
    eagle3 = _source(sglang_wheels, version, "sglang/srt/models/llama_eagle3.py")
    # Up to 0.5.1x it refuses other layer counts; 0.5.23 builds that many draft layers.
    assert "num_hidden_layers != 1" in eagle3 or "range(config.num_hidden_layers)" in eagle3
