"""The documentation: the README stays a front page whose commands and links are true, the
experiment-file reference is the code's (docs/hooks/gen_reference.py), and the site builds with
``mkdocs build --strict`` (a broken link or anchor fails it)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS = [
    'pip install torch==2.13.0 ".[reference,plot]" && perfbisect demo',
    'pip install torch==2.13.0 -e ".[test]" && python3 -m pytest -q -n 4 --dist loadgroup',
]


def _generator() -> ModuleType:
    path = ROOT / "docs" / "hooks" / "gen_reference.py"
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_starts_with_the_two_commands_and_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[:6] == ["# perfbisect", "", "```bash", *COMMANDS, "```"]
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail into docs/"


def test_every_relative_link_in_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"^[a-z]+://", t)]
    assert len(local) >= 10  # the images and the pages it sends readers to
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_committed_reference_is_what_the_code_declares() -> None:
    gen = _generator()
    assert gen.stale() is None
    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    from perfbisect import experiment
    from perfbisect.targets.kinds import KINDS

    for name, kind in KINDS.items():  # every option of every kind, in its own section
        section = page.split(f'### `kind = "{name}"`')[1].split("\n### ")[0]
        for key in kind.schema:
            assert f"| `{key}` |" in section, (name, key)
    for key in experiment.HOST_SCHEMA:
        assert f"| `{key}` |" in page.split("### `[host]`")[1], key
    # The defaults the issue found missing, read from the code: 600 s per stage.
    command = page.split('### `kind = "command"`')[1].split("\n### ")[0]
    assert re.search(r"\| `timeout_s` \| number \| `600` \| seconds per stage", command)
    assert "runs in the commit's worktree" in command


def test_an_option_without_a_description_fails_the_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfbisect.targets import kinds
    from perfbisect.targets.kind import TargetKind, schema_of

    gen = _generator()
    monkeypatch.setitem(
        kinds.KINDS, "echo", TargetKind("echo", schema_of(EchoOptions), "tests:Echo")
    )
    monkeypatch.setitem(gen.KIND_OPTIONS, "echo", (__name__, "EchoOptions"))
    with pytest.raises(RuntimeError, match="words have no description"):
        gen.render()


def test_a_loader_key_without_a_description_fails_the_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfbisect import experiment

    gen = _generator()
    monkeypatch.setitem(experiment.HOST_SCHEMA, "jump_host", ((str,), False))
    with pytest.raises(RuntimeError, match="jump_host"):
        gen.render()
    monkeypatch.delitem(experiment.HOST_SCHEMA, "jump_host")
    monkeypatch.setattr(experiment, "TOP_LEVEL", {*experiment.TOP_LEVEL, "search"})
    with pytest.raises(RuntimeError, match="search"):
        gen.render()


def test_field_comments_are_read_on_the_line_or_just_above() -> None:
    gen = _generator()
    assert gen.field_comments(EchoOptions) == {"repeat": "how many times"}
    assert gen.field_comments(Described) == {
        "first": "said on its line",
        "second": "said above it, over two lines",
    }


@dataclass(frozen=True)
class EchoOptions:
    words: int
    repeat: int = 1  # how many times


@dataclass(frozen=True)
class Described:
    first: int = 0  # said on its line
    # said above it,
    # over two lines
    second: int = 0


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    result = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
    assert "WARNING" not in result.stderr


def test_a_broken_link_or_a_stale_reference_fails_the_build(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    probes = copy / "docs" / "probes.md"
    original = probes.read_text(encoding="utf-8")
    probes.write_text(original + "\nSee [the hosts](hosts.md#no-such-section).\n")
    broken = _mkdocs(copy / "mkdocs.yml", tmp_path / "site")
    assert broken.returncode != 0
    assert "no-such-section" in broken.stderr

    probes.write_text(original, encoding="utf-8")
    reference = copy / "docs" / "reference.md"
    reference.write_text(reference.read_text(encoding="utf-8").replace("`600`", "`60`"))
    stale = _mkdocs(copy / "mkdocs.yml", tmp_path / "site")
    assert stale.returncode != 0
    assert "reference.md differs from the code" in stale.stderr
