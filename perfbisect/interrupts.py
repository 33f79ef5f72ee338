"""Ctrl-C that is never lost.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside a
callback whose exceptions Python ignores (logging's lock release that runs after every fork,
i.e. whenever a subprocess is spawned; a ``__del__``), the exception is printed as "Exception
ignored in ..." and dropped, and a session would run on to its end. The handler installed here
also records the request, and ``check()``, called before every launch stage, raises it again.
Teardown never calls ``check()``: stopping what was started must not be interrupted by it.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_requested = threading.Event()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _requested.set()
    raise KeyboardInterrupt


def install() -> None:
    """Take over SIGINT from Python's default handler (in the main thread; an embedding
    program's own handler is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        _requested.clear()
        signal.signal(signal.SIGINT, _on_sigint)


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed (also when its first delivery was lost)."""
    if _requested.is_set():
        raise KeyboardInterrupt
