"""The ``sglang`` target kind's declaration: an SGLang checkout (the commit axis) served with
EAGLE-3 speculative decoding; its options and their checks (the implementation is target.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfbisect.checks import Checker, Schema
from perfbisect.targets.kind import KindCheck, TargetKind, schema_of

CONFIRM_CHOICES = ("full", "none")  # confirm the proxy search's culprit on the full model, or not
PROXY_SCHEMA: Schema = {
    "layers": ((int,), True),
    "override": ((dict,), False),
    "model": ((str,), False),
    "extra_args": ((list,), False),
}


@dataclass(frozen=True)
class SglangOptions:
    """The ``[target]`` table of ``kind = "sglang"``, typed, with its defaults."""

    model: str  # the served model: a hub id or a folder
    draft_model: str  # the EAGLE-3 draft
    repo: str | None = None  # the SGLang checkout; required unless build = "installed"
    # "editable" (the commit's checkout installed, falling back to its source folder when its
    # compiled parts cannot build), "source" (the source folder, never built), or "installed"
    build: str = "editable"
    source_fallback: bool = True  # false: a failed editable install is a SKIP
    pins: tuple[Any, ...] = ()  # package names that alone key a commit's environment
    wheelhouse: str | None = None  # a folder of wheels on the host: environments built offline
    index_url: str | None = None  # the package index (with wheelhouse: both are used)
    max_envs: int = 4  # pin-set environments kept per host (least recently used evicted)
    ready: str = "health"  # "health" (/health_generate) or "log" (the ready line)
    axis_args: dict[str, Any] = field(default_factory=dict)  # {axis: {value: [server args]}}
    prompts: str | None = None  # one prompt per line (default: a built-in set)
    tp: int = 1  # --tp-size
    speculative_num_steps: int = 3  # EAGLE-3 draft steps per cycle
    speculative_eagle_topk: int = 1  # branches kept per draft step
    speculative_num_draft_tokens: int = 4  # tokens the target verifies per cycle
    extra_args: tuple[Any, ...] = ()  # more launch_server args, for every launch
    python: str | None = None  # the interpreter the environments are layered on
    pip_args: tuple[Any, ...] = ()  # more `pip install` args for the environments
    requests: int = 32  # measured workload requests per launch
    concurrency: int = 4  # requests in flight at once
    max_new_tokens: int = 256  # tokens generated per request
    warmup_requests: int = 2  # requests sent before the measured ones
    # Proxy launches (targets/sglang/proxy.py): {layers = N, override?, model?, extra_args?}
    proxy: dict[str, Any] | None = None
    confirm: str | None = None  # "full" (default with a proxy) or "none"
    # Launch the endpoints without speculative decoding too: speculation's speed-up.
    baseline: bool = False
    baseline_rounds: int = 2  # with/without pairs per endpoint
    timeout_s: float = 1800.0  # seconds per stage: build (pip), readiness, measure
    # Start-up (targets/sglang/startup_args.py, caches.py): on by default, false turns it off.
    compile_cache: bool = True  # kernel caches (Triton, Inductor, JIT) kept per pin set
    fit_cuda_graphs: bool = True  # --cuda-graph-bs 1..concurrency unless extra_args size graphs
    skip_server_warmup: bool = True  # --skip-server-warmup when warmup_requests > 0


SCHEMA: Schema = schema_of(SglangOptions)


SGLANG_BUILDS = ("editable", "source", "installed")
SGLANG_READY = ("health", "log")


def check_sglang(ctx: KindCheck) -> None:
    check, target, repo, path = ctx.checker, ctx.target, ctx.repo, ctx.path
    build = target.get("build", "editable")
    if build not in SGLANG_BUILDS:
        raise check.fail(("target",), "build", f"must be one of {', '.join(SGLANG_BUILDS)}")
    if build != "installed" and repo is None:
        raise check.fail(
            ("target",), "repo", 'missing: the SGLang checkout (or build = "installed")'
        )
    if not all(isinstance(p, str) and p for p in target.get("pins", [])):
        raise check.fail(("target",), "pins", "must be a list of package names")
    if target.get("max_envs", 1) < 1:
        raise check.fail(("target",), "max_envs", "must be at least 1")
    if target.get("ready", "health") not in SGLANG_READY:
        raise check.fail(("target",), "ready", f"must be one of {', '.join(SGLANG_READY)}")
    if "prompts" in target and not (path.parent / str(target["prompts"])).is_file():
        raise check.fail(("target",), "prompts", f"file {target['prompts']} does not exist")
    _check_proxy(check, target)
    axes = ctx.axis_values
    for axis, table in dict(target.get("axis_args", {})).items():
        if axis not in axes:
            raise check.fail(
                ("target", "axis_args"), axis, "is not a custom axis of this experiment"
            )
        if not isinstance(table, dict):
            raise check.fail(("target", "axis_args"), axis, "must map axis values to arg lists")
        for value, args in table.items():
            if value not in axes[axis]:
                raise check.fail(
                    ("target", "axis_args", axis),
                    value,
                    f"is not a value of axis {axis!r} (listed: {', '.join(axes[axis])})",
                )
            if not isinstance(args, list) or not all(isinstance(a, (str, int)) for a in args):
                raise check.fail(("target", "axis_args", axis), value, "must be a list of args")


def _check_proxy(check: Checker, target: Mapping[str, Any]) -> None:
    if "confirm" in target:
        if "proxy" not in target:
            raise check.fail(("target",), "confirm", "needs a proxy = { layers = N } to confirm")
        if target["confirm"] not in CONFIRM_CHOICES:
            raise check.fail(("target",), "confirm", f"must be one of {', '.join(CONFIRM_CHOICES)}")
    if "proxy" not in target:
        return
    proxy = target["proxy"]
    check.check(proxy, ("target", "proxy"), PROXY_SCHEMA)
    if proxy["layers"] < 1:
        raise check.fail(("target", "proxy"), "layers", "must be at least 1")
    if not all(isinstance(a, (str, int)) for a in proxy.get("extra_args", [])):
        raise check.fail(("target", "proxy"), "extra_args", "must be a list of args")
    model = str(proxy.get("model") or target["model"])
    if not model.startswith(("/", "./", "../", "~")):
        raise check.fail(
            ("target", "proxy"),
            "model",
            f"a proxy launch needs the model's config.json and tokenizer in a directory; "
            f"{model!r} is a hub id: download those files and set proxy.model to their folder",
        )


SGLANG = TargetKind(
    name="sglang",
    schema=SCHEMA,
    factory="perfbisect.targets.sglang.target:SglangTarget",
    default_metric=("verify_ms", r"verify_ms=([0-9.]+)"),
    check=check_sglang,
)
