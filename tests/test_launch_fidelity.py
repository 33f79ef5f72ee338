"""Launch fidelity: perfbisect launches as the user does (the OpenSSH client, the pane's own
shell) and `probe env-propagation` names sources and hints without being told what to watch.

Real sshd (tests/sshd_fixture.py, with an Include'd drop-in directory as Debian ships), real
tmux, real bash/fish, real virtualenvs. The parsers are also tested on their own for every guard
spelling and sshd layout that is cheaper to write than to start.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Cli, layered_env
from sshd_fixture import SshServer

from perfbisect.hosts.local import LocalHost
from perfbisect.launch.base import LaunchOptions, LaunchSpec
from perfbisect.launch.registry import make_launcher
from perfbisect.probes import sshd_config
from perfbisect.probes.startup_files import guard_lines, startup_assignments
from perfbisect.targets.pyenv import layered_venv_argv

STAGES = ("shell", "python", "spawn_child", "c_getenv")
SECRET = "hf_fidelity_secret_4711"


def cells(result: dict[str, Any], name: str, method: str) -> dict[str, str]:
    return {s: c["status"] for s, c in result["matrix"][name][method].items()}


def probe_args(server: SshServer, *args: str, ssh_config: Path | None = None) -> list[str]:
    return [
        "probe",
        "env-propagation",
        "--host",
        server.address,
        "--ssh-config",
        str(ssh_config or server.ssh_config),
        *args,
    ]


def probe(cli: Cli, server: SshServer, *args: str, ssh_config: Path | None = None) -> Any:
    return cli.json(*probe_args(server, *args, "--json", ssh_config=ssh_config))


@pytest.fixture
def user_files(ssh_server: SshServer) -> Iterator[dict[str, Path]]:
    """The test user's start-up files, restored after the test (the fixture is shared)."""
    names = [".bashrc", ".profile", ".bash_env", ".ssh/environment", ".bash_history"]
    paths = {n: ssh_server.home / n for n in names}
    saved = {n: p.read_bytes() if p.exists() else None for n, p in paths.items()}
    try:
        yield paths
    finally:
        for name, path in paths.items():
            if saved[name] is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(saved[name])  # type: ignore[arg-type]


def _chown(server: SshServer, *paths: Path) -> None:
    for path in paths:
        shutil.chown(path, server.user, server.user)


# ---- guards: every common spelling, found by the parser ----------------------------------------

GUARDS = {
    "debian case": "case $- in\n    *i*) ;;\n      *) return;;\nesac",
    "one-line case, quoted": 'case "$-" in *i*) ;; *) return;; esac',
    "[[ == ]] ||": "[[ $- == *i* ]] || return",
    "[[ != ]] &&": "[[ $- != *i* ]] && return",
    "quoted [[ != ]]": '[[ "$-" != *i* ]] && return',
    "[ -z PS1 ]": '[ -z "$PS1" ] && return',
    "[ -z ${PS1-} ]": '[ -z "${PS1-}" ] && return',
    "[ -n PS1 ] ||": '[ -n "$PS1" ] || return',
    "if one line": "if [[ $- != *i* ]]; then return; fi",
    "if block": "if [[ $- != *i* ]]; then\n    return\nfi",
    "if -z PS1 block": 'if [ -z "$PS1" ]; then\n  return\nfi',
    "if ! ==": "if ! [[ $- == *i* ]]; then return; fi",
}


@pytest.mark.parametrize("spelling", sorted(GUARDS))
def test_every_guard_spelling_is_recognised(spelling: str) -> None:
    text = f"# ~/.bashrc\nexport EARLY=1\n{GUARDS[spelling]}\nexport NCCL_PROTO=LL\n"
    assert guard_lines(text) == [3], spelling
    files = {"~/.bashrc": text}
    found = startup_assignments(files.get, lambda _: [], "/home/u")
    by_name = {a.name: a for a in found}
    assert by_name["EARLY"].guard is None and "ssh-cmd" in by_name["EARLY"].worlds
    assert by_name["NCCL_PROTO"].guard == "~/.bashrc:3"
    assert "ssh-cmd" not in by_name["NCCL_PROTO"].worlds


def test_interactive_only_blocks_are_not_guards() -> None:
    text = 'if [[ $- == *i* ]]; then\n  bind "set bell-style none"\nfi\n[ -n "$PS1" ] && echo hi\n'
    assert guard_lines(text) == []


def test_guard_in_a_sourced_file_ends_only_that_file_and_profile_rules() -> None:
    files = {
        "~/.bash_profile": "export FROM_BASH_PROFILE=1\n. ~/.bashrc\n",
        "~/.profile": "export NEVER_READ=1\n",  # ignored: ~/.bash_profile exists
        "~/.bashrc": "export A=1\n. ~/.bash_env\nexport B=2\n",
        "~/.bash_env": "[[ $- == *i* ]] || return\nexport NCCL_ALGO=Ring\n",
    }
    found = {a.name: a for a in startup_assignments(files.get, lambda _: [], "/h")}
    assert found["NCCL_ALGO"].guard == "~/.bash_env:1"
    assert found["NCCL_ALGO"].via == ("~/.bashrc:2",)
    assert found["NCCL_ALGO"].worlds == ("login",)
    assert found["B"].guard is None and found["B"].worlds == ("login", "ssh-cmd")
    assert found["FROM_BASH_PROFILE"].worlds == ("login",)
    assert found["NEVER_READ"].worlds == ()
    assert "~/.bash_profile exists" in found["NEVER_READ"].where()


def test_sshd_parser_follows_include_and_match() -> None:
    files = {
        "/etc/ssh/sshd_config": (
            "Include /etc/ssh/sshd_config.d/*.conf\nAcceptEnv LANG LC_*\n"
            "PermitUserEnvironment no\nMatch User alice\n  AcceptEnv ALICE_*\n"
            "Match Group gpu\n  AcceptEnv GPU_*\nMatch all\nAcceptEnv LATE\n"
        ),
        "/etc/ssh/sshd_config.d/50-cloud.conf": "PermitUserEnvironment yes\n",
        "/etc/ssh/sshd_config.d/10-nccl.conf": "AcceptEnv NCCL_*\n",
    }
    listing = {"/etc/ssh/sshd_config.d/*.conf": sorted(k for k in files if ".d/" in k)}
    conn = sshd_config.Connection(user="bob", address="10.0.0.5")
    result = sshd_config.parse("/etc/ssh/sshd_config", files.get, listing.__getitem__, conn)
    assert result.accepts("NCCL_PROTO").where == "/etc/ssh/sshd_config.d/10-nccl.conf:1"  # type: ignore[union-attr]
    assert result.accepts("ALICE_X") is None  # Match User alice: not bob
    assert result.accepts("GPU_X").conditional  # type: ignore[union-attr]  # Group: not decidable
    assert result.accepts("LATE") is not None
    assert result.permit_user_environment is not None
    assert result.permit_user_environment.pattern == "yes"  # the drop-in came first: it wins
    assert "NCCL_*" in result.summary() and "10-nccl.conf" in result.summary()


# ---- the OpenSSH client: SendEnv + AcceptEnv from a drop-in -----------------------------------


def test_sendenv_and_included_acceptenv_cross_through_the_openssh_client(
    cli: Cli, ssh_server: SshServer, tmp_path: Path
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(ssh_server.ssh_config.read_text() + "  SendEnv NCCL_* CUDA_*\n")
    cli.env["NCCL_SOCKET_IFNAME"] = "lo"  # in the user's shell; only SendEnv can carry it
    cli.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # sent, but no AcceptEnv covers it
    result = probe(cli, ssh_server, "--method", "ssh,direct", ssh_config=config)
    assert result["errors"] == {}
    # The user's `ssh host cmd` delivers it, and so does perfbisect's ssh method now.
    assert cells(result, "NCCL_SOCKET_IFNAME", "ssh") == dict.fromkeys(STAGES, "present")
    assert result["matrix"]["NCCL_SOCKET_IFNAME"]["ssh"]["python"]["value"] == "lo"
    # direct on an ssh host starts through paramiko's channel, which sends nothing.
    assert cells(result, "NCCL_SOCKET_IFNAME", "direct") == dict.fromkeys(STAGES, "absent")
    dropin = f"{ssh_server.dropins}/10-nccl.conf:1"
    assert any(
        "SendEnv NCCL_*" in s and f"AcceptEnv NCCL_* at {dropin}" in s
        for s in result["sources"]["NCCL_SOCKET_IFNAME"]["host"]
    ), result["sources"]["NCCL_SOCKET_IFNAME"]
    # The effective AcceptEnv was parsed (not root on the host): drop-in and main file.
    assert result["ssh"]["sshd"].startswith("AcceptEnv NCCL_*")
    assert "LANG" in result["ssh"]["sshd"] and "parsed" in result["ssh"]["sshd"]
    hints = {h["variable"]: h for h in result["hints"]}
    assert "NCCL_SOCKET_IFNAME" not in hints  # it arrived: nothing to explain
    cuda = hints["CUDA_DEVICE_ORDER"]
    assert cuda["kind"] == "ssh-acceptenv" and dropin in cuda["message"]
    assert "accepts only" not in cuda["message"]
    # The launch record says which client delivered the command.
    notes = " ".join(result["notes"]["ssh"])
    assert "command delivered by the OpenSSH client: ssh -F" in notes


def test_sshd_t_gives_the_effective_configuration_as_root(cli: Cli, ssh_server: SshServer) -> None:
    result = cli.json(
        "probe",
        "env-propagation",
        "--method",
        "ssh",
        "--ssh-address",
        ssh_server.root_address,
        "--ssh-config",
        str(ssh_server.ssh_config),
        "--json",
    )
    assert result["errors"] == {}, result["errors"]
    assert "sshd -T" in result["ssh"]["sshd"]
    assert "NCCL_*" in result["ssh"]["sshd"] and "LC_*" in result["ssh"]["sshd"]


def test_guard_in_a_sourced_file_is_hinted_with_both_lines(
    cli: Cli, ssh_server: SshServer, user_files: dict[str, Path]
) -> None:
    bashrc = user_files[".bashrc"]
    lines = bashrc.read_text().splitlines()
    bashrc.write_text("\n".join(["[ -f ~/.bash_env ] && . ~/.bash_env", *lines]) + "\n")
    user_files[".bash_env"].write_text(
        "# shared settings\n[[ $- == *i* ]] || return\nexport NCCL_MIN_NCHANNELS=4\n"
    )
    _chown(ssh_server, user_files[".bash_env"])
    result = probe(cli, ssh_server, "--method", "tmux,ssh")
    assert cells(result, "NCCL_MIN_NCHANNELS", "tmux")["python"] == "present"
    assert cells(result, "NCCL_MIN_NCHANNELS", "ssh")["python"] == "absent"
    hint = next(h for h in result["hints"] if h["variable"] == "NCCL_MIN_NCHANNELS")
    assert hint["kind"] == "non-interactive-guard"
    assert "~/.bash_env:3 (sourced via ~/.bashrc:1)" in hint["message"]
    assert "guard at ~/.bash_env:2" in hint["message"]


# ---- the remote user's login environment as the reference -------------------------------------


def test_remote_probe_compares_with_the_hosts_login_environment(
    cli: Cli, ssh_server: SshServer, user_files: dict[str, Path]
) -> None:
    # ~/.ssh/environment, applied by sshd because a drop-in permits it (the first value wins
    # over the main file's `PermitUserEnvironment no`). A tmux server that was started outside
    # any ssh session lacks it: panes created now do not see it.
    dropin = ssh_server.dropins / "20-userenv.conf"
    dropin.write_text("PermitUserEnvironment yes\n")
    ssh_server.reload()
    env_file = user_files[".ssh/environment"]
    env_file.parent.mkdir(exist_ok=True)
    env_file.write_text("NCCL_IB_HCA=[mlx5_0]\n")
    _chown(ssh_server, env_file.parent, env_file)
    ssh_server.as_user("tmux", "kill-server")
    started = ssh_server.as_user("tmux", "new-session", "-d", "-s", "keeper")
    assert started.returncode == 0, started.stderr
    try:
        result = probe(cli, ssh_server, "--method", "tmux,ssh")
        text = cli.run(*probe_args(ssh_server, "--method", "tmux,ssh"))
    finally:
        dropin.unlink()
        ssh_server.reload()
        ssh_server.as_user("tmux", "kill-server")
    assert result["reference"] == "the login environment of the host's user"
    assert result["matrix"]["NCCL_IB_HCA"]["ssh"]["python"]["value"] == "[mlx5_0]"
    assert cells(result, "NCCL_IB_HCA", "tmux")["python"] == "absent"
    stale = [h for h in result["hints"] if h["kind"] == "tmux-stale-environment"]
    assert [h["variable"] for h in stale] == ["NCCL_IB_HCA"], result["hints"]
    sources = result["sources"]["NCCL_IB_HCA"]["host"]
    assert any("~/.ssh/environment:1" in s and "PermitUserEnvironment yes" in s for s in sources)
    # Square brackets in values survive the text view (rich markup would swallow them).
    assert text.returncode == 0, text.stderr
    assert "[mlx5_0]" in text.stdout


# ---- secrets: never in a history file, never left in the cache --------------------------------


def test_secrets_reach_no_history_file_and_no_cache_file(
    cli: Cli, ssh_server: SshServer, user_files: dict[str, Path]
) -> None:
    # A shell that keeps every typed line, space-prefixed or not, and writes it at once.
    bashrc = user_files[".bashrc"]
    text = bashrc.read_text().replace("HISTCONTROL=ignoreboth", "HISTCONTROL=")
    bashrc.write_text(text + "\nPROMPT_COMMAND='history -a'\n")
    result = probe(
        cli,
        ssh_server,
        "--method",
        "tmux,ssh,sitecustomize",
        "--env",
        f"HF_TOKEN={SECRET}",
        "--env",
        f"MY_API_KEY={SECRET}",
    )
    assert result["errors"] == {}
    for method in ("tmux", "ssh", "sitecustomize"):
        assert cells(result, "HF_TOKEN", method)["python"] == "present", method
        assert result["matrix"]["HF_TOKEN"][method]["python"]["value"] == "<redacted>"
    time.sleep(0.5)  # a pane's last history append
    leaks = subprocess.run(
        ["grep", "-rl", SECRET, str(ssh_server.home)], capture_output=True, text=True
    )
    assert leaks.stdout == "", f"secret found in {leaks.stdout}"
    assert SECRET not in (cli.cwd / "history.db").read_bytes().decode(errors="replace")


def test_sitecustomize_file_is_private_while_running_and_gone_after(tmp_path: Path) -> None:
    host = LocalHost()
    spec = LaunchSpec(
        command="sleep 30",
        cwd=str(tmp_path),
        log_path=str(tmp_path / "serve.log"),
        tag="secret-test",
        tuning_env={"HF_TOKEN": SECRET, "NCCL_ALGO": "Ring"},
    )
    launcher = make_launcher("sitecustomize", LaunchOptions(python=sys.executable))
    process = launcher.start(host, spec)
    try:
        generated = list(Path(host.cache_dir()).glob("sitecustomize/*/sitecustomize.py"))
        assert len(generated) == 1
        assert stat.S_IMODE(generated[0].stat().st_mode) == 0o600
    finally:
        process.stop(grace_s=1)
    assert not generated[0].exists() and not generated[0].parent.exists()


# ---- the pane's shell: fish driven in its own syntax, an unknown shell fails fast -------------


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_pane_is_driven_in_fish_syntax(
    cli: Cli, ssh_server: SshServer, user_files: dict[str, Path]
) -> None:
    bashrc = user_files[".bashrc"]
    bashrc.write_text(bashrc.read_text() + "\nexec fish\n")  # after the guard: interactive only
    result = probe(
        cli, ssh_server, "--method", "tmux", "--env", "NCCL_ALGO=Tree", "--env", "PB_Q=it's a\\b"
    )
    assert result["errors"] == {}, result["errors"]
    assert "pane shell: fish" in result["notes"]["tmux"]
    assert cells(result, "NCCL_ALGO", "tmux") == dict.fromkeys(STAGES, "present")
    assert result["matrix"]["PB_Q"]["tmux"]["python"]["value"] == "it's a\\b"


def test_unknown_pane_shell_fails_within_seconds_naming_it(
    cli: Cli, ssh_server: SshServer, user_files: dict[str, Path]
) -> None:
    odd = ssh_server.home / "bin" / "nush"
    odd.parent.mkdir(exist_ok=True)
    shutil.copy("/bin/dash", odd)
    _chown(ssh_server, odd.parent, odd)
    bashrc = user_files[".bashrc"]
    bashrc.write_text(bashrc.read_text() + f"\nexec {odd} -i\n")
    try:
        start = time.monotonic()
        result = probe(cli, ssh_server, "--method", "tmux,direct", "--env", "NCCL_ALGO=Ring")
        took = time.monotonic() - start
    finally:
        shutil.rmtree(odd.parent)
    assert "nush" in result["errors"]["tmux"] and "bash, sh, zsh" in result["errors"]["tmux"]
    # the rest of the probe completed
    assert cells(result, "NCCL_ALGO", "direct") == dict.fromkeys(STAGES, "present")
    assert took < 30
    sessions = ssh_server.as_user("tmux", "list-sessions")
    assert "perfbisect-" not in sessions.stdout


# ---- local: ssh not reachable, explicit variables ----------------------------------------------


def test_unreachable_ssh_is_not_run_within_seconds(cli: Cli) -> None:
    cli.env["NCCL_NVLS_ENABLE"] = "0"
    start = time.monotonic()
    result = cli.json("probe", "env-propagation", "--ssh-address", "ssh://127.0.0.1:1", "--json")
    assert time.monotonic() - start < 25
    assert result["errors"]["ssh"].startswith("not run: ")
    assert "Connection refused" in result["errors"]["ssh"]
    assert set(result["matrix"]["NCCL_NVLS_ENABLE"]) == {"direct", "tmux", "sitecustomize"}
    # perfbisect passes NCCL_NVLS_ENABLE itself: labelled so, not credited to tmux or ssh.
    source = result["sources"]["NCCL_NVLS_ENABLE"]
    assert source["explicit"] is True
    assert source["perfbisect"].startswith("perfbisect: passed explicitly")
    text = cli.run("probe", "env-propagation", "--ssh-address", "ssh://127.0.0.1:1")
    assert text.returncode == 0, text.stderr
    assert "ssh not run:" in text.stdout
    assert f"NCCL_NVLS_ENABLE source: {source['perfbisect']}" in text.stdout


# ---- environments layered on the interpreter they are made from -------------------------------


def test_environment_made_from_a_venv_sees_that_venvs_packages(tmp_path: Path) -> None:
    # The user's venv (made from the test runner's interpreter) holds a package of its own.
    parent_python, site = layered_env(sys.executable, tmp_path / "user-venv")
    (site / "pb_user_pkg.py").write_text("WHERE = 'user venv'\n")
    # perfbisect's per-commit environment made from that venv's interpreter.
    child = tmp_path / "per-commit"
    subprocess.run(layered_venv_argv(str(parent_python), str(child)), check=True, timeout=120)
    code = "import sys, pb_user_pkg, torch; print(sys.prefix); print(pb_user_pkg.WHERE)"
    out = subprocess.run(
        [str(child / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    prefix, where = out.stdout.split("\n")[:2]
    assert Path(prefix) == child and where == "user venv"
    # A plain `venv --system-site-packages` from the same interpreter loses both (the fault).
    plain = tmp_path / "plain"
    subprocess.run(
        [str(parent_python), "-m", "venv", "--system-site-packages", "--without-pip", str(plain)],
        check=True,
        timeout=120,
    )
    lost = subprocess.run(
        [str(plain / "bin" / "python"), "-c", "import pb_user_pkg"], capture_output=True
    )
    assert lost.returncode != 0
    assert os.access(child / "bin" / "python", os.X_OK)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_login_shell_on_the_host_runs_every_method(cli: Cli, ssh_server: SshServer) -> None:
    # `chsh -s fish`: every `ssh host cmd` now runs through fish. perfbisect hands its sh
    # wrappers to /bin/sh on standard input, so fish only starts /bin/sh (after config.fish).
    subprocess.run(["usermod", "-s", shutil.which("fish") or "fish", ssh_server.user], check=True)
    try:
        start = time.monotonic()
        result = probe(cli, ssh_server, "--env", "NCCL_ALGO=Ring")
        took = time.monotonic() - start
    finally:
        subprocess.run(["usermod", "-s", "/bin/bash", ssh_server.user], check=True)
    assert result["errors"] == {}, result["errors"]
    for method in ("direct", "tmux", "ssh", "sitecustomize"):
        assert cells(result, "NCCL_ALGO", method)["python"] == "present", method
    assert "pane shell: fish" in result["notes"]["tmux"]
    assert result["reference"] == "the login environment of the host's user"
    assert took < 60
