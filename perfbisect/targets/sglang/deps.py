"""What an SGLang checkout installs, and the hash that keys its dependency environment.

Up to 0.5.2 the runtime dependencies sit in extras (``pip install -e "python[all]"``, where
``all`` pulls ``srt`` which pulls ``runtime_common``); from 0.5.3 they are the project's own
dependencies (``pip install -e python``). The environment is keyed by the sorted, normalised
requirement set, so stepping between commits whose pins are equal costs no reinstall. An
experiment can narrow the key to the packages that matter to it (``pins = ["torch", ...]``):
commits that differ only in other requirements then share one environment.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from perfbisect.errors import StepFailed

_EXTRA_REF = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*\[([^\]]+)\]\s*$")


@dataclass(frozen=True)
class InstallPlan:
    target: str  # what to pass to `pip install -e`, relative to the checkout
    requirements: tuple[str, ...]
    digest: str  # keys the dependency environment
    version_from_git: bool  # needs SETUPTOOLS_SCM_PRETEND_VERSION in a tagless worktree
    keyed_by: tuple[str, ...] = ()  # the requirements the digest is made of
    build_requires: tuple[str, ...] = ()  # [build-system] requires (the editable build's)
    version_file: str | None = None  # setuptools-scm's generated file, relative to python/

    def label(self, shown: int = 4) -> str:
        """The pin set as a report shows it: the headline packages' pins first, then a count."""
        ranked = sorted(self.keyed_by, key=lambda r: (_rank(r), r))
        more = len(ranked) - shown
        return ", ".join(ranked[:shown]) + (f" (+{more} more)" if more > 0 else "")


# The packages whose pins decide what a commit runs on: shown first in a pin set's label.
HEADLINE = ("torch", "sglang-kernel", "sgl-kernel", "flashinfer-python", "transformers")


def requirement_name(requirement: str) -> str | None:
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return None


def _rank(requirement: str) -> int:
    name = requirement_name(requirement)
    return HEADLINE.index(name) if name in HEADLINE else len(HEADLINE)


def _normalise(requirement: str) -> str:
    """One spelling per requirement (name canonical, spaces and extras' order as packaging
    writes them), still installable: markers keep their ``and``/``or`` words apart."""
    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return " ".join(requirement.split())
    parsed.name = canonicalize_name(parsed.name)
    return str(parsed)


def _closure(optional: dict[str, list[str]], extra: str, name: str, seen: set[str]) -> list[str]:
    """The requirements of ``extra``, with the project's own ``name[other]`` references expanded."""
    if extra in seen:
        return []
    seen.add(extra)
    out = []
    for requirement in optional.get(extra, []):
        ref = _EXTRA_REF.match(requirement)
        if ref and ref.group(1).lower().replace("_", "-") == name:
            for other in ref.group(2).split(","):
                out += _closure(optional, other.strip(), name, seen)
        else:
            out.append(requirement)
    return out


def install_plan(
    pyproject_text: str, where: str = "python/pyproject.toml", pins: tuple[str, ...] = ()
) -> InstallPlan:
    """What the checkout installs; ``pins``: package names that alone key the environment."""
    try:
        data = tomllib.loads(pyproject_text)
        project = data["project"]
        name = str(project["name"]).lower().replace("_", "-")
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise StepFailed("build", f"{where} is not an SGLang project file ({exc})") from None
    optional = {k.lower(): list(v) for k, v in project.get("optional-dependencies", {}).items()}
    requirements = list(project.get("dependencies", []))
    target = "python"
    if "srt" in optional and "all" in optional:  # the layout before 0.5.3
        requirements += _closure(optional, "all", name, set())
        target = "python[all]"
    normalised = tuple(sorted({_normalise(r) for r in requirements}))
    wanted = {canonicalize_name(p) for p in pins}
    keyed = tuple(r for r in normalised if not wanted or requirement_name(r) in wanted)
    digest = hashlib.sha256("\n".join(keyed).encode()).hexdigest()[:16]
    dynamic = project.get("dynamic", [])
    tool = data.get("tool", {})
    scm = "setuptools_scm" in tool or "setuptools-scm" in pyproject_text
    version_file = tool.get("setuptools_scm", {}).get("version_file")
    return InstallPlan(
        target,
        normalised,
        digest,
        "version" in dynamic and scm,
        keyed,
        tuple(str(r) for r in data.get("build-system", {}).get("requires", [])),
        str(version_file) if version_file else None,
    )
