"""The perfbisect commands printed for the user to run next (``bisect resume 3``, ``bisect
report 3``), spelled so that they work as printed: the executable as this one was started (its
full path when ``perfbisect`` on PATH is another program, or none: a venv not activated), and
``--db`` when the history is not the one a bare ``perfbisect`` opens."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from perfbisect.store.database import default_url, normalise_url

PROGRAM = "perfbisect"


def executable() -> list[str]:
    """How to start this perfbisect again from the user's shell."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is None or not started.is_file():
        return [PROGRAM]  # embedded (an interpreter's -c, a test's in-process call)
    if started.name == "__main__.py":  # python -m perfbisect
        return [sys.executable, "-m", PROGRAM]
    on_path = shutil.which(PROGRAM)
    try:
        same = on_path is not None and os.path.samefile(on_path, started)
    except OSError:
        same = False
    return [PROGRAM] if same else [str(started.resolve())]


def db_option(db_url: str | None) -> list[str]:
    """``--db`` and the history's location, unless it is the one used without the option
    (``$PERFBISECT_DB`` or the default file). A password in a URL is not printed."""
    if not db_url:
        return []
    url = normalise_url(db_url)
    if url == normalise_url(default_url()):
        return []
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return ["--db", url[len("sqlite:///") :]]
    from sqlalchemy.engine import make_url

    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: the store would have refused it already
        shown = url
    return ["--db", shown]


def command_line(*args: str, db_url: str | None = None) -> str:
    """A perfbisect command line to print, each word quoted for a POSIX shell."""
    return shlex.join([*executable(), *db_option(db_url), *args])
