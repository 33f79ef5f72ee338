"""Ctrl-C that is never lost, and SIGTERM / SIGHUP stopped the way Ctrl-C is.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside a
callback whose exceptions Python ignores (logging's lock release that runs after every fork,
i.e. whenever a subprocess is spawned; a ``__del__``), the exception is printed as "Exception
ignored in ..." and dropped, and a session would run on to its end. The handler installed here
also records the request, and ``check()``, called before every launch stage, raises it again.
Teardown never calls ``check()``: stopping what was started must not be interrupted by it.

SIGTERM (Slurm's scancel and time limit, `timeout`, `kill`, systemd, a CI job cancelled) and
SIGHUP (the ssh session or terminal perfbisect ran in closed) killed the process outright by
default: no teardown ran, so a launched server (an SGLang server holding its GPUs, in its own
tmux session or process group) outlived perfbisect, and the session stayed "running". They now
raise ``Terminated`` (a KeyboardInterrupt) like Ctrl-C: the launch is torn down, the session
saved as interrupted, and the exit status is 128 + the signal's number. A signal someone set
to be ignored (``nohup`` ignores SIGHUP) or handled stays so.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_requested = threading.Event()
_received: list[int] = []  # the signal that stopped the session (the first one)
_TERMINATING = (signal.SIGTERM, signal.SIGHUP)
# The exit statuses of a process stopped by one of the signals taken over here (128 + it).
STOPPED_EXIT_CODES = frozenset(128 + s for s in (signal.SIGINT, *_TERMINATING))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the session stops as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if not _requested.is_set():
        _received.append(signum)
    _requested.set()
    _raise(signum)


def install() -> None:
    """Take over SIGINT from Python's default handler, and SIGTERM and SIGHUP where they still
    kill the process (in the main thread; an embedding program's own handlers, and signals set
    to be ignored, are left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return
    _requested.clear()
    _received.clear()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_signal)
    for signum in _TERMINATING:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _on_signal)


def check() -> None:
    """Raise KeyboardInterrupt (``Terminated`` for SIGTERM / SIGHUP) if one was received (also
    when its first delivery was lost)."""
    if _requested.is_set():
        _raise(_received[0] if _received else signal.SIGINT)


def stopped_by(exc: BaseException) -> tuple[str, int]:
    """What stopped the process, for its message, and its exit status (128 + the signal)."""
    if isinstance(exc, Terminated):
        return f"terminated by {signal.Signals(exc.signum).name}", 128 + exc.signum
    return "interrupted", 128 + signal.SIGINT
