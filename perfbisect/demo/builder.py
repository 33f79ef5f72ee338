"""`perfbisect demo`: a throwaway repository with a plausible history and one planted regression.

The repository holds a small speculative-decoding stand-in (``server.py`` + ``bench.py``); about
30 commits refactor, log, comment and tweak it, and one of them makes verify recompute the whole
prefix instead of using the KV cache (the regression mechanism, measured for real). The
experiment file uses the generic ``command`` target, so the demo runs the same pipeline as any
user experiment.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TEMPLATE = Path(__file__).with_name("template")
PLANTED_SUBJECT = "verify: run the whole sequence through the layer for consistency"

EXPERIMENT = """\
# perfbisect demo experiment: the generic command target on a tiny speculative server.
[target]
kind = "command"
repo = "repo"
serve = "python3 server.py --port {port}"
ready = "http://127.0.0.1:{port}/health"
measure = "python3 bench.py --port {port} --cycles 40"
timeout_s = 120

[metric]
name = "verify_ms"
pattern = 'verify_ms=([0-9.]+)'
higher_is_better = false
"""

Edit = Callable[[dict[str, str]], None]


@dataclass(frozen=True)
class Change:
    subject: str
    edit: Edit


def _replace(name: str, old: str, new: str) -> Edit:
    def edit(files: dict[str, str]) -> None:
        if old not in files[name]:
            raise AssertionError(f"demo history: {old!r} not in {name}")
        files[name] = files[name].replace(old, new, 1)

    return edit


def _append(name: str, text: str) -> Edit:
    def edit(files: dict[str, str]) -> None:
        files[name] = files[name] + text

    return edit


def _new_file(name: str, text: str) -> Edit:
    def edit(files: dict[str, str]) -> None:
        files[name] = text

    return edit


def history() -> list[Change]:
    """The commits after the initial import; exactly one is the planted regression."""
    s = "server.py"
    return [
        Change("docs: add a README", _new_file("README.md", "# tiny speculative server\n")),
        Change(
            "server: log requests at debug level",
            _replace(
                s,
                "# @@LOGGING@@",
                "import logging\n\nLOG = logging.getLogger('server')\n# @@LOGGING@@",
            ),
        ),
        Change(
            "config: document the draft token count",
            _replace(
                s, '    "draft_tokens": 4,', '    "draft_tokens": 4,  # tokens proposed per cycle'
            ),
        ),
        Change(
            "bench: comment on warm-up cycles",
            _append("bench.py", "# warm-up cycles are dropped above\n"),
        ),
        Change(
            "server: name the layer weights",
            _replace(s, "WEIGHTS = [[", "WEIGHTS = [[  # fixed pseudo-random weights\n"),
        ),
        Change(
            "docs: explain /generate",
            _append("README.md", "\n`/generate?cycles=N` runs N speculative cycles.\n"),
        ),
        Change(
            "config: tweak prefix length", _replace(s, '    "prefix": 32,', '    "prefix": 36,')
        ),
        Change(
            "server: add a version string",
            _replace(s, "CONFIG = {", "VERSION = '0.1.1'\n\nCONFIG = {"),
        ),
        Change(
            "refactor: extract the draft proposer",
            _replace(
                s,
                'def cycle(cache, step):\n    draft = [[((step + t + k) % 7) / 7.0 for k in range(CONFIG["hidden"])]\n             for t in range(CONFIG["draft_tokens"])]',
                'def propose(step):\n    return [[((step + t + k) % 7) / 7.0 for k in range(CONFIG["hidden"])]\n            for t in range(CONFIG["draft_tokens"])]\n\n\ndef cycle(cache, step):\n    draft = propose(step)',
            ),
        ),
        Change(
            "docs: mention the health endpoint",
            _append("README.md", "`/health` answers once the server is up.\n"),
        ),
        Change("server: bump version", _replace(s, "VERSION = '0.1.1'", "VERSION = '0.1.2'")),
        Change(
            "bench: accept --cycles",
            _append("bench.py", "# usage: bench.py --port P [--cycles N]\n"),
        ),
        Change(
            "server: comment the handler",
            _replace(
                s,
                "class Handler(BaseHTTPRequestHandler):",
                'class Handler(BaseHTTPRequestHandler):\n    """JSON endpoints only."""\n',
            ),
        ),
        Change(
            "config: add a seed field",
            _replace(s, '    "prefix": 36,', '    "prefix": 36,\n    "seed": 0,'),
        ),
        Change(
            "refactor: return early on unknown paths",
            _replace(
                s,
                "        else:\n            self._reply(404",
                "        else:  # unknown path\n            self._reply(404",
            ),
        ),
        Change(
            "docs: changelog for 0.1.2",
            _new_file("CHANGELOG.md", "## 0.1.2\n- draft proposer extracted\n"),
        ),
        Change(
            "server: keep timings as floats",
            _replace(
                s,
                "    return (time.perf_counter_ns() - start) / 1e6",
                "    return float(time.perf_counter_ns() - start) / 1e6",
            ),
        ),
        Change("server: bump version", _replace(s, "VERSION = '0.1.2'", "VERSION = '0.1.3'")),
        Change(
            PLANTED_SUBJECT,
            _replace(
                s,
                "    tokens = draft  # @@VERIFY_INPUT@@",
                "    tokens = cache + draft  # @@VERIFY_INPUT@@",
            ),
        ),
        Change(
            "docs: note on the KV cache", _append("README.md", "The prefix lives in a KV cache.\n")
        ),
        Change(
            "server: debug log on start",
            _replace(s, "def main():\n", "def main():\n    LOG.debug('starting %s', VERSION)\n"),
        ),
        Change(
            "config: comment on hidden size",
            _replace(s, '    "hidden": 48,', '    "hidden": 48,  # model width'),
        ),
        Change("bench: print the cycle count", _append("bench.py", "print(f'cycles={cycles}')\n")),
        Change("docs: changelog for 0.1.3", _append("CHANGELOG.md", "## 0.1.3\n- logging\n")),
        Change("server: bump version", _replace(s, "VERSION = '0.1.3'", "VERSION = '0.1.4'")),
        Change(
            "refactor: name the reply helper argument",
            _replace(
                s,
                "    def _reply(self, code, body):",
                "    def _reply(self, code, body):  # body: JSON-able",
            ),
        ),
        Change(
            "docs: how to run the bench", _append("README.md", "Run `python bench.py --port P`.\n")
        ),
        Change(
            "server: comment on threading",
            _replace(
                s,
                "    ThreadingHTTPServer((",
                "    # one thread per request; /generate is CPU bound anyway\n    ThreadingHTTPServer((",
            ),
        ),
        Change("release 0.1.4", _append("CHANGELOG.md", "## 0.1.4\n- released\n")),
    ]


def _git(repo: Path, *args: str, when: int) -> str:
    stamp = f"@{1767225600 + when * 3600} +0000"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Demo Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "Demo Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_DATE": stamp,
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass(frozen=True)
class DemoRepo:
    root: Path
    repo: Path
    experiment: Path
    good: str
    bad: str
    planted: str


def create_demo(root: Path) -> DemoRepo:
    """Write the repository and experiment under ``root`` (which must not hold a demo yet)."""
    repo = root / "repo"
    if repo.exists():
        from perfbisect.errors import UsageError

        raise UsageError(f"{repo} already exists: pass an empty --dir")
    repo.mkdir(parents=True)
    files = {p.name: p.read_text() for p in sorted(TEMPLATE.glob("*.py"))}
    _git(repo, "init", "-q", "-b", "main", when=0)

    def commit(subject: str, when: int) -> str:
        for name, text in files.items():
            (repo / name).write_text(text)
        _git(repo, "add", "-A", when=when)
        _git(repo, "commit", "-q", "-m", subject, when=when)
        return _git(repo, "rev-parse", "HEAD", when=when)

    good = commit("initial import of the tiny speculative server", 0)
    planted = ""
    for number, change in enumerate(history(), start=1):
        change.edit(files)
        sha = commit(change.subject, number)
        if change.subject == PLANTED_SUBJECT:
            planted = sha
    bad = _git(repo, "rev-parse", "HEAD", when=0)
    experiment = root / "perfbisect.toml"
    experiment.write_text(EXPERIMENT)
    return DemoRepo(root, repo, experiment, good, bad, planted)
