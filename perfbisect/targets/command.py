"""The generic ``command`` target: user commands for build, serve, readiness and measure.

Placeholders (``{port}``, ``{worktree}``, ``{commit}``, every axis name) are substituted with
shell-quoted values, so an axis value can never inject shell syntax; other braces in the
command (awk programs, JSON) are left alone. Every stage runs through the experiment's host
(``[host]``), and ``serve`` is started by the configuration's launch method.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfbisect import __version__
from perfbisect.config import (
    COMMIT_AXIS,
    DRIVER_AXIS,
    LAUNCH_AXIS,
    NCCL_AXIS,
    PATCHES_AXIS,
    Configuration,
)
from perfbisect.errors import NO_SAMPLES, StepFailed
from perfbisect.experiment import Experiment
from perfbisect.hosts.base import Host, HostProcess
from perfbisect.hosts.registry import open_experiment_host
from perfbisect.launch.base import PRESERVED_ENV, LaunchSpec, launch_options
from perfbisect.launch.registry import make_launcher
from perfbisect.probes.hardware import gpu_memory_used, hardware_snapshot
from perfbisect.redact import redact_env, redact_text
from perfbisect.samples import instability_flags
from perfbisect.targets import nccl
from perfbisect.targets.base import BuildInfo, LaunchPlan, Measurement
from perfbisect.targets.driver import ensure_driver
from perfbisect.targets.gitrepo import GitRepo
from perfbisect.targets.readiness import wait_ready
from perfbisect.targets.sync import sync_tree

PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")
SHELL = "/bin/sh"
GPU_MEMORY_SLACK_MIB = 256  # what another tenant's small allocation may add meanwhile
_CHECKOUTS = threading.Lock()  # local worktrees, one at a time (see _worktree)
_COPIES: dict[str, threading.Lock] = {}  # tree copies, one at a time per host address


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


class CommandTarget:
    def __init__(self, experiment: Experiment, cache_dir: Path, host: Host | None = None):
        self.experiment = experiment
        self.options = experiment.target.options
        self.host = host or open_experiment_host(experiment)
        self._default_host = self.host
        self._hosts: dict[str, Host] = {}
        self.worktree_root = cache_dir / "worktrees"
        self.repo = GitRepo(experiment.target.repo) if experiment.target.repo else None
        self.pattern = experiment.metric.regex
        self._cuda: int | None = None
        self._server: HostProcess | None = None  # the running launch's server, for abort()
        # Diagnostic launches (`bisect explain`): variables for the served processes only,
        # whatever the launch method; "{logs}" in a value is the launch's log folder.
        self.diagnostics: dict[str, str] = {}

    def abort(self) -> None:
        server = self._server
        if server is not None:
            server.stop()

    def close(self) -> None:
        for host in {id(h): h for h in [self.host, *self._hosts.values()]}.values():
            host.close()

    def _host_for(self, config: Configuration) -> Host:
        """The host of this configuration: the driver axis may map its version to one."""
        driver = self.experiment.driver
        version = config.get(DRIVER_AXIS)
        if driver is None or version is None or version not in driver.hosts:
            return self._default_host
        address = driver.hosts[version]
        if address not in self._hosts:
            self._hosts[address] = open_experiment_host(self.experiment, address)
        return self._hosts[address]

    # ---- environment and placeholders -------------------------------------------------------

    def _values(self, config: Configuration, worktree: str, port: int) -> dict[str, str]:
        # {timing}: a fresh directory for per-cycle verify timer files of this launch.
        timing = f"{worktree}/.perfbisect-timing/{uuid.uuid4().hex[:10]}"
        values = {"port": str(port), "worktree": worktree, "timing": timing}
        values.update(config.as_dict())
        values.setdefault(COMMIT_AXIS, "")
        return values

    @staticmethod
    def _plain_env(values: Mapping[str, str]) -> dict[str, str]:
        env = {f"PERFBISECT_{name.upper()}": value for name, value in values.items()}
        env.update({k: os.environ[k] for k in PRESERVED_ENV if k in os.environ})
        return env

    def _local_tree(self, config: Configuration) -> Path:
        sha = config.get(COMMIT_AXIS)
        if self.repo is None:
            return self.experiment.directory
        if sha is None:
            sha = self.repo.resolve("HEAD")
        tokens = [t for t in (config.get(PATCHES_AXIS) or "").split("+") if t]
        if not tokens:
            return self.repo.worktree(sha, self.worktree_root)
        by_token = {p.token: p for p in self.experiment.patches}
        patches = [(by_token[t].name, by_token[t].path) for t in tokens]
        return self.repo.patched_worktree(sha, self.worktree_root, patches)

    def _worktree(self, config: Configuration) -> str:
        """The configuration's source tree on the host (copied there for a remote host).
        Launches at once (several slots) share the local clone and may ask for one commit
        twice: checkouts are made one at a time, so none sees another's half-made tree."""
        with _CHECKOUTS:
            local = self._local_tree(config)
        if self.host.is_local:
            return str(local)
        with _CHECKOUTS:
            lock = _COPIES.setdefault(self.host.address, threading.Lock())
        with lock:  # copies to one host one at a time; to different hosts at once
            return sync_tree(self.host, local)

    def _free_port(self) -> int:
        """The port the served process will listen on (free on the host now)."""
        return self.host.free_port()

    def _method(self, config: Configuration) -> str:
        return config.get(LAUNCH_AXIS) or self.experiment.launch.method

    def describe(self, config: Configuration) -> dict[str, Any]:
        """The commands one launch of ``config`` would run (for the log and --dry-run)."""
        sha = config.get(COMMIT_AXIS)
        worktree = (
            f"<worktree of {sha[:12]}>" if self.repo and sha else str(self.experiment.directory)
        )
        values = self._values(config, worktree, 0)
        values["port"] = "{port}"
        described: dict[str, Any] = {
            stage: substitute(command, values) for stage, command in self._plan().stages().items()
        }
        described["host"] = self.host.address
        described["launch"] = self._method(config)
        return described

    def _samples(self, output: str, config: Configuration) -> tuple[list[float], list[str]]:
        """Samples from the measure output, and notes about them."""
        return parse_samples(output, self.pattern), []

    def _sample_source(self, config: Configuration) -> str:
        return f"metric pattern {self.experiment.metric.pattern!r}"

    # ---- stages -----------------------------------------------------------------------------

    def _plan(self) -> LaunchPlan:
        """The user's own commands, as the ``[target]`` table gives them."""
        return LaunchPlan(
            measure=self.options["measure"],
            serve=self.options.get("serve"),
            ready=self.options.get("ready"),
            build=self.options.get("build"),
        )

    def _build(
        self,
        config: Configuration,
        worktree: str,
        values: Mapping[str, str],
        env: Mapping[str, str],
        log_dir: Path,
    ) -> tuple[BuildInfo, LaunchPlan]:
        """Build the checkout; what was built and the commands the launch runs next."""
        plan = self._plan()
        return self._run_build(worktree, values, env, log_dir), plan

    def _builds(self) -> bool:
        """Whether a launch has a build stage: a ``build`` command (targets that install or
        prepare something in their build say so)."""
        return bool(self.options.get("build"))

    def _timed_out(self, tail: str) -> str:
        """A stage that ran past ``timeout_s``: the limit, how to raise it, the output tail."""
        limit = self.experiment.timeout_s
        where = "" if not tail else f"; output tail: {tail}"
        return (
            f"timed out after {limit:.0f}s (the per-stage limit: raise [target] timeout_s "
            f"in {self.experiment.path.name} if this stage needs longer){where}"
        )

    def _run_build(
        self, worktree: str, values: Mapping[str, str], env: Mapping[str, str], log_dir: Path
    ) -> BuildInfo:
        command = self.options.get("build")
        if not command:
            return BuildInfo("none", True, 0.0)
        argv_text = substitute(command, values)
        marker = f"{worktree}.build.json"
        cached_text = self.host.read_text(marker)
        if cached_text:
            try:
                cached = json.loads(cached_text)
            except ValueError:
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
        ok = result.ok
        # A build that a signal or the time limit ended says nothing about the commit: only
        # a success or the build's own failure is kept for the next launch of it.
        if worktree != str(self.experiment.directory) and (ok or not result.interrupted):
            status = "ok" if ok else "failed"
            record = {"command": argv_text, "status": status, "log_tail": tail}
            self.host.write_file(marker, json.dumps(record).encode())
        if result.timed_out:
            raise StepFailed("build", self._timed_out(tail))
        if not ok:
            raise StepFailed("build", f"exit {result.returncode}: {tail}")
        return BuildInfo("ok", False, result.duration_s, tail)

    def _cuda_major(self) -> int:
        if self.experiment.nccl_cuda:
            return self.experiment.nccl_cuda
        if self._cuda is None:
            cuda = str(hardware_snapshot(self.host).get("cuda_driver") or "12")
            self._cuda = int(cuda.split(".")[0]) if cuda.split(".")[0].isdigit() else 12
        return self._cuda

    def _nccl_library(self, config: Configuration) -> str | None:
        """The configuration's NCCL library on the host, materialised on first use."""
        version = config.get(NCCL_AXIS)
        if not version:
            return None
        cuda = self._cuda_major()
        return nccl.on_host(self.host, nccl.materialise(version, cuda), cuda)

    def _serve(
        self,
        config: Configuration,
        worktree: str,
        serve: str,
        values: Mapping[str, str],
        logs: Path,
        delivery: Mapping[str, str],
    ) -> HostProcess:
        tag = uuid.uuid4().hex[:10]
        log_path = (
            str(logs / "serve.log")
            if self.host.is_local
            else f"{self.host.cache_dir()}/logs/{tag}/serve.log"
        )
        spec = LaunchSpec(
            command=substitute(serve, values),
            cwd=worktree,
            log_path=log_path,
            tag=tag,
            tuning_env=dict(self.experiment.env),
            plain_env={
                **self._plain_env(values),
                **delivery,
                **{k: v.replace("{logs}", str(logs)) for k, v in self.diagnostics.items()},
            },
        )
        launcher = make_launcher(self._method(config), launch_options(self.experiment))
        return launcher.start(self.host, spec)

    def _teardown_after(
        self,
        server: HostProcess,
        logs: Path,
        port: int,
        gpu_before: list[int],
        in_flight: BaseException | None,
    ) -> None:
        """Teardown that never hides what was already going wrong: with a step failure in
        flight both are reported in one failure; with Ctrl-C (or a bug) in flight that one goes
        on and the teardown failure is printed, not raised in its place."""
        try:
            self._teardown(server, logs, port, gpu_before)
        except Exception as exc:
            why = exc.reason if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
            if in_flight is None:
                raise
            if isinstance(in_flight, StepFailed):
                raise StepFailed(
                    in_flight.stage, f"{in_flight.reason}; teardown also failed: {why}"
                ) from None
            print(f"perfbisect: teardown failed while stopping: {why}", file=sys.stderr)

    def _teardown(self, server: HostProcess, logs: Path, port: int, gpu_before: list[int]) -> None:
        server.stop()
        if not self.host.is_local:
            (logs / "serve.log").write_text(self.host.read_text(server.log_path) or "")
        leftover = server.tree_alive()
        if leftover:
            raise StepFailed("teardown", f"processes survived teardown: {leftover}")
        if self.host.port_in_use(port):
            raise StepFailed("teardown", f"port {port} is still in use after teardown")
        if any(gpu_before):
            deadline = time.monotonic() + 15
            while True:
                after = gpu_memory_used(hardware_snapshot(self.host))
                grown = [
                    (i, b, a)
                    for i, (b, a) in enumerate(zip(gpu_before, after, strict=False))
                    if a > b + GPU_MEMORY_SLACK_MIB
                ]
                if not grown:
                    break
                if time.monotonic() > deadline:
                    detail = ", ".join(f"GPU {i}: {b} -> {a} MiB" for i, b, a in grown)
                    raise StepFailed("teardown", f"GPU memory was not released ({detail})")
                time.sleep(0.5)

    def launch(
        self, config: Configuration, log_dir: str, on_stage: Callable[[str], None] | None = None
    ) -> Measurement:
        stage = on_stage or (lambda _name: None)
        logs = Path(log_dir)
        logs.mkdir(parents=True, exist_ok=True)
        self.host = self._host_for(config)
        notes: list[str] = []
        if config.get(DRIVER_AXIS) and self.experiment.driver:
            stage("driver")
            settings = self.experiment.driver
            notes.append(
                ensure_driver(
                    self.host, config.get(DRIVER_AXIS) or "", settings.switch, settings.wait_s
                )
            )
        stage("checkout")
        t_checkout = time.monotonic()
        worktree = self._worktree(config)
        port = self._free_port()
        values = self._values(config, worktree, port)
        library = self._nccl_library(config)
        delivery: dict[str, str] = {}  # the nccl axis's library, for the served processes only
        if library:
            pythonpath = os.environ.get("PYTHONPATH") if self.host.is_local else None
            shadow = nccl.torch_shadow(self.host, library)
            delivery = nccl.delivery(library, shadow, pythonpath)
        # Build and measure do not get the NCCL library: only the served processes run NCCL.
        env = {**self._plain_env(values), **self.experiment.env}
        # The checkout's time counts in the session's time spent, as the other stages' do.
        timings: dict[str, float] = {"checkout_s": time.monotonic() - t_checkout}
        if self._builds():  # a stage the user did not configure is not shown as one
            stage("build")
        t_build = time.monotonic()
        build, plan = self._build(config, worktree, values, env, logs)
        # The stage's wall time: a cached or "installed" build still spends it (checking the
        # environment, installing the verify timer, preparing a proxy's model folder).
        if self._builds():
            timings["build_s"] = max(build.duration_s, time.monotonic() - t_build)
        snapshot = hardware_snapshot(self.host)
        gpu_before = gpu_memory_used(snapshot)

        server: HostProcess | None = None
        in_flight: BaseException | None = None
        try:
            if plan.serve:
                stage("serve")
                t0 = time.monotonic()
                server = self._serve(config, worktree, plan.serve, values, logs, delivery)
                self._server = server
                ready = plan.ready
                wait_ready(
                    self.host,
                    substitute(ready, values, quote=False) if ready else None,
                    server,
                    self.experiment.timeout_s,
                    secrets=env,
                )
                timings["ready_s"] = time.monotonic() - t0
                if library:
                    server.notes.append(nccl.confirm_loaded(self.host, server, library))
            stage("measure")
            result = self.host.run(
                [SHELL, "-c", substitute(plan.measure, values)],
                cwd=worktree,
                env=env,
                timeout_s=self.experiment.timeout_s,
                log_path=logs / "measure.log",
            )
            timings["measure_s"] = result.duration_s
            tail = redact_text(result.tail(10), env)
            if result.timed_out:
                raise StepFailed("measure", self._timed_out(tail))
            if result.returncode != 0:
                raise StepFailed("measure", f"exit {result.returncode}: {tail}")
            samples, flags = self._samples(result.output, config)
            if not samples:
                raise StepFailed(
                    "measure",
                    f"{NO_SAMPLES}{self._sample_source(config)} matched nothing; output tail: "
                    f"{tail or '(empty)'}",
                )
        except BaseException as exc:
            in_flight = exc
            raise
        finally:
            self._server = None
            if server is not None:
                notes.extend(server.notes)
                t_down = time.monotonic()
                self._teardown_after(server, logs, port, gpu_before, in_flight)
                timings["teardown_s"] = time.monotonic() - t_down
        snapshot.update(
            {
                "address": self.host.address,
                "perfbisect": __version__,
                "env": redact_env(dict(self.experiment.env)),
                "launch": {
                    "method": self._method(config),
                    "notes": notes,
                    # What ran, to reproduce this launch by hand (secrets redacted).
                    "cwd": worktree,
                    "commands": {
                        stage: redact_text(substitute(command, values, quote=stage != "ready"), env)
                        for stage, command in plan.stages().items()
                    },
                },
            }
        )
        return Measurement(
            samples=samples,
            timings=timings,
            log_path=str(logs),
            flags=[*flags, *instability_flags(samples), *plan.notes],
            build=build,
            snapshot=snapshot,
        )
