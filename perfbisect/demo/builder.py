"""`perfbisect demo`: a throwaway repository with a plausible history and one planted regression.

The repository holds a copy of the reference server (``perfbisect/remote/reference_server.py``:
an HTTP front, one worker per tensor-parallel rank, a draft proposer and the verify forward);
about 30 commits refactor, log, comment and tweak it, and one of them plants the regression:
on CPU verify recomputes the whole prefix instead of using the KV cache, on GPU (``--gpu``)
verify runs eagerly instead of replaying its CUDA graph. The experiment uses the ``reference``
target, so the demo runs the same pipeline as any user experiment, measured for real.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfbisect.targets.reference.target import SERVER

PLANTED_CPU = "verify: run the whole sequence through the layer for consistency"
PLANTED_GPU = "verify: run eagerly so accept-length debugging sees every op"

EXPERIMENT_CPU = """\
# perfbisect demo: the reference speculative server at TP={tp} on CPU (gloo).
[target]
kind = "reference"
repo = "repo"
tp = {tp}
device = "cpu"
hidden = 512
max_seq = 1024
prompt = 384
cycles = 16
warmup = 2
timeout_s = 300
"""

EXPERIMENT_GPU = """\
# perfbisect demo: the reference speculative server at TP={tp} on GPUs (NCCL, CUDA graphs).
[target]
kind = "reference"
repo = "repo"
tp = {tp}
device = "cuda"
layers = 16
hidden = 4096
heads = 32
max_seq = 1024
prompt = 256
cycles = 40
warmup = 5
timeout_s = 600
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
        files[name] = files.get(name, "") + text

    return edit


def history(gpu: bool) -> list[Change]:
    """The commits after the initial import; exactly one is the planted regression."""
    s = "server.py"
    planted = (
        Change(
            PLANTED_GPU,
            _replace(
                s,
                'choices=["graph", "eager"], default="graph")',
                'choices=["graph", "eager"], default="eager")',
            ),
        )
        if gpu
        else Change(
            PLANTED_CPU,
            _replace(
                s,
                'choices=["cache", "prefix"], default="cache")',
                'choices=["cache", "prefix"], default="prefix")',
            ),
        )
    )
    return [
        Change("docs: add a README", _append("README.md", "# reference speculative server\n")),
        Change(
            "server: wait longer for slow ranks",
            _replace(s, "READY_TIMEOUT_S = 600.0", "READY_TIMEOUT_S = 900.0"),
        ),
        Change(
            "docs: explain the draft proposer",
            _replace(
                s,
                "(no communication).",
                "(no communication).\n        Replicated on every rank, like EAGLE's draft head.",
            ),
        ),
        Change(
            "bench: one warm-up request fewer",
            _replace(s, '"--warmup", type=int, default=5)', '"--warmup", type=int, default=4)'),
        ),
        Change(
            "refactor: comment the all-reduce helper",
            _replace(
                s,
                "    def all_reduce(self, x):",
                "    # Row-parallel outputs are partial sums: every rank adds the others'.\n"
                "    def all_reduce(self, x):",
            ),
        ),
        Change("docs: start a changelog", _append("CHANGELOG.md", "## 0.3.0\n- first import\n")),
        Change(
            "config: document --threads",
            _replace(
                s, 'help="torch threads per rank")', 'help="torch threads per rank (1 is best)")'
            ),
        ),
        Change(
            "server: add a version string",
            _replace(
                s, "REQUEST_TIMEOUT_S = 600.0", 'REQUEST_TIMEOUT_S = 600.0\nVERSION = "0.3.0"'
            ),
        ),
        Change(
            "refactor: name the accept loop",
            _replace(
                s,
                "            accepted = 0\n",
                "            accepted = 0  # longest agreeing prefix\n",
            ),
        ),
        Change(
            "server: print the version when ready",
            _replace(s, 'f"reference server ready: tp=', 'f"reference server {VERSION} ready: tp='),
        ),
        Change("docs: usage", _append("README.md", "\n`python server.py serve --tp 2 --port P`\n")),
        Change("server: bump version", _replace(s, 'VERSION = "0.3.0"', 'VERSION = "0.3.1"')),
        Change(
            "refactor: comment the handler",
            _replace(
                s,
                "        def do_GET(self) -> None:\n",
                "        def do_GET(self) -> None:\n"
                '            """/health and /generate; JSON bodies."""\n',
            ),
        ),
        Change(
            "config: longer request timeout",
            _replace(s, "REQUEST_TIMEOUT_S = 600.0", "REQUEST_TIMEOUT_S = 900.0"),
        ),
        Change(
            "server: flush the failure message",
            _replace(
                s,
                'print(f"error: {front.failure}", file=sys.stderr)',
                'print(f"error: {front.failure}", file=sys.stderr, flush=True)',
            ),
        ),
        Change("docs: changelog for 0.3.1", _append("CHANGELOG.md", "## 0.3.1\n- version\n")),
        Change(
            "server: keep timings as floats",
            _replace(s, '"ms": ms, "bs": 1,', '"ms": float(ms), "bs": 1,'),
        ),
        Change("server: bump version", _replace(s, 'VERSION = "0.3.1"', 'VERSION = "0.3.2"')),
        planted,
        Change(
            "docs: note on the KV cache", _append("README.md", "The prefix lives in a KV cache.\n")
        ),
        Change(
            "server: comment on the position table",
            _replace(
                s,
                "        self.pos_table = ",
                "        # small, so positions nudge rather than dominate\n        self.pos_table = ",
            ),
        ),
        Change(
            "config: note the head constraint",
            _replace(
                s,
                '"--heads", type=int, default=4)',
                '"--heads", type=int, default=4)  # divisible by --tp',
            ),
        ),
        Change(
            "bench: comment the warm-up",
            _replace(
                s,
                "        generate(args.warmup)\n",
                "        generate(args.warmup)  # not measured\n",
            ),
        ),
        Change("docs: changelog for 0.3.2", _append("CHANGELOG.md", "## 0.3.2\n- timings\n")),
        Change("server: bump version", _replace(s, 'VERSION = "0.3.2"', 'VERSION = "0.3.3"')),
        Change(
            "refactor: comment the stop message",
            _replace(
                s,
                '                pipe.send(("stop",))',
                '                pipe.send(("stop",))  # ranks leave their loop',
            ),
        ),
        Change(
            "docs: how to run the bench",
            _append("README.md", "Run `python server.py bench --port P`.\n"),
        ),
        Change(
            "server: comment on start-up order",
            _replace(
                s,
                "    serving.start()  # /health answers 503 while the ranks start",
                "    serving.start()  # /health answers 503 while the ranks start (load balancers wait)",
            ),
        ),
        Change("release 0.3.3", _append("CHANGELOG.md", "## 0.3.3\n- released\n")),
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


def create_demo(root: Path, gpu: bool = False, tp: int = 2) -> DemoRepo:
    """Write the repository and experiment under ``root`` (which must not hold a demo yet)."""
    repo = root / "repo"
    if repo.exists():
        from perfbisect.errors import UsageError

        raise UsageError(f"{repo} already exists: pass an empty --dir")
    repo.mkdir(parents=True)
    files = {"server.py": SERVER.read_text()}
    _git(repo, "init", "-q", "-b", "main", when=0)

    def commit(subject: str, when: int) -> str:
        for name, text in files.items():
            (repo / name).write_text(text)
        _git(repo, "add", "-A", when=when)
        _git(repo, "commit", "-q", "-m", subject, when=when)
        return _git(repo, "rev-parse", "HEAD", when=when)

    good = commit("initial import of the reference speculative server", 0)
    planted = ""
    planted_subject = PLANTED_GPU if gpu else PLANTED_CPU
    for number, change in enumerate(history(gpu), start=1):
        change.edit(files)
        sha = commit(change.subject, number)
        if change.subject == planted_subject:
            planted = sha
    bad = _git(repo, "rev-parse", "HEAD", when=0)
    experiment = root / "perfbisect.toml"
    experiment.write_text((EXPERIMENT_GPU if gpu else EXPERIMENT_CPU).format(tp=tp))
    return DemoRepo(root, repo, experiment, good, bad, planted)
