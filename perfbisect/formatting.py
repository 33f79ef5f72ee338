"""How measured values and configurations are written for people, the same in the terminal
and in the HTML report: numbers to meaningful digits, whole configurations, stage times."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from perfbisect.bisect.report.report_model import Interval, MergeDescent, Step
from perfbisect.bisect.stats import posterior_percent
from perfbisect.targets.sglang.startup import phases_text


def num(value: float | None) -> str:
    """A measured number to meaningful digits (never 29.194000000000003)."""
    if value is None:
        return "-"
    return f"{value:.4g}"


def cfg(config: Mapping[str, Any]) -> str:
    """A whole configuration (nothing cut): a commit as its sha, other axes as name=value."""
    return ",".join(
        str(value) if key == "commit" else f"{key}={value}" for key, value in config.items()
    )


# Tables show a commit as git's long short form: 12 hex digits name a commit uniquely in any
# real repository and still fit a 100-column terminal; JSON and `--full-hashes` keep all 40.
SHORT_SHA = 12
# A whole SHA-1 or SHA-256 object name standing as a value of its own (after a start, a space,
# `=` or `,`; before an end, a space or a punctuation mark): never part of a path or a longer
# word, which stay whole.
_FULL_SHA = re.compile(r"(?<![^\s=,(])([0-9a-f]{40}(?:[0-9a-f]{24})?)(?=$|[\s,;)]|[.:](?:\s|$))")


def short_hashes(text: str) -> str:
    """``commit=c1fda1d002f4e69d...`` as ``commit=c1fda1d002f4``: every full commit hash in
    ``text`` cut to its first ``SHORT_SHA`` digits (git accepts the prefix back)."""
    return _FULL_SHA.sub(lambda m: m.group(1)[:SHORT_SHA], text)


def interval(ms: Interval | None) -> str:
    if ms is None:
        return "-"
    return f"{num(ms.median)} [{num(ms.lo)}, {num(ms.hi)}] n={ms.launches}"


def verification_text(step: Step) -> str:
    """``yes (first bad launched again twice; last good not re-launched: ...)``: whether the
    step is verified and exactly what its verification launched."""
    ran = f" ({step.verification})" if step.verification else ""
    if step.verified:
        return f"yes{ran}"
    return f"no: {step.verify_note or 'no reason recorded'}{ran}"


def stage_times(timings: Mapping[str, Any]) -> str:
    """``build 0.1s, ready 56.0s (workers 17.0s, graphs 1.0s, ...), measure 30.2s`` from a
    launch's stored timings: the ready stage with its start-up phases where they were read
    from the server's log (an SGLang launch)."""
    phases = phases_text(timings)
    parts = [
        f"{k.removesuffix('_s')} {float(v):.1f}s"
        + (f" ({phases})" if k == "ready_s" and phases else "")
        for k, v in timings.items()
        if k.endswith("_s") and isinstance(v, (int, float))
    ]
    return ", ".join(parts) or "-"


def clock(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` for elapsed and estimated times."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def confidence_text(confidence: float) -> str:
    """A crossing's posterior for people: never "100%" (a posterior of 0.9999996 is not
    certainty), and what it is a probability of."""
    return (
        f"{posterior_percent(confidence)} that this is the first configuration past the threshold (every "
        "launch weighed in the order it ran, bursts of slow launches allowed for)"
    )


def search_text(search: str) -> str:
    """How the search went, as every view says it: its mode in words, and the prior it started
    from when one was given (``Report.search`` holds "<mode>; <prior>")."""
    mode, _, prior = search.partition("; ")
    return (
        mode
        + (
            " (the configuration that crosses the threshold; `--all-steps` maps every step)"
            if mode == "crossing first"
            else " (every level change searched)"
        )
        + (f"; {prior}" if prior else "")
    )


def descent_lines(descent: Sequence[MergeDescent]) -> list[str]:
    """The search inside a merge, one line per branch, as every view prints it: which positions
    hold the branch's commits, and what was found there (the commit that crosses, its interval
    and the last good before it), or why nothing inside was named."""
    lines = []
    for d in descent:
        where = (
            f" (positions {d.positions[0]}-{d.positions[1]}: the merge base "
            f"{d.base[:12]} and the branch's {d.commits} commits to {d.head[:12]})"
            if d.positions
            else ""
        )
        head = f"inside the merge at position {d.merge_position}{where}: "
        c = d.culprit
        if c is None:
            lines.append(head + d.message)
            continue
        subject = f" {c.commit.subject}" if c.commit else ""
        lines.append(
            head + f"first bad {cfg(c.first_bad)}{subject} {interval(c.first_bad_ms)} "
            f"(position {c.position}); last good {cfg(c.last_good)} {interval(c.last_good_ms)}; "
            f"verified: {verification_text(c)}"
        )
    return lines
