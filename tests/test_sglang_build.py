"""Building SGLang checkouts for real: pyproject layouts of both version ranges, an editable
install into a dependency environment keyed by the pinned set (cache hit and miss), the
verify timer installed next to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_repo

from perfbisect.errors import StepFailed
from perfbisect.hosts.local import LocalHost
from perfbisect.targets.sglang.build import BuildOptions, build
from perfbisect.targets.sglang.deps import install_plan

OLD_LAYOUT = """
[project]
name = "sglang"
version = "0.4.6.post5"
dependencies = ["aiohttp", "requests"]

[project.optional-dependencies]
runtime_common = ["fastapi", "torchao==0.9.0"]
srt = ["sglang[runtime_common]", "sgl-kernel==0.1.0", "torch==2.6.0"]
all = ["sglang[srt]", "sglang[openai]"]
openai = ["openai>=1.0"]
"""

NEW_LAYOUT = """
[project]
name = "sglang"
dynamic = ["version"]
dependencies = ["aiohttp", "torch==2.9.1", "sgl-kernel==0.3.20"]

[tool.setuptools_scm]
root = ".."
"""


def test_install_plans_of_both_layouts() -> None:
    old = install_plan(OLD_LAYOUT)
    assert old.target == "python[all]"
    assert "torch==2.6.0" in old.requirements and "torchao==0.9.0" in old.requirements
    assert "openai>=1.0" in old.requirements
    assert not any(r.startswith("sglang[") for r in old.requirements)
    assert not old.version_from_git
    new = install_plan(NEW_LAYOUT)
    assert new.target == "python" and new.version_from_git
    same = install_plan(
        NEW_LAYOUT.replace('"aiohttp", "torch==2.9.1"', '"torch == 2.9.1", "aiohttp"')
    )
    assert same.digest == new.digest  # order and spaces do not matter
    bumped = install_plan(NEW_LAYOUT.replace("sgl-kernel==0.3.20", "sgl-kernel==0.3.21"))
    assert bumped.digest != new.digest
    with pytest.raises(StepFailed, match="not an SGLang project file"):
        install_plan("[tool.black]\n")


TINY = """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
version = "0.0.1"
dependencies = [{deps}]

[tool.setuptools]
packages = ["sglang"]
"""


def test_build_reuses_the_environment_while_pins_are_equal(tmp_path: Path) -> None:
    def commit(code: str, deps: str) -> dict[str, str]:
        return {"python/pyproject.toml": TINY.format(deps=deps), "python/sglang/__init__.py": code}

    repo = make_repo(
        tmp_path / "repo",
        [
            commit("VERSION = 'a'\n", '"packaging"'),
            commit("VERSION = 'b'\n", '"packaging"'),  # code only: same environment
            commit("VERSION = 'c'\n", '"packaging", "pip"'),  # a pin more: a new one
        ],
    )
    host = LocalHost()
    root = str(tmp_path / "envs")
    built = []
    for i, sha in enumerate(repo.shas):
        worktree = tmp_path / f"wt{i}"
        subprocess.run(
            ["git", "-C", str(repo.path), "worktree", "add", "-q", "--detach", str(worktree), sha],
            check=True,
        )
        env = build(host, str(worktree), sys.executable, root, 300, ("--no-build-isolation",))
        version = subprocess.run(
            [env.python, "-c", "import sglang; print(sglang.VERSION)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        built.append((env.digest, env.reused, version, env.python))
    assert [b[1] for b in built] == [False, True, False]
    assert built[0][0] == built[1][0] != built[2][0]
    assert [b[2] for b in built] == ["a", "b", "c"]  # the editable install follows the worktree
    timer = subprocess.run(
        [built[0][3], "-c", "import perfbisect_verify_timer as t; print(t.ENV)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert timer.stdout.strip() == "PERFBISECT_VERIFY_TIMER_DIR"  # the .pth imported it


def test_not_an_sglang_checkout(tmp_path: Path) -> None:
    with pytest.raises(StepFailed, match="is not an SGLang checkout"):
        build(LocalHost(), str(tmp_path), sys.executable, str(tmp_path / "envs"), 60)


def test_pins_environment_installs_only_the_pinned_requirements(tmp_path: Path) -> None:
    """An offline host whose python already holds the serving packages: with `pins`, the
    environment installs those alone, so an unpinned requirement no source has is no SKIP."""
    deps = '"packaging", "no-such-dist-perfbisect==9.9"'
    repo = make_repo(
        tmp_path / "repo",
        [{"python/pyproject.toml": TINY.format(deps=deps), "python/sglang/__init__.py": ""}],
    )
    worktree = tmp_path / "wt"
    subprocess.run(
        ["git", "-C", str(repo.path), "worktree", "add", "-q", "--detach", str(worktree)],
        check=True,
    )
    options = BuildOptions(pins=("packaging",), source_only=True)
    root = str(tmp_path / "envs")
    env = build(LocalHost(), str(worktree), sys.executable, root, 300, ("--no-index",), options)
    pins_file = Path(root) / env.digest / "perfbisect-pins.txt"
    assert pins_file.read_text().split() == ["packaging"]
    assert env.source_path == f"{worktree}/python"
    unpinned = BuildOptions(source_only=True)  # every requirement: the missing one is named
    with pytest.raises(StepFailed, match="no-such-dist-perfbisect"):
        build(LocalHost(), str(worktree), sys.executable, root, 300, ("--no-index",), unpinned)
