"""Redaction of secret-looking values: names are kept, values never reach output or the store."""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted>"


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret(k) else v) for k, v in env.items()}


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """Replace every secret value of ``env`` that occurs in ``text`` (e.g. a log tail)."""
    for name, value in env.items():
        if is_secret(name) and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text
