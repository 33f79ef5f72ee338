"""``probe env-propagation``: which variables reach which process, for each launch method.

For every method the probe chain (``remote/envchain_probe.py``) is started exactly as a server would
be, through the same launcher. It records the watched variables at each stage: the shell that
runs the command, the Python parent, a ``spawn`` child, C ``getenv`` in that child, and with
``gpu`` NCCL's own report. The result is a matrix variable x method x stage plus provenance
hints read from the host's files. Values of secret-looking variables are redacted here, before
anything is printed or stored.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host, default_python
from perfbisect.hosts.openssh import OpenSshClient
from perfbisect.launch.base import PRESERVED_ENV, LaunchOptions, LaunchSpec, Method
from perfbisect.launch.registry import make_launcher
from perfbisect.launch.ssh import SshLauncher
from perfbisect.probes import provenance
from perfbisect.probes.env_hints import PREFIXES, HintContext, shown_value
from perfbisect.remote import program

SCRIPT = program("envchain_probe.py")
ALWAYS = ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "OMP_NUM_THREADS")
STAGES = ("shell", "python", "spawn_child", "c_getenv")
# Set by the probe itself or by the sitecustomize launcher: not the user's variables.
OWN = ("NCCL_DEBUG_FILE", "PERFBISECT_SITECUSTOMIZE", "PERFBISECT_SITECUSTOMIZE_SHADOWED")
# Variables that differ between any two sessions by nature (terminal, session, shell state):
# a difference in them says nothing about the launch method.
SESSION_NOISE = re.compile(
    r"^(PWD|OLDPWD|SHLVL|_|TMUX|TMUX_PANE|TERM|TERM_PROGRAM.*|TERMCAP|COLORTERM|COLUMNS|LINES|"
    r"SSH_CLIENT|SSH_CONNECTION|SSH_TTY|SSH_AUTH_SOCK|SSH_ORIGINAL_COMMAND|MAIL|MOTD_SHOWN|"
    r"LS_COLORS|PS1|PS2|PROMPT_COMMAND|HIST.*|XDG_.*|DBUS_.*|WINDOWID|DISPLAY|LESS.*|"
    r"PERFBISECT_.*|PYTEST_.*|fish_.*|__.*)$"
)


@dataclass(frozen=True)
class ProbeRequest:
    methods: Sequence[Method]
    deliver: Mapping[str, str] = field(default_factory=dict)  # --env: delivered by perfbisect
    watch: Sequence[str] = ()  # --watch: only observed
    gpus: int = 0  # ranks with a real NCCL communicator (0: no GPU stage)
    python: str | None = None  # the host's Python for the chain (default: ours / python3)
    timeout_s: float = 120.0
    # "your environment": default ours on the local host, the login shell's on a remote one
    reference_env: Mapping[str, str] | None = None
    # passed to every launch by perfbisect itself (launch.base.PRESERVED_ENV found here)
    explicit: Mapping[str, str] | None = None

    def passed(self) -> dict[str, str]:
        if self.explicit is not None:
            return dict(self.explicit)
        return {k: os.environ[k] for k in PRESERVED_ENV if k in os.environ}


def _run_method(
    host: Host, method: Method, request: ProbeRequest, options: LaunchOptions, base: str
) -> dict[str, Any]:
    """Start the chain with one method; the raw per-stage environments (unredacted)."""
    folder = f"{base}/{method.value}"
    python = request.python or default_python(host)
    names = sorted(set(ALWAYS) | set(request.deliver) | set(request.watch))
    host.write_file(f"{folder}/envchain.py", SCRIPT.read_bytes())
    spec_json = {"names": names, "prefixes": list(PREFIXES), "gpus": request.gpus, "all": True}
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
        plain_env=request.passed(),
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
    stages: dict[str, dict[str, str]] = {
        "shell": provenance.parse_env0(shell_text),
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
        "executable": parent.get("executable"),
        "python_startup": parent.get("python_startup") or [],
        "nccl": nccl,
        "notes": notes,
        "exit": code,
        "log_tail": tail,
    }


LOOPBACK = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


def _ssh_client(host: Host, options: LaunchOptions) -> tuple[OpenSshClient, Host | None]:
    """The OpenSSH client the ssh method uses, and the host whose sshd it reaches (None when
    that is neither the probed host nor this machine)."""
    target, _ = SshLauncher(options).ssh_host(host)  # not connected until used
    if target is host:
        return target.openssh(), host
    is_here = target.target.host in LOOPBACK or target.target.host == socket.gethostname()
    return target.openssh(), (host if host.is_local and is_here else None)


def run_probe(host: Host, request: ProbeRequest, options: LaunchOptions) -> dict[str, Any]:
    """Run the chain for every method and assemble the (redacted) result."""
    base = f"{host.cache_dir()}/probes/env-{uuid.uuid4().hex[:10]}"
    host.run(["mkdir", "-p", "-m", "700", base], timeout_s=30)
    errors: dict[str, str] = {}
    methods = list(request.methods)
    raw: dict[str, dict[str, Any]] = {}
    try:
        client: OpenSshClient | None = None
        files: Host | None = None
        if Method.SSH in methods:
            client, files = _ssh_client(host, options)
            why = client.check()
            if why:  # seconds, not the back-off of a host that went away
                errors[Method.SSH.value] = f"not run: {why}"
                methods.remove(Method.SSH)
                client = None
        # tmux's global environment must be read before a tmux launch starts a server.
        sources = provenance.gather(host, ssh_client=client, ssh_files=files, folder=base)
        reference: dict[str, str] | None
        if request.reference_env is not None:
            reference = dict(request.reference_env)
        elif host.is_local:
            reference = dict(os.environ)
        else:  # "your environment" on that host: its user's login shell
            reference = provenance.login_environment(host, base)
        for method in methods:
            try:
                raw[method.value] = _run_method(host, method, request, options, base)
            except StepFailed as exc:
                errors[method.value] = exc.reason
    finally:
        host.run(["rm", "-rf", base], timeout_s=60)
    return assemble(request, raw, errors, sources, reference, dict(os.environ), host.address)


def _variables(
    request: ProbeRequest,
    raw: Mapping[str, Mapping[str, Any]],
    explicit: Mapping[str, str],
    client_env: Mapping[str, str],
    startup: Sequence[provenance.Assignment] = (),
) -> list[str]:
    """The rows: what was delivered, watched or passed; every variable of the watched families
    seen at any stage or assigned in a start-up file (reaching no process is a finding); and
    every variable whose value differs between methods."""
    seen = set(request.deliver) | set(request.watch) | set(explicit)
    seen.update(a.name for a in startup if a.name.startswith(PREFIXES))
    if Method.SSH.value in raw:  # what the ssh client could send (SendEnv) is a candidate too
        seen.update(n for n in client_env if n.startswith(PREFIXES) and not SESSION_NOISE.match(n))
    for result in raw.values():
        for env in result["stages"].values():
            seen.update(n for n in env if n.startswith(PREFIXES) or n in ALWAYS)
        for hook in result.get("python_startup") or []:  # Python start-up hooks, run or not
            seen.update(n for n in hook["names"] if n.startswith(PREFIXES))
    envs = [result["stages"]["python"] for result in raw.values()]
    if len(envs) > 1:
        for name in set().union(*envs):
            if SESSION_NOISE.match(name) or name in seen:
                continue
            if len({env.get(name) for env in envs}) > 1:
                seen.add(name)
    return sorted(v for v in seen if v not in OWN)


def assemble(
    request: ProbeRequest,
    raw: Mapping[str, Mapping[str, Any]],
    errors: Mapping[str, str],
    sources: provenance.HostSources,
    reference: Mapping[str, str] | None,
    client_env: Mapping[str, str],
    address: str,
) -> dict[str, Any]:
    explicit = request.passed()
    variables = _variables(request, raw, explicit, client_env, sources.startup)
    stages = [*STAGES, *(["nccl"] if request.gpus else [])]
    matrix: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for name in variables:
        expected = request.deliver.get(name, explicit.get(name))
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
                cells[stage] = {"status": status, "value": shown_value(name, value)}
            row[method] = cells
        matrix[name] = row
    context = HintContext(request.deliver, raw, sources, reference, client_env, explicit)
    ssh = sources.ssh
    return {
        "host": address,
        "methods": [m.value for m in request.methods],
        "stages": stages,
        "delivered": {k: shown_value(k, v) for k, v in request.deliver.items()},
        "passed_explicitly": {k: shown_value(k, v) for k, v in explicit.items()},
        "watched": sorted(request.watch),
        "variables": variables,
        "matrix": matrix,
        "sources": {name: context.sources(name) for name in variables},
        "hints": context.hints(variables),
        "errors": dict(errors),
        "reference": "your environment"
        if address == "local"
        else "the login environment of the host's user"
        if reference is not None
        else None,
        "ssh": None
        if ssh is None
        else {
            "client": ssh.client,
            "send_env": ssh.send_env,
            "sshd": ssh.sshd.summary() if ssh.sshd else None,
            "sshd_error": ssh.sshd_error,
        },
        "nccl": {m: r["nccl"] for m, r in raw.items() if r.get("nccl")},
        "notes": {m: r["notes"] for m, r in raw.items() if r.get("notes")},
    }
