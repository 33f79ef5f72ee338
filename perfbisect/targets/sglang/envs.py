"""Where an SGLang pin set's packages come from (the host's index, another index, or a local
wheelhouse for a host without internet), what pip's refusal names, and the bound on how many
pin-set environments a host keeps (least recently used first out).

An environment's last use is the mtime of its ``.perfbisect-deps-ok`` marker, touched by every
build that uses it; one used within ``EVICT_IDLE_S`` is never removed (another launch on the
host may be serving from it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from perfbisect.hosts.base import Host

OK_MARKER = ".perfbisect-deps-ok"
MAX_ENVS = 4  # SGLang environments are GiBs each (kernels, flashinfer); a range rarely has more
EVICT_IDLE_S = 600

# pip 22-25: "No matching distribution found for foo==1.2" (also with --no-index --find-links)
_NO_DISTRIBUTION = re.compile(r"No matching distribution found for (\S+)")
_NO_VERSION = re.compile(r"Could not find a version that satisfies the requirement (\S+)")


@dataclass(frozen=True)
class Sources:
    """``[target] wheelhouse`` / ``index_url``: where pip looks for packages."""

    wheelhouse: str | None = None  # a folder of wheels on the host
    index_url: str | None = None

    @property
    def offline(self) -> bool:
        return self.wheelhouse is not None and self.index_url is None

    def pip_args(self) -> list[str]:
        args: list[str] = []
        if self.wheelhouse:
            args += ["--find-links", self.wheelhouse]
            if self.index_url is None:
                args.append("--no-index")  # the wheelhouse alone: never reach for the network
        if self.index_url:
            args += ["--index-url", self.index_url]
        return args

    def describe(self) -> str:
        if self.offline:
            return f"the wheelhouse {self.wheelhouse} (offline)"
        if self.wheelhouse:
            return f"the wheelhouse {self.wheelhouse} and {self.index_url}"
        return str(self.index_url) if self.index_url else "the host's package index"


def missing_requirement(pip_output: str) -> str | None:
    """The requirement pip could not find (``name==version``), from its output."""
    for pattern in (_NO_DISTRIBUTION, _NO_VERSION):
        found = pattern.findall(pip_output)
        if found:
            return str(found[-1]).rstrip(".,;")
    return None


def evict_envs(
    host: Host, root: str, keep: int, spare: str, idle_s: float = EVICT_IDLE_S
) -> list[str]:
    """Remove the least recently used environments under ``root`` beyond ``keep`` (never
    ``spare``, the one in use, nor one used in the last ``idle_s`` seconds); what was removed."""
    listing = host.run(
        [
            "sh",
            "-c",
            f"now=$(date +%s); for m in {shlex.quote(root)}/*/{OK_MARKER}; do "
            '[ -e "$m" ] && echo "$(( now - $(stat -c %Y "$m") )) ${m%/*}"; done; true',
        ],
        timeout_s=60,
    )
    if not listing.ok:
        return []
    ages: list[tuple[float, str]] = []
    for line in listing.output.splitlines():
        age, _, path = line.partition(" ")
        if path and path != spare and age.lstrip("-").isdigit():
            ages.append((float(age), path))
    ages.sort(reverse=True)  # the oldest first
    removed = []
    for idle, path in ages[: max(0, len(ages) + 1 - keep)]:
        if idle < idle_s:
            continue
        if host.run(["rm", "-rf", path], timeout_s=300).ok:
            removed.append(path)
    return removed
