"""The generic ``command`` target: user commands for build, serve, readiness and measure.

Placeholders (``{port}``, ``{worktree}``, ``{commit}``, every axis name) are substituted with
shell-quoted values, so an axis value can never inject shell syntax; other braces in the
command (awk programs, JSON) are left alone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfbisect.bisect.stats import instability_flags
from perfbisect.config import COMMIT_AXIS, Configuration
from perfbisect.errors import StepFailed
from perfbisect.experiment import Experiment
from perfbisect.hosts.local import LocalHost, LocalProcess, free_port, port_in_use
from perfbisect.probes.environment import basic_snapshot
from perfbisect.redact import redact_text
from perfbisect.targets.base import BuildInfo, Measurement
from perfbisect.targets.gitrepo import GitRepo

PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")
SHELL = "/bin/sh"


def substitute(command: str, values: Mapping[str, str], quote: bool = True) -> str:
    """Fill known placeholders; shell-quoted unless the result is not a shell command (a URL)."""

    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        return shlex.quote(values[name]) if quote else values[name]

    return PLACEHOLDER.sub(repl, command)


def parse_samples(output: str, pattern: re.Pattern[str]) -> list[float]:
    samples: list[float] = []
    for match in pattern.finditer(output):
        try:
            samples.append(float(match.group(1)))
        except ValueError:
            continue
    return samples


def wait_ready(url: str, process: LocalProcess | None, timeout_s: float) -> float:
    """Poll ``url`` until it answers 200; fail fast if the served process dies."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise StepFailed(
                "serve",
                f"server exited with code {process.poll()} before it was "
                f"ready; log tail:\n{process.log_tail(10)}",
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - start
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        time.sleep(0.2)
    raise StepFailed("ready", f"{url} did not answer 200 within {timeout_s:.0f}s (last: {last})")


class CommandTarget:
    def __init__(self, experiment: Experiment, cache_dir: Path, host: LocalHost | None = None):
        self.experiment = experiment
        self.options = experiment.target.options
        self.host = host or LocalHost()
        self.worktree_root = cache_dir / "worktrees"
        self.repo = GitRepo(experiment.target.repo) if experiment.target.repo else None
        self.pattern = experiment.metric.regex

    # ---- environment and placeholders -------------------------------------------------------

    def _values(self, config: Configuration, worktree: Path, port: int) -> dict[str, str]:
        values = {"port": str(port), "worktree": str(worktree)}
        values.update(config.as_dict())
        values.setdefault(COMMIT_AXIS, "")
        return values

    def _env(self, values: Mapping[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.experiment.env)
        for name, value in values.items():
            env[f"PERFBISECT_{name.upper()}"] = value
        return env

    def _worktree(self, config: Configuration) -> Path:
        sha = config.get(COMMIT_AXIS)
        if self.repo is None or sha is None:
            return self.experiment.directory
        return self.repo.worktree(sha, self.worktree_root)

    def describe(self, config: Configuration) -> dict[str, Any]:
        """The commands one launch of ``config`` would run (for --dry-run and the log)."""
        worktree = self._worktree_path_hint(config)
        values = self._values(config, worktree, 0)
        values["port"] = "{port}"
        return {
            stage: substitute(self.options[stage], values)
            for stage in ("build", "serve", "ready", "measure")
            if stage in self.options
        }

    def _worktree_path_hint(self, config: Configuration) -> Path:
        sha = config.get(COMMIT_AXIS)
        return (
            self.worktree_root / (sha[:16] if sha else "")
            if self.repo
            else self.experiment.directory
        )

    # ---- stages -----------------------------------------------------------------------------

    def _build(
        self, worktree: Path, values: Mapping[str, str], env: Mapping[str, str], log_dir: Path
    ) -> BuildInfo:
        command = self.options.get("build")
        if not command:
            return BuildInfo("none", True, 0.0)
        argv_text = substitute(command, values)
        marker = worktree.parent / f"{worktree.name}.build.json"
        if marker.exists():
            try:
                cached = json.loads(marker.read_text())
            except (OSError, ValueError):
                cached = {}
            if cached.get("command") == argv_text:
                info = BuildInfo(cached["status"], True, 0.0, cached.get("log_tail", ""))
                if info.status != "ok":
                    raise StepFailed("build", f"build failed (cached): {info.log_tail}")
                return info
        result = self.host.run(
            [SHELL, "-c", argv_text],
            cwd=worktree,
            env=env,
            timeout_s=self.experiment.timeout_s,
            log_path=log_dir / "build.log",
        )
        tail = redact_text(result.tail(15), env)
        ok = result.returncode == 0 and not result.timed_out
        if worktree != self.experiment.directory:
            marker.write_text(
                json.dumps(
                    {"command": argv_text, "status": "ok" if ok else "failed", "log_tail": tail}
                )
            )
        if result.timed_out:
            raise StepFailed("build", f"timed out after {self.experiment.timeout_s:.0f}s: {tail}")
        if not ok:
            raise StepFailed("build", f"exit {result.returncode}: {tail}")
        return BuildInfo("ok", False, result.duration_s, tail)

    def launch(
        self, config: Configuration, log_dir: str, on_stage: Callable[[str], None] | None = None
    ) -> Measurement:
        stage = on_stage or (lambda _name: None)
        logs = Path(log_dir)
        stage("checkout")
        worktree = self._worktree(config)
        port = free_port()
        values = self._values(config, worktree, port)
        env = self._env(values)
        timings: dict[str, float] = {}
        stage("build")
        build = self._build(worktree, values, env, logs)
        timings["build_s"] = build.duration_s

        server: LocalProcess | None = None
        try:
            if "serve" in self.options:
                stage("serve")
                t0 = time.monotonic()
                server = self.host.spawn(
                    [SHELL, "-c", substitute(self.options["serve"], values)],
                    cwd=worktree,
                    env=env,
                    log_path=logs / "serve.log",
                )
                if "ready" in self.options:
                    wait_ready(
                        substitute(self.options["ready"], values, quote=False),
                        server,
                        self.experiment.timeout_s,
                    )
                elif server.poll() is not None:
                    raise StepFailed("serve", f"server exited with code {server.poll()}")
                timings["ready_s"] = time.monotonic() - t0
            stage("measure")
            result = self.host.run(
                [SHELL, "-c", substitute(self.options["measure"], values)],
                cwd=worktree,
                env=env,
                timeout_s=self.experiment.timeout_s,
                log_path=logs / "measure.log",
            )
            timings["measure_s"] = result.duration_s
            tail = redact_text(result.tail(10), env)
            if result.timed_out:
                raise StepFailed(
                    "measure", f"timed out after {self.experiment.timeout_s:.0f}s: {tail}"
                )
            if result.returncode != 0:
                raise StepFailed("measure", f"exit {result.returncode}: {tail}")
            samples = parse_samples(result.output, self.pattern)
            if not samples:
                raise StepFailed(
                    "measure",
                    f"no samples: metric pattern "
                    f"{self.experiment.metric.pattern!r} matched nothing; output tail: "
                    f"{tail or '(empty)'}",
                )
        finally:
            if server is not None:
                server.stop()
                leftover = server.tree_alive()
                if leftover:  # pragma: no cover - kill_tree escalates to SIGKILL
                    raise StepFailed("teardown", f"processes survived teardown: {leftover}")
        if "serve" in self.options and port_in_use(port):
            raise StepFailed("teardown", f"port {port} is still in use after teardown")
        return Measurement(
            samples=samples,
            timings=timings,
            log_path=str(logs),
            flags=instability_flags(samples),
            build=build,
            snapshot=basic_snapshot(self.experiment.env),
        )
