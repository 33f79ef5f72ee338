"""The HTML report's chart of a session's launches: hand-written SVG (no script, no CDN), with
round tick values on both axes and failed launches in a band of their own above the values
(a launch that measured nothing has no place on the value axis)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from perfbisect.bisect.report.report_model import Report
from perfbisect.formatting import cfg, num, short_hashes
from perfbisect.store.history import LaunchView

COLOURS = {
    "good": "#2ca02c",
    "bad": "#d62728",
    "intermediate": "#17becf",
    "unclear": "#ff7f0e",
    "skip": "#9467bd",
    "failed": "#555555",
}


def esc(value: Any) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def host_of(snapshot: Mapping[str, Any]) -> str:
    """Where a launch ran, as its snapshot names it."""
    return str(snapshot.get("host") or snapshot.get("address") or "-")


def nice_step(span: float, count: int) -> float:
    """The round step (1, 2 or 5 times a power of ten) that cuts ``span`` into at most
    ``count`` parts."""
    raw = span / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values from a multiple of the step at or below ``lo`` to one at or above ``hi``."""
    if hi - lo <= abs(hi) * 1e-9:  # one value (to a float's last digits): a span around it
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, count)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    last = max(last, first + 1)
    digits = _digits(step) + 3  # i * step to the step's digits: 0.3, not 0.30000000000000004
    return [round(i * step, digits) for i in range(first, last + 1)]


def _digits(step: float) -> int:
    """The decimals a multiple of ``step`` needs."""
    return max(0, -math.floor(math.log10(step) + 1e-9))


def tick_text(value: float, step: float) -> str:
    """A tick's value to its step's digits: 0.3, not 0.30000000000000004; 20, not 20.0."""
    return f"{value:.{_digits(step)}f}"


def chart(
    report: Report,
    launches: Sequence[LaunchView],
    snapshots: Mapping[int, Mapping[str, Any]],
    width: int = 960,
    height: int = 380,
) -> str:
    """Every launch as one mark in the verdict colour of its configuration, with its value,
    host and time as title text; failed launches as crosses in the 'failed' band; the
    threshold and the culprit as lines. The SVG scales down to narrow windows."""
    verdict_of = {cfg(p.config): p.verdict.value for p in report.path}
    position_of = {cfg(p.config): p.position for p in report.path}
    values = [v.value for v in launches if v.value is not None]
    if report.threshold_ms is not None:
        values.append(report.threshold_ms)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    margin = (hi - lo) * 0.04  # no mark sits on the frame
    y_ticks = ticks(lo - margin, hi + margin)
    lo, hi = y_ticks[0], y_ticks[-1]
    failed = [v for v in launches if v.value is None]
    band = 28 if failed else 0
    left, right, bottom = 64, 16, 52
    top = 12 + band + (8 if failed else 0)  # the plot area starts below the failed band
    n = max(report.path_length - 1, 1)
    x_step = max(1.0, nice_step(n, 10))
    x_ticks = [i * x_step for i in range(math.floor(n / x_step) + 1)]

    def x(position: float) -> float:
        return left + (width - left - right) * position / n

    def y(value: float) -> float:
        return top + (height - top - bottom) * (hi - value) / (hi - lo)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
        f"width='{width}' height='{height}' role='img' class='chart'>"
    ]
    y_step = y_ticks[1] - y_ticks[0]
    for value in y_ticks:
        parts.append(
            f"<line x1='{left}' x2='{width - right}' y1='{y(value):.1f}' y2='{y(value):.1f}' "
            f"stroke='#eee'/><text class='ytick' x='{left - 6}' y='{y(value) + 4:.1f}' "
            f"font-size='11' text-anchor='end'>{tick_text(value, y_step)}</text>"
        )
    base = height - bottom
    for position in x_ticks:
        parts.append(
            f"<line x1='{x(position):.1f}' x2='{x(position):.1f}' y1='{base}' y2='{base + 4}' "
            f"stroke='#999'/><text class='xtick' x='{x(position):.1f}' y='{base + 16}' "
            f"font-size='11' text-anchor='middle'>{position:.0f}</text>"
        )
    parts.append(
        f"<rect x='{left}' y='{top}' width='{width - left - right}' height='{base - top}' "
        "fill='none' stroke='#ccc'/>"
        f"<text x='{(width + left) / 2:.0f}' y='{height - 8}' font-size='12' text-anchor='middle'>"
        "position on the path (good → bad)</text>"
        f"<text x='14' y='{(top + base) / 2:.0f}' font-size='12' text-anchor='middle' "
        f"transform='rotate(-90 14 {(top + base) / 2:.0f})'>{esc(report.metric)}</text>"
    )
    band_y = 12 + band / 2
    if failed:
        parts.append(
            f"<rect class='failed-band' x='{left}' y='12' width='{width - left - right}' "
            f"height='{band}' fill='#f4f4f4'/><text class='failed-label' x='{left - 6}' "
            f"y='{band_y + 4:.1f}' font-size='11' text-anchor='end'>failed</text>"
        )
    if report.threshold_ms is not None:
        ty = y(report.threshold_ms)
        parts.append(
            f"<line class='threshold' x1='{left}' x2='{width - right}' y1='{ty:.1f}' y2='{ty:.1f}' "
            f"stroke='#000' stroke-dasharray='6 4'><title>threshold {num(report.threshold_ms)}"
            f"</title></line><text x='{width - right - 4}' y='{ty - 4:.1f}' font-size='11' "
            f"text-anchor='end'>threshold {num(report.threshold_ms)}</text>"
        )
    if report.culprit is not None:
        cx = (x(report.culprit.position) + x(report.culprit.position - 1)) / 2
        parts.append(
            f"<line x1='{cx:.1f}' x2='{cx:.1f}' y1='{top}' y2='{base}' "
            "stroke='#d62728' stroke-opacity='0.35' stroke-width='3'><title>first bad "
            f"{esc(short_hashes(cfg(report.culprit.first_bad)))}</title></line>"
        )
    counts: dict[int, int] = {}
    for view in launches:
        position = position_of.get(cfg(view.axes), view.position)
        counts[position] = counts.get(position, 0) + 1
    repeats: dict[int, int] = {}
    for view in launches:
        key = cfg(view.axes)
        position = position_of.get(key, view.position)
        k = repeats.get(position, 0)
        repeats[position] = k + 1
        # repeated launches of one configuration side by side, so that each stays visible
        cx = x(position) + (k - (counts[position] - 1) / 2) * 6.0
        when = view.started_at.isoformat(timespec="seconds") + "Z"
        if view.value is None:
            title = f"launch {view.id} ({view.purpose}) failed: {view.stage}: {view.reason or ''}"
            parts.append(
                f"<g class='launch failed'><title>{esc(title[:300])}; {esc(when)}</title>"
                f"<path d='M{cx - 4:.1f} {band_y - 4:.1f} l8 8 m0 -8 l-8 8' "
                f"stroke='{COLOURS['failed']}' stroke-width='2'/></g>"
            )
            continue
        colour = COLOURS.get(verdict_of.get(key, "unclear"), "#999")
        title = (
            f"launch {view.id} ({view.purpose}): {num(view.value)} {report.metric}; "
            f"host {host_of(snapshots.get(view.id, {}))}; {when}; {key}"
        )
        parts.append(
            f"<circle class='launch' cx='{cx:.1f}' cy='{y(view.value):.1f}' r='4.5' "
            f"fill='{colour}' fill-opacity='0.8' stroke='#333' stroke-width='0.5'>"
            f"<title>{esc(title)}</title></circle>"
        )
    parts.append("</svg>")
    present = sorted({p.verdict.value for p in report.path}) + (["failed"] if failed else [])
    legend = "".join(
        f"<span><i style='background:{COLOURS[v]}'></i>{esc(v)}</span>" for v in present
    )
    return "".join(parts) + f"<div class='legend'>{legend}</div>"
