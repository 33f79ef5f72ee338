"""A session (or two launches) as one self-contained HTML file: styles and the chart inline
(hand-written SVG, no script, no CDN), so it opens anywhere without network access and can be
attached to an issue as it is.

It reads the stored report (``report_model.Report``) and the session's launches with their
snapshots; everything in the store is already redacted, and the commands shown are the ones
recorded at launch time (secrets redacted there).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from perfbisect.bisect.report_model import Report, Step
from perfbisect.errors import StoreError
from perfbisect.formatting import cfg, confidence_text, interval, num, stage_times
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    diff_snapshots,
    find_session,
    launch_with_samples,
    session_launches,
    session_snapshots,
)

COLOURS = {
    "good": "#2ca02c",
    "bad": "#d62728",
    "intermediate": "#17becf",
    "unclear": "#ff7f0e",
    "skip": "#9467bd",
    "failed": "#555555",
}
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top;text-align:left;word-break:break-word} .wide{overflow-x:auto} th{background:#f4f4f4} code,.mono{font-family:ui-monospace,Menlo,monospace;
font-size:12px;word-break:break-all} .verdict{font-weight:600} .found{color:#2ca02c} .ambiguous,
.endpoints-not-reproduced{color:#b8860b} .note{color:#666} details{margin:2px 0} svg{background:#fff;
border:1px solid #ddd} .legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px}
"""


def esc(value: Any) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], raw: bool = False) -> str:
    """Rows are escaped unless ``raw`` (cells already HTML)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if raw else esc(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return (
        f"<div class='wide'><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'><title>{esc(title)}</title>"
        f"<style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


_GRAPH = re.compile(r"verify in CUDA graphs: ([0-9.]+%)")
_ACCEPT = re.compile(r"accept len(?:gth)? ([0-9.]+)")


def _flag(flags: Sequence[Any], pattern: re.Pattern[str]) -> str:
    for flag in flags:
        found = pattern.search(str(flag))
        if found:
            return found.group(1)
    return "-"


def _host(snapshot: Mapping[str, Any]) -> str:
    return str(snapshot.get("host") or snapshot.get("address") or "-")


def chart(
    report: Report,
    launches: Sequence[LaunchView],
    snapshots: Mapping[int, Mapping[str, Any]],
    width: int = 960,
    height: int = 360,
) -> str:
    """Every launch as one mark (failed ones as crosses on the bottom axis), in the verdict
    colour of its configuration, with its value, host and time as title text; the threshold
    and the culprit as lines."""
    verdict_of = {cfg(p.config): p.verdict.value for p in report.path}
    position_of = {cfg(p.config): p.position for p in report.path}
    values = [v.value for v in launches if v.value is not None]
    if report.threshold_ms is not None:
        values.append(report.threshold_ms)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    lo, hi = lo - pad, hi + pad
    left, right, top, bottom = 64, 16, 16, 40
    n = max(report.path_length - 1, 1)

    def x(position: int) -> float:
        return left + (width - left - right) * position / n

    def y(value: float) -> float:
        return top + (height - top - bottom) * (hi - value) / (hi - lo)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>"
    ]
    for i in range(5):  # horizontal grid with values
        value = lo + (hi - lo) * i / 4
        parts.append(
            f"<line x1='{left}' x2='{width - right}' y1='{y(value):.1f}' y2='{y(value):.1f}' "
            f"stroke='#eee'/><text x='{left - 6}' y='{y(value) + 4:.1f}' font-size='11' "
            f"text-anchor='end'>{num(value)}</text>"
        )
    parts.append(
        f"<text x='{(width + left) / 2:.0f}' y='{height - 8}' font-size='12' text-anchor='middle'>"
        "position on the path (good → bad)</text>"
        f"<text x='14' y='{(height - bottom) / 2:.0f}' font-size='12' text-anchor='middle' "
        f"transform='rotate(-90 14 {(height - bottom) / 2:.0f})'>{esc(report.metric)}</text>"
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
            f"<line x1='{cx:.1f}' x2='{cx:.1f}' y1='{top}' y2='{height - bottom}' "
            "stroke='#d62728' stroke-opacity='0.35' stroke-width='3'><title>first bad</title></line>"
        )
    repeats: dict[int, int] = {}
    counts: dict[int, int] = {}
    for view in launches:
        counts[position_of.get(cfg(view.axes), view.position)] = (
            counts.get(position_of.get(cfg(view.axes), view.position), 0) + 1
        )
    for view in launches:
        key = cfg(view.axes)
        position = position_of.get(key, view.position)
        k = repeats.get(position, 0)
        repeats[position] = k + 1
        # repeated launches of one configuration side by side, so that each stays visible
        shift = (k - (counts[position] - 1) / 2) * 6.0
        colour = COLOURS.get(verdict_of.get(key, "unclear"), "#999")
        snap = snapshots.get(view.id, {})
        when = view.started_at.isoformat(timespec="seconds") + "Z"
        if view.value is None:
            cx, cy = x(position) + shift, height - bottom + 2
            title = f"launch {view.id} ({view.purpose}) failed: {view.stage}: {view.reason or ''}"
            parts.append(
                f"<g class='launch failed'><title>{esc(title[:300])}; {esc(when)}</title>"
                f"<path d='M{cx - 4:.1f} {cy - 4:.1f} l8 8 m0 -8 l-8 8' stroke='{COLOURS['failed']}' "
                "stroke-width='2'/></g>"
            )
            continue
        title = (
            f"launch {view.id} ({view.purpose}): {num(view.value)} {report.metric}; "
            f"host {_host(snap)}; {when}; {key}"
        )
        parts.append(
            f"<circle class='launch' cx='{x(position) + shift:.1f}' cy='{y(view.value):.1f}' r='4.5' "
            f"fill='{colour}' fill-opacity='0.8' stroke='#333' stroke-width='0.5'>"
            f"<title>{esc(title)}</title></circle>"
        )
    parts.append("</svg>")
    present = sorted({p.verdict.value for p in report.path}) + (
        ["failed"] if any(v.value is None for v in launches) else []
    )
    legend = "".join(
        f"<span><i style='background:{COLOURS[v]}'></i>{esc(v)}</span>" for v in present
    )
    return "".join(parts) + f"<div class='legend'>{legend}</div>"


def _culprit_html(report: Report) -> str:
    c = report.culprit
    if c is None:
        return "<p>No culprit named.</p>"
    commit = (
        f"<br><code>{esc(c.commit.sha)}</code> {esc(c.commit.subject)} — {esc(c.commit.author)}, "
        f"{esc(c.commit.date)}"
        if c.commit
        else ""
    )
    eff = c.effect_ms
    effect = (
        f"{eff.delta:+.4g} {esc(report.metric)} (interval {eff.lo:+.4g} .. {eff.hi:+.4g})"
        if eff
        else "-"
    )
    verified = "yes" if c.verified else f"no — {esc(c.verify_note or 'no reason recorded')}"
    confidence = (
        f"<br><b>confidence:</b> {esc(confidence_text(c.confidence))}"
        if c.confidence is not None
        else ""
    )
    return (
        f"<p><b>culprit ({esc(c.axis)}):</b> <span class='mono'>{esc(cfg(c.first_bad))}</span> "
        f"{esc(interval(c.first_bad_ms))}{commit}<br><b>last good:</b> "
        f"<span class='mono'>{esc(cfg(c.last_good))}</span> {esc(interval(c.last_good_ms))}<br>"
        f"<b>effect:</b> {effect}; <b>verified</b> with interleaved launches: {verified}"
        f"{confidence}</p>"
    )


def _steps_html(steps: Sequence[Step], unit: str) -> str:
    rows = [
        (
            s.axis,
            cfg(s.last_good),
            cfg(s.first_bad),
            interval(s.last_good_ms),
            interval(s.first_bad_ms),
            f"{s.effect_ms.delta:+.4g}" if s.effect_ms else "-",
            "yes" if s.verified else f"no: {s.verify_note or ''}",
            "yes" if s.crosses_threshold else "",
        )
        for s in steps
    ]
    head = [
        "axis",
        "last good",
        "first bad",
        f"last good {unit}",
        f"first bad {unit}",
        "effect",
        "verified",
        "crosses threshold",
    ]
    return _table(head, rows)


def _diff_html(a: Mapping[str, Any], b: Mapping[str, Any], name_a: str, name_b: str) -> str:
    diff = diff_snapshots(a, b)
    if not diff:
        return "<p class='note'>No differences in the environment snapshots.</p>"
    return _table(["key", name_a, name_b], [(k, x, y) for k, x, y in diff])


def _launch_rows(
    launches: Sequence[LaunchView], snapshots: Mapping[int, Mapping[str, Any]]
) -> list[list[str]]:
    rows = []
    for v in launches:
        snap = snapshots.get(v.id, {})
        commands = (snap.get("launch") or {}).get("commands") or {}
        cwd = (snap.get("launch") or {}).get("cwd")
        reproduce = "".join(
            f"<div><b>{esc(stage)}</b>: <code>{esc(command)}</code></div>"
            for stage, command in commands.items()
        )
        if reproduce:
            reproduce = (
                f"<details><summary>commands</summary>"
                f"{f'<div>cd <code>{esc(cwd)}</code></div>' if cwd else ''}{reproduce}</details>"
            )
        timings = stage_times(v.timings)
        value = num(v.value) if v.value is not None else f"failed: {v.stage}: {v.reason or ''}"
        rows.append(
            [
                esc(v.seq),
                esc(v.id),
                esc(v.purpose),
                f"<span class='mono'>{esc(cfg(v.axes))}</span>",
                esc(value[:400]),
                esc(_flag(v.flags, _GRAPH)),
                esc(_flag(v.flags, _ACCEPT)),
                esc(timings),
                esc(_host(snap)),
                esc(v.started_at.isoformat(timespec="seconds") + "Z"),
                f"<span class='mono'>{esc(v.log_path)}</span>{reproduce}",
            ]
        )
    return rows


def _edge_launches(
    report: Report, launches: Sequence[LaunchView]
) -> tuple[LaunchView, LaunchView] | None:
    """The last good launch and the first bad launch of the culprit pair (measured ones)."""
    if report.culprit is None:
        return None
    good = [v for v in launches if v.axes == report.culprit.last_good and v.value is not None]
    bad = [v for v in launches if v.axes == report.culprit.first_bad and v.value is not None]
    if not good or not bad:
        return None
    return good[-1], bad[0]


def session_html(store: Store, ref: str | None) -> str:
    row = find_session(store, ref)
    if row.result is None:
        raise StoreError(
            f"session {row.id} has no report yet (status {row.status}); "
            f"`perfbisect bisect resume {row.id}` finishes it"
        )
    report = Report.from_json(row.result)
    launches = session_launches(store, row.id)
    snapshots = session_snapshots(store, row.id)
    unit = report.metric
    status = report.status.value
    parts = [
        f"<h1>perfbisect session {report.session}{' (' + esc(row.name) + ')' if row.name else ''}: "
        f"<span class='{esc(status)}'>{esc(status)}</span></h1>",
        f"<p>{esc(report.message)}</p>",
        f"<p><b>threshold:</b> {num(report.threshold_ms)} {esc(unit)} "
        f"({'higher' if report.higher_is_better else 'lower'} is better); noise "
        f"{report.noise_rel_sd:.1%} launch-to-launch; {report.evaluations} configurations judged, "
        f"{report.launches} launches ({report.failed_launches} failed); started "
        f"{esc(row.created_at.isoformat(timespec='seconds'))}Z on {esc(row.owner_host)}</p>",
        _culprit_html(report),
        "<h2>Launches on the path</h2>",
        chart(report, launches, snapshots),
    ]
    if report.attribution:
        parts += [
            "<h2>Attribution (axes switched to their bad values)</h2>",
            _table(
                ["axes", "configuration", "verdict", f"effect ({unit})"],
                [
                    ("+".join(a.axes), cfg(a.config), a.verdict.value, num(a.effect_ms))
                    for a in report.attribution
                ],
            ),
            f"<p><b>culprit axes:</b> {esc('; '.join(' + '.join(s) for s in report.culprit_axes))}</p>",
        ]
    if report.steps:
        parts += ["<h2>Steps</h2>", _steps_html(report.steps, unit)]
    parts += [
        "<h2>Configurations evaluated</h2>",
        _table(
            [
                "pos",
                "configuration",
                "verdict",
                f"{unit} median [interval] n",
                "SKIP reason / failures",
            ],
            [
                (
                    esc(p.position),
                    f"<span class='mono'>{esc(cfg(p.config))}</span>",
                    f"<span class='verdict' style='color:{COLOURS[p.verdict.value]}'>"
                    f"{esc(p.verdict.value)}</span>",
                    esc(interval(p.ms)),
                    esc(p.reason or "; ".join(p.failures)),
                )
                for p in report.path
            ],
            raw=True,
        ),
    ]
    fid = report.fidelity
    if fid is not None:
        parts += [
            "<h2>Proxy and full launches</h2>",
            f"<p>{esc(fid.proxy)}; the search ran on {esc(fid.searched_on)} launches "
            f"({fid.proxy_launches} proxy, {fid.full_launches} full)."
            + (f" {esc(fid.fallback)}" if fid.fallback else "")
            + "</p>",
            _table(
                ["last good", "first bad", "full model", "what it showed"],
                [
                    (
                        cfg(c.last_good),
                        cfg(c.first_bad),
                        "confirmed" if c.confirmed else "not confirmed",
                        c.note,
                    )
                    for c in fid.checks
                ],
            ),
        ]
    if report.speculation:
        parts += [
            "<h2>Speculation against no speculation</h2>",
            _table(
                ["end", "configuration", "tokens/s with", "tokens/s without", "speed-up"],
                [
                    (
                        r.end,
                        cfg(r.config),
                        ", ".join(num(v) for v in r.with_tokens_s),
                        ", ".join(num(v) for v in r.without_tokens_s),
                        f"{r.speedup:.2f}x" if r.speedup is not None else "-",
                    )
                    for r in report.speculation
                ],
            ),
        ]
    if report.seen:
        parts += [
            "<h2>Seen, not searched</h2>",
            _table(["from", "to", "what"], [(cfg(u.good), cfg(u.bad), u.why) for u in report.seen]),
        ]
    if report.creep:
        parts += [
            "<h2>Creep</h2>",
            _table(
                ["from", "to", "what"], [(cfg(u.good), cfg(u.bad), u.why) for u in report.creep]
            ),
        ]
    if report.unresolved:
        parts += [
            "<h2>Unresolved</h2>",
            _table(
                ["good", "bad", "why"],
                [(cfg(u.good), cfg(u.bad), u.why) for u in report.unresolved],
            ),
        ]
    edge = _edge_launches(report, launches)
    if edge:
        good, bad = edge
        parts += [
            f"<h2>Environment: last good launch {good.id} vs first bad launch {bad.id}</h2>",
            _diff_html(
                snapshots.get(good.id, {}),
                snapshots.get(bad.id, {}),
                f"launch {good.id}",
                f"launch {bad.id}",
            ),
        ]
    if report.why:
        from perfbisect.explain.html import why_html

        parts.append(why_html(report.why))
    for d in report.drift:
        parts.append(
            f"<p><b>drift:</b> the {esc(d['endpoint'])} endpoint measured "
            f"{num(d['before']['median'])} before and {num(d['now']['median'])} now</p>"
        )
    parts += [
        "<h2>Every launch</h2>",
        _table(
            [
                "#",
                "id",
                "purpose",
                "configuration",
                unit,
                "verify in graphs",
                "accept length",
                "stage times",
                "host",
                "started",
                "log / commands",
            ],
            _launch_rows(launches, snapshots),
            raw=True,
        ),
    ]
    return _page(f"perfbisect session {report.session}", "".join(parts))


def compare_html(store: Store, launch_a: int, launch_b: int) -> str:
    views = [launch_with_samples(store, i) for i in (launch_a, launch_b)]
    rows = []
    for label, getter in (
        ("configuration", lambda v: cfg(v.axes)),
        ("value", lambda v: num(v.value) if v.value is not None else f"failed: {v.reason}"),
        ("purpose", lambda v: v.purpose),
        ("started", lambda v: v.started_at.isoformat(timespec="seconds") + "Z"),
        ("verify in graphs", lambda v: _flag(v.flags, _GRAPH)),
        ("accept length", lambda v: _flag(v.flags, _ACCEPT)),
        ("log", lambda v: v.log_path),
    ):
        rows.append((label, getter(views[0][0]), getter(views[1][0])))
    samples = [s for _, s, _ in views]
    rows.append(("samples", str(len(samples[0])), str(len(samples[1]))))
    body = (
        f"<h1>perfbisect: launch {launch_a} vs launch {launch_b}</h1>"
        + _table(["", f"launch {launch_a}", f"launch {launch_b}"], rows)
        + "<h2>Environment differences</h2>"
        + _diff_html(views[0][2], views[1][2], f"launch {launch_a}", f"launch {launch_b}")
    )
    return _page(f"perfbisect launches {launch_a} vs {launch_b}", body)
