"""Per-commit pin sets of real upstream SGLang project files (tests/data/sglang_pyprojects: the
released 0.5.2, 0.5.9, 0.5.10, 0.5.10.post1), environments built offline from a wheelhouse
(real pip, ``--no-index``), a pin the wheelhouse lacks -> SKIP naming it, the source-folder
fallback when the package's own build cannot run, the environments' LRU bound, the server-log
causes a failed endpoint names, and ``perfbisect sglang pinsets|wheelhouse`` end to end.

The dependency wheels are tiny pure-Python wheels written here (``pbtiny-*``), so installs are
fast and nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import Cli, make_repo
from packaging.requirements import Requirement

from perfbisect.errors import StepFailed
from perfbisect.hosts.local import LocalHost
from perfbisect.targets.sglang.build import BuildOptions, build
from perfbisect.targets.sglang.deps import install_plan
from perfbisect.targets.sglang.envs import OK_MARKER, Sources, evict_envs, missing_requirement
from perfbisect.targets.sglang.pinsets import range_pins
from perfbisect.targets.sglang.server_log import failure_cause

REAL = Path(__file__).parent / "data" / "sglang_pyprojects"
NO_ISOLATION = ("--no-build-isolation",)  # the parent env's setuptools(-scm) build the checkout


def real(version: str) -> str:
    return (REAL / f"{version}.toml").read_text()


def with_dependencies(pyproject: str, deps: list[str]) -> str:
    """A real project file with its ``dependencies`` replaced (build system, setuptools-scm
    configuration and package discovery stay upstream's)."""
    listed = ", ".join(f'"{d}"' for d in deps)
    return re.sub(
        r"(?ms)^dependencies = \[.*?^\]", f"dependencies = [{listed}]", pyproject, count=1
    )


def checkout(pyproject: str, code: str = "VERSION = 'a'\n") -> dict[str, str]:
    """The files of an upstream-layout commit: the package under python/."""
    return {
        "python/pyproject.toml": pyproject,
        "python/README.md": "tiny\n",
        "python/LICENSE": "Apache-2.0\n",
        "python/sglang/__init__.py": code,
        "python/sglang/version.py": "try:\n    from sglang._version import __version__\n"
        "except ImportError:\n    __version__ = '0.0.0.dev0'\n",
    }


def tiny_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of one module ``<name>`` (dashes as underscores)."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}.dist-info/METADATA": meta,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as whl:
        for name_in, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            whl.writestr(name_in, text)
    return path


def worktree(repo: Path, sha: str, where: Path) -> str:
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(where), sha],
        check=True,
        timeout=60,
    )
    return str(where)


def run(python: str, code: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    ).stdout.strip()


# ---- keying on real upstream pins ------------------------------------------------------------


def test_real_upstream_pin_sets_of_a_range(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "sglang",
        [
            checkout(real("0.5.2")),  # the layout with extras (python[all])
            checkout(real("0.5.9")),
            checkout(real("0.5.9"), "VERSION = 'code only'\n"),
            checkout(real("0.5.10")),
            checkout(real("0.5.10.post1")),  # only flashinfer moved
            {"python/sglang/__init__.py": "VERSION = 'code only again'\n"},
        ],
    )
    found = range_pins(repo.path, repo.shas[0], repo.shas[-1])
    assert found.commits == tuple(repo.shas)
    assert [len(s.commits) for s in found.sets] == [1, 2, 1, 2]
    old, v059, v0510, post1 = (s.plan for s in found.sets)
    assert old.target == "python[all]" and "torch==2.8.0" in old.requirements
    assert v059.label().startswith("torch==2.9.1, sgl-kernel==0.3.21, flashinfer-python==0.6.3")
    assert "sglang-kernel==0.4.1" in v0510.label() and v0510.version_file == "sglang/_version.py"
    assert "setuptools-scm>=8.0" in v0510.build_requires
    assert "flashinfer-python==0.6.7.post3" in post1.requirements
    # Normalised, every requirement is still one pip installs: markers keep their words apart.
    marked = [r for r in v0510.requirements if ";" in r]
    assert 'decord2; sys_platform == "linux" and (platform_machine == "aarch64" or' in marked[1]
    assert all(str(Requirement(r)) == r for r in v0510.requirements + old.requirements)
    # Narrowed to the packages that matter, 0.5.10 and its post-release share an environment.
    narrowed = range_pins(repo.path, repo.shas[0], repo.shas[-1], ("torch", "sglang-kernel"))
    assert [len(s.commits) for s in narrowed.sets] == [1, 2, 3]
    assert narrowed.sets[2].plan.keyed_by == ("sglang-kernel==0.4.1", "torch==2.9.1")
    assert install_plan(real("0.5.10")).digest == v0510.digest  # the build keys it the same


# ---- environments from a wheelhouse only -------------------------------------------------------


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheelhouse"
    tiny_wheel(folder, "pbtiny-a", "1.0")
    tiny_wheel(folder, "pbtiny-b", "1.0", ("pbtiny-c>=1",))
    tiny_wheel(folder, "pbtiny-c", "1.0")
    return folder


def test_offline_environments_per_pin_set(tmp_path: Path, wheelhouse: Path) -> None:
    one = with_dependencies(real("0.5.10"), ["pbtiny-a==1.0"])
    two = with_dependencies(real("0.5.10"), ["pbtiny-a==1.0", "pbtiny-b==1.0"])
    repo = make_repo(
        tmp_path / "sglang",
        [checkout(one, "VERSION = 'a'\n"), checkout(one, "VERSION = 'b'\n"), checkout(two)],
    )
    root = tmp_path / "envs"
    options = BuildOptions(Sources(str(wheelhouse)))
    host = LocalHost()
    built = [
        build(
            host,
            worktree(repo.path, sha, tmp_path / f"wt{i}"),
            sys.executable,
            str(root),
            300,
            NO_ISOLATION,
            options,
        )
        for i, sha in enumerate(repo.shas)
    ]
    assert [b.reused for b in built] == [False, True, False]
    assert built[0].digest == built[1].digest != built[2].digest
    assert built[0].notes[0].startswith(f"pin set {built[0].digest} (made from the wheelhouse")
    assert "(reused)" in built[1].notes[0] and built[0].label == "pbtiny-a==1.0"
    assert built[2].source_path is None  # upstream's setuptools-scm build ran: editable
    code = "import sglang, pbtiny_b, pbtiny_c; print(sglang.__file__, pbtiny_b.VERSION)"
    where, version = run(built[2].python, code).split()
    assert where == str(tmp_path / "wt2" / "python" / "sglang" / "__init__.py")
    assert version == "1.0"  # pbtiny-c came in as pbtiny-b's dependency, from the wheelhouse
    assert (root / built[2].digest / "perfbisect-pins.txt").read_text().split() == [
        "pbtiny-a==1.0",
        "pbtiny-b==1.0",
    ]


def test_launches_at_once_take_turns_in_one_environment(tmp_path: Path, wheelhouse: Path) -> None:
    """Two slots on one host building the same new pin set: one makes it, the other waits
    and reuses it (no rm -rf under a running pip)."""
    from concurrent.futures import ThreadPoolExecutor

    pyproject = with_dependencies(real("0.5.10"), ["pbtiny-a==1.0", "pbtiny-b==1.0"])
    repo = make_repo(
        tmp_path / "sglang", [checkout(pyproject, "A = 1\n"), checkout(pyproject, "A = 2\n")]
    )
    trees = [worktree(repo.path, sha, tmp_path / f"wt{i}") for i, sha in enumerate(repo.shas)]
    options = BuildOptions(Sources(str(wheelhouse)))

    def one(tree: str) -> tuple[bool, str]:
        built = build(
            LocalHost(), tree, sys.executable, str(tmp_path / "envs"), 300, NO_ISOLATION, options
        )
        return built.reused, built.python

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, trees))
    assert sorted(reused for reused, _ in results) == [False, True]
    assert run(results[0][1], "import pbtiny_b, pbtiny_c; print(pbtiny_c.VERSION)") == "1.0"


def test_a_pin_the_wheelhouse_lacks_is_a_skip_naming_it(tmp_path: Path, wheelhouse: Path) -> None:
    pyproject = with_dependencies(real("0.5.10"), ["pbtiny-a==1.0", "pbtiny-b==2.0"])
    repo = make_repo(tmp_path / "sglang", [checkout(pyproject)])
    root = tmp_path / "envs"
    with pytest.raises(StepFailed) as failed:
        build(
            LocalHost(),
            worktree(repo.path, repo.shas[0], tmp_path / "wt"),
            sys.executable,
            str(root),
            300,
            NO_ISOLATION,
            BuildOptions(Sources(str(wheelhouse))),
        )
    assert failed.value.stage == "build"
    assert "needs pbtiny-b==2.0, which the wheelhouse" in failed.value.reason
    assert "(offline)" in failed.value.reason
    # No half-made environment left to be reused (the lock file stays: others may wait on it).
    assert [p.name for p in root.iterdir()] == [f"{install_plan(pyproject).digest}.lock"]


def test_a_package_that_cannot_build_runs_from_its_source_folder(
    tmp_path: Path, wheelhouse: Path
) -> None:
    # Upstream builds Rust extensions from 0.5.11 (its wheels carry sglang/srt/grpc/_core*.so)
    # through setuptools-rust; on a host without that build chain, the package cannot build.
    pyproject = with_dependencies(real("0.5.10"), ["pbtiny-a==1.0"]).replace(
        'requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "wheel"]',
        'requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "wheel", "setuptools-rust>=1.9"]',
    )
    assert "setuptools-rust>=1.9" in install_plan(pyproject).build_requires
    files = checkout(pyproject, "VERSION = 'from source'\n")
    files["python/setup.py"] = (
        "from setuptools import setup\nfrom setuptools_rust import RustExtension\n"
        "setup(rust_extensions=[RustExtension('sglang.srt.grpc._core', "
        "path='../sgl-grpc/Cargo.toml')])\n"
    )
    repo = make_repo(tmp_path / "sglang", [files])
    tree = worktree(repo.path, repo.shas[0], tmp_path / "wt")
    sources = Sources(str(wheelhouse))
    args = (LocalHost(), tree, sys.executable, str(tmp_path / "envs"), 300, NO_ISOLATION)
    built = build(*args, BuildOptions(sources))
    assert built.source_path == f"{tree}/python"
    assert (
        "editable install failed (ModuleNotFoundError: No module named 'setuptools_rust')"
        in (built.notes[1])
    )
    code = "import sglang, pbtiny_a; print(sglang.VERSION, pbtiny_a.VERSION)"
    assert run(built.python, code, {"PYTHONPATH": built.source_path}) == "from source 1.0"
    with pytest.raises(StepFailed, match=r"pip install -e python: .*'setuptools_rust'"):
        build(*args, BuildOptions(sources, fallback=False))
    source_only = build(*args, BuildOptions(sources, source_only=True))
    assert source_only.reused and "(build = source)" in source_only.notes[1]


def test_environments_beyond_the_bound_are_evicted_oldest_first(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    now = time.time()
    for name, age_s in (("old", 7200), ("older", 9000), ("recent", 60), ("mid", 3600)):
        (root / name).mkdir(parents=True)
        (root / name / OK_MARKER).touch()
        os.utime(root / name / OK_MARKER, (now - age_s, now - age_s))
    (root / "new").mkdir()
    (root / "new" / OK_MARKER).touch()
    removed = evict_envs(LocalHost(), str(root), keep=3, spare=str(root / "new"))
    # 5 environments, 3 kept: the two least recently used go; one used a minute ago never.
    assert sorted(Path(p).name for p in removed) == ["old", "older"]
    assert sorted(p.name for p in root.iterdir()) == ["mid", "new", "recent"]
    assert evict_envs(LocalHost(), str(root), keep=1, spare=str(root / "new")) == [
        str(root / "mid")
    ]


def test_pip_refusals_and_server_failures_are_named() -> None:
    assert missing_requirement(
        "ERROR: Could not find a version that satisfies the requirement torch==2.11.0 "
        "(from versions: 2.9.1)\nERROR: No matching distribution found for torch==2.11.0"
    ) == ("torch==2.11.0")
    log = (
        "[2026-05-20 10:00:01] server_args=ServerArgs(...)\n"
        "Traceback (most recent call last):\n"
        '  File "sglang/srt/layers/attention/flashinfer_backend.py", line 12, in <module>\n'
        "ModuleNotFoundError: No module named 'flashinfer'\n"
    )
    assert failure_cause(log) == (
        "missing import flashinfer (serve.log line 4: "
        "ModuleNotFoundError: No module named 'flashinfer')"
    )
    flag = "launch_server.py: error: unrecognized arguments: --speculative-eagle-topk 1\n"
    assert failure_cause("usage: ...\n" + flag) == (
        "flag not known to this commit: --speculative-eagle-topk 1 (serve.log line 2: "
        f"{flag.strip()})"
    )
    assert failure_cause("The server is fired up and ready to roll!\n") is None


# ---- the commands ------------------------------------------------------------------------------


def test_pinsets_and_wheelhouse_commands(cli: Cli, tmp_path: Path, wheelhouse: Path) -> None:
    def project(deps: list[str]) -> str:  # build requirements a wheelhouse must carry too
        text = with_dependencies(real("0.5.10"), deps)
        upstream = 'requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "wheel"]'
        return text.replace(upstream, 'requires = ["pbtiny-build"]')

    tiny_wheel(wheelhouse, "pbtiny-b", "2.0")  # not needed by the range: not copied
    tiny_wheel(wheelhouse, "pbtiny-build", "1.0")
    repo = make_repo(
        tmp_path / "sglang",
        [
            checkout(project(["pbtiny-a==1.0"])),
            checkout(project(["pbtiny-a==1.0"]), "VERSION = 'b'\n"),
            checkout(project(["pbtiny-a==1.0", "pbtiny-b==1.0"])),
        ],
    )
    span = f"{repo.shas[0]}..{repo.shas[-1]}"
    sets = cli.json("sglang", "pinsets", "--range", span, "--repo", str(repo.path), "--json")
    assert sets["commits"] == 3 and [s["commits"] for s in sets["pin_sets"]] == [2, 1]
    out = tmp_path / "for-gpu"
    bare = tmp_path / "names.txt"
    bare.write_text("pbtiny-c\npbtiny-a\n")  # pbtiny-a is pinned (==): still needed
    args = ["sglang", "wheelhouse", str(out), "--range", span, "--repo", str(repo.path)]
    house = cli.json(*args, "--find-links", str(wheelhouse), "--json")
    files = {f["file"]: f for f in house["files"]}
    assert sorted(files) == [
        "pbtiny_a-1.0-py3-none-any.whl",
        "pbtiny_b-1.0-py3-none-any.whl",
        "pbtiny_build-1.0-py3-none-any.whl",
        "pbtiny_c-1.0-py3-none-any.whl",  # pbtiny-b's own dependency
    ]  # not pbtiny-b 2.0: no commit of the range pins it
    assert all(f["new"] and f["bytes"] > 100 for f in files.values())
    assert house["total_bytes"] == sum(f["bytes"] for f in files.values())
    assert house["pin_sets"][1]["wheels"] == [
        "pbtiny-a==1.0",
        "pbtiny-b==1.0",
        "pbtiny-build==1.0",
        "pbtiny-c==1.0",
    ]
    again = cli.run(*args, "--find-links", str(wheelhouse))  # has them all: nothing new
    assert again.returncode == 0, again.stderr
    assert "4 file(s)" in again.stdout and "(new)" not in again.stdout
    assert re.search(r"[0-9] KiB  pbtiny_a-1.0-py3-none-any.whl", again.stdout)
    # What it made builds the range's last environment with no other source.
    built = build(
        LocalHost(),
        worktree(repo.path, repo.shas[-1], tmp_path / "wt"),
        sys.executable,
        str(tmp_path / "envs"),
        300,
        NO_ISOLATION,
        BuildOptions(Sources(str(out))),
    )
    assert run(built.python, "import pbtiny_c; print(pbtiny_c.VERSION)") == "1.0"
    # --dry-run resolves and lists, downloads nothing; a bare name in --have: any version.
    dry = ["sglang", "wheelhouse", str(tmp_path / "nothing"), "--range", span, "--repo"]
    dry += [str(repo.path), "--find-links", str(wheelhouse), "--dry-run", "--have", str(bare)]
    listed = cli.run(*dry)
    assert listed.returncode == 0, listed.stderr
    assert "    pbtiny_c-1.0-py3-none-any.whl  (the host has it)" in listed.stdout
    assert "    pbtiny_b-1.0-py3-none-any.whl\n" in listed.stdout
    assert "    pbtiny_a-1.0-py3-none-any.whl\n" in listed.stdout
    assert not (tmp_path / "nothing").exists()
    # What the target host has (a pip freeze of it) is left out.
    have = tmp_path / "freeze.txt"
    have.write_text("pbtiny-c==1.0\nsomething-else==3\n")
    lean = tmp_path / "lean"
    lean_args = ["sglang", "wheelhouse", str(lean), "--range", span, "--repo", str(repo.path)]
    leaner = cli.json(*lean_args, "--find-links", str(wheelhouse), "--have", str(have), "--json")
    assert leaner["left_out"] == ["pbtiny-c==1.0"] and len(leaner["files"]) == 3
    # A pin no source has: the command names it and exits 1.
    bad = make_repo(
        tmp_path / "bad",
        [checkout(project(["pbtiny-a==1.0"])), checkout(project(["pbtiny-a==9.9"]))],
    )
    bad_args = ["sglang", "wheelhouse", str(tmp_path / "x"), "--repo", str(bad.path)]
    missing = cli.run(*bad_args, "--range", f"{bad.shas[0]}..{bad.shas[1]}", "--find-links",
                      str(wheelhouse))  # fmt: skip
    assert missing.returncode == 1, missing.stderr
    assert "CANNOT RESOLVE pbtiny-a==9.9" in missing.stdout
    bad_range = cli.run("sglang", "pinsets", "--range", "nodots", "--repo", str(bad.path))
    assert bad_range.returncode == 2 and "expected GOOD..BAD" in bad_range.stderr


# ---- a real-layout checkout through the target: pin set recorded, endpoint smoke failure ------

STANDIN = Path(__file__).with_name("standin_sglang") / "sglang"  # SGLang itself needs a GPU


def test_endpoint_smoke_names_the_missing_import(
    cli: Cli, tmp_path: Path, wheelhouse: Path
) -> None:
    files = checkout(with_dependencies(real("0.5.10"), ["pbtiny-a==1.0"]))
    for path in STANDIN.rglob("*.py"):  # the stand-in server as the checkout's package body
        files[f"python/sglang/{path.relative_to(STANDIN)}"] = path.read_text()
    server = files["python/sglang/launch_server.py"]
    broken = server.replace("import json\n", "import json\nimport pbtiny_gone\n", 1)
    assert broken != server
    repo = make_repo(tmp_path / "sglang", [files, {"python/sglang/launch_server.py": broken}])
    for name in ("target", "draft"):
        (tmp_path / "models" / name).mkdir(parents=True)
    (tmp_path / "perfbisect.toml").write_text(
        f'[target]\nkind = "sglang"\nrepo = "sglang"\npython = "{sys.executable}"\n'
        f'model = "{tmp_path}/models/target"\ndraft_model = "{tmp_path}/models/draft"\n'
        'wheelhouse = "wheelhouse"\npip_args = ["--no-build-isolation"]\nready = "log"\n'
        "requests = 4\nconcurrency = 2\nmax_new_tokens = 8\nwarmup_requests = 1\n"
        "timeout_s = 60\n"
    )
    result = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1], "--json",
                     timeout=300)  # fmt: skip
    assert result.returncode == 3, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert "bad endpoint could not be measured" in report["message"], report["message"]
    assert "missing import pbtiny_gone (serve.log line" in report["message"]
    assert "ModuleNotFoundError: No module named 'pbtiny_gone'" in report["message"]
    log = json.loads(cli.run("bisect", "log", "--json").stdout)
    launches = log["launches"] if isinstance(log, dict) else log
    flags = {f for launch in launches for f in launch.get("flags", [])}
    digest = install_plan(files["python/pyproject.toml"]).digest
    assert any(f.startswith(f"pin set {digest} (") and "pbtiny-a==1.0" in f for f in flags)
    measured = [launch for launch in launches if launch["status"] == "ok"]
    assert measured and all(launch["timings"]["build_s"] > 0 for launch in measured)


def test_dry_run_shows_the_pin_set_and_the_offline_sources(cli: Cli, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "sglang", [checkout(real("0.5.9")), checkout(real("0.5.10"))])
    (tmp_path / "perfbisect.toml").write_text(
        '[target]\nkind = "sglang"\nrepo = "sglang"\nmodel = "/m/t"\ndraft_model = "/m/d"\n'
        'wheelhouse = "wheels"\npins = ["torch", "sgl-kernel", "sglang-kernel"]\n'
    )
    result = cli.json(
        "bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1], "--dry-run", "--json"
    )
    steps = "\n".join(result["commands"]["build"])
    digest = install_plan(real("0.5.9"), pins=("torch", "sgl-kernel", "sglang-kernel")).digest
    assert f"sglang-envs/{digest}   # once per pin set (torch==2.9.1, sgl-kernel==0.3.21)" in (
        steps
    )
    assert f"--find-links {tmp_path}/wheels --no-index -r " in steps
    # Only the pinned requirements are installed (the rest come from the parent interpreter).
    assert "the 2 requirements, from the wheelhouse" in steps
    assert "if that install fails: PYTHONPATH=<worktree>/python" in steps
    # Served from its own worktree, whatever another slot's commit did to the editable install.
    # (after perfbisect's start mark and the compile caches' variables)
    assert re.search(
        r" PYTHONPATH=\S+/worktrees/\S+/python\$\{PYTHONPATH", result["commands"]["serve"]
    )


def test_a_missing_wheelhouse_is_named(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "sglang", [checkout(with_dependencies(real("0.5.10"), []))])
    with pytest.raises(StepFailed, match=r"wheelhouse /nowhere/wheels is not a folder on "):
        build(
            LocalHost(),
            worktree(repo.path, repo.shas[0], tmp_path / "wt"),
            sys.executable,
            str(tmp_path / "envs"),
            60,
            NO_ISOLATION,
            BuildOptions(Sources("/nowhere/wheels")),
        )


def test_a_range_of_hundreds_of_commits_reads_its_few_pin_sets(tmp_path: Path) -> None:
    """A release-to-release range: 400 first-parent commits (git fast-import: one process),
    the pins changing twice, and a merged side branch whose own pins the path never visits."""
    pins_at = {0: real("0.5.9"), 150: real("0.5.10"), 300: real("0.5.10.post1")}

    def data(text: str) -> str:
        return f"data {len(text.encode())}\n{text}\n"

    stream = []
    for n in range(400):
        stream.append(f"commit refs/heads/main\nmark :{n + 1}\n")
        stream.append(f"committer T <t@example.com> {1_700_000_000 + n} +0000\n")
        stream.append(data(f"commit {n}"))
        if n:
            stream.append(f"from :{n}\n")
        if n == 200:  # merge the side branch
            stream.append("merge :1000\n")
        if n in pins_at:
            stream.append("M 100644 inline python/pyproject.toml\n" + data(pins_at[n]))
        stream.append("M 100644 inline python/sglang/__init__.py\n" + data(f"N = {n}\n"))
        if n == 100:  # the side branch, off commit 100, with the pins of another release
            stream.append("commit refs/heads/side\nmark :1000\n")
            stream.append("committer T <t@example.com> 1700000101 +0000\n" + data("side"))
            stream.append("from :101\nM 100644 inline python/pyproject.toml\n")
            stream.append(data(real("0.5.2")))
    repo = tmp_path / "sglang"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, timeout=60)
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"],
        input="".join(stream).encode(),
        check=True,
        timeout=120,
    )
    shas = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", "main"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert len(shas) == 400
    found = range_pins(repo, shas[0], shas[-1])
    assert found.commits == tuple(shas) and not found.unreadable
    assert [len(s.commits) for s in found.sets] == [150, 150, 100]
    assert [s.plan.digest for s in found.sets] == [
        install_plan(real(v)).digest for v in ("0.5.9", "0.5.10", "0.5.10.post1")
    ]  # 0.5.2's pins, on the side branch only, are not among them


@pytest.mark.parametrize(
    "line,message",
    [
        ("pins = [1]", "'target.pins': must be a list of package names"),
        ("max_envs = 0", "'target.max_envs': must be at least 1"),
        ('build = "wheel"', "'target.build': must be one of editable, source, installed"),
        ('wheelhouse = ["w"]', "'target.wheelhouse'"),
    ],
)
def test_bad_sglang_build_options_are_named(
    cli: Cli, tmp_path: Path, line: str, message: str
) -> None:
    repo = make_repo(tmp_path / "sglang", [checkout(real("0.5.10")), checkout(real("0.5.9"))])
    (tmp_path / "perfbisect.toml").write_text(
        '[target]\nkind = "sglang"\nrepo = "sglang"\nmodel = "/m/t"\ndraft_model = "/m/d"\n'
        f"{line}\n"
    )
    result = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[1])
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_cache_lists_environments_not_their_locks(cli: Cli, tmp_path: Path) -> None:
    envs = tmp_path / "cache" / "sglang-envs"
    (envs / "0123456789abcdef").mkdir(parents=True)
    (envs / "0123456789abcdef.lock").touch()
    listed = cli.json("cache", "list", "--json")
    entry = next(e for e in listed["entries"] if e["kind"] == "sglang-envs")
    assert entry["items"] == 1
