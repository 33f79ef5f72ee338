"""``probe env-propagation``: which variables reach which process, for each launch method.

For every method the probe chain (``envchain_script.py``) is started exactly as a server would
be, through the same launcher. It records the watched variables at each stage: the shell that
runs the command, the Python parent, a ``spawn`` child, C ``getenv`` in that child, and with
``gpu`` NCCL's own report. The result is a matrix variable x method x stage plus provenance
hints read from the host's files. Values of secret-looking variables are redacted here, before
anything is printed or stored.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host
from perfbisect.launch.base import LaunchOptions, LaunchSpec, Method, make_launcher
from perfbisect.probes import provenance
from perfbisect.redact import REDACTED, is_secret
from perfbisect.targets.command import PRESERVED_ENV

SCRIPT = Path(__file__).with_name("envchain_script.py")
PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "SGLANG_")
ALWAYS = ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "OMP_NUM_THREADS")
STAGES = ("shell", "python", "spawn_child", "c_getenv")
# Set by the probe itself or by the sitecustomize launcher: not the user's variables.
OWN = ("NCCL_DEBUG_FILE", "PERFBISECT_SITECUSTOMIZE", "PERFBISECT_SITECUSTOMIZE_SHADOWED")
NON_INTERACTIVE = (Method.SSH, Method.SITECUSTOMIZE)


@dataclass(frozen=True)
class ProbeRequest:
    methods: Sequence[Method]
    deliver: Mapping[str, str] = field(default_factory=dict)  # --env: delivered by perfbisect
    watch: Sequence[str] = ()  # --watch: only observed
    gpus: int = 0  # ranks with a real NCCL communicator (0: no GPU stage)
    python: str | None = None  # the host's Python for the chain (default: ours / python3)
    timeout_s: float = 120.0
    reference_env: Mapping[str, str] | None = None  # "your shell" (default: ours, local host)


def _value(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    return REDACTED if is_secret(name) else value


def _parse_env0(text: str) -> dict[str, str]:
    env = {}
    for item in text.split("\0"):
        if "=" in item:
            name, value = item.split("=", 1)
            env[name] = value
    return env


def _watched(env: Mapping[str, str], names: set[str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in names or k.startswith(PREFIXES)}


def _run_method(
    host: Host, method: Method, request: ProbeRequest, options: LaunchOptions, base: str
) -> dict[str, Any]:
    """Start the chain with one method; the raw per-stage environments (unredacted)."""
    folder = f"{base}/{method.value}"
    python = request.python or (sys.executable if host.is_local else "python3")
    names = sorted(set(ALWAYS) | set(request.deliver) | set(request.watch))
    host.write_file(f"{folder}/envchain.py", SCRIPT.read_bytes())
    spec_json = {"names": names, "prefixes": list(PREFIXES), "gpus": request.gpus}
    host.write_file(f"{folder}/watch.json", json.dumps(spec_json).encode())
    command = (
        f"env -0 > {shlex.quote(folder)}/shell.env0; "
        f"exec {shlex.quote(python)} {shlex.quote(folder)}/envchain.py {shlex.quote(folder)}"
    )
    spec = LaunchSpec(
        command=command,
        cwd=folder,
        log_path=f"{folder}/probe.log",
        tag=f"probe-{uuid.uuid4().hex[:8]}-{method.value}",
        tuning_env=dict(request.deliver),
        plain_env={k: os.environ[k] for k in PRESERVED_ENV if k in os.environ},
    )
    launcher = make_launcher(method, LaunchOptions(**{**options.__dict__, "python": python}))
    process = launcher.start(host, spec)
    try:
        deadline = time.monotonic() + request.timeout_s + (300 if request.gpus else 0)
        while process.poll() is None:
            if time.monotonic() > deadline:
                raise StepFailed("probe", f"the probe chain did not finish: {process.log_tail(5)}")
            time.sleep(0.2)
        code = process.poll()
        notes = list(process.notes)
        tail = process.log_tail(15)
    finally:
        process.stop(grace_s=2.0)

    def load(name: str) -> dict[str, Any] | None:
        text = host.read_text(f"{folder}/{name}")
        return json.loads(text) if text else None

    shell_text = host.read_text(f"{folder}/shell.env0")
    parent, child, nccl = load("parent.json"), load("child.json"), load("nccl.json")
    if shell_text is None or parent is None or child is None:
        raise StepFailed("probe", f"the probe chain stopped early (exit {code}): {tail}")
    name_set = set(names)
    stages: dict[str, dict[str, str]] = {
        "shell": _watched(_parse_env0(shell_text), name_set),
        "python": parent["env"],
        "spawn_child": child["env"],
        "c_getenv": {k: v for k, v in child["getenv"].items() if v is not None},
    }
    if nccl is not None:
        merged: dict[str, str] = {}
        for values in nccl.get("ranks", {}).values():
            merged.update(values)
        stages["nccl"] = merged
    return {
        "stages": stages,
        "sitecustomize": parent.get("sitecustomize"),
        "shadowed": parent.get("shadowed"),
        "nccl": nccl,
        "notes": notes,
        "exit": code,
        "log_tail": tail,
    }


def run_probe(host: Host, request: ProbeRequest, options: LaunchOptions) -> dict[str, Any]:
    """Run the chain for every method and assemble the (redacted) result."""
    base = f"{host.cache_dir()}/probes/env-{uuid.uuid4().hex[:10]}"
    names = set(ALWAYS) | set(request.deliver) | set(request.watch)
    # tmux's global environment must be read before a tmux launch starts a server.
    sources = provenance.gather(host, names | set(os.environ if host.is_local else ()))
    raw: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    try:
        for method in request.methods:
            try:
                raw[method.value] = _run_method(host, method, request, options, base)
            except StepFailed as exc:
                errors[method.value] = exc.reason
    finally:
        host.run(["rm", "-rf", base], timeout_s=60)
    reference = dict(request.reference_env if request.reference_env is not None else {})
    if request.reference_env is None and host.is_local:
        reference = dict(os.environ)
    return assemble(request, raw, errors, sources, reference, host.address)


def _variables(request: ProbeRequest, raw: Mapping[str, Mapping[str, Any]]) -> list[str]:
    seen = set(request.deliver) | set(request.watch)
    for result in raw.values():
        for env in result["stages"].values():
            seen.update(env)
    return sorted(v for v in seen if v not in OWN)


def assemble(
    request: ProbeRequest,
    raw: Mapping[str, Mapping[str, Any]],
    errors: Mapping[str, str],
    sources: provenance.HostSources,
    reference: Mapping[str, str],
    address: str,
) -> dict[str, Any]:
    variables = _variables(request, raw)
    stages = [*STAGES, *(["nccl"] if request.gpus else [])]
    matrix: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for name in variables:
        expected = request.deliver.get(name)
        row: dict[str, dict[str, dict[str, Any]]] = {}
        for method, result in raw.items():
            cells = {}
            for stage in stages:
                env = result["stages"].get(stage)
                if env is None:
                    continue
                value = env.get(name)
                if stage == "nccl" and not name.startswith("NCCL_"):
                    continue
                status = (
                    "absent"
                    if value is None
                    else "different"
                    if expected is not None and value != expected
                    else "present"
                )
                cells[stage] = {"status": status, "value": _value(name, value)}
            row[method] = cells
        matrix[name] = row
    hints = _hints(request, raw, sources, reference, variables)
    return {
        "host": address,
        "methods": [m.value for m in request.methods],
        "stages": stages,
        "delivered": {k: _value(k, v) for k, v in request.deliver.items()},
        "watched": sorted(request.watch),
        "variables": variables,
        "matrix": matrix,
        "sources": _sources(request, sources, variables),
        "hints": hints,
        "errors": dict(errors),
        "nccl": {m: r["nccl"] for m, r in raw.items() if r.get("nccl")},
        "notes": {m: r["notes"] for m, r in raw.items() if r.get("notes")},
    }


def _sources(
    request: ProbeRequest, sources: provenance.HostSources, variables: Sequence[str]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in variables:
        host_sources = [
            f"{a.file}:{a.line}"
            + (
                f" (after the non-interactive guard at line {a.after_guard})"
                if a.after_guard
                else ""
            )
            for a in sources.startup
            if a.name == name
        ]
        host_sources += [
            f"{a.file}:{a.line}"
            for a in sources.etc_environment + sources.nccl_conf
            if a.name == name
        ]
        if sources.tmux_global.get(name) is not None:
            host_sources.append("tmux global environment")
        out[name] = {"delivered": name in request.deliver, "host": host_sources}
    return out


def _absent(
    raw: Mapping[str, Mapping[str, Any]], name: str, methods: Sequence[Method]
) -> list[str]:
    return [
        m.value
        for m in methods
        if m.value in raw
        and name not in raw[m.value]["stages"]["shell"]
        and name not in raw[m.value]["stages"]["python"]
    ]


def _hints(
    request: ProbeRequest,
    raw: Mapping[str, Mapping[str, Any]],
    sources: provenance.HostSources,
    reference: Mapping[str, str],
    variables: Sequence[str],
) -> list[dict[str, str]]:
    hints: list[dict[str, str]] = []

    def add(name: str, kind: str, message: str) -> None:
        hints.append({"variable": name, "kind": kind, "message": message})

    for a in sources.startup:
        if a.name not in variables or a.after_guard is None:
            continue
        missed = _absent(raw, a.name, NON_INTERACTIVE)
        if missed:
            add(
                a.name,
                "non-interactive-guard",
                f"{a.file}:{a.line} sets {a.name} after the non-interactive guard at line "
                f"{a.after_guard}: shells started by `ssh host cmd` return before it, so "
                f"{', '.join(missed)} never see it; interactive shells (tmux) do",
            )
    if sources.tmux_running and Method.TMUX.value in raw:
        started = (
            f" (started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(int(sources.tmux_started)))})"
            if sources.tmux_started
            else ""
        )
        for name in variables:
            want = reference.get(name)
            if want is None or name in request.deliver:
                continue
            have = sources.tmux_global.get(name)
            if have == want:
                continue
            state = "has no" if have is None else f"holds a stale value ({_value(name, have)}) of"
            add(
                name,
                "tmux-stale-environment",
                f"the tmux server{started} {state} {name} in its global environment, while "
                f"your environment has {name}={_value(name, want)}: new sessions inherit the "
                "server's environment, frozen when it started. Restart the tmux server or run "
                f"`tmux set-environment -g {name} ...`",
            )
    if sources.accept_env_known:
        for name in variables:
            if (
                name in reference
                and _absent(raw, name, (Method.SSH,))
                and not provenance.matches(name, sources.accept_env)
            ):
                add(
                    name,
                    "ssh-acceptenv",
                    f"{name} is in your environment but `ssh host cmd` does not carry it: the "
                    f"host's sshd accepts only AcceptEnv {' '.join(sources.accept_env) or '(none)'} "
                    "(and SendEnv must name it on the client); perfbisect delivers [env] on the "
                    "command line instead",
                )
    site = raw.get(Method.SITECUSTOMIZE.value)
    if site is not None:
        ours = site.get("sitecustomize") or ""
        if site.get("shadowed"):
            add(
                "PYTHONPATH",
                "sitecustomize-shadow",
                f"perfbisect's sitecustomize ({ours}) shadows {site['shadowed']}; it loads that "
                "one after setting the variables",
            )
        if "/sitecustomize/" not in ours:
            add(
                "PYTHONPATH",
                "sitecustomize-shadow",
                f"another sitecustomize ({ours or 'none'}) was imported instead of perfbisect's",
            )
    for a in sources.nccl_conf:
        if a.name not in variables or not a.name.startswith("NCCL_"):
            continue
        add(
            a.name,
            "nccl-conf",
            f"{a.file}:{a.line} sets {a.name}={_value(a.name, a.value)}: NCCL applies it when "
            "the variable is not in the process environment",
        )
    for a in sources.etc_environment:
        if a.name not in variables:
            continue
        add(
            a.name,
            "etc-environment",
            f"/etc/environment:{a.line} sets {a.name}: pam_env applies it to ssh and login "
            "sessions when sshd uses PAM, not to processes started otherwise",
        )
    return hints
