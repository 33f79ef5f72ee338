"""Where perfbisect keeps worktrees and logs (overridable with PERFBISECT_CACHE)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    configured = os.environ.get("PERFBISECT_CACHE")
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("perfbisect"))
