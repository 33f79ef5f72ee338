"""Waiting for a served process to become ready, polled from the host it runs on."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Mapping

from perfbisect.errors import StepFailed
from perfbisect.hosts.base import Host, HostProcess
from perfbisect.redact import redact_text

# Run on a remote host with its python3: prints the HTTP status, or the error.
_PROBE = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print("error", e)
"""

START_GRACE_S = 1.0  # without a readiness URL: a server that dies at once shows it by then
LOG_PREFIX = "log:"  # a readiness "URL" of this form waits for that text in the server's log
LOG_WINDOW_LINES = 400


def http_status(host: Host, url: str) -> str:
    """'200', 'HTTP 503', or why nothing answered."""
    if not host.is_local:
        result = host.run(["python3", "-c", _PROBE, url], timeout_s=30)
        return result.output.strip() or "no answer"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))


def _died(process: HostProcess, secrets: Mapping[str, str]) -> StepFailed:
    tail = redact_text(process.log_tail(10), secrets)
    return StepFailed(
        "serve", f"server exited with code {process.poll()} before it was ready; log tail:\n{tail}"
    )


RAISE_TIMEOUT = "a slow start needs a larger [target] timeout_s"


def wait_ready(
    host: Host,
    url: str | None,
    process: HostProcess,
    timeout_s: float,
    secrets: Mapping[str, str] | None = None,
) -> float:
    """Poll ``url`` until it answers 200 (or, for ``log:TEXT``, until TEXT is in the server's
    log); fail fast if the served process dies."""
    secrets = secrets or {}
    start = time.monotonic()
    if url is None:
        time.sleep(START_GRACE_S)
        if process.poll() is not None:
            raise _died(process, secrets)
        return time.monotonic() - start
    deadline = start + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise _died(process, secrets)
        if url.startswith(LOG_PREFIX):
            if url[len(LOG_PREFIX) :] in process.log_tail(LOG_WINDOW_LINES):
                return time.monotonic() - start
            time.sleep(0.5)
            continue
        last = http_status(host, url)
        if last == "200":
            return time.monotonic() - start
        time.sleep(0.2)
    if url.startswith(LOG_PREFIX):
        raise StepFailed(
            "ready",
            f"the server log did not show {url[len(LOG_PREFIX) :]!r} within {timeout_s:.0f}s "
            f"({RAISE_TIMEOUT}); log tail:\n{redact_text(process.log_tail(5), secrets)}",
        )
    raise StepFailed(
        "ready",
        f"{url} did not answer 200 within {timeout_s:.0f}s (last: {last}; {RAISE_TIMEOUT})",
    )
