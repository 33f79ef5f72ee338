"""The experiment file (TOML): what to build, serve and measure, the metric, the axes, the env.

Validation is strict: an unknown key, a wrong type or a missing required key is an
:class:`ExperimentError` naming the file, the key and the line, because a typo in an experiment
file would otherwise silently change what hours of GPU time measure.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfbisect.checks import NUMBER, Checker, Schema
from perfbisect.config import BUILTIN_AXES, DRIVER_AXIS, NCCL_AXIS, PATCHES_AXIS, context_digest
from perfbisect.errors import ExperimentError
from perfbisect.launch.method import Method
from perfbisect.targets.kind import KindCheck
from perfbisect.targets.kinds import KINDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_EXPERIMENT = "perfbisect.toml"
AXIS_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
NCCL_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.post\d+)?$")  # else an [axes.nccl] value is a path
RESERVED_AXES = {*BUILTIN_AXES, "port", "worktree"}  # the built-in axes and placeholders


METRIC_SCHEMA: Schema = {
    "name": ((str,), True),
    "pattern": ((str,), True),
    "higher_is_better": ((bool,), False),
}
CUSTOM_AXIS_SCHEMA: Schema = {"values": ((list,), True), "ordered": ((bool,), False)}
PATCHES_SCHEMA: Schema = {"files": ((list,), True)}
NCCL_SCHEMA: Schema = {"values": ((list,), True), "cuda": ((int,), False)}
DRIVER_SCHEMA: Schema = {
    "values": ((list,), True),
    "hosts": ((dict,), False),
    "switch": ((str,), False),
    "wait_s": (NUMBER, False),
}
HOST_SCHEMA: Schema = {
    "address": ((str,), False),
    "ssh_config": ((str,), False),
    "known_hosts": ((str,), False),
    "accept_new_host_key": ((bool,), False),
    "retry_s": (NUMBER, False),
}
LAUNCH_SCHEMA: Schema = {
    "method": ((str,), False),
    "ssh_address": ((str,), False),
    "python": ((str,), False),
}
LAUNCH_METHODS = tuple(m.value for m in Method)  # defined once, in launch/method.py
TOP_LEVEL = {"target", "metric", "axes", "env", "host", "launch", "executor", "explain"}
EXPLAIN_SCHEMA: Schema = {
    "launches": ((int,), False),
    "cycles": ((int,), False),
    "skip": ((int,), False),
    "after_start": ((bool,), False),
}
EXECUTOR_KINDS = ("local", "hosts", "slurm")
SUBMITIT_MISSING = (
    "\"slurm\" submits through submitit, which is not installed: pip install 'perfbisect[slurm]'"
)
EXECUTOR_SCHEMA: Schema = {
    "kind": ((str,), False),
    "slots": ((int,), False),
    "hosts": ((list,), False),
    # kind = "slurm": one job per launch, on a whole node by default
    "partition": ((str,), False),
    "gpus_per_node": ((int,), False),
    "exclusive": ((bool,), False),
    "cpus_per_task": ((int,), False),
    "time_limit_min": ((int,), False),
    "account": ((str,), False),
    "qos": ((str,), False),
    "sbatch_args": ((dict,), False),  # more sbatch options: {constraint = "h200"}
}
SLURM_KEYS = (
    "partition",
    "gpus_per_node",
    "exclusive",
    "cpus_per_task",
    "time_limit_min",
    "account",
    "qos",
    "sbatch_args",
)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    pattern: str
    higher_is_better: bool = False

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


@dataclass(frozen=True)
class CustomAxisSpec:
    name: str
    values: tuple[str, ...]
    ordered: bool = True


@dataclass(frozen=True)
class PatchSpec:
    """A patch of the ``patches`` axis: keyed by content (``token``), shown by name."""

    name: str
    path: Path
    digest: str

    @property
    def token(self) -> str:
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class DriverSettings:
    """``[axes.driver]``: versions in search order, and how a configuration gets its driver."""

    values: tuple[str, ...]
    hosts: Mapping[str, str] = field(default_factory=dict)  # version -> host address
    switch: str | None = None  # hook run on the host; {driver} is the version
    wait_s: float = 900.0  # how long to wait for the host to come back with it


@dataclass(frozen=True)
class TargetSpec:
    kind: str
    options: Mapping[str, Any]
    repo: Path | None


@dataclass(frozen=True)
class HostSettings:
    """``[host]``: where every stage runs (``local`` or ``ssh://[user@]host[:port]``)."""

    address: str = "local"
    ssh_config: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    retry_s: float = 300.0


@dataclass(frozen=True)
class LaunchSettings:
    """``[launch]``: the default launch method (a ``launch=`` spec value overrides it)."""

    method: str = "direct"
    ssh_address: str = "ssh://localhost"
    python: str = "python3"


@dataclass(frozen=True)
class ExecutorSettings:
    """``[executor]``: how many launches run at once, and where. ``local``: ``slots`` launches
    at once on the experiment's host (1 by default: one at a time). ``hosts``: a pool of ssh
    hosts, one launch per host at a time (``slots`` defaults to the pool's size)."""

    kind: str = "local"
    slots: int = 1
    hosts: tuple[str, ...] = ()
    slurm: Mapping[str, Any] = field(default_factory=dict)  # kind = "slurm": its options


@dataclass(frozen=True)
class ExplainSettings:
    """``[explain]``: the diagnostic launches of ``bisect explain``: ``launches`` a side
    (interleaved), ``cycles`` profiled per launch after ``skip`` verifies, and whether
    ``bisect start`` explains a verified culprit when it ends (``--no-explain`` overrides)."""

    launches: int = 2
    cycles: int = 10
    skip: int = 5
    after_start: bool = True


@dataclass(frozen=True)
class Experiment:
    path: Path
    text: str
    target: TargetSpec
    metric: MetricSpec
    custom_axes: tuple[CustomAxisSpec, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    patches: tuple[PatchSpec, ...] = ()
    nccl: tuple[str, ...] = ()  # [axes.nccl] values: versions (or library paths), in order
    nccl_cuda: int | None = None  # CUDA major of the wheels; None: the host's driver says
    driver: DriverSettings | None = None
    host: HostSettings = field(default_factory=HostSettings)
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    explain: ExplainSettings = field(default_factory=ExplainSettings)

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def timeout_s(self) -> float:
        return float(self.target.options.get("timeout_s", 600))

    def axis_names(self) -> list[str]:
        names = ["commit"] if self.target.repo is not None else []
        extra = (["patches"] if self.patches else []) + (["nccl"] if self.nccl else [])
        extra += ["driver"] if self.driver else []
        return [*names, *extra, *(a.name for a in self.custom_axes), "launch"]

    def custom_axis(self, name: str) -> CustomAxisSpec | None:
        return next((a for a in self.custom_axes if a.name == name), None)

    def context(self) -> str:
        """Digest of everything fixed that changes what a measurement means."""
        return context_digest(
            [
                self.target.kind,
                sorted((k, v) for k, v in self.target.options.items() if k != "timeout_s"),
                [self.metric.name, self.metric.pattern, self.metric.higher_is_better],
                sorted(self.env.items()),
                # Only when set, so that experiments without them keep their fingerprints.
                *([self.host.address] if self.host.address != "local" else []),
                *([self.launch.method] if self.launch.method != "direct" else []),
            ]
        )


def load_experiment(path: Path | str) -> Experiment:
    """Read and validate an experiment file."""
    path = Path(path).expanduser().resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExperimentError(f"{path}: experiment file not found (use -c FILE)") from None
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot read experiment file: {exc.strerror}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: invalid TOML: {exc}") from None
    return parse_experiment(doc, path, text)


def parse_experiment(doc: Mapping[str, Any], path: Path, text: str) -> Experiment:
    check = Checker(path, text)
    for key in doc:
        if key not in TOP_LEVEL:
            raise check.fail((), key, f"unknown table (known: {', '.join(sorted(TOP_LEVEL))})")

    target = check.table(doc, ("target",), required=True)
    kind = target.get("kind")
    if not isinstance(kind, str):
        raise check.fail(("target",), "kind", 'missing required key (e.g. kind = "command")')
    declared = KINDS.get(kind)  # each kind declares its options next to its code
    if declared is None:
        raise check.fail(
            ("target",),
            "kind",
            f"unknown target kind {kind!r} (known: {', '.join(sorted(KINDS))})",
        )
    check.check(target, ("target",), declared.schema)
    if "timeout_s" in target and float(target["timeout_s"]) <= 0:
        raise check.fail(("target",), "timeout_s", "must be positive")
    repo: Path | None = None
    if "repo" in target:
        repo = (path.parent / str(target["repo"])).resolve()
        if not repo.is_dir():
            raise check.fail(("target",), "repo", f"directory {repo} does not exist")

    default_metric = declared.default_metric  # kinds that report their own metric
    metric_table = check.table(doc, ("metric",), required=default_metric is None)
    if default_metric and not metric_table:
        metric_table = {"name": default_metric[0], "pattern": default_metric[1]}
    check.check(metric_table, ("metric",), METRIC_SCHEMA)
    try:
        compiled = re.compile(metric_table["pattern"])
    except re.error as exc:
        raise check.fail(("metric",), "pattern", f"invalid regular expression: {exc}") from None
    if compiled.groups < 1:
        raise check.fail(("metric",), "pattern", "needs one capture group around the number")
    metric = MetricSpec(
        name=metric_table["name"],
        pattern=metric_table["pattern"],
        higher_is_better=bool(metric_table.get("higher_is_better", False)),
    )

    axes_table = check.table(doc, ("axes",), required=False)
    custom = _parse_custom_axes(check, axes_table)
    patches = _parse_patches(check, axes_table, path)
    nccl, nccl_cuda = _parse_nccl(check, axes_table, path)
    driver = _parse_driver(check, axes_table)
    if patches and repo is None:
        raise check.fail(("axes",), "patches", "needs [target] repo (patches apply to a checkout)")
    kind_checks = declared.check
    if kind_checks is not None:
        kind_checks(KindCheck(check, target, repo, {a.name: a.values for a in custom}, path))

    env_table = check.table(doc, ("env",), required=False)
    env: dict[str, str] = {}
    for key, value in env_table.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise check.fail(("env",), key, "is not a valid environment variable name")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise check.fail(
                ("env",), key, f"must be a string or number, not {type(value).__name__}"
            )
        env[key] = str(value)

    return Experiment(
        path=path,
        text=text,
        target=TargetSpec(kind=kind, options=dict(target), repo=repo),
        metric=metric,
        custom_axes=custom,
        env=env,
        patches=patches,
        nccl=nccl,
        nccl_cuda=nccl_cuda,
        driver=driver,
        host=_parse_host(check, doc, path),
        launch=_parse_launch(check, doc),
        executor=_parse_executor(check, doc),
        explain=_parse_explain(check, doc),
    )


def _parse_explain(check: Checker, doc: Mapping[str, Any]) -> ExplainSettings:
    table = check.table(doc, ("explain",), required=False)
    check.check(table, ("explain",), EXPLAIN_SCHEMA)
    for key, low in (("launches", 1), ("cycles", 1), ("skip", 0)):
        if key in table and int(table[key]) < low:
            raise check.fail(("explain",), key, f"must be at least {low}")
    return ExplainSettings(
        launches=int(table.get("launches", 2)),
        cycles=int(table.get("cycles", 10)),
        skip=int(table.get("skip", 5)),
        after_start=bool(table.get("after_start", True)),
    )


def _parse_host(check: Checker, doc: Mapping[str, Any], path: Path) -> HostSettings:
    table = check.table(doc, ("host",), required=False)
    check.check(table, ("host",), HOST_SCHEMA)
    address = str(table.get("address", "local"))
    if address != "local" and not (address.startswith("ssh://") or "@" in address):
        raise check.fail(("host",), "address", "must be 'local' or ssh://[user@]host[:port]")

    def relative(key: str) -> str | None:
        value = table.get(key)
        return str((path.parent / str(value)).expanduser()) if value else None

    if "retry_s" in table and float(table["retry_s"]) < 0:
        raise check.fail(("host",), "retry_s", "must not be negative")
    return HostSettings(
        address=address,
        ssh_config=relative("ssh_config"),
        known_hosts=relative("known_hosts"),
        accept_new_host_key=bool(table.get("accept_new_host_key", False)),
        retry_s=float(table.get("retry_s", 300.0)),
    )


def _parse_executor(check: Checker, doc: Mapping[str, Any]) -> ExecutorSettings:
    table = check.table(doc, ("executor",), required=False)
    check.check(table, ("executor",), EXECUTOR_SCHEMA)
    kind = str(table.get("kind", "local"))
    if kind not in EXECUTOR_KINDS:
        raise check.fail(("executor",), "kind", f"must be one of {', '.join(EXECUTOR_KINDS)}")
    if kind == "slurm" and importlib.util.find_spec("submitit") is None:
        raise check.fail(("executor",), "kind", SUBMITIT_MISSING)
    slurm = {k: table[k] for k in SLURM_KEYS if k in table}
    if slurm and kind != "slurm":
        raise check.fail(("executor",), next(iter(slurm)), 'is for kind = "slurm"')
    if int(table.get("time_limit_min", 60)) < 1:
        raise check.fail(("executor",), "time_limit_min", "must be at least 1")
    hosts = tuple(str(h) for h in table.get("hosts", []))
    for h in hosts:
        if not h.startswith("ssh://"):
            raise check.fail(("executor",), "hosts", f"{h!r} is not ssh://[user@]host[:port]")
    if kind == "hosts" and not hosts:
        raise check.fail(("executor",), "hosts", 'kind = "hosts" needs a list of ssh:// hosts')
    if kind == "local" and hosts:
        raise check.fail(("executor",), "hosts", 'hosts are for kind = "hosts"')
    if len(set(hosts)) != len(hosts):
        raise check.fail(("executor",), "hosts", "lists a host twice")
    slots = int(table.get("slots", len(hosts) or 1))
    if slots < 1:
        raise check.fail(("executor",), "slots", "must be at least 1")
    return ExecutorSettings(kind, slots, hosts, slurm)


def _parse_launch(check: Checker, doc: Mapping[str, Any]) -> LaunchSettings:
    table = check.table(doc, ("launch",), required=False)
    check.check(table, ("launch",), LAUNCH_SCHEMA)
    method = str(table.get("method", "direct"))
    if method not in LAUNCH_METHODS:
        raise check.fail(
            ("launch",),
            "method",
            f"unknown launch method {method!r} (known: {', '.join(LAUNCH_METHODS)})",
        )
    return LaunchSettings(
        method=method,
        ssh_address=str(table.get("ssh_address", "ssh://localhost")),
        python=str(table.get("python", "python3")),
    )


def _parse_custom_axes(check: Checker, axes: Mapping[str, Any]) -> tuple[CustomAxisSpec, ...]:
    for key in axes:
        if key not in ("custom", PATCHES_AXIS, NCCL_AXIS, DRIVER_AXIS):
            raise check.fail(
                ("axes",), key, "unknown axis kind here (known: custom, patches, nccl, driver)"
            )
    custom_table = check.table(axes, ("axes", "custom"), required=False)
    result = []
    for name, spec in custom_table.items():
        table = ("axes", "custom", name)
        if not isinstance(spec, dict):
            raise check.fail(("axes", "custom"), name, "must be a table with 'values'")
        if not AXIS_NAME.match(name) or name in RESERVED_AXES:
            raise check.fail(
                table,
                None,
                f"axis name {name!r} must be lower_snake_case and not "
                f"one of {', '.join(sorted(RESERVED_AXES))}",
            )
        check.check(spec, table, CUSTOM_AXIS_SCHEMA)
        values = spec["values"]
        if not values or not all(isinstance(v, (str, int, float)) for v in values):
            raise check.fail(table, "values", "must be a non-empty list of strings or numbers")
        as_text = tuple(str(v) for v in values)
        if len(set(as_text)) != len(as_text):
            raise check.fail(table, "values", "lists a value twice")
        bad = [v for v in as_text if "," in v or "=" in v]
        if bad:
            raise check.fail(table, "values", f"value {bad[0]!r} contains ',' or '='")
        result.append(CustomAxisSpec(name, as_text, bool(spec.get("ordered", True))))
    return tuple(result)


_DIFF_PATHS = re.compile(
    r"^(?:diff --git (\S+) (\S+)|--- (\S+)|\+\+\+ (\S+)|(?:rename|copy) (?:from|to) (.+))$"
)


def unsafe_paths(diff: str) -> list[str]:
    """Paths in a unified diff that would escape the worktree (absolute or with ``..``)."""
    bad = []
    for line in diff.splitlines():
        match = _DIFF_PATHS.match(line)
        if not match:
            continue
        for raw in (g for g in match.groups() if g):
            path = raw.strip().strip('"')
            if path == "/dev/null":
                continue
            if path[:2] in ("a/", "b/") and not line.startswith(("rename", "copy")):
                path = path[2:]
            if path.startswith("/") or ".." in path.split("/"):
                bad.append(path)
    return bad


def _parse_patches(check: Checker, axes: Mapping[str, Any], path: Path) -> tuple[PatchSpec, ...]:
    import hashlib

    table = check.table(axes, ("axes", "patches"), required=False)
    if not table:
        return ()
    where = ("axes", "patches")
    check.check(table, where, PATCHES_SCHEMA)
    files = table["files"]
    if not files or not all(isinstance(f, str) for f in files):
        raise check.fail(where, "files", "must be a non-empty list of patch file paths")
    result = []
    for name in files:
        file = (path.parent / name).resolve()
        if not file.is_file():
            raise check.fail(where, "files", f"patch file {name!r} does not exist ({file})")
        data = file.read_bytes()
        escaping = unsafe_paths(data.decode(errors="replace"))
        if escaping:
            raise check.fail(
                where, "files", f"patch {name!r} touches {escaping[0]!r} outside the worktree"
            )
        short = Path(name).name  # specs name patches by file name: `patches=a.patch+b.patch`
        if any(c in short for c in "+@,="):
            raise check.fail(where, "files", f"patch name {short!r} contains one of + @ , =")
        result.append(PatchSpec(short, file, hashlib.sha256(data).hexdigest()[:8]))
    if len({p.name for p in result}) != len(result):
        raise check.fail(where, "files", "lists two patches with the same file name")
    return tuple(result)


def _parse_nccl(
    check: Checker, axes: Mapping[str, Any], path: Path
) -> tuple[tuple[str, ...], int | None]:
    table = check.table(axes, ("axes", "nccl"), required=False)
    if not table:
        return (), None
    where = ("axes", "nccl")
    check.check(table, where, NCCL_SCHEMA)
    values = table["values"]
    if len(values) < 2 or not all(isinstance(v, str) and v for v in values):
        raise check.fail(where, "values", "must list at least two versions (or library paths)")
    resolved = []
    for value in values:
        if NCCL_VERSION.match(value):
            resolved.append(value)
            continue
        file = (path.parent / value).expanduser().resolve()
        if not file.is_file():
            raise check.fail(
                where, "values", f"{value!r} is neither a version like 2.27.7 nor a library file"
            )
        resolved.append(str(file))
    if len(set(resolved)) != len(resolved):
        raise check.fail(where, "values", "lists a version twice")
    cuda = table.get("cuda")
    if cuda is not None and cuda not in (12, 13):
        raise check.fail(where, "cuda", "must be 12 or 13 (the nvidia-nccl-cu12/cu13 wheels)")
    return tuple(resolved), cuda


def _parse_driver(check: Checker, axes: Mapping[str, Any]) -> DriverSettings | None:
    table = check.table(axes, ("axes", "driver"), required=False)
    if not table:
        return None
    where = ("axes", "driver")
    check.check(table, where, DRIVER_SCHEMA)
    values = table["values"]
    if len(values) < 2 or not all(isinstance(v, str) and v for v in values):
        raise check.fail(where, "values", "must list at least two driver versions")
    hosts = table.get("hosts", {})
    for version, address in hosts.items():
        if version not in values:
            raise check.fail(where, "hosts", f"version {version!r} is not in values")
        if not isinstance(address, str) or not address.startswith(("ssh://", "local")):
            raise check.fail(where, "hosts", f"{version}: expected 'local' or ssh://...")
    switch = table.get("switch")
    if not hosts and not switch:
        raise check.fail(where, None, 'needs [axes.driver.hosts] or switch = "...{driver}..."')
    return DriverSettings(tuple(values), dict(hosts), switch, float(table.get("wait_s", 900.0)))
