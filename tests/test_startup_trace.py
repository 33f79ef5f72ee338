"""The start-up trace's reading of real bash xtrace output: which line set each variable."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from perfbisect.probes.startup_trace import parse, wrapper


def traced(home: Path, world: str) -> dict[str, str]:
    out = home / f"trace-{world}"
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "SHELL": "/bin/bash", "USER": "u"}
    subprocess.run(["sh", "-c", wrapper(world, str(out))], env=env, check=True, timeout=60)
    return {k: v.where() for k, v in parse(out.read_text(), str(home)).items()}


def test_each_variable_gets_the_line_that_set_it(tmp_path: Path) -> None:
    (tmp_path / "inc.sh").write_text("\nexport FROM_COMPUTED=1\n")
    (tmp_path / ".bashrc").write_text(
        "export BEFORE_GUARD=1\n"  # 1
        '[ -z "$PS1" ] && return\n'  # 2
        "eval \"$(printf 'export FROM_EVAL=1\\nX=2\\nexport ALSO_EVAL=1\\n')\"\n"  # 3
        "source <(printf 'export FROM_PROCSUB=1\\n')\n"  # 4
        'f=inc.sh; . "$HOME/$f"\n'  # 5
        "LATER=1\n"  # 6
        "export LATER\n"  # 7: the value came from line 6
    )
    (tmp_path / ".profile").write_text(". ~/.bashrc\n")
    login = traced(tmp_path, "login")
    assert login["FROM_EVAL"] == "~/.bashrc:3 (via ~/.profile:1)"
    assert login["ALSO_EVAL"] == "~/.bashrc:3 (via ~/.profile:1)"  # not the eval text's line 3
    assert login["FROM_PROCSUB"] == "~/.bashrc:4 (via ~/.profile:1)"
    assert login["FROM_COMPUTED"] == "~/inc.sh:2 (via ~/.profile:1 -> ~/.bashrc:5)"
    assert login["LATER"] == "~/.bashrc:6 (via ~/.profile:1)"
    # `ssh host cmd`: ~/.bashrc returns at its guard.
    ssh = traced(tmp_path, "ssh-cmd")
    assert ssh["BEFORE_GUARD"] == "~/.bashrc:1" and "FROM_EVAL" not in ssh
