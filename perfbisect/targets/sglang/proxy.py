"""Proxy launches: the same SGLang code, the model's own architecture, random weights, fewer layers.

``[target] proxy = { layers = 4 }`` serves a copy of the model's ``config.json`` with
``num_hidden_layers`` (and any ``override`` keys) changed, next to the model's tokenizer files,
with ``--load-format dummy``: SGLang initialises random weights of that shape, so a launch skips
the weight download and load, and the forward is the model's own kernels at a fraction of the
depth. The EAGLE-3 draft keeps its own config and gets random weights too
(``--speculative-draft-load-format dummy``, SGLang 0.5.5 and later; earlier versions give the
draft the target's load format).

Why a config copy and not ``--json-model-override-args``: SGLang applies that override to the
draft's config as well (``ModelConfig.from_server_args`` passes it for both), and the EAGLE-3
Llama draft refuses ``num_hidden_layers != 1`` (up to 0.5.1x) or builds that many draft layers
(0.5.23): either way not the draft being measured. The compatibility tests check these facts in
the released wheels.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host

FIRST_DRAFT_LOAD_FORMAT = Version("0.5.5")
# Files of a model directory that hold weights: never needed by a proxy launch.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
_WEIGHT_INDEXES = (".safetensors.index.json", ".bin.index.json")
# Where a config keeps its layer count (multimodal models nest the language model's).
_LAYER_KEYS = ("num_hidden_layers",)
_NESTED = ("text_config", "language_config", "llm_config")


@dataclass(frozen=True)
class ProxySpec:
    layers: int
    override: Mapping[str, Any] = field(default_factory=dict)  # more config.json keys
    model: str | None = None  # a directory with config.json + tokenizer (default: model)
    extra_args: tuple[str, ...] = ()
    confirm: str = "full"

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> ProxySpec | None:
        table = options.get("proxy")
        if not table:
            return None
        return cls(
            layers=int(table["layers"]),
            override=dict(table.get("override", {})),
            model=str(table["model"]) if table.get("model") else None,
            extra_args=tuple(str(a) for a in table.get("extra_args", [])),
            confirm=str(options.get("confirm", "full")),
        )

    def describe(self) -> str:
        more = "".join(f", {k}={v}" for k, v in sorted(self.override.items()))
        return f"{self.layers} layers{more}, random weights (--load-format dummy)"


def proxy_config(config: Mapping[str, Any], spec: ProxySpec) -> dict[str, Any]:
    """The model's config with the proxy's layer count and overrides."""
    out: dict[str, Any] = json.loads(json.dumps(config))  # a deep copy of plain JSON
    holders = [out, *(out[k] for k in _NESTED if isinstance(out.get(k), dict))]
    found = False
    for holder in holders:
        for key in _LAYER_KEYS:
            if key in holder:
                holder[key] = spec.layers
                found = True
    if not found:
        out["num_hidden_layers"] = spec.layers
    for key, value in spec.override.items():
        target = next((h for h in reversed(holders) if key in h), out)
        target[key] = value
    return out


def is_weight_file(name: str) -> bool:
    return name.endswith(_WEIGHT_SUFFIXES) or name.endswith(_WEIGHT_INDEXES)


def prepare_model(host: Host, source: str, spec: ProxySpec, root: str) -> str:
    """A directory on ``host`` with the proxy config and links to ``source``'s other files
    (tokenizer, generation config), never its weights; made once per config and spec."""
    text = host.read_text(f"{source}/config.json")
    if text is None:
        raise StepFailed("build", f"proxy: {source}/config.json does not exist on {host.address}")
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise StepFailed("build", f"proxy: {source}/config.json is not JSON: {exc}") from None
    rewritten = json.dumps(proxy_config(config, spec), indent=2, sort_keys=True)
    digest = hashlib.sha256(f"{source}\n{rewritten}".encode()).hexdigest()[:12]
    folder = f"{root}/{digest}"
    if host.read_text(f"{folder}/config.json") == rewritten:
        return folder  # made by an earlier launch (config.json is written last)
    listing = host.run(["ls", "-1", source], timeout_s=60)
    if not listing.ok:
        raise StepFailed("build", f"proxy: cannot list {source} on {host.address}")
    names = [n for n in listing.output.splitlines() if n and n != "config.json"]
    links = [n for n in names if not is_weight_file(n)]
    made = host.run(["mkdir", "-p", folder], timeout_s=60)
    if not made.ok:
        raise StepFailed("build", f"proxy: cannot create {folder}: {made.tail(3)}")
    for name in links:
        host.run(["ln", "-sfn", f"{source}/{name}", f"{folder}/{name}"], timeout_s=60)
    host.write_file(f"{folder}/config.json", rewritten.encode())
    return folder


def server_args(spec: ProxySpec, version: Version | None) -> list[str]:
    """The flags of a proxy launch (its model path is set by the caller)."""
    args = ["--load-format", "dummy"]
    if version is None or version >= FIRST_DRAFT_LOAD_FORMAT:
        args += ["--speculative-draft-load-format", "dummy"]
    return args + list(spec.extra_args)


def flag_note(spec: ProxySpec, model_dir: str, version: Version | None) -> str:
    return (
        f"proxy launch: {spec.describe()}, model config {model_dir}/config.json; flags "
        + " ".join(shlex.quote(a) for a in server_args(spec, version))
    )
