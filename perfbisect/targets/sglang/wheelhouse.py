"""A wheelhouse for a host without internet: on a machine with access, resolve every pin set
of a range for the target host's Python and platform, and download the wheels (binary only:
kernel packages are never built from source), so that ``[target] wheelhouse`` on that host
builds each set with ``pip install --no-index --find-links``.

Each set is resolved on its own (sets of one range can disagree, e.g. two torch versions)
with ``pip install --dry-run --report``, which reads package metadata without downloading
the wheels; the union is then downloaded once with ``--no-deps``. Packages the target host
already has (``--have``, a ``pip freeze`` of it) are left out: its environments are layered on
its interpreter's packages, so pip there finds them installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from perfbisect.targets.sglang.deps import requirement_name
from perfbisect.targets.sglang.envs import Sources, missing_requirement
from perfbisect.targets.sglang.pinsets import PinSet

_MANYLINUX = re.compile(r"^manylinux_2_(\d+)_(\w+)$")
_FREEZE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:==\s*([^\s;#]+))?\s*(?:#.*)?$")
PIP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class TargetPython:
    """The host the wheels are for; all None: this interpreter's own."""

    python_version: str | None = None  # "3.12"
    platforms: tuple[str, ...] = ()  # "manylinux_2_28_x86_64" stands for every older one too

    def pip_args(self) -> list[str]:
        args: list[str] = ["--only-binary=:all:"]
        if self.python_version:
            args += ["--python-version", self.python_version, "--implementation", "cp"]
        for platform in expand_platforms(self.platforms):
            args += ["--platform", platform]
        return args

    def describe(self) -> str:
        python = f"Python {self.python_version}" if self.python_version else "this Python"
        return f"{python}, {', '.join(self.platforms) or 'this platform'}"


def expand_platforms(platforms: Iterable[str]) -> list[str]:
    """pip takes ``--platform`` tags literally; a host that runs manylinux_2_28 runs every
    older manylinux wheel too (PEP 600), and most wheels are tagged with an older one."""
    out: list[str] = []
    for platform in platforms:
        found = _MANYLINUX.match(platform)
        if not found:
            out.append(platform)
            continue
        glibc, arch = int(found.group(1)), found.group(2)
        out += [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)]
        out += [f"manylinux{legacy}_{arch}" for legacy in ("2014", "2010", "1") if glibc >= 5]
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class SetResolution:
    pin_set: PinSet
    wheels: tuple[tuple[str, str, str], ...]  # (name, version, file name), what it installs
    missing: str | None  # the requirement no source had, when it could not be resolved
    error: str = ""


@dataclass(frozen=True)
class Wheelhouse:
    folder: Path
    sets: tuple[SetResolution, ...]
    files: tuple[tuple[str, int, bool], ...]  # (file name, bytes, downloaded now)
    left_out: tuple[str, ...]  # name==version the target host has already
    error: str = ""  # the download's own failure, if any

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.files)


def read_freeze(text: str) -> set[str]:
    """``name==version`` (normalised names) of a ``pip freeze``; a bare name (a package list
    without versions) stands for any version of it."""
    out = set()
    for line in text.splitlines():
        found = _FREEZE.match(line)
        if found:
            name = canonicalize_name(found.group(1))
            out.add(f"{name}=={found.group(2)}" if found.group(2) else name)
    return out


def _pip(python: str, args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [python, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([python], 124, "", f"pip timed out after {timeout_s}s")


def resolve(
    pin_set: PinSet, host: TargetPython, sources: Sources, python: str = sys.executable
) -> SetResolution:
    """What installing this set (its requirements and its build requirements) takes."""
    requirements = [*pin_set.plan.requirements, *pin_set.plan.build_requires]
    with tempfile.TemporaryDirectory(prefix="perfbisect-wheelhouse-") as tmp:
        pins = Path(tmp) / "pins.txt"
        pins.write_text("\n".join(requirements) + "\n")
        report = Path(tmp) / "report.json"
        args = ["install", "-q", "--dry-run", "--ignore-installed", "--report", str(report)]
        args += ["--target", str(Path(tmp) / "target"), *host.pip_args(), *sources.pip_args()]
        result = _pip(python, [*args, "-r", str(pins)], PIP_TIMEOUT_S)
        if result.returncode != 0 or not report.exists():
            output = result.stdout + result.stderr
            tail = " | ".join(output.strip().splitlines()[-3:])
            return SetResolution(pin_set, (), missing_requirement(output), tail)
        items = json.loads(report.read_text()).get("install", [])
    wheels = []
    for item in items:
        meta, url = item["metadata"], item["download_info"]["url"]
        name = unquote(Path(urlparse(url).path).name)
        wheels.append((canonicalize_name(meta["name"]), str(meta["version"]), name))
    return SetResolution(pin_set, tuple(sorted(wheels)), None)


def build_wheelhouse(
    sets: Sequence[PinSet],
    folder: Path,
    host: TargetPython,
    sources: Sources,
    have: set[str] | None = None,
    python: str = sys.executable,
    download: bool = True,
) -> Wheelhouse:
    """Resolve every set, download the wheels none of them has yet into ``folder`` (with
    ``download`` false: only resolve; the listing then has no files)."""
    if download:
        folder.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    resolved = tuple(resolve(s, host, sources, python) for s in sets)
    have = have or set()
    wanted: dict[str, str] = {}  # file name -> name==version
    left_out = set()
    needed = set()
    for res in resolved:
        # A bare name says nothing of the host's version: not enough for an exact pin.
        exact = {requirement_name(r) for r in res.pin_set.plan.requirements if "==" in r}
        for name, version, file in res.wheels:
            pin = f"{name}=={version}"
            if pin in have or (name in have and name not in exact):
                left_out.add(pin)
                continue
            needed.add(file)
            if file not in before:
                wanted[file] = pin
    error = ""
    if wanted and download:
        args = ["download", "-q", "--no-deps", "-d", str(folder), *host.pip_args()]
        result = _pip(python, [*args, *sources.pip_args(), *sorted(set(wanted.values()))], 7200)
        if result.returncode != 0:
            error = " | ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
    files = tuple(
        (p.name, p.stat().st_size, p.name not in before)
        for p in (sorted(folder.iterdir()) if folder.is_dir() else [])
        if p.name in needed and p.is_file()
    )
    return Wheelhouse(folder, resolved, files, tuple(sorted(left_out)), error)
