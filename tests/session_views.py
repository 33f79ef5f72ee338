"""One session, every view: the per-configuration numbers (median, launches kept, launches set
aside, verdict) read back from the text report, the `--json` report, the HTML report,
`bisect status` (text and JSON) and `bisect log` (text and JSON), and asserted to agree.

Each view is parsed the way a person or a script reads it (table cells, JSON fields), so a view
that shows another number for a configuration than the report does fails here.
"""

from __future__ import annotations

import html.parser
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import Cli

_INTERVAL = re.compile(r"^(\S+) \[(\S+), (\S+)\] n=(\d+)$")
_ASIDE = re.compile(r"(\d+) of (\d+) set aside")


@dataclass(frozen=True)
class Row:
    """One configuration as one view shows it."""

    verdict: str
    median: str  # as printed (4 significant digits)
    launches: int  # kept: the launches its median is made of
    set_aside: int


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│").split("│")]


def _table_rows(text: str, header_first: str) -> list[list[str]]:
    """The body rows of the table whose header row starts with ``header_first``: a rich table,
    or the aligned plain text that long tables print as (cells two spaces apart or more)."""
    rows: list[list[str]] = []
    inside = False
    lines = text.splitlines()
    for line in lines:
        if line.startswith("┃") and _cells(line.replace("┃", "│"))[0] == header_first:
            inside = True
            continue
        if inside and line.startswith("└"):
            return rows
        if inside and line.startswith("│"):
            rows.append(_cells(line))
    if rows:
        return rows
    for i, line in enumerate(lines):
        if re.split(r"\s{2,}", line.strip())[0] == header_first and i + 1 < len(lines):
            for body in lines[i + 2 :]:
                if not body.strip() or not body[0].isdigit():
                    break
                rows.append(re.split(r"\s{2,}", body.strip()))
            break
    return rows


def _row_of(verdict: str, interval_text: str, note: str) -> Row:
    found = _INTERVAL.match(interval_text)
    median, launches = (found.group(1), int(found.group(4))) if found else ("-", 0)
    aside = _ASIDE.search(note)
    return Row(verdict, median, launches, int(aside.group(1)) if aside else 0)


def from_json_report(report: dict[str, Any]) -> dict[int, Row]:
    out = {}
    for p in report["path"]:
        ms = p["ms"]
        out[p["position"]] = Row(
            p["verdict"],
            _num(ms["median"]) if ms else "-",
            ms["launches"] if ms else 0,
            sum(1 for u in p["launches"] if not u["kept"]),
        )
    return out


def from_text_table(text: str) -> dict[int, Row]:
    """The report's or status's configuration table: pos, configuration, verdict, interval,
    note."""
    rows = _table_rows(text, "pos")
    return {int(r[0]): _row_of(r[2], r[3], r[4]) for r in rows}


class _HtmlTables(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def from_html(page: str) -> dict[int, Row]:
    """The HTML report's table of configurations, its columns found by their headers."""
    parser = _HtmlTables()
    parser.feed(page)
    for table in parser.tables:
        head = table[0] if table else []
        if "verdict" in head and any("median" in h for h in head) and "pos" in head:
            pos, verdict = head.index("pos"), head.index("verdict")
            ms = next(i for i, h in enumerate(head) if "median" in h)
            note = head.index("note")
            return {int(r[pos]): _row_of(r[verdict], r[ms], r[note]) for r in table[1:]}
    raise AssertionError("no table of configurations in the HTML report")


def from_status_json(status: dict[str, Any]) -> dict[int, Row]:
    return {
        v["position"]: Row(v["verdict"], _num(v["median"]), v["launches"], v["set_aside"])
        for v in status["verdicts"]
    }


def from_log(entries: list[dict[str, Any]], report: dict[str, Any]) -> dict[int, Row]:
    """Per configuration from `bisect log --json`: the launches it marks kept make the median
    and the count, those it marks set aside the other count, and the verdict it shows."""
    position_of = {}
    for p in report["path"]:
        for u in p["launches"]:
            position_of[u["id"]] = p["position"]
    by_position: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        if e["id"] in position_of:
            by_position.setdefault(position_of[e["id"]], []).append(e)
    out = {}
    for position, mine in by_position.items():
        kept = [e["value"] for e in mine if e["kept"]]
        verdicts = {e["verdict"] for e in mine}
        assert len(verdicts) == 1, (position, verdicts)
        out[position] = Row(
            verdicts.pop(),
            _num(statistics.median(kept)) if kept else "-",
            len(kept),
            sum(1 for e in mine if e["kept"] is False),
        )
    return out


def from_log_text(text: str, report: dict[str, Any]) -> dict[int, Row]:
    """Per configuration from `bisect log`'s table: the values marked kept make the median
    (to the digits printed), the rows marked set aside the other count."""
    position_of = {u["id"]: p["position"] for p in report["path"] for u in p["launches"]}
    by_position: dict[int, list[list[str]]] = {}
    for r in _table_rows(text, "#"):
        launch_id = int(r[1])
        if launch_id in position_of:
            by_position.setdefault(position_of[launch_id], []).append(r)
    out = {}
    for position, rows in by_position.items():
        kept = [float(r[4]) for r in rows if r[5] == "kept"]
        verdicts = {r[7] for r in rows}  # (r[6]: the posterior's P(slow) of the launch)
        assert len(verdicts) == 1, (position, verdicts)
        out[position] = Row(
            verdicts.pop(),
            _num(statistics.median(kept)) if kept else "-",
            len(kept),
            sum(1 for r in rows if r[5].startswith("set aside")),
        )
    return out


def _close(a: dict[int, Row], b: dict[int, Row]) -> bool:
    """The log's text prints each value to 4 digits: its median may differ in the last one."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if (x.verdict, x.launches, x.set_aside) != (y.verdict, y.launches, y.set_aside):
            return False
        if x.median != y.median and abs(float(x.median) - float(y.median)) > 1e-3 * abs(
            float(y.median)
        ):
            return False
    return True


@dataclass(frozen=True)
class Views:
    """One session's views as the CLI printed them, each asked for once (a CLI call costs a
    second or two of imports: callers check more on these rather than asking again)."""

    report: dict[str, Any]  # `bisect report --json`
    text: str  # `bisect report`
    status: dict[str, Any]  # `bisect status --json`
    status_text: str  # `bisect status`
    log: list[dict[str, Any]]  # `bisect log --json`


def same_numbers_in_every_view(
    cli: Cli, session: int, tmp_path: Path, code: int = 0
) -> dict[str, Any]:
    """Every view of ``session`` shows the same verdict, median, launches and launches set
    aside per configuration; the report (JSON) it checked against."""
    return every_view(cli, session, tmp_path, code).report


def every_view(cli: Cli, session: int, tmp_path: Path, code: int = 0) -> Views:
    """As ``same_numbers_in_every_view``; the views it read."""
    s = str(session)
    report = cli.json("bisect", "report", s, "--json", codes=(code,))
    truth = from_json_report(report)
    assert truth, "a report with no configurations checks nothing"
    text = cli.run("bisect", "report", s)
    assert text.returncode == code, text.stderr
    page = tmp_path / f"session-{session}.html"
    made = cli.run("bisect", "report", s, "--html", str(page))
    assert made.returncode == code, made.stderr
    status = cli.json("bisect", "status", s, "--json")
    status_text = cli.run("bisect", "status", s)
    assert status_text.returncode == 0, status_text.stderr
    log = cli.json("bisect", "log", s, "--json")
    log_text = cli.run("bisect", "log", s)
    assert log_text.returncode == 0, log_text.stderr
    views = {
        "text report": from_text_table(text.stdout),
        "html report": from_html(page.read_text()),
        "status --json": from_status_json(status),
        "status": from_text_table(status_text.stdout),
    }
    for name, rows in views.items():
        assert rows == truth, (name, rows, truth)
    # The log lists launches: configurations whose launches it can place (every one measured).
    measured = {k: v for k, v in truth.items() if v.launches or v.set_aside}
    for name, rows in (
        ("log --json", from_log(log, report)),
        ("log", from_log_text(log_text.stdout, report)),
    ):
        assert _close(rows, measured), (name, rows, measured)
    # The culprit: the same in status and report, and named in the status text.
    assert status["culprit"] == report["culprit"]
    if report["culprit"]:
        first_bad = report["culprit"]["first_bad"]
        assert any(
            line.lstrip().startswith(("culprit:", "provisional culprit:"))
            and all(str(v) in line for v in first_bad.values())
            for line in status_text.stdout.splitlines()
        ), status_text.stdout
    # Every verdict word shown is explained in the legend of the text report.
    for word in {row.verdict for row in truth.values()}:
        assert re.search(rf"^\s+{word}: \S", text.stdout, re.M), (word, text.stdout)
        assert word in report["legend"]
    return Views(report, text.stdout, status, status_text.stdout, log)
