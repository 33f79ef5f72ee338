"""A session (or two launches) as one self-contained HTML file: styles and the chart inline
(hand-written SVG, no script, no CDN), so it opens anywhere without network access and can be
attached to an issue as it is.

It reads the stored report (``report_model.Report``) and the session's launches with their
snapshots; everything in the store is already redacted, and the commands shown are the ones
recorded at launch time (secrets redacted there).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from perfbisect.bisect.report.report_model import Report, Step, counted
from perfbisect.formatting import (
    cfg,
    confidence_text,
    descent_lines,
    interval,
    num,
    search_text,
    short_hashes,
    stage_times,
    verification_text,
)
from perfbisect.html_chart import COLOURS, chart, esc, host_of
from perfbisect.samples import sample_stats
from perfbisect.store.database import Store
from perfbisect.store.history import (
    LaunchView,
    diff_snapshots,
    find_session,
    launch_with_samples,
    session_launches,
    session_snapshots,
)

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:6px 0} .wide{overflow-x:auto;max-width:100%}
td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top;text-align:left;
overflow-wrap:normal;word-break:normal;hyphens:none} th{background:#f4f4f4}
td.num,.nw{white-space:nowrap} .cfg{font-family:ui-monospace,Menlo,monospace;font-size:12px}
.text{overflow-wrap:anywhere;min-width:14em} .path{overflow-wrap:anywhere;min-width:20em}
.reason{display:block;min-width:16em;max-width:40em;max-height:8.5em;overflow:auto;
white-space:pre-wrap;overflow-wrap:anywhere;font-family:ui-monospace,Menlo,monospace;font-size:12px;
background:#fafafa;border:1px solid #eee;padding:2px 4px;margin-top:2px}
code,.mono{font-family:ui-monospace,Menlo,monospace;font-size:12px;overflow-wrap:anywhere}
.verdict{font-weight:600} .found{color:#2ca02c} .ambiguous,
.endpoints-not-reproduced{color:#b8860b} .note{color:#666} .failed,.unstable{color:#b22222}
details{margin:2px 0} svg.chart{background:#fff;border:1px solid #ddd;max-width:100%;height:auto}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px}
"""


# How a table column's cells wrap: "num" never (a number or interval is read whole), "text"
# anywhere (free text, paths: long words must not widen the table), "cfg" only after a comma of
# a configuration (short hashes whole); other cells, like headers, only between words.
CELL = {
    "num": "<td class='num'>{}</td>",
    "text": "<td><div class='text'>{}</div></td>",
    "cfg": "<td class='cfg'>{}</td>",
    "": "<td>{}</td>",
}


def _table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    raw: bool = False,
    kinds: Sequence[str] = (),
) -> str:
    """Rows are escaped unless ``raw`` (cells already HTML); ``kinds`` names each column's
    wrapping (``CELL``), plain where left out."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)

    def cell(i: int, content: str) -> str:
        kind = kinds[i] if i < len(kinds) else ""
        shown = content if raw else _cfg_cell(content) if kind == "cfg" else esc(content)
        return CELL[kind].format(shown)

    body = "".join(
        "<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return (
        f"<div class='wide'><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _cfg_cell(text: str) -> str:
    """A configuration (``cfg``'s text) for a table cell: short hashes, a line break allowed
    only after its commas, the whole configuration as the cell's hover text."""
    parts = short_hashes(text).split(",")
    return f"<span title='{esc(text)}'>" + ",<wbr>".join(esc(p) for p in parts) + "</span>"


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
    basis = f"; from {esc(c.effect_basis)}" if c.effect_basis else ""
    effect = (
        f"{eff.delta:+.4g} {esc(report.metric)} (interval {eff.lo:+.4g} .. {eff.hi:+.4g}{basis})"
        if eff
        else "-"
    )
    verified = esc(verification_text(c))
    confidence = (
        f"<br><b>confidence:</b> {esc(confidence_text(c.confidence))}"
        if c.confidence is not None
        else ""
    )
    return (
        f"<p><b>culprit ({esc(c.axis)}):</b> <span class='mono'>{esc(cfg(c.first_bad))}</span> "
        f"{esc(interval(c.first_bad_ms))}{commit}<br><b>last good:</b> "
        f"<span class='mono'>{esc(cfg(c.last_good))}</span> {esc(interval(c.last_good_ms))}<br>"
        f"<b>effect:</b> {effect}; <b>verified:</b> {verified}"
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
            verification_text(s),
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
    return _table(head, rows, kinds=("", "cfg", "cfg", "num", "num", "num", "text"))


def _diff_html(a: Mapping[str, Any], b: Mapping[str, Any], name_a: str, name_b: str) -> str:
    diff = diff_snapshots(a, b)
    if not diff:
        return "<p class='note'>No differences in the environment snapshots.</p>"
    return _table(
        ["key", name_a, name_b], [(k, x, y) for k, x, y in diff], kinds=("", "text", "text")
    )


def _value_html(v: LaunchView) -> str:
    """A launch's value, or that it failed and why: the reason (a traceback, often one long
    line) scrolls in a box of its own, so that it cannot squeeze the table's other columns."""
    if v.value is not None:
        return esc(num(v.value))
    return (
        f"<span class='failed'>failed</span>: {esc(v.stage)}"
        f"<div class='reason'>{esc((v.reason or '')[:4000])}</div>"
    )


def _when_html(v: LaunchView) -> str:
    """The launch's start, wrapping only between its date and its time."""
    day, time = v.started_at.isoformat(sep=" ", timespec="seconds").split(" ")
    return f"<span class='nw'>{day}</span> <span class='nw'>{time}Z</span>"


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
        rows.append(
            [
                esc(v.seq),
                esc(v.id),
                esc(v.purpose),
                _cfg_cell(cfg(v.axes)),
                _value_html(v),
                esc(_flag(v.flags, _GRAPH)),
                esc(_flag(v.flags, _ACCEPT)),
                esc(timings),
                esc(host_of(snap)),
                _when_html(v),
                f"<div class='path mono'>{esc(v.log_path)}</div>{reproduce}",
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
    from perfbisect.bisect.session.status import session_report

    row = find_session(store, ref)
    # an unfinished session's provisional report, marked as such, rather than nothing
    report = session_report(store, row)
    launches = session_launches(store, row.id)
    snapshots = session_snapshots(store, row.id)
    unit = report.metric
    status = report.status.value
    parts = [
        f"<h1>perfbisect session {report.session}{' (' + esc(row.name) + ')' if row.name else ''}: "
        f"<span class='{esc(status)}'>{esc(status)}</span></h1>",
        f"<p>{esc(report.message)}</p>",
        f"<p class='provisional'><b>provisional:</b> {esc(report.remaining)}</p>"
        if report.remaining is not None
        else "",
        f"<p><b>threshold:</b> {num(report.threshold_ms)} {esc(unit)} "
        f"({'higher' if report.higher_is_better else 'lower'} is better); noise "
        f"{report.noise_rel_sd:.1%} launch-to-launch; {counted(report.evaluations, 'configuration')} judged, "
        f"{report.launches} launches ({report.failed_launches} failed); started "
        f"{esc(row.created_at.isoformat(timespec='seconds'))}Z on {esc(row.owner_host)}</p>",
        f"<p><b>search:</b> {esc(search_text(report.search))}</p>",
        _culprit_html(report),
        *(f"<p><b>merge:</b> {esc(line)}</p>" for line in descent_lines(report.descent)),
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
                kinds=("", "cfg", "", "num"),
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
                "note",
            ],
            [
                (
                    esc(p.position),
                    _cfg_cell(cfg(p.config)),
                    f"<span class='verdict' style='color:{COLOURS[p.verdict.value]}'>"
                    f"{esc(p.verdict.value)}</span>",
                    esc(interval(p.ms)),
                    esc(p.note),
                )
                for p in report.path
            ],
            raw=True,
            kinds=("num", "cfg", "", "num", "text"),
        ),
        "".join(
            f"<p class='note legend-text'><b>{esc(word)}</b>: {esc(meaning)}</p>"
            for word, meaning in report.legend.items()
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
                kinds=("cfg", "cfg", "", "text"),
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
                kinds=("", "cfg", "", "", "num"),
            ),
        ]
    if report.seen:
        parts += [
            "<h2>Seen, not searched</h2>",
            _table(
                ["from", "to", "what"],
                [(cfg(u.good), cfg(u.bad), u.why) for u in report.seen],
                kinds=("cfg", "cfg", "text"),
            ),
        ]
    if report.creep:
        parts += [
            "<h2>Creep</h2>",
            _table(
                ["from", "to", "what"],
                [(cfg(u.good), cfg(u.bad), u.why) for u in report.creep],
                kinds=("cfg", "cfg", "text"),
            ),
        ]
    if report.unresolved:
        parts += [
            "<h2>Unresolved</h2>",
            _table(
                ["good", "bad", "why"],
                [(cfg(u.good), cfg(u.bad), u.why) for u in report.unresolved],
                kinds=("cfg", "cfg", "text"),
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
            kinds=("num", "num", "", "cfg", "", "num", "num", "", "num"),
        ),
    ]
    return _page(f"perfbisect session {report.session}", "".join(parts))


def _flags_html(flags: Sequence[Any]) -> str:
    """A launch's notes and warnings, one a line; an unstable launch's in red."""
    return "".join(
        f"<div class='{'unstable' if str(f).startswith('unstable') else 'note'}'>{esc(f)}</div>"
        for f in flags
    )


def _compare_cells(v: LaunchView, stats: Mapping[str, Any]) -> list[str]:
    """One launch's column of the compare page, in ``compare_html``'s row order."""
    return [
        _cfg_cell(cfg(v.axes)),
        _value_html(v),
        esc(v.purpose),
        _when_html(v),
        esc(_flag(v.flags, _GRAPH)),
        esc(_flag(v.flags, _ACCEPT)),
        esc(stats["n"]),
        *(esc(num(stats.get(key))) for key in ("median", "p10", "p90", "min", "max")),
        _flags_html(stats.get("flags", [])),
        f"<div class='path mono'>{esc(v.log_path)}</div>",
    ]


def compare_html(store: Store, launch_a: int, launch_b: int) -> str:
    """Two launches side by side: what they ran, their samples' spread (the numbers `query
    compare` prints) with their warnings, and the differences of their environments."""
    views = [launch_with_samples(store, i) for i in (launch_a, launch_b)]
    stats = [sample_stats(samples, view.flags) for view, samples, _ in views]
    labels = ["configuration", "value", "purpose", "started", "verify in graphs"]
    labels += ["accept length", "samples", "median", "p10", "p90", "min", "max", "warnings", "log"]
    columns = [_compare_cells(view, stat) for (view, _, _), stat in zip(views, stats, strict=True)]
    rows = list(zip(labels, *columns, strict=True))
    medians = [s.get("median") for s in stats]
    ratio = (
        f"<p><b>median b/a:</b> {medians[1] / medians[0]:.3f}</p>"
        if medians[0] and medians[1] is not None
        else ""
    )
    body = (
        f"<h1>perfbisect: launch {launch_a} vs launch {launch_b}</h1>"
        + _table(
            ["", f"launch {launch_a}", f"launch {launch_b}"], rows, raw=True, kinds=("", "", "")
        )
        + ratio
        + "<h2>Environment differences</h2>"
        + _diff_html(views[0][2], views[1][2], f"launch {launch_a}", f"launch {launch_b}")
    )
    return _page(f"perfbisect launches {launch_a} vs {launch_b}", body)
