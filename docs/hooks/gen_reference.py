"""The experiment-file reference (docs/reference.md), generated from the code so that it cannot
drift: each target kind's options come from its options dataclass (names, types, defaults, and
the comment written next to each field), the other tables from the schemas the experiment loader
checks against (perfbisect/experiment.py), with their descriptions here.

A table or key the loader accepts but this page does not describe fails the generation, and so
the docs build and tests/test_docs.py. docs/reference.md is committed (readable without a build);
the MkDocs hook below refuses to build when it differs from what the code gives now.

    python docs/hooks/gen_reference.py --write     # regenerate docs/reference.md
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference.md"
if str(ROOT) not in sys.path:  # the checkout's perfbisect, also when mkdocs runs elsewhere
    sys.path.insert(0, str(ROOT))

from perfbisect import experiment as exp  # noqa: E402
from perfbisect.checks import Schema  # noqa: E402
from perfbisect.targets.kinds import KINDS  # noqa: E402

REGENERATE = "python docs/hooks/gen_reference.py --write"

# The options dataclass of each kind. Every kind in targets/kinds.py must be here: a kind
# without an entry fails the generation.
KIND_OPTIONS: dict[str, tuple[str, str]] = {
    "command": ("perfbisect.targets.command_kind", "CommandOptions"),
    "reference": ("perfbisect.targets.reference.kind", "ReferenceOptions"),
    "sglang": ("perfbisect.targets.sglang.kind", "SglangOptions"),
}

# The tables other than [target]: (heading, schema, the settings dataclass whose defaults apply,
# an introduction, {key: (default shown when the dataclass has none, description)}).
Table = tuple[str, Schema, type | None, str, dict[str, tuple[str | None, str]]]
TABLES: list[Table] = [
    (
        "[metric]",
        exp.METRIC_SCHEMA,
        exp.MetricSpec,
        "What a sample is. Optional for the `reference` and `sglang` kinds, which report "
        "`verify_ms` themselves.",
        {
            "name": (None, "the metric's name, shown in reports (`verify_ms`)"),
            "pattern": (
                None,
                "a regular expression with one capture group around the number; every match "
                "in the output of `measure` is one sample",
            ),
            "higher_is_better": (None, "`true` for throughput-like metrics"),
        },
    ),
    (
        "[axes.custom.NAME]",
        exp.CUSTOM_AXIS_SCHEMA,
        exp.CustomAxisSpec,
        "Any number of user axes. The value is exposed as the placeholder `{NAME}` and the "
        "variable `PERFBISECT_NAME`. Names are lower_snake_case and none of: "
        + ", ".join(f"`{n}`" for n in sorted(exp.RESERVED_AXES))
        + ".",
        {
            "values": (None, "the axis's values (strings or numbers; no `,` or `=`)"),
            "ordered": (
                None,
                "binary search over the values in this order; `false`: one step, categorical",
            ),
        },
    ),
    (
        "[axes.patches]",
        exp.PATCHES_SCHEMA,
        None,
        "A stack of patches applied with `git apply --index` in this order; a configuration "
        "names a subset (`patches=a.patch+b.patch`, `patches=none`). Needs `[target] repo`.",
        {
            "files": (
                None,
                "patch files, relative to the experiment file; keyed by content (editing one "
                "makes new configurations)",
            )
        },
    ),
    (
        "[axes.nccl]",
        exp.NCCL_SCHEMA,
        None,
        "NCCL libraries, in search order; each launch is checked to map the chosen one.",
        {
            "values": (
                None,
                "at least two NCCL versions (`2.28.3`, materialised from the "
                "`nvidia-nccl-cu<N>` wheel) or library file paths",
            ),
            "cuda": ("the host driver's CUDA", "12 or 13: which `nvidia-nccl-cu<N>` wheels"),
        },
    ),
    (
        "[axes.driver]",
        exp.DRIVER_SCHEMA,
        exp.DriverSettings,
        "GPU driver versions, in search order. Needs `hosts` or `switch`; NVML on the host must "
        "report the configuration's driver before anything is measured.",
        {
            "values": (None, "at least two driver versions"),
            "hosts": (None, "version -> host address (`ssh://...` or `local`) that has it"),
            "switch": (None, "a hook run on the host to install `{driver}` (then reboot)"),
            "wait_s": (None, "how long to wait for the host to come back with the driver"),
        },
    ),
    (
        "[explain]",
        exp.EXPLAIN_SCHEMA,
        exp.ExplainSettings,
        "The diagnostic launches of `bisect explain` (the culprit pair launched again, "
        "interleaved, with the profiler and NCCL's INFO log on); they never count toward a "
        "verdict.",
        {
            "launches": (None, "launches a side, interleaved good, bad, good, bad"),
            "cycles": (None, "verify cycles profiled per launch (PyTorch's profiler)"),
            "skip": (None, "verify cycles let pass before profiling (warm-up)"),
            "after_start": (
                None,
                "`bisect start` explains a verified culprit when it ends (`--no-explain` "
                "overrides)",
            ),
        },
    ),
    (
        "[env]",
        {},
        None,
        "Tuning environment delivered to `serve` and `measure` by the launch method: "
        "`NAME = value` (strings or numbers). Values of variables named like `*TOKEN*`, "
        "`*KEY*`, `*SECRET*`, `*PASSWORD*` are redacted wherever they are shown or stored.",
        {},
    ),
    (
        "[host]",
        exp.HOST_SCHEMA,
        exp.HostSettings,
        "Where every stage runs. See [Hosts and launch methods](hosts.md).",
        {
            "address": (None, "`local` or `ssh://[user@]host[:port]`"),
            "ssh_config": (None, "an ssh config file instead of `~/.ssh/config`"),
            "known_hosts": (None, "an extra known_hosts file"),
            "accept_new_host_key": (None, "trust and save an unknown host key"),
            "retry_s": (None, "how long a host that stops answering (reboot) is retried"),
        },
    ),
    (
        "[launch]",
        exp.LAUNCH_SCHEMA,
        exp.LaunchSettings,
        "How the server is started; a `launch=` value in a configuration overrides `method`.",
        {
            "method": (None, " | ".join(f"`{m}`" for m in exp.LAUNCH_METHODS)),
            "ssh_address": (None, "where the `ssh` method goes from the local host"),
            "python": (None, "the Python that the `sitecustomize` check asks"),
        },
    ),
    (
        "[executor]",
        exp.EXECUTOR_SCHEMA,
        exp.ExecutorSettings,
        "How many launches run at once, and where. See [Cluster and team history](cluster.md).",
        {
            "kind": (None, " | ".join(f"`{k}`" for k in exp.EXECUTOR_KINDS)),
            "slots": (
                None,
                "launches at once (k-ary search); `hosts`: the pool's size by default; "
                "also `--slots`",
            ),
            "hosts": (None, 'the pool, `ssh://` addresses (`kind = "hosts"`)'),
            "partition": ("", 'Slurm partition (`kind = "slurm"`)'),
            "gpus_per_node": ("", "GPUs per job (Slurm)"),
            "exclusive": ("true", "a whole node per launch (Slurm)"),
            "cpus_per_task": ("", "CPUs per job (Slurm)"),
            "time_limit_min": ("60", "minutes per launch; perfbisect stops waiting 5 later"),
            "account": ("", "Slurm account"),
            "qos": ("", "Slurm QOS"),
            "sbatch_args": ("", 'more sbatch options: `{ constraint = "nvlink" }`'),
        },
    ),
]


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint) if a is not type(None))
    base = origin or hint
    if base in (tuple, list):
        return "list"
    if base in (dict, Mapping) or (isinstance(base, type) and issubclass(base, Mapping)):
        return "table"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}[base]


def _schema_type(accepted: tuple[type, ...]) -> str:
    if set(accepted) == {int, float}:
        return "number"
    return " or ".join(_type_name(t) for t in accepted)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _default(f: dataclasses.Field[Any]) -> str | None:
    """The field's default as TOML, or None when it has none (a required key)."""
    if f.default is not dataclasses.MISSING:
        return "" if f.default is None else _toml(f.default)  # "": unset
    if f.default_factory is not dataclasses.MISSING:
        return _toml(f.default_factory())
    return None


def field_comments(cls: type) -> dict[str, str]:
    """The comment written with each field of a dataclass: on its line, else the comment
    lines right above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if node.lineno in comments:
            found[node.target.id] = comments[node.lineno]
            continue
        above: list[str] = []
        previous = node.lineno - 1
        while previous in comments and lines[previous - 1].lstrip().startswith("#"):
            above.insert(0, comments[previous])
            previous -= 1
        if above:
            found[node.target.id] = " ".join(above)
    return found


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _shown(default: str | None, required: bool) -> str:
    if required:
        return "required"
    if not default:
        return "unset"
    literal = default[0] in '0123456789"[{' or default in ("true", "false")
    return f"`{default}`" if literal else default


def _row(key: str, kind: str, required: bool, default: str | None, text: str) -> str:
    shown = _shown(default, required)
    return f"| `{key}` | {kind} | {shown} | {_escape(text)} |"


HEADER = ["| key | type | default | description |", "|---|---|---|---|"]


def _command_defaults() -> dict[str, str]:
    """What an unset ``timeout_s`` means: the loader's own default, read from the code."""
    spec = exp.TargetSpec("command", {}, None)
    probe = exp.Experiment(Path("x"), "", spec, exp.MetricSpec("m", "(x)"))
    return {"timeout_s": _toml(probe.timeout_s)}


def _reference_defaults() -> dict[str, str]:
    """The server's own defaults of the flags an unset option leaves out, from its parser."""
    from perfbisect.remote.reference_server import parse
    from perfbisect.targets.reference.target import SERVER_FLAGS

    served = vars(parse(["serve", "--port", "0"]))
    return {key: _toml(served[key]) for key in SERVER_FLAGS}


# Options whose dataclass default is None (unset) but that mean a value: what it is.
EFFECTIVE_DEFAULTS = {"command": _command_defaults, "reference": _reference_defaults}


def kind_section(name: str) -> Iterator[str]:
    module_name, class_name = KIND_OPTIONS[name]
    module = sys.modules.get(module_name) or __import__(module_name, fromlist=[class_name])
    options = getattr(module, class_name)
    declared = KINDS[name].schema
    fields = {f.name: f for f in dataclasses.fields(options)}
    if set(fields) | {"kind"} != set(declared):
        raise RuntimeError(
            f"{class_name} and the schema of kind {name!r} differ: "
            f"{sorted(set(fields) ^ (set(declared) - {'kind'}))}"
        )
    hints = typing.get_type_hints(options)
    comments = field_comments(options)
    missing = [n for n in fields if n not in comments]
    if missing:
        raise RuntimeError(
            f"{module_name}.{class_name}: option(s) {', '.join(missing)} have no description: "
            "write a comment after the field (it becomes the reference's description)"
        )
    intro = inspect.cleandoc(options.__doc__ or "")
    yield f'### `kind = "{name}"`'
    yield ""
    yield " ".join(intro.split())
    if KINDS[name].default_metric:
        metric, pattern = KINDS[name].default_metric or ("", "")
        yield (
            f"Without `[metric]` the metric is `{metric}` (pattern `{pattern}`): the kind "
            "reports it itself."
        )
    yield ""
    yield from HEADER
    yield _row("kind", "string", True, None, f'`"{name}"`')
    effective = EFFECTIVE_DEFAULTS[name]() if name in EFFECTIVE_DEFAULTS else {}
    for key, f in fields.items():
        default = _default(f)
        if f.default is None and key in effective:
            default = effective[key]
        yield _row(key, _type_name(hints[key]), default is None, default, comments[key])
    yield ""


def table_section(table: Table) -> Iterator[str]:
    heading, schema, settings, intro, described = table
    if set(schema) != set(described):
        raise RuntimeError(
            f"{heading}: the loader's keys and this page's differ: "
            f"{sorted(set(schema) ^ set(described))} (describe them in docs/hooks/gen_reference.py)"
        )
    defaults = {f.name: f for f in dataclasses.fields(settings)} if settings else {}
    yield f"### `{heading}`"
    yield ""
    yield intro
    yield ""
    if not schema:
        return
    yield from HEADER
    for key, (accepted, required) in schema.items():
        shown, text = described[key]
        default = _default(defaults[key]) if key in defaults else shown
        yield _row(key, _schema_type(accepted), required, default, text)
    yield ""


def render() -> str:
    unknown_kinds = set(KINDS) - set(KIND_OPTIONS)
    if unknown_kinds:
        raise RuntimeError(
            f"target kind(s) {sorted(unknown_kinds)} are not in docs/hooks/gen_reference.py"
        )
    covered = {"target", "axes"} | {t[0].strip("[]").split(".")[0] for t in TABLES}
    uncovered = set(exp.TOP_LEVEL) - covered
    if uncovered:
        raise RuntimeError(
            f"experiment table(s) {sorted(uncovered)} are not in docs/hooks/gen_reference.py"
        )
    lines = [
        "# Experiment file reference",
        "",
        f"<!-- Generated from the code by docs/hooks/gen_reference.py: do not edit. "
        f"Regenerate: {REGENERATE} -->",
        "",
        "An experiment file (`perfbisect.toml`, or `-c FILE`) is TOML with the tables below. "
        "An unknown table or key, a wrong type or a missing required key is an error naming "
        "the file, the key and its line (exit 2). Relative paths are relative to the "
        "experiment file. This page is generated from the options each target kind declares "
        "and the schemas the loader checks, so it lists exactly what perfbisect accepts. "
        "The [user guide](user-guide.md) shows them in use.",
        "",
        "## `[target]`",
        "",
        "Required. `kind` picks what is built, served and measured; the other keys depend on "
        "it. `timeout_s` bounds each stage of a launch (build, readiness, measure) separately: "
        "a stage that runs past it ends the launch as a failure with the stage named.",
        "",
    ]
    for name in KINDS:
        lines += kind_section(name)
    lines += [
        '#### `proxy` (`kind = "sglang"`)',
        "",
        "An inline table: search on cut-down launches of the same model, then confirm on the "
        "full model ([SGLang and GPUs](sglang.md)).",
        "",
        *HEADER,
    ]
    from perfbisect.targets.sglang.kind import PROXY_SCHEMA

    proxy_text = {
        "layers": "layers of the proxy model (at least 1)",
        "override": "more `config.json` keys to change: `{ n_routed_experts = 16 }`",
        "model": "a folder with the model's `config.json` and tokenizer (default: `model`)",
        "extra_args": "more launch_server args for proxy launches",
    }
    if set(PROXY_SCHEMA) != set(proxy_text):
        raise RuntimeError(f"the proxy table's keys changed: {sorted(PROXY_SCHEMA)}")
    for key, (accepted, required) in PROXY_SCHEMA.items():
        lines.append(_row(key, _schema_type(accepted), required, None, proxy_text[key]))
    lines += ["", "## The other tables", ""]
    for table in TABLES:
        lines += table_section(table)
    return "\n".join(lines).rstrip("\n") + "\n"


def stale() -> str | None:
    """Why the committed page is out of date, or None when it matches the code."""
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if current == render():
        return None
    return f"{PAGE.relative_to(ROOT)} differs from the code's options: run `{REGENERATE}`"


def on_pre_build(config: Any) -> None:
    """MkDocs hook: refuse to build from a reference page that no longer matches the code."""
    from mkdocs.exceptions import PluginError

    why = stale()
    if why:
        raise PluginError(why)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        PAGE.write_text(render(), encoding="utf-8")
        print(f"wrote {PAGE.relative_to(ROOT)}")
    else:
        sys.stdout.write(render())
