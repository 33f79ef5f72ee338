"""`perfbisect probe env-propagation`: variables that start-up code sets without an assignment
the probe can read (a program's output evaluated, a computed source path, a prompt hook), that
only login shells set (~/.bash_profile), or that a Python start-up hook sets (a venv's
sitecustomize.py or .pth file). Real sshd, real tmux, a test user with real dotfiles."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import Cli
from sshd_fixture import SshServer

STAGES = ("shell", "python", "spawn_child", "c_getenv")
# What `pyenv init -` prints (pyenv 2.x), minus its completion and rehash lines; plus a token a
# tool's init might export, whose value must never reach the output.
PYENV = """#!/bin/sh
if [ "$1" = init ]; then
  echo 'export PATH="'"$HOME"'/.pyenv/shims:${PATH}"'
  echo 'export PYENV_SHELL=bash'
  echo 'export HF_TOKEN=hf_traced_secret_value'
fi
"""
# What `conda shell.bash hook` prints, cut down: a function defined by the eval, then called.
CONDA = """#!/bin/sh
cat <<'EOF'
conda() {
  if [ "$1" = activate ]; then
    export CONDA_PREFIX="$HOME/miniconda3"
    export CONDA_DEFAULT_ENV="$2"
  fi
}
conda activate base
EOF
"""
# `conda init`'s block in ~/.bashrc.
CONDA_LINES = (
    "__conda_setup=\"$(\"$HOME/miniconda3/bin/conda\" 'shell.bash' 'hook' 2> /dev/null)\"\n"
    "if [ $? -eq 0 ]; then\n"
    '    eval "$__conda_setup"\n'
    "fi\n"
    "unset __conda_setup\n"
)
PYENV_LINES = (
    'export PYENV_ROOT="$HOME/.pyenv"\n'
    '[[ -d $PYENV_ROOT/bin ]] && export PATH="$PYENV_ROOT/bin:$PATH"\n'
    'eval "$(pyenv init -)"\n'
)


def cells(result: dict[str, Any], name: str, method: str) -> dict[str, str]:
    return {s: c["status"] for s, c in result["matrix"][name][method].items()}


def hints(result: dict[str, Any], kind: str) -> dict[str, str]:
    return {h["variable"]: h["message"] for h in result["hints"] if h["kind"] == kind}


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@contextlib.contextmanager
def dotfiles(server: SshServer, files: dict[str, str]) -> Iterator[None]:
    """Write the test user's files (owned by the user), restore or delete them after."""
    saved = {}
    for rel, text in files.items():
        path = server.home / rel
        saved[path] = path.read_text() if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if "bin/" in rel:
            path.chmod(0o755)
    subprocess.run(["chown", "-R", f"{server.user}:", str(server.home)], check=True, timeout=30)
    try:
        yield
    finally:
        for path, text in saved.items():
            if text is None:
                path.unlink()
            else:
                path.write_text(text)


def probe(cli: Cli, server: SshServer, *extra: str) -> dict[str, Any]:
    return cli.json(
        "probe",
        "env-propagation",
        "--host",
        server.address,
        "--ssh-config",
        str(server.ssh_config),
        *extra,
        "--json",
    )


def test_a_program_run_by_bashrc_after_its_guard(
    cli: Cli, ssh_server: SshServer, tmp_path: Path
) -> None:
    # pyenv's documented lines appended to Debian's ~/.bashrc (after its non-interactive guard),
    # and Fedora's ~/.bashrc.d loop: no assignment of PYENV_SHELL or NCCL_IB_TIMEOUT to read.
    original = (ssh_server.home / ".bashrc").read_text()
    bashrc = (
        original
        + PYENV_LINES
        + 'for rc in ~/.bashrc.d/*.sh; do [ -f "$rc" ] && . "$rc"; done\n'
        + "pb_hook() { export NCCL_HOOKED=1; }\nPROMPT_COMMAND=pb_hook\n"
        + 'eval "$(~/bin/site-env --api-key k_s3cr3t_line)"\n'
        + CONDA_LINES
    )
    files = {
        ".bashrc": bashrc,
        ".pyenv/bin/pyenv": PYENV,
        "bin/site-env": "#!/bin/sh\necho 'export NCCL_ALGO=Tree'\n",
        "miniconda3/bin/conda": CONDA,
        ".bashrc.d/nccl.sh": "# cluster settings\nexport NCCL_IB_TIMEOUT=22\n",
    }
    with dotfiles(ssh_server, files):
        result = probe(cli, ssh_server)
        text = cli.run(
            "probe",
            "env-propagation",
            "--host",
            ssh_server.address,
            "--ssh-config",
            str(ssh_server.ssh_config),
            "--method",
            "tmux,ssh",
        )
    assert result["errors"] == {}
    guard = line_of(original, "case $- in")
    eval_line = line_of(bashrc, 'eval "$(pyenv init -)"')
    loop_line = line_of(bashrc, "~/.bashrc.d/")
    # Where it reached: the tmux pane (a login shell) only.
    assert result["matrix"]["PYENV_SHELL"]["tmux"]["python"]["value"] == "bash"
    assert cells(result, "PYENV_SHELL", "ssh") == dict.fromkeys(STAGES, "absent")
    assert cells(result, "NCCL_IB_TIMEOUT", "tmux") == dict.fromkeys(STAGES, "present")
    assert cells(result, "NCCL_IB_TIMEOUT", "ssh") == dict.fromkeys(STAGES, "absent")
    # Why: the eval line, the guard, the methods.
    found = hints(result, "startup-command")
    message = found["PYENV_SHELL"]
    assert f'`eval "$(pyenv init -)"` at ~/.bashrc:{eval_line}' in message
    assert f"non-interactive guard at ~/.bashrc:{guard}" in message
    assert "ssh, sitecustomize never see it" in message
    assert any(f"~/.bashrc:{eval_line}" in s for s in result["sources"]["PYENV_SHELL"]["host"]), (
        result["sources"]["PYENV_SHELL"]
    )
    loop = found["NCCL_IB_TIMEOUT"]
    assert "~/.bashrc.d/nccl.sh:2, reached through" in loop
    assert f"at ~/.bashrc:{loop_line}" in loop and f"guard at ~/.bashrc:{guard}" in loop
    # A function the eval defines and calls (conda's hook): the eval line, not the function's.
    conda = found["CONDA_DEFAULT_ENV"]
    conda_line = line_of(bashrc, 'eval "$__conda_setup"')
    assert conda.startswith(
        f'CONDA_DEFAULT_ENV is set by `eval "$__conda_setup"` at ~/.bashrc:{conda_line}, a'
    ), conda
    assert f"guard at ~/.bashrc:{guard}" in conda
    assert result["matrix"]["CONDA_DEFAULT_ENV"]["tmux"]["python"]["value"] == "base"
    # A prompt hook: tmux panes run it before the typed command, ssh never shows a prompt.
    assert cells(result, "NCCL_HOOKED", "tmux")["python"] == "present"
    assert "PROMPT_COMMAND" in found["NCCL_HOOKED"] and "~/.bashrc" in found["NCCL_HOOKED"]
    # The token the program exported: named, never shown (output, text output, store); a
    # start-up line with a secret-looking word is located, not quoted.
    assert result["matrix"]["HF_TOKEN"]["tmux"]["python"]["value"] == "<redacted>"
    site_env = line_of(bashrc, "site-env")
    assert found["NCCL_ALGO"].startswith(f"NCCL_ALGO is set by ~/.bashrc:{site_env}, a command")
    assert text.returncode == 0, text.stderr
    assert "eval" in text.stdout and "PYENV_SHELL" in text.stdout
    for out in (str(result), text.stdout, (tmp_path / "history.db").read_bytes().decode("latin1")):
        assert "hf_traced_secret_value" not in out and "k_s3cr3t_line" not in out
    # The trace is gone from the host with the probe's directory.
    assert not list((ssh_server.home / ".cache" / "perfbisect" / "probes").glob("env-*"))


def test_login_only_files(cli: Cli, ssh_server: SshServer) -> None:
    # A ~/.bash_profile that exports and does not source ~/.profile: bash's login shells read
    # it alone (the first of ~/.bash_profile, ~/.bash_login, ~/.profile), `ssh host cmd` not.
    profile = (ssh_server.home / ".profile").read_text() + "export NCCL_MIN_NCHANNELS=4\n"
    files = {
        ".bash_profile": "# site settings\nexport NCCL_NET_GDR_LEVEL=PHB\n",
        ".profile": profile,
    }
    with dotfiles(ssh_server, files):
        result = probe(cli, ssh_server)
    assert result["errors"] == {}
    assert cells(result, "NCCL_NET_GDR_LEVEL", "tmux") == dict.fromkeys(STAGES, "present")
    assert cells(result, "NCCL_NET_GDR_LEVEL", "ssh") == dict.fromkeys(STAGES, "absent")
    login = hints(result, "login-only")["NCCL_NET_GDR_LEVEL"]
    assert login.startswith("~/.bash_profile:2 sets NCCL_NET_GDR_LEVEL")
    assert "read by login shells only" in login and "ssh, sitecustomize never see it" in login
    # ~/.profile is not read at all now: its export reaches no method, and the hint says why.
    for method in ("tmux", "ssh", "direct"):
        assert cells(result, "NCCL_MIN_NCHANNELS", method)["shell"] == "absent"
    unread = hints(result, "login-file-not-read")["NCCL_MIN_NCHANNELS"]
    assert f"~/.profile:{line_of(profile, 'NCCL_MIN_NCHANNELS')} sets" in unread
    assert "here ~/.bash_profile" in unread


def test_a_venv_hook_over_ssh(cli: Cli, ssh_server: SshServer) -> None:
    # The user's venv, activated by ~/.bashrc after its guard: only tmux panes run its python3.
    # Its .pth file sets a variable at start-up; its sitecustomize.py never runs, because
    # Debian's /usr/lib/python3.X/sitecustomize.py comes first on sys.path.
    venv = ssh_server.home / "venv"
    made = ssh_server.as_user("python3", "-m", "venv", "--without-pip", str(venv), timeout=120)
    assert made.returncode == 0, made.stderr
    (site,) = venv.glob("lib/python3*/site-packages")
    original = (ssh_server.home / ".bashrc").read_text()
    files = {
        ".bashrc": original + ". ~/venv/bin/activate\n",
        f"{site.relative_to(ssh_server.home)}/nccl_env.pth": (
            "import os; os.environ.setdefault('NCCL_CROSS_NIC', '1')\n"
        ),
        f"{site.relative_to(ssh_server.home)}/sitecustomize.py": (
            "import os\nos.environ['NCCL_P2P_LEVEL'] = 'NVL'\n"
        ),
    }
    try:
        with dotfiles(ssh_server, files):
            result = probe(cli, ssh_server)  # no --watch: the hooks name their variables
    finally:
        subprocess.run(["rm", "-rf", str(venv)], timeout=60)
    assert result["errors"] == {}
    assert cells(result, "NCCL_CROSS_NIC", "tmux") == {
        "shell": "absent",
        "python": "present",
        "spawn_child": "present",
        "c_getenv": "present",
    }
    assert cells(result, "NCCL_CROSS_NIC", "ssh") == dict.fromkeys(STAGES, "absent")
    pth = hints(result, "python-startup")["NCCL_CROSS_NIC"]
    assert pth.startswith(f"{site}/nccl_env.pth:1 sets NCCL_CROSS_NIC when {venv}/bin/python")
    assert "(its .pth file): in tmux NCCL_CROSS_NIC is set" in pth and "not in the shell" in pth
    assert "which does not run it" in pth and "ssh" in pth.split("; ")[-1]
    assert any("nccl_env.pth:1" in s for s in result["sources"]["NCCL_CROSS_NIC"]["host"])
    assert cells(result, "NCCL_P2P_LEVEL", "tmux") == dict.fromkeys(STAGES, "absent")
    shadowed = hints(result, "sitecustomize-shadowed")["NCCL_P2P_LEVEL"]
    assert f"{site}/sitecustomize.py:2 sets NCCL_P2P_LEVEL but never runs" in shadowed
    assert "/usr/lib/python3" in shadowed


def test_a_venv_sitecustomize_for_one_method(cli: Cli, tmp_path: Path) -> None:
    # A venv of the test's own interpreter whose sitecustomize.py sets a variable; ~/.bashrc
    # activates the venv, so only the tmux pane's python3 is the venv's (--python python3: each
    # method resolves it on its own PATH). Where the base Python has no sitecustomize of its
    # own (pyenv, python.org, conda builds) the venv's runs, for tmux only; under a
    # distribution's Python (Debian's /usr/lib/python3.X/sitecustomize.py) it never runs.
    home = tmp_path / "home"
    home.mkdir()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "sitecustomize.py").write_text("import os\nos.environ['NCCL_P2P_LEVEL'] = 'NVL'\n")
    which = "import sitecustomize; print(sitecustomize.__file__)"
    imported = subprocess.run(
        [str(venv / "bin" / "python3"), "-c", which], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    (home / ".profile").write_text(". ~/.bashrc\n")
    (home / ".bashrc").write_text(f"[[ $- != *i* ]] && return\n. {venv}/bin/activate\n")
    sock = Path(tempfile.mkdtemp(prefix="pbvs-", dir="/tmp"))  # a tmux server with this HOME
    cli.env.update(HOME=str(home), TMUX_TMPDIR=str(sock))
    try:
        result = cli.json(
            "probe",
            "env-propagation",
            "--method",
            "tmux,direct,sitecustomize",
            "--python",
            "python3",
            "--json",
        )
    finally:
        subprocess.run(
            ["tmux", "kill-server"],
            env={**os.environ, "TMUX_TMPDIR": str(sock)},
            capture_output=True,
            timeout=20,
        )
        shutil.rmtree(sock, ignore_errors=True)
    assert result["errors"] == {}
    assert cells(result, "NCCL_P2P_LEVEL", "direct")["python"] == "absent"
    if imported != str(site / "sitecustomize.py"):
        assert cells(result, "NCCL_P2P_LEVEL", "tmux")["python"] == "absent"
        shadowed = hints(result, "sitecustomize-shadowed")["NCCL_P2P_LEVEL"]
        assert f"{site}/sitecustomize.py:2 sets NCCL_P2P_LEVEL but never runs" in shadowed
        assert f"imports {imported} first" in shadowed
        return
    assert cells(result, "NCCL_P2P_LEVEL", "tmux")["python"] == "present"
    assert cells(result, "NCCL_P2P_LEVEL", "tmux")["shell"] == "absent"
    message = hints(result, "python-startup")["NCCL_P2P_LEVEL"]
    assert message.startswith(f"{site}/sitecustomize.py:2 sets NCCL_P2P_LEVEL when {venv}/bin/")
    assert "(its sitecustomize): in tmux NCCL_P2P_LEVEL is set" in message
    assert "direct, sitecustomize run" in message and "which does not run it" in message
    assert any(
        "sitecustomize.py:2 (Python start-up" in s
        for s in result["sources"]["NCCL_P2P_LEVEL"]["host"]
    )
