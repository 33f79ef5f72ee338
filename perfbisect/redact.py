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


_TOML_ASSIGNMENT = re.compile(r"""^(\s*["']?([A-Za-z0-9_.\-]+)["']?\s*=\s*)(.+)$""")


def redact_toml(text: str) -> str:
    """The experiment file as stored: values of secret-looking keys replaced, lines kept."""
    lines = []
    for line in text.splitlines():
        match = _TOML_ASSIGNMENT.match(line)
        if match and is_secret(match.group(2)):
            line = f'{match.group(1)}"{REDACTED}"'
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
