"""The nccl axis with real NCCL libraries (nvidia-nccl-cu13 wheels from PyPI, ~200 MB each,
downloaded once per test session): materialised, preloaded into the served processes, and
confirmed from /proc/<pid>/maps; a launch that drops the library is refused, not measured."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Cli, make_repo

# One worker runs this module under pytest-xdist: its fixture is set up once, not per worker.
pytestmark = pytest.mark.xdist_group("nccl_axis")

# The server reports the NCCL version its process actually has (ncclGetVersion of the
# preloaded libnccl.so.2); 2.28 is "slower". No GPU is needed to load NCCL and ask its version.
SERVER = r"""
import ctypes, http.server, sys
code = ctypes.c_int()
try:  # without the preloaded library (no system NCCL here) the server runs without NCCL
    ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(code))
except OSError:
    pass
ms = 30.0 if code.value >= 22800 else 10.0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(str(ms).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
MEASURE = r"""
import sys, urllib.request
for _ in range(5):
    print("verify_ms=" + urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v").read().decode())
"""
EXPERIMENT = """
[target]
kind = "command"
repo = "repo"
serve = "{serve}"
ready = "http://127.0.0.1:{{port}}/health"
measure = "python3 measure.py {{port}}"
timeout_s = 60

[metric]
name = "verify_ms"
pattern = 'verify_ms=([0-9.]+)'

[axes.nccl]
values = [{values}]
cuda = 13
"""


@pytest.fixture(scope="session")
def nccl_cache() -> Iterator[str]:
    """Where the libraries are unpacked: kept when the developer names a directory (no
    second download), a temporary one removed at the end otherwise (CI)."""
    given = os.environ.get("PERFBISECT_TEST_NCCL_CACHE")
    path = given or tempfile.mkdtemp(prefix="pbnccl-")
    yield path
    if not given:
        shutil.rmtree(path, ignore_errors=True)


def _setup(cli: Cli, tmp_path: Path, nccl_cache: str, serve: str, values: str) -> str:
    repo = make_repo(tmp_path / "repo", [{"server.py": SERVER, "measure.py": MEASURE}])
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT.format(serve=serve, values=values))
    cli.env["PERFBISECT_NCCL_CACHE"] = nccl_cache
    return repo.shas[0]


@pytest.mark.slow
def test_nccl_version_is_bisected_and_confirmed(cli: Cli, tmp_path: Path, nccl_cache: str) -> None:
    sha = _setup(cli, tmp_path, nccl_cache, "python3 server.py {port}", '"2.27.7", "2.28.3"')
    report = cli.bisect(f"{sha},nccl=2.27.7", f"{sha},nccl=2.28.3", timeout=900)
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["axis"] == "nccl"
    assert report["culprit"]["first_bad"]["nccl"] == "2.28.3"
    launch = cli.json("query", "history", "--json")[-1]
    shown = cli.json("query", "show", str(launch["id"]), "--json")
    notes = shown["snapshot"]["launch"]["notes"]
    assert any("NCCL library confirmed" in n and "cu13/2.28.3/libnccl.so.2" in n for n in notes)


@pytest.mark.slow
def test_dropped_library_is_refused_and_unknown_version_is_named(
    cli: Cli, tmp_path: Path, nccl_cache: str
) -> None:
    serve = "env -u LD_PRELOAD python3 server.py {port}"
    sha = _setup(cli, tmp_path, nccl_cache, serve, '"2.27.7", "2.28.3"')
    result = cli.run(
        "bisect", "start", "--good", f"{sha},nccl=2.27.7", "--bad", f"{sha},nccl=2.28.3"
    )
    assert result.returncode == 3, result.stderr  # neither endpoint may be measured
    assert "no process of the server mapped" in result.stdout + result.stderr
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(serve="python3 server.py {port}", values='"2.27.7", "9.9.9"')
    )
    result = cli.run(
        "bisect", "start", "--good", f"{sha},nccl=2.27.7", "--bad", f"{sha},nccl=9.9.9"
    )
    assert result.returncode == 3
    assert "NCCL 9.9.9: no nvidia-nccl-cu13==9.9.9 wheel" in result.stdout + result.stderr
    result = cli.run(
        "bisect", "start", "--good", f"{sha},nccl=2.27.7", "--bad", f"{sha},nccl=2.30.3"
    )
    assert result.returncode == 2
    assert "NCCL '2.30.3' is not listed in [axes.nccl]" in result.stderr


# Six NCCL "versions" as a test double: copies of this machine's libz (a real shared library
# that any process can preload) at <version>/libnccl.so.2. Six real NCCL wheels would be 1.2 GB
# per CI run; the two real libraries above prove the loading. The server's cost depends on the
# library it really mapped (read from its own /proc/self/maps), as a real NCCL regression would.
SIX = ("2.18.5", "2.19.3", "2.20.5", "2.21.5", "2.23.4", "2.26.2")
MAPPED_SERVER = r"""
import http.server, pathlib, re, sys
maps = pathlib.Path("/proc/self/maps").read_text()
found = re.search(r"/([0-9.]+)/libnccl\.so\.2", maps)
version = tuple(int(x) for x in found.group(1).split(".")) if found else (0,)
ms = 30.0 if version >= (2, 21, 5) else 10.0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(str(ms).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _a_real_shared_library() -> Path:
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        for candidate in sorted(Path(folder).glob("libz.so.1*")):
            if candidate.is_file():
                return candidate
    pytest.skip("no libz.so.1 on this machine")


def test_one_nccl_version_among_six_is_found(cli: Cli, tmp_path: Path) -> None:
    source = _a_real_shared_library()
    paths = []
    for version in SIX:
        target = tmp_path / "libs" / version / "libnccl.so.2"
        target.parent.mkdir(parents=True)
        shutil.copy(source, target)
        paths.append(str(target))
    repo = make_repo(tmp_path / "repo", [{"server.py": MAPPED_SERVER, "measure.py": MEASURE}])
    values = ", ".join(f'"{p}"' for p in paths)
    (tmp_path / "perfbisect.toml").write_text(
        EXPERIMENT.format(serve="python3 server.py {port}", values=values)
    )
    sha = repo.shas[0]
    report = cli.bisect(f"{sha},nccl={paths[0]}", f"{sha},nccl={paths[-1]}", timeout=600)
    assert report["status"] == "found", report["message"]
    assert report["culprit"]["first_bad"]["nccl"] == paths[3]  # 2.21.5
    assert report["culprit"]["last_good"]["nccl"] == paths[2]
    for launch in cli.json("query", "history", "--json"):
        notes = cli.json("query", "show", str(launch["id"]), "--json")["snapshot"]["launch"]
        assert any(
            f"/{launch['config']['nccl'].split('/')[-2]}/libnccl.so.2" in n
            for n in notes["notes"]
            if "confirmed" in n
        ), notes
