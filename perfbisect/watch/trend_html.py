"""A series' trend as one self-contained HTML page: every launch as a mark, each commit's value
as a line, the change points marked, each linked to its bisection session's report (written
next to the page) when one ran. Hand-written SVG, no script, like ``html_report``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfbisect.formatting import num
from perfbisect.html_chart import esc
from perfbisect.html_report import _page, _table, session_html
from perfbisect.store.database import Store
from perfbisect.store.watch import ChangeSession
from perfbisect.watch.analysis import SeriesAnalysis

WIDTH, HEIGHT = 960, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40


def _chart(analysis: SeriesAnalysis, links: dict[int, str]) -> str:
    points = analysis.points
    values = [la.value for p in points for la in p.launches if la.value is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    lo, hi = lo - pad, hi + pad
    n = max(len(points) - 1, 1)

    def x(i: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * i / n

    def y(v: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (hi - v) / (hi - lo)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}'>"]
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        parts.append(
            f"<line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y(v):.1f}' y2='{y(v):.1f}' "
            f"stroke='#eee'/><text x='{LEFT - 6}' y='{y(v) + 4:.1f}' font-size='11' "
            f"text-anchor='end'>{num(v)}</text>"
        )
    parts.append(
        f"<text x='{(WIDTH + LEFT) / 2:.0f}' y='{HEIGHT - 8}' font-size='12' "
        f"text-anchor='middle'>commits of {esc(analysis.series.branch)}, oldest first</text>"
    )
    index = {p.commit: i for i, p in enumerate(points)}
    for change in analysis.changes:
        i = index.get(change.stored.commit_after)
        if i is None:
            continue
        cx = (x(i) + x(i - 1)) / 2
        colour = "#d62728" if change.crosses else "#ff7f0e"
        label = f"change {change.stored.id}: {change.change.rel_change:+.1%}"
        mark = (
            f"<g class='change'><line x1='{cx:.1f}' x2='{cx:.1f}' y1='{TOP}' "
            f"y2='{HEIGHT - BOTTOM}' stroke='{colour}' stroke-width='3' stroke-opacity='0.5'/>"
            f"<text x='{cx + 4:.1f}' y='{TOP + 12}' font-size='11' fill='{colour}'>"
            f"{esc(label)}</text><title>{esc(label)}</title></g>"
        )
        href = links.get(change.stored.id)
        parts.append(f"<a href='{esc(href)}'>{mark}</a>" if href else mark)
    line = " ".join(f"{x(i):.1f},{y(p.value):.1f}" for i, p in enumerate(points))
    parts.append(f"<polyline points='{line}' fill='none' stroke='#1f77b4' stroke-width='1.5'/>")
    for i, p in enumerate(points):
        for la in p.launches:
            title = f"{p.commit[:12]} launch {la.launch_id}: " + (
                num(la.value) if la.value is not None else f"failed: {la.reason or ''}"
            )
            cy = y(la.value) if la.value is not None else HEIGHT - BOTTOM + 2
            fill = "#1f77b4" if la.value is not None else "#555"
            parts.append(
                f"<circle class='launch' cx='{x(i):.1f}' cy='{cy:.1f}' r='3' fill='{fill}' "
                f"fill-opacity='0.6'><title>{esc(title)}</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def write_trend(
    store: Store,
    analyses: Sequence[SeriesAnalysis],
    sessions: dict[int, list[ChangeSession]],
    path: Path,
) -> list[Path]:
    """Write the page (one chart and table per series) and each linked session's report;
    returns every file written."""
    written = [path]
    body = ["<h1>perfbisect watch: change points</h1>"]
    for analysis in analyses:
        links: dict[int, str] = {}
        for s in sessions.get(analysis.series.id, []):
            report = path.with_name(f"{path.stem}-session-{s.session_id}.html")
            report.write_text(session_html(store, str(s.session_id)))
            written.append(report)
            links[s.change_id] = report.name
        series = analysis.series
        body.append(
            f"<h2>series {series.id}: {esc(series.label)} ({esc(series.metric)}, "
            f"{len(analysis.points)} commits, threshold {analysis.threshold:.1%})</h2>"
        )
        body.append(_chart(analysis, links))
        rows = []
        for c in analysis.changes:
            link = links.get(c.stored.id)
            rows.append(
                [
                    esc(c.stored.id),
                    f"<code>{esc(c.stored.commit_before[:12])}</code> → "
                    f"<code>{esc(c.stored.commit_after[:12])}</code>",
                    f"{num(c.change.before.mean)} [{num(c.change.before.lo)}, "
                    f"{num(c.change.before.hi)}]",
                    f"{num(c.change.after.mean)} [{num(c.change.after.lo)}, "
                    f"{num(c.change.after.hi)}]",
                    esc(f"{c.change.rel_change:+.1%}"),
                    esc(f"{c.change.pvalue:.2g}"),
                    "yes" if c.crosses else "no",
                    f"<a href='{esc(link)}'>session report</a>" if link else "-",
                ]
            )
        body.append(
            _table(
                ["id", "commits", "before", "after", "change", "p", "past threshold", "bisection"],
                rows,
                raw=True,
            )
            if rows
            else "<p class='note'>no change point</p>"
        )
    path.write_text(_page("perfbisect watch", "".join(body)))
    return written
