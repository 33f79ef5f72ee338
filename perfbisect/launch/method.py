"""The launch methods' names, defined once (the experiment file, the `launch` axis and the
launcher registry all read them from here)."""

from __future__ import annotations

from enum import Enum

from perfbisect.errors import UsageError


class Method(str, Enum):
    DIRECT = "direct"
    TMUX = "tmux"
    SSH = "ssh"
    SITECUSTOMIZE = "sitecustomize"

    @classmethod
    def parse(cls, text: str) -> Method:
        try:
            return cls(text.strip())
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise UsageError(f"unknown launch method {text!r} (known: {known})") from None
