"""Sources and hints of ``probe env-propagation``: for each variable, where it can come from on
the host, and for what reached (or did not reach) each launch method, why. Built from the raw
per-method environments (``env_propagation``), the host's files (``provenance``) and the
start-up code (``startup_hints``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfbisect.launch.base import Method
from perfbisect.probes import provenance
from perfbisect.probes.startup_hints import StartupHints, python_hints, python_sources
from perfbisect.redact import REDACTED, is_secret

PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "SGLANG_")
NON_INTERACTIVE = (Method.SSH, Method.SITECUSTOMIZE)
EXPLICIT_SOURCE = "perfbisect: passed explicitly because it is set where perfbisect runs"


def shown_value(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    return REDACTED if is_secret(name) else value


@dataclass
class HintContext:
    deliver: Mapping[str, str]  # what perfbisect delivers (--env, [env])
    raw: Mapping[str, Mapping[str, Any]]
    sources_: provenance.HostSources
    reference: Mapping[str, str] | None
    client_env: Mapping[str, str]
    explicit: Mapping[str, str]

    def has(self, method: Method, name: str) -> bool | None:
        result = self.raw.get(method.value)
        if result is None:
            return None
        stages = result["stages"]
        return name in stages["shell"] or name in stages["python"]

    def startup(self) -> StartupHints:
        return StartupHints(
            startup=self.sources_.startup_files,
            traced=self.sources_.traced,
            has=lambda method, name: self.has(Method(method), name),
            methods=list(self.raw),
            non_interactive=[m.value for m in NON_INTERACTIVE],
            read=self.sources_.read,
        )

    def absent_in(self, name: str, methods: Sequence[Method]) -> list[str]:
        return [m.value for m in methods if self.has(m, name) is False]

    def sources(self, name: str) -> dict[str, Any]:
        src = self.sources_
        host = [a.where() for a in src.startup if a.name == name]
        host += [
            f"{a.file}:{a.line}" for a in src.etc_environment + src.nccl_conf if a.name == name
        ]
        for a in src.ssh_environment:
            if a.name == name:
                permit = src.ssh.sshd.permit_user_environment if src.ssh and src.ssh.sshd else None
                state = (
                    f"PermitUserEnvironment {permit.pattern} [{permit.where}]"
                    if permit
                    else ("PermitUserEnvironment unknown")
                )
                host.append(f"{a.file}:{a.line} (applied by sshd only with {state})")
        host += self.startup().sources(name)
        for where, role, methods, exe in python_sources(name, self.raw, self.deliver):
            host.append(f"{where} (Python start-up: the {role} of {exe}; {', '.join(methods)})")
        if src.tmux_global.get(name) is not None:
            host.append("tmux global environment")
        crossing = self.ssh_crossing(name)
        if crossing and self.has(Method.SSH, name):
            host.append(crossing)
        out: dict[str, Any] = {
            "delivered": name in self.deliver,
            "explicit": name in self.explicit and name not in self.deliver,
            "host": host,
        }
        if out["explicit"]:
            out["perfbisect"] = EXPLICIT_SOURCE
        return out

    def ssh_crossing(self, name: str) -> str | None:
        """How ``name`` crosses `ssh host cmd` from this client, when SendEnv sends it."""
        ssh = self.sources_.ssh
        if ssh is None or name not in self.client_env or not provenance.matches(name, ssh.send_env):
            return None
        sent = next(p for p in ssh.send_env if provenance.matches(name, [p]))
        rule = ssh.sshd.accepts(name) if ssh.sshd else None
        if rule is None:
            return f"sent by the OpenSSH client (SendEnv {sent})"
        cond = ", inside a Match block not evaluated here" if rule.conditional else ""
        return (
            f"sent by the OpenSSH client (SendEnv {sent}), accepted by sshd "
            f"(AcceptEnv {rule.pattern} at {rule.where}{cond})"
        )

    def hints(self, variables: Sequence[str]) -> list[dict[str, str]]:
        hints: list[dict[str, str]] = []

        def add(name: str, kind: str, message: str) -> None:
            hints.append({"variable": name, "kind": kind, "message": message})

        names = set(variables)
        src = self.sources_
        for a in src.startup:
            if a.name not in names or not a.guard:
                continue
            missed = self.absent_in(a.name, NON_INTERACTIVE)
            if not missed:
                continue
            via = f" (sourced via {' -> '.join(a.via)})" if a.via else ""
            reached = "; login shells (tmux panes) do" if "login" in a.worlds else ""
            add(
                a.name,
                "non-interactive-guard",
                f"{a.file}:{a.line}{via} sets {a.name} after the non-interactive guard at "
                f"{a.guard}: `ssh host cmd` stops there, so {', '.join(missed)} never see "
                f"it{reached}. Move the export above the guard, or deliver it with [env]",
            )
        self.startup().hints(variables, lambda n, k, m: add(n, k, m))
        python_hints(variables, self.raw, self.deliver, lambda n, k, m: add(n, k, m))
        self._tmux_hints(variables, add)
        self._ssh_hints(variables, add)
        self._sitecustomize_hints(add)
        for a in src.nccl_conf:
            if a.name in names and a.name.startswith("NCCL_"):
                add(
                    a.name,
                    "nccl-conf",
                    f"{a.file}:{a.line} sets {a.name}={shown_value(a.name, a.value)}: NCCL applies "
                    "it when the variable is not in the process environment",
                )
        for a in src.etc_environment:
            if a.name in names:
                add(
                    a.name,
                    "etc-environment",
                    f"/etc/environment:{a.line} sets {a.name}: pam_env applies it to ssh and "
                    "login sessions when sshd uses PAM, not to processes started otherwise",
                )
        return hints

    def _tmux_hints(self, variables: Sequence[str], add: Any) -> None:
        src = self.sources_
        if not src.tmux_running or self.reference is None:
            return
        started = (
            f" (started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(int(src.tmux_started)))})"
            if src.tmux_started
            else ""
        )
        tmux = self.raw.get(Method.TMUX.value)
        for name in variables:
            want = self.reference.get(name)
            if want is None or name in self.deliver or name in self.explicit:
                continue
            if tmux is not None and tmux["stages"]["python"].get(name) == want:
                continue  # the pane has it (its login shell set it): nothing went stale
            have = src.tmux_global.get(name)
            if have == want:
                continue
            state = (
                "has no" if have is None else f"holds a stale value ({shown_value(name, have)}) of"
            )
            add(
                name,
                "tmux-stale-environment",
                f"the tmux server{started} {state} {name} in its global environment, while "
                f"your environment has {name}={shown_value(name, want)}: new sessions inherit the "
                "server's environment, frozen when it started. Restart the tmux server or run "
                f"`tmux set-environment -g {name} ...`",
            )

    def _ssh_hints(self, variables: Sequence[str], add: Any) -> None:
        ssh = self.sources_.ssh
        if ssh is None or self.has(Method.SSH, "PATH") is None:
            return
        for name in variables:
            if (
                name not in self.client_env
                or name in self.deliver
                or name in self.explicit
                or not name.startswith(PREFIXES)
                or self.has(Method.SSH, name)
            ):
                continue
            if not provenance.matches(name, ssh.send_env):
                add(
                    name,
                    "ssh-sendenv",
                    f"{name} is in your environment but `ssh host cmd` does not carry it: your "
                    f"ssh client sends only SendEnv {' '.join(ssh.send_env) or '(none)'} "
                    f"(`{ssh.client} -G`); add `SendEnv {name}` to ~/.ssh/config (and "
                    "AcceptEnv on the host), or deliver it with [env]",
                )
                continue
            if ssh.sshd is None:
                add(
                    name,
                    "ssh-acceptenv",
                    f"{name} is sent by your ssh client (SendEnv) but did not arrive; sshd's "
                    f"AcceptEnv could not be read ({ssh.sshd_error})",
                )
                continue
            rule = ssh.sshd.accepts(name)
            if rule is None:
                add(
                    name,
                    "ssh-acceptenv",
                    f"{name} is sent by your ssh client (SendEnv) but sshd drops it: "
                    f"{ssh.sshd.summary()}. Add `AcceptEnv {name}` on the host, or deliver "
                    "it with [env]",
                )
            else:
                add(
                    name,
                    "ssh-dropped",
                    f"{name} is sent (SendEnv) and accepted (AcceptEnv {rule.pattern} at "
                    f"{rule.where}{', conditionally' if rule.conditional else ''}) but absent "
                    "in the remote shell: a start-up file unsets it, or the Match block does "
                    "not apply to this connection",
                )

    def _sitecustomize_hints(self, add: Any) -> None:
        site = self.raw.get(Method.SITECUSTOMIZE.value)
        if site is None:
            return
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
