"""The sglang target without a GPU: launch flags per version (EAGLE-3 refused before
0.4.4.post3), `bisect start --dry-run` on checkouts of both packaging layouts, and the workload
client against a stand-in HTTP server (a test double: SGLang itself needs a GPU)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Cli, make_repo
from packaging.version import Version

from perfbisect.errors import StepFailed
from perfbisect.targets.sglang.launch_args import checkout_version, server_argv
from perfbisect.targets.sglang.target import WORKLOAD

OPTIONS = {"model": "/models/target", "draft_model": "/models/eagle3", "tp": 8}


def test_server_flags_and_the_eagle3_floor() -> None:
    argv = server_argv(
        "py", Version("0.5.2"), {**OPTIONS, "extra_args": ["--disable-cuda-graph"]}, "{port}"
    )
    assert argv[:3] == ["py", "-m", "sglang.launch_server"]
    assert argv[argv.index("--tp-size") + 1] == "8" and "--tp" not in argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert argv[-1] == "--disable-cuda-graph"
    server_argv("py", Version("0.4.4.post3"), OPTIONS, "1")  # the first with EAGLE-3
    with pytest.raises(StepFailed, match="has no EAGLE-3"):
        server_argv("py", Version("0.4.4.post2"), OPTIONS, "1")


def test_checkout_version_from_either_place() -> None:
    assert checkout_version('[project]\nversion = "0.4.6.post5"\n', None) == Version("0.4.6.post5")
    dynamic = '[project]\ndynamic = ["version"]\n'
    assert checkout_version(dynamic, '__version__ = "0.5.9"\n') == Version("0.5.9")
    assert checkout_version(dynamic, None) is None


OLD = '[project]\nname = "sglang"\nversion = "0.4.6.post5"\ndependencies = ["aiohttp"]\n\n[project.optional-dependencies]\nsrt = ["torch==2.6.0"]\nall = ["sglang[srt]"]\n'
NEW = '[project]\nname = "sglang"\ndynamic = ["version"]\ndependencies = ["torch==2.9.1"]\n\n[tool.setuptools_scm]\nroot = ".."\n'


@pytest.mark.parametrize(
    "layout,version,target", [(OLD, "0.4.6.post5", "python[all]"), (NEW, "0.5.9", "python")]
)
def test_dry_run_prints_every_command(
    cli: Cli, tmp_path: Path, layout: str, version: str, target: str
) -> None:
    files = {
        "python/pyproject.toml": layout,
        "python/sglang/version.py": f'__version__ = "{version}"\n',
    }
    repo = make_repo(tmp_path / "sglang", [files, {**files, "README.md": "x"}])
    (tmp_path / "perfbisect.toml").write_text(
        '[target]\nkind = "sglang"\nrepo = "sglang"\nmodel = "/models/llama"\n'
        'draft_model = "/models/eagle3"\ntp = 8\n'
    )
    result = cli.json(
        "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1], "--dry-run", "--json"
    )
    commands = result["commands"]
    assert commands["sglang_version"] == version
    assert any(
        "pip install --no-deps -e " in line and line.endswith(target) for line in commands["build"]
    )
    assert (
        "PERFBISECT_VERIFY_TIMER_DIR=" in commands["serve"] and "--tp-size 8" in commands["serve"]
    )
    assert "--speculative-algorithm EAGLE3" in commands["serve"]
    assert "workload.py" in commands["measure"]
    assert ("SETUPTOOLS_SCM_PRETEND_VERSION" in " ".join(commands["build"])) == (layout is NEW)
    text = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1], "--dry-run")
    assert text.returncode == 0 and "serve:" in text.stdout
    assert not (tmp_path / "history.db").exists() or "sessions" not in text.stdout


class _StandIn(http.server.BaseHTTPRequestHandler):
    """Test double of an SGLang server's HTTP API: /generate and /server_info."""

    fail = False

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if _StandIn.fail:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "CUDA out of memory"}')
            return
        self._json({"text": "ok", "meta_info": {"completion_tokens": 16}})

    def do_GET(self) -> None:
        self._json({"internal_states": [{"avg_spec_accept_length": 2.75}]})

    def _json(self, data: object) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def _workload(port: int, timing: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """perfbisect's workload client, run as the target runs it, against the stand-in."""
    argv = [sys.executable, str(WORKLOAD), "--port", str(port), "--timing-dir", str(timing)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60)


def test_workload_reads_the_measured_window(stand_in: int, tmp_path: Path) -> None:
    (tmp_path / "verify.rank0.1.jsonl").write_text(
        json.dumps({"t": 1.0, "ms": 99.0, "bs": 1, "graph": True})
        + "\n"  # before the window
        + json.dumps({"t": 4e9, "ms": 5.0, "bs": 4, "graph": True})
        + "\n"
    )
    _StandIn.fail = False
    out = _workload(stand_in, tmp_path, "--requests", "8", "--concurrency", "2")
    assert out.returncode == 0, out.stderr
    verify = [line for line in out.stdout.splitlines() if line.startswith("verify ")]
    assert len(verify) == 1 and '"ms": 5.0' in verify[0]
    assert "tokens=128" in out.stdout and "accept_length=2.750" in out.stdout
    _StandIn.fail = True
    failed = _workload(stand_in, tmp_path, "--warmup", "0")
    assert failed.returncode == 1
    assert "HTTP 500" in failed.stderr and "CUDA out of memory" in failed.stderr
