"""The PNG plot of a report: every launch, each configuration's interval in its verdict's
colour (a legend entry for every verdict present), the threshold, the named culprit."""

from __future__ import annotations

from pathlib import Path

from perfbisect.bisect.report.report_model import Report
from perfbisect.errors import UsageError

COLOURS = {
    "good": "tab:green",
    "bad": "tab:red",
    "intermediate": "tab:cyan",
    "unclear": "tab:orange",
    "skip": "tab:purple",
}


def write_plot(report: Report, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'perfbisect[plot]'") from None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labelled: set[str] = set()
    for point in report.path:
        x = point.position
        verdict = point.verdict.value
        label = verdict if verdict not in labelled else None
        labelled.add(verdict)
        if point.ms is None:
            ax.axvline(x, color=COLOURS[verdict], alpha=0.4, linestyle=":", label=label)
            continue
        ms = point.ms
        ax.errorbar(
            [x],
            [ms.median],
            yerr=[[ms.median - ms.lo], [ms.hi - ms.median]],
            fmt="o",
            color=COLOURS[verdict],
            capsize=3,
            label=label,
        )
        # every launch: those in the configuration's numbers as dots, those set aside (slow,
        # or in a burst) as crosses (reports before version 3 list only the former)
        kept = [u.value for u in point.launches if u.kept] or list(point.launch_values)
        aside = [u.value for u in point.set_aside]
        for values, marker, name in ((kept, ".", "launch"), (aside, "x", "launch set aside")):
            if values:
                ax.plot(
                    [x] * len(values),
                    values,
                    marker,
                    color="grey",
                    alpha=0.6,
                    label=name if name not in labelled else None,
                )
                labelled.add(name)
    if report.threshold_ms is not None:
        ax.axhline(report.threshold_ms, color="black", linestyle="--", label="threshold")
    if report.culprit is not None:
        ax.axvline(report.culprit.position - 0.5, color="tab:red", alpha=0.4, label="first bad")
    ax.set_xlabel("position on the path (good -> bad)")
    ax.set_ylabel(report.metric)
    ax.set_title(f"perfbisect session {report.session}: {report.status.value}")
    ax.legend(loc="best")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write: {exc.strerror}") from None
    finally:
        plt.close(fig)
