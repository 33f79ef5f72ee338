"""The ``sglang`` target: build a commit's environment, launch the EAGLE-3 server with tensor
parallelism through the launch methods, run perfbisect's workload, read the verify timer."""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from perfbisect.config import Configuration
from perfbisect.errors import StepFailed
from perfbisect.experiment import Experiment, TargetSpec
from perfbisect.hosts.base import Host, default_python
from perfbisect.probes.verify_timer import client_tokens_per_s, verify_samples
from perfbisect.remote import program
from perfbisect.targets.base import BuildInfo, LaunchPlan, Measurement
from perfbisect.targets.command import CommandTarget
from perfbisect.targets.kind import parse_options
from perfbisect.targets.readiness import LOG_PREFIX
from perfbisect.targets.sglang.build import BuildOptions, build, envs_root
from perfbisect.targets.sglang.caches import CompileCache, installed_key, layout, prepare
from perfbisect.targets.sglang.deps import install_plan
from perfbisect.targets.sglang.envs import Sources
from perfbisect.targets.sglang.kind import SglangOptions
from perfbisect.targets.sglang.launch_args import checkout_version, server_argv, shell_command
from perfbisect.targets.sglang.proxy import ProxySpec, flag_note, prepare_model
from perfbisect.targets.sglang.proxy import server_args as proxy_args
from perfbisect.targets.sglang.server_log import READY_LINE, failure_cause, log_notes
from perfbisect.targets.sglang.startup import (
    START_COMMAND,
    as_timings,
    import_note,
    reached,
    startup_phases,
)
from perfbisect.targets.sglang.startup_args import Startup, declared_on_host, startup_args
from perfbisect.targets.sglang.timer import BOOT, install_timer

WORKLOAD = program("sglang_workload.py")


# Run by the interpreter of a `build = "installed"` target: what it would serve.
_INSTALLED_PROBE = (
    "import sglang, sysconfig; print(sglang.__version__); print(sglang.__file__); "
    "print(sysconfig.get_paths()['purelib'])"
)
_PATH_LIKE = ("/", "./", "../", "~")  # a model given as a path (not a hub id) must exist
# SGLang derives ports from --port: 0.5.12 refuses to start when --port + 10000 (its gRPC port)
# exceeds 65535, which 1 in 5 of the kernel's ephemeral ports (32768-60999) does.
DERIVED_PORT_OFFSETS = (10000,)
PORT_ATTEMPTS = 50


def graph_warning(flags: list[str]) -> str | None:
    """What the launch's verify-in-graphs note means when not every cycle ran in a graph:
    none of them (0%) is said as such, not as "some"."""
    note = next((f for f in flags if f.startswith(GRAPH_NOTE)), None)
    if note is None:
        return None
    share = note[len(GRAPH_NOTE) :].split("%")[0].strip()
    if share == "100":
        return None
    if share == "0":
        return "verify ran outside CUDA graphs in every cycle"
    return "verify left CUDA graphs in some cycles"


GRAPH_NOTE = "verify in CUDA graphs: "


class SglangTarget(CommandTarget):
    def __init__(self, experiment: Experiment, cache_dir: Path, host: Host | None = None):
        super().__init__(experiment, cache_dir, host)
        self.sglang = dict(experiment.target.options)
        self.opts = parse_options(SglangOptions, experiment.target.options)
        self.installed = self.opts.build == "installed"
        self.options = {"timeout_s": self.opts.timeout_s}
        self.proxy = ProxySpec.of(self.sglang)
        self.experiment = replace(
            experiment, target=TargetSpec("sglang", self.options, experiment.target.repo)
        )

    # ---- the commit's environment and commands -------------------------------------------------

    def _checkout_version(self, worktree: str) -> Version | None:
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
        return version

    def _base_python(self) -> str:
        """The interpreter the environments are layered on (or that imports an installed
        SGLang): ``python`` in the experiment, else the host's default."""
        return self.opts.python or default_python(self.host)

    def _server_args(self, values: Mapping[str, str]) -> list[str]:
        """``extra_args`` plus the ``axis_args`` of this configuration's axis values."""
        args = [str(a) for a in self.opts.extra_args]
        for axis, by_value in self.opts.axis_args.items():
            args += [str(a) for a in by_value.get(values.get(axis, ""), [])]
        return args

    def _commands(
        self,
        python: str,
        version: Version | None,
        values: Mapping[str, str],
        proxy_model: str | None = None,
        speculative: bool = True,
        source_path: str | None = None,
        startup: Startup | None = None,
    ) -> dict[str, str]:
        """The serve, ready and measure commands; ``proxy_model``: the proxy's model folder
        (a proxy launch), ``speculative``: False for a baseline launch, ``source_path``: the
        checkout's folder SGLang is imported from (no editable install), ``startup``: the
        version's start-up flags and the pin set's compile caches."""
        options = {**self.sglang, "extra_args": self._server_args(values)}
        if proxy_model is not None and self.proxy is not None:
            options["model"] = proxy_model
            options["extra_args"] = [*options["extra_args"], *proxy_args(self.proxy, version)]
        startup = startup or Startup(set(), None)
        extra, note = startup_args(self.opts, options["extra_args"], startup)
        options["extra_args"] = [*options["extra_args"], *extra]
        argv = server_argv(python, version, options, "{port}", speculative)
        serve = "PERFBISECT_VERIFY_TIMER_DIR={timing} exec " + shell_command(argv)
        if source_path:
            serve = f"PYTHONPATH={shlex.quote(source_path)}${{PYTHONPATH:+:$PYTHONPATH}} " + serve
        if "SGLANG_LOG_MS" not in self.experiment.env:  # milliseconds in the phases' times
            serve = 'SGLANG_LOG_MS="${SGLANG_LOG_MS:-1}" ' + serve
        if startup.cache is not None:
            serve = startup.cache.shell_prefix() + serve
        # The start mark: the phases' clock starts when the serve command does (startup.py).
        serve = START_COMMAND + serve
        workload = [
            shlex.quote(python),
            shlex.quote(self._workload_path()),
            "--port",
            "{port}",
            "--timing-dir",
            "{timing}",
            "--requests",
            str(self.opts.requests),
            "--concurrency",
            str(self.opts.concurrency),
            "--max-new-tokens",
            str(self.opts.max_new_tokens),
            "--warmup",
            str(self.opts.warmup_requests),
        ]
        if self.opts.prompts:
            workload += ["--prompts", shlex.quote(self._prompts_path())]
        ready = (
            LOG_PREFIX + READY_LINE
            if self.opts.ready == "log"
            else "http://127.0.0.1:{port}/health_generate"
        )
        return {
            "serve": serve,
            "ready": ready,
            "measure": " ".join(workload),
            "version": str(version) if version else "unknown",
            "startup": note,
        }

    def _prepare_startup(self, key: str, package: str, make: bool = True) -> Startup:
        """The start-up flags the served SGLang (its package folder on the host) declares,
        and the compile caches of ``key`` (its pin set; ``make``: False for a dry run, which
        writes nothing)."""
        declared = declared_on_host(self.host, package)
        cache: CompileCache | None = None
        if self.opts.compile_cache and make:
            cache = prepare(self.host, key, self.experiment.env, self.opts.max_envs)
        elif self.opts.compile_cache:
            cache = layout(self.host, key, self.experiment.env)
        return Startup(declared, cache)

    def _prompts_path(self) -> str:
        local = self.experiment.directory / str(self.opts.prompts)
        if self.host.is_local:
            return str(local)
        path = f"{self.host.cache_dir()}/sglang/prompts-{local.name}"
        self.host.write_file(path, local.read_bytes())
        return path

    def _free_port(self) -> int:
        for _ in range(PORT_ATTEMPTS):
            port = self.host.free_port()
            derived = [port + offset for offset in DERIVED_PORT_OFFSETS]
            if all(p <= 65535 and not self.host.port_in_use(p) for p in derived):
                return port
        raise StepFailed(
            "serve", f"no free port on {self.host.address} with its SGLang-derived ports free"
        )

    def _check_models(self) -> None:
        for key in ("model", "draft_model"):
            path = str(self.sglang[key])
            if not path.startswith(_PATH_LIKE):
                continue  # a hub id: SGLang resolves (or fails to resolve) it itself
            if not self.host.run(["test", "-e", path], timeout_s=60).ok:
                raise StepFailed("build", f"{key} {path} does not exist on {self.host.address}")

    def _workload_path(self) -> str:
        if self.host.is_local:
            return str(WORKLOAD)
        path = f"{self.host.cache_dir()}/sglang/workload.py"
        self.host.write_file(path, WORKLOAD.read_bytes())
        return path

    def _builds(self) -> bool:
        return True  # the environment, the verify timer, a proxy's model folder

    def _build(
        self,
        config: Configuration,
        worktree: str,
        values: Mapping[str, str],
        env: Any,
        log_dir: Path,
    ) -> tuple[BuildInfo, LaunchPlan]:
        self._check_models()
        source_path: str | None = None
        notes: tuple[str, ...] = ()
        if self.installed:
            python, version, info, location = self._installed()
            package = location.rsplit("/", 1)[0]
            key = installed_key(python, str(version))
        else:
            version = self._checkout_version(worktree)
            started = time.monotonic()
            built = build(
                self.host,
                worktree,
                self._base_python(),
                envs_root(self.host),
                float(self.options["timeout_s"]),
                tuple(str(a) for a in self.opts.pip_args),
                self._build_options(),
            )
            python, notes = built.python, built.notes
            # Served from its own worktree in every case: with several slots on one host,
            # another commit of this pin set may have re-pointed the editable install since.
            source_path = built.source_path or f"{worktree}/python"
            spent = time.monotonic() - started  # part of time to culprit: recorded per step
            info = BuildInfo("ok", built.reused, spent, f"pin set {built.digest}: {built.label}")
            (log_dir / "build.log").write_text(built.log)
            package, key = f"{source_path}/sglang", built.digest
        startup = self._prepare_startup(key, package)
        proxy_model: str | None = None
        if config.is_proxy:
            assert self.proxy is not None
            source = self.proxy.model or self.opts.model
            root = f"{self.host.cache_dir()}/sglang/proxy-models"
            proxy_model = prepare_model(self.host, source, self.proxy, root)
            notes = (*notes, flag_note(self.proxy, proxy_model, version))
        commands = self._commands(
            python, version, values, proxy_model, not config.is_baseline, source_path, startup
        )
        if commands["startup"]:
            notes = (*notes, commands["startup"])
        plan = LaunchPlan(commands["measure"], commands["serve"], commands["ready"], notes=notes)
        return info, plan

    def _build_options(self) -> BuildOptions:
        wheelhouse = self.opts.wheelhouse
        if wheelhouse and self.host.is_local:  # relative to the experiment file, like prompts
            wheelhouse = str(self.experiment.directory / Path(wheelhouse).expanduser())
        return BuildOptions(
            Sources(wheelhouse, self.opts.index_url),
            tuple(str(p) for p in self.opts.pins),
            self.opts.build == "source",
            self.opts.source_fallback,
            self.opts.max_envs,
        )

    def _installed(self) -> tuple[str, Version | None, BuildInfo, str]:
        """``build = "installed"``: serve the SGLang that ``python`` imports, as it is."""
        python, version, location, site = self._probe_installed()
        install_timer(self.host, site)
        note = (
            f"installed sglang {version or 'unknown'} at {location} (no build: build = installed)"
        )
        return python, version, BuildInfo("ok", True, 0.0, note), location

    def _probe_installed(self) -> tuple[str, Version | None, str, str]:
        """The interpreter, the SGLang version it imports, where from, and its site-packages."""
        python = self._base_python()
        probe = self.host.run([python, "-c", _INSTALLED_PROBE], timeout_s=300)
        if not probe.ok:
            raise StepFailed(
                "build", f'{python} cannot import sglang (build = "installed"): {probe.tail(5)}'
            )
        raw_version, location, site = probe.output.strip().splitlines()[-3:]
        try:
            version: Version | None = Version(raw_version)
        except InvalidVersion:
            version = None
        return python, version, location, site

    def _samples(self, output: str, config: Configuration) -> tuple[list[float], list[str]]:
        if config.is_baseline:  # no speculation, no verify: the value is the client's tokens/s
            tokens = client_tokens_per_s(output)
            note = "baseline launch: no speculative decoding; value = client tokens/s"
            return ([tokens] if tokens is not None else []), [note]
        return verify_samples(output)

    def _sample_source(self, config: Configuration) -> str:
        if config.is_baseline:
            return "no workload summary line (tokens_per_s=...)"
        return "no verify timer lines (is the timer installed and PERFBISECT_VERIFY_TIMER_DIR set?)"

    def launch(self, config: Configuration, log_dir: str, on_stage: Any = None) -> Measurement:
        if config.is_proxy and self.proxy is None:
            raise StepFailed("build", "a proxy launch was asked for, but [target] has no proxy")
        if config.is_baseline and not self.opts.baseline:
            raise StepFailed("build", "a baseline launch was asked for, but baseline is not set")
        try:
            measured = super().launch(config, log_dir, on_stage)
        except StepFailed as exc:
            # The endpoints launch first: an environment that does not fit the commit shows
            # there, and the SKIP names the import or flag instead of a log tail.
            serve_log = Path(log_dir) / "serve.log"
            text = serve_log.read_text(errors="replace") if serve_log.exists() else ""
            cause = failure_cause(text)
            if cause is None and exc.stage == "ready":  # stuck, not failed: say where
                cause = reached(text)
            if cause is None or exc.stage not in ("serve", "ready"):
                raise
            raise StepFailed(exc.stage, f"{cause}; {exc.reason}") from exc
        measured.snapshot["fidelity"] = "proxy" if config.is_proxy else "full"
        measured.snapshot["speculative"] = not config.is_baseline
        log_file = Path(log_dir) / "serve.log"
        log = log_file.read_text(errors="replace") if log_file.exists() else ""
        # Numbers next to the stage times (keys without "_s": not stages, never summed).
        measured.timings.update(as_timings(startup_phases(log, measured.timings.get("ready_s"))))
        imports = import_note(log)
        if imports:
            measured.flags.append(imports)
        measured.flags.extend(log_notes(log))
        warning = graph_warning(measured.flags)
        if warning:
            measured.flags.append(warning)
        return measured

    def describe(self, config: Configuration) -> dict[str, Any]:
        """Every command one launch runs on the host, for ``bisect start --dry-run``."""
        values = self._values(config, "<worktree>", 0)
        source_path: str | None = None
        if self.installed:
            python, version, location, _ = self._probe_installed()
            package, key = location.rsplit("/", 1)[0], installed_key(python, str(version))
            steps = [
                f"{python} -c {shlex.quote(_INSTALLED_PROBE)}   # no build: build = installed",
                f"install {BOOT.name} + .pth into {python}'s site-packages",
            ]
        else:
            worktree = self._worktree(config)
            text = self.host.read_text(f"{worktree}/python/pyproject.toml")
            if text is None:
                raise StepFailed("build", f"{worktree} is not an SGLang checkout")
            options = self._build_options()
            source_path = f"{worktree}/python"
            plan = install_plan(text, pins=options.pins)
            package, key = f"{source_path}/sglang", plan.digest
            env_dir = f"{envs_root(self.host)}/{plan.digest}"
            python = f"{env_dir}/bin/python"
            version = self._checkout_version(worktree)
            pretend = (
                "SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0+perfbisect " if plan.version_from_git else ""
            )
            pip = "".join(f"{shlex.quote(str(a))} " for a in self.opts.pip_args)
            pip += "".join(f"{shlex.quote(a)} " for a in options.sources.pip_args())
            steps = [
                f"{self._base_python()} -m venv --system-site-packages --without-pip {env_dir}"
                f"   # once per pin set ({plan.label()}), layered on that interpreter's own "
                "environment",
                f"{python} -m pip install {pip}-r {env_dir}/perfbisect-pins.txt"
                f"   # the {len(plan.keyed_by)} requirements, from "
                f"{options.sources.describe()}",
                f"{pretend}{python} -m pip install --no-deps {pip}-e {worktree}/{plan.target}"
                if not options.source_only
                else f"no install: PYTHONPATH={worktree}/python (build = source)",
            ]
            if options.fallback and not options.source_only:
                steps.append("if that install fails: PYTHONPATH=<worktree>/python (source folder)")
            steps += [
                f"install {BOOT.name} + .pth into the environment's site-packages",
            ]
        startup = self._prepare_startup(key, package, make=False)
        commands = self._commands(python, version, values, source_path=source_path, startup=startup)
        described: dict[str, Any] = {
            "host": self.host.address,
            "launch": self._method(config),
            "sglang_version": commands["version"],
            "build": steps,
            "serve": commands["serve"],
            "ready": commands["ready"],
            "measure": commands["measure"],
            "startup": commands["startup"],
        }
        if self.proxy is not None:
            source = self.proxy.model or self.opts.model
            described["proxy"] = {
                "what": self.proxy.describe(),
                "model": f"a copy of {source}/config.json ({self.proxy.describe()}) next to links "
                "to its tokenizer files, never its weights",
                "serve_args": proxy_args(self.proxy, version),
                "confirm": self.proxy.confirm,
            }
        return described
