"""The ``sglang`` target: build a commit's environment, launch the EAGLE-3 server with tensor
parallelism through the launch methods, run perfbisect's workload, read the verify timer."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfbisect.config import Configuration
from perfbisect.errors import StepFailed
from perfbisect.experiment import Experiment, TargetSpec
from perfbisect.hosts.base import Host
from perfbisect.probes.verify_timer import verify_samples
from perfbisect.targets.base import BuildInfo, Measurement
from perfbisect.targets.command import CommandTarget
from perfbisect.targets.sglang.build import build, envs_root
from perfbisect.targets.sglang.deps import install_plan
from perfbisect.targets.sglang.launch_args import checkout_version, server_argv, shell_command

WORKLOAD = Path(__file__).with_name("workload.py")
NCCL_LINE = re.compile(r"sglang is using nccl==([0-9.]+)")


class SglangTarget(CommandTarget):
    def __init__(self, experiment: Experiment, cache_dir: Path, host: Host | None = None):
        super().__init__(experiment, cache_dir, host)
        self.sglang = dict(experiment.target.options)
        self.options = {"timeout_s": self.sglang.get("timeout_s", 1800)}
        self.experiment = replace(
            experiment, target=TargetSpec("sglang", self.options, experiment.target.repo)
        )

    # ---- the commit's environment and commands -------------------------------------------------

    def _commands(self, worktree: str, python: str) -> dict[str, str]:
        text = self.host.read_text(f"{worktree}/python/pyproject.toml")
        if text is None:
            raise StepFailed("build", f"{worktree} is not an SGLang checkout")
        version_files = [
            self.host.read_text(f"{worktree}/python/sglang/{name}")
            for name in ("_version.py", "version.py")  # the generated file first
        ]
        version = checkout_version(text, "\n".join(v for v in version_files if v))
        if version is None:  # a tagless-version checkout: the nearest release tag says it
            tag = self.host.run(["git", "-C", worktree, "describe", "--tags", "--abbrev=0"])
            if tag.ok:
                version = checkout_version(f'version = "{tag.output.strip().lstrip("v")}"', None)
        argv = server_argv(python, version, self.sglang, "{port}")
        serve = "PERFBISECT_VERIFY_TIMER_DIR={timing} exec " + shell_command(argv)
        workload = self._workload_path()
        measure = " ".join(
            [
                shlex.quote(python),
                shlex.quote(workload),
                "--port",
                "{port}",
                "--timing-dir",
                "{timing}",
                "--requests",
                str(int(self.sglang.get("requests", 32))),
                "--concurrency",
                str(int(self.sglang.get("concurrency", 4))),
                "--max-new-tokens",
                str(int(self.sglang.get("max_new_tokens", 256))),
                "--warmup",
                str(int(self.sglang.get("warmup_requests", 2))),
            ]
        )
        return {
            "serve": serve,
            "ready": "http://127.0.0.1:{port}/health_generate",
            "measure": measure,
            "version": str(version) if version else "unknown",
        }

    def _workload_path(self) -> str:
        if self.host.is_local:
            return str(WORKLOAD)
        path = f"{self.host.cache_dir()}/sglang/workload.py"
        self.host.write_file(path, WORKLOAD.read_bytes())
        return path

    def _build(self, worktree: str, values: Any, env: Any, log_dir: Path) -> BuildInfo:
        built = build(
            self.host,
            worktree,
            str(self.sglang.get("python", "python3")),
            envs_root(self.host),
            float(self.options["timeout_s"]),
            tuple(str(a) for a in self.sglang.get("pip_args", [])),
        )
        (log_dir / "build.log").write_text(built.log)
        self.options = {**self.options, **self._commands(worktree, built.python)}
        return BuildInfo("ok", built.reused, 0.0, f"environment {built.digest}")

    def _samples(self, output: str) -> tuple[list[float], list[str]]:
        return verify_samples(output)

    def _sample_source(self) -> str:
        return "no verify timer lines (is the timer installed and PERFBISECT_VERIFY_TIMER_DIR set?)"

    def launch(self, config: Configuration, log_dir: str, on_stage: Any = None) -> Measurement:
        measured = super().launch(config, log_dir, on_stage)
        log = (
            (Path(log_dir) / "serve.log").read_text(errors="replace")
            if (Path(log_dir) / "serve.log").exists()
            else ""
        )
        found = NCCL_LINE.search(log)
        if found:
            measured.flags.append(f"server reports NCCL {found.group(1)}")
        graph_notes = [f for f in measured.flags if f.startswith("verify in CUDA graphs:")]
        if graph_notes and not graph_notes[0].startswith("verify in CUDA graphs: 100%"):
            measured.flags.append("verify left CUDA graphs in some cycles")
        return measured

    def describe(self, config: Configuration) -> dict[str, Any]:
        """Every command one launch runs on the host, for ``bisect start --dry-run``."""
        worktree = self._worktree(config)
        text = self.host.read_text(f"{worktree}/python/pyproject.toml")
        if text is None:
            raise StepFailed("build", f"{worktree} is not an SGLang checkout")
        plan = install_plan(text)
        env_python = f"{envs_root(self.host)}/{plan.digest}/bin/python"
        commands = self._commands(worktree, env_python)
        pretend = (
            "SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0+perfbisect " if plan.version_from_git else ""
        )
        return {
            "host": self.host.address,
            "launch": self._method(config),
            "sglang_version": commands["version"],
            "build": [
                f"{self.sglang.get('python', 'python3')} -m venv --system-site-packages "
                f"--without-pip {envs_root(self.host)}/{plan.digest}   # once per pinned set",
                f"{pretend}{env_python} -m pip install -e {worktree}/{plan.target}",
                f"install {Path(__file__).with_name('verify_timer_boot.py').name} + .pth into the "
                "environment's site-packages",
            ],
            "serve": commands["serve"],
            "ready": commands["ready"],
            "measure": commands["measure"],
        }
