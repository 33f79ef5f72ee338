"""Hosts and launch methods refusing bad input: each a clear error (one line, non-zero exit),
and inside a bisect a SKIP with that reason rather than a crash."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conftest import Cli, value_repo
from sshd_fixture import SshServer
from test_bad_input import one_line_error

from perfbisect.hosts.ssh import SshHost, SshOptions


def test_unreachable_host_is_retried_then_named(cli: Cli) -> None:
    result = cli.run(
        "probe", "env-propagation", "--host", "ssh://nobody@127.0.0.1:1", "--retry-s", "2"
    )
    assert result.returncode == 1
    line = one_line_error(result)
    assert "ssh://nobody@127.0.0.1:1" in line and "no answer for 2s" in line


def test_unknown_host_key_is_refused_then_accepted_explicitly(
    cli: Cli, ssh_server: SshServer, tmp_path: Path
) -> None:
    # An ssh config without the test host's key: refused, with the fingerprint and the fix.
    config = tmp_path / "ssh_config"
    known = tmp_path / "known_hosts"
    key = next(p for p in ssh_server.ssh_config.read_text().split() if p.endswith("/client"))
    config.write_text(f"Host *\n  IdentityFile {key}\n  UserKnownHostsFile {known}\n")
    args = ["probe", "hardware", "--host", ssh_server.address, "--ssh-config", str(config)]
    refused = cli.run(*args)
    assert refused.returncode == 1
    line = one_line_error(refused)
    assert "unknown host key ssh-ed25519 SHA256:" in line and "refused" in line
    assert "--accept-new-host-key" in line and "ssh-keyscan -p" in line
    assert not known.exists()
    accepted = cli.run(*args, "--accept-new-host-key", "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert "trusting the new host key" in accepted.stderr
    assert f"[127.0.0.1]:{ssh_server.port}" in known.read_text()
    again = cli.run(*args)  # now known: no flag needed
    assert again.returncode == 0, again.stderr


def test_changed_host_key_is_refused(ssh_server: SshServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    other = "AAAAC3NzaC1lZDI1NTE5AAAAIBHJ0YOPcfc2iKaqd4UzXyMN0M5mUlwtSzgZ2rZxIh4u"
    known.write_text(f"[127.0.0.1]:{ssh_server.port} ssh-ed25519 {other}\n")
    key = next(p for p in ssh_server.ssh_config.read_text().split() if p.endswith("/client"))
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  IdentityFile {key}\n  UserKnownHostsFile {known}\n")
    host = SshHost(ssh_server.address, SshOptions(ssh_config=str(config), retry_s=1))
    try:
        host.run(["true"])
    except Exception as exc:
        assert "host key changed" in str(exc) and "ssh-keygen -R" in str(exc)
    else:
        raise AssertionError("a changed host key was accepted")


def test_unknown_method_is_a_usage_error(cli: Cli) -> None:
    result = cli.run("probe", "env-propagation", "--method", "direct,screen")
    assert result.returncode == 2
    assert "unknown launch method 'screen'" in one_line_error(result)


def _path_without_tmux(tmp_path: Path) -> str:
    """PATH where every directory that holds tmux is replaced by a copy of links without it."""
    dirs = []
    for i, folder in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not (Path(folder) / "tmux").exists():
            dirs.append(folder)
            continue
        shadow = tmp_path / f"bin{i}"
        shadow.mkdir()
        for entry in Path(folder).iterdir():
            if entry.name != "tmux":
                (shadow / entry.name).symlink_to(entry)
        dirs.append(str(shadow))
    return os.pathsep.join(dirs)


def test_missing_tmux_on_the_host(cli: Cli, tmp_path: Path) -> None:
    assert shutil.which("tmux")
    cli.env["PATH"] = _path_without_tmux(tmp_path)
    probe = cli.run("probe", "env-propagation", "--method", "tmux", "--json")
    assert probe.returncode == 1
    assert "tmux is not installed on local" in probe.stdout
    # In a bisect the tmux configuration is SKIP with that reason; the search goes on.
    repo = value_repo(tmp_path / "repo", [10.0, 10.0, 30.0])
    (tmp_path / "perfbisect.toml").write_text(
        '[target]\nkind = "command"\nrepo = "repo"\nserve = "sleep 30"\n'
        'measure = "python3 measure.py"\ntimeout_s = 30\n'
        "[metric]\nname = \"verify_ms\"\npattern = 'verify_ms=([0-9.]+)'\n"
        '[launch]\nmethod = "tmux"\n'
    )
    result = cli.run("bisect", "start", "--good", repo.shas[0], "--bad", repo.shas[2], "--json")
    assert result.returncode == 3, result.stderr  # the endpoints cannot be measured
    assert "tmux is not installed on local" in result.stdout
