"""The error hierarchy.

Every error a user can cause or fix derives from :class:`PerfbisectError`; the CLI prints its
message on one line (no traceback) and exits with its ``exit_code``. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations


class PerfbisectError(Exception):
    """Root of all errors that are reported to the user without a traceback."""

    exit_code = 1


class UsageError(PerfbisectError):
    """Raised when command-line arguments are malformed (bad spec syntax, unknown axis)."""

    exit_code = 2


class ExperimentError(PerfbisectError):
    """Raised when the experiment file is missing, malformed or incomplete.

    The message names the file, the key and, when known, the line. Input the user must fix:
    exit 2, like a usage error.
    """

    exit_code = 2


class RevisionError(PerfbisectError):
    """Raised when a revision does not resolve, or good/bad are not an ancestor pair (exit 2)."""

    exit_code = 2


class MetricMatchedNothing(ExperimentError):
    """Raised when both endpoints ran and neither's output held a single sample: the metric's
    pattern (or the timer) is wrong, not the code. Input to fix, exit 2."""


# How a launch whose output held no sample says so (its reason starts with it, after the stage).
NO_SAMPLES = "no samples: "


class StoreError(PerfbisectError):
    """Raised when the history database cannot be opened, is newer than us, or is busy."""


class DatabaseMissing(StoreError):
    """Raised when a command that only reads the history is given one that does not exist
    (a mistyped ``--db``): input to fix, exit 2."""

    exit_code = 2


class SessionBusy(StoreError):
    """Raised when another bisect session is running on the same database."""


class SessionNotFound(StoreError):
    """Raised when a session id or name does not exist in the store."""


class StepFailed(PerfbisectError):
    """Raised by targets, hosts and launchers when one step cannot produce samples.

    The driver catches it and records the configuration as SKIP with ``reason``; it never
    ends a search on its own.
    """

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


class HostError(StepFailed):
    """Raised when a host refuses us: unknown or changed host key, failed authentication, a
    tool missing on the host. Retrying does not help; the message says what to fix. Inside a
    bisect the step becomes SKIP with this reason; a probe exits with it."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__("host", f"{address}: {reason}")
        self.address = address


class HostUnreachable(HostError):
    """Raised when a host does not answer within its retry budget (reboot, network)."""


_ERROR_LINE = (
    "error",
    "Error",
    "ERROR",
    "Exception",
    "exception",
    "failed",
    "Failed",
    "FAILED",
    "Traceback",
    "not found",
    "No such",
    "denied",
    "refused",
    "Killed",
    "fatal",
)


def lead_with_error(reason: str) -> str:
    """A failure's reason with its error line first: a traceback's last line, or the last line
    that looks like an error, ahead of the context it came with (a log tail)."""
    lines = [line.rstrip() for line in reason.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return reason.strip()
    head = lines[0]
    candidates = [ln for ln in lines[1:] if any(w in ln for w in _ERROR_LINE)]
    error = next(
        (
            ln
            for ln in reversed(lines)
            if ln
            and not ln.startswith((" ", "\t"))
            and ":" in ln
            and any(w in ln for w in _ERROR_LINE)
        ),
        candidates[-1] if candidates else None,
    )
    if error is None or error == head:
        return reason.strip()
    return f"{error.strip()} ({head.strip()} ... {len(lines)} lines)"
