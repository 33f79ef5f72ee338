"""The `why` section of the HTML report: the ranked findings, the kernel groups of both sides
as bars, the NCCL table, what was not measured, links to the traces. Self-contained HTML (no
script, no network), escaped throughout."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfbisect.explain.how_it_ran import comm_text, how_it_ran, nccl_version_text

COLOURS = {"good": "#2ca02c", "bad": "#d62728"}


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def _rows(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<div class='wide'><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _bars(good: Mapping[str, float], bad: Mapping[str, float]) -> str:
    groups = sorted(set(good) | set(bad), key=lambda g: -max(good.get(g, 0), bad.get(g, 0)))
    top = max([*good.values(), *bad.values(), 1e-9])
    rows = []
    for group in groups:
        cells = [f"<td>{_e(group)}</td>"]
        for label, values in (("good", good), ("bad", bad)):
            ms = values.get(group, 0.0)
            width = max(1, round(300 * ms / top))
            cells.append(
                f"<td><span style='display:inline-block;height:10px;width:{width}px;"
                f"background:{COLOURS[label]}'></span> {ms:.3f}</td>"
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "<tr><th>group</th><th>good (ms per verify)</th><th>bad (ms per verify)</th></tr>"
    return f"<div class='wide'><table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table></div>"


def why_html(why: Mapping[str, Any]) -> str:
    good, bad = why["good"], why["bad"]
    delta = why.get("delta")
    shown = f"{delta:+.3f}" if delta is not None else "not measured"
    parts = [
        "<h2>Why (bisect explain)</h2>",
        f"<p>{_e(why.get('metric'))} {shown} bad vs good, from {_e(why.get('delta_source'))}</p>",
        _rows(
            ["#", "share of the delta", "finding", "evidence"],
            [
                (
                    str(i),
                    f"{f['share']:.0%}" if f["share"] is not None else "n/a",
                    _e(f["title"]),
                    _e(f["evidence"]),
                )
                for i, f in enumerate(why.get("findings", []), 1)
            ],
        ),
    ]
    if good["groups"] or bad["groups"]:
        parts += [
            f"<p>kernel groups ({_e(good.get('device') or 'no')} trace)</p>",
            _bars(good["groups"], bad["groups"]),
        ]
    ran = how_it_ran(good, bad)
    if ran:
        parts += [
            "<p>how the verify ran (per verify)</p>",
            _rows(["", "good", "bad"], [tuple(_e(c) for c in row) for row in ran]),
        ]
    nccl = [(side["label"], p) for side in (good, bad) for p in side["nccl"]]
    if nccl:
        parts.append(
            _rows(
                ["side", "pid", "NCCL", "communicators", "taken from the environment", "not taken"],
                [
                    (
                        _e(label),
                        _e(p["pid"]),
                        _e(nccl_version_text(p)),
                        _e(", ".join(comm_text(c) for c in p["communicators"])),
                        _e(", ".join(f"{k}={v}" for k, v in p["taken"].items())),
                        _e("?" if p["not_taken"] is None else ", ".join(p["not_taken"])),
                    )
                    for label, p in nccl
                ],
            )
        )
    parts += [
        f"<p class='note'>not measured: {_e(line)}</p>" for line in why.get("not_measured", [])
    ]
    links = [
        f"<a href='{_e(Path(t).as_uri())}'>{_e(Path(t).name)}</a>"
        for t in [*good["traces"], *bad["traces"]]
        if Path(t).is_absolute()
    ]
    if links:
        parts.append(f"<p>traces (Chrome trace JSON): {' '.join(links)}</p>")
    return "".join(parts)
