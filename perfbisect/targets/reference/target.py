"""The ``reference`` target kind: the embedded server, built, served and measured through the
command pipeline (host, launch methods, teardown checks), with per-cycle verify timings."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfbisect.config import Configuration
from perfbisect.experiment import Experiment, TargetSpec
from perfbisect.hosts.base import Host, default_python
from perfbisect.probes.verify_timer import verify_samples
from perfbisect.remote import program
from perfbisect.targets.command import PLACEHOLDER, CommandTarget
from perfbisect.targets.kind import parse_options
from perfbisect.targets.reference.kind import ReferenceOptions

SERVER = program("reference_server.py")
SERVER_FLAGS = ("tp", "device", "layers", "hidden", "heads", "draft_tokens", "max_seq", "threads")


def command_options(options: ReferenceOptions, server: str, python: str) -> dict[str, Any]:
    """serve/ready/measure for the generic pipeline, from the reference options (``python``: the
    interpreter when the experiment names none)."""
    python = shlex.quote(options.python or python)
    flags = []
    for key in SERVER_FLAGS:
        value = getattr(options, key)
        if value is not None:
            flags += [f"--{key.replace('_', '-')}", str(value)]
    flags += [str(a) for a in options.server_args]
    # A bare placeholder ("{verify_input}") is left for substitution, which quotes it.
    quoted = [f if PLACEHOLDER.fullmatch(f) else shlex.quote(f) for f in flags]
    # `exec`: the shell that runs the command becomes the server, so the server is the process
    # perfbisect started and dies with it even on a kill -9 (PR_SET_PDEATHSIG survives exec; a
    # server the shell forked would outlive it, and its ranks with it).
    serve = " ".join(
        ["exec", python, server, "serve", "--port", "{port}", "--timing-dir", "{timing}", *quoted]
    )
    measure = " ".join(
        [
            python,
            server,
            "bench",
            "--port",
            "{port}",
            "--timing-dir",
            "{timing}",
            f"--cycles {options.cycles}",
            f"--warmup {options.warmup}",
            f"--prompt {options.prompt}",
        ]
    )
    return {
        "serve": serve,
        "ready": "http://127.0.0.1:{port}/health",
        "measure": measure,
        "timeout_s": options.timeout_s,
    }


class ReferenceTarget(CommandTarget):
    def __init__(self, experiment: Experiment, cache_dir: Path, host: Host | None = None):
        super().__init__(experiment, cache_dir, host)
        server = "{worktree}/server.py" if experiment.target.repo else self._packaged_server()
        typed = parse_options(ReferenceOptions, experiment.target.options)
        self.options = command_options(typed, server, default_python(self.host))
        self.experiment = replace(
            experiment, target=TargetSpec("reference", self.options, experiment.target.repo)
        )

    def _packaged_server(self) -> str:
        if self.host.is_local:
            return shlex.quote(str(SERVER))
        path = f"{self.host.cache_dir()}/reference/server.py"
        self.host.write_file(path, SERVER.read_bytes())
        return shlex.quote(path)

    def _samples(self, output: str, config: Configuration) -> tuple[list[float], list[str]]:
        return verify_samples(output)

    def _sample_source(self, config: Configuration) -> str:
        return "no verify timing lines"

    def describe(self, config: Configuration) -> dict[str, Any]:
        described = super().describe(config)
        described["kind"] = "reference"
        return described
