"""The HTML report and compare page read well at 1400 and at 800 pixels wide, measured in a real
headless Chromium (the browser fixture of test_html_report): no header or number is broken
mid-word, a failed launch's one-line traceback cannot squeeze the launch table, the page itself
never scrolls sideways, the chart's ticks are round values with labels on both axes and a failed
launch sits in a 'failed' band instead of at a value, and the compare page carries the spread of
each launch's samples and its `unstable` warning. Screenshots go to test-artifacts/."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import EXPERIMENT, Cli, make_repo
from test_html_report import ARTIFACTS, CHROMIUM, browser  # noqa: F401 (the fixture)

from perfbisect.formatting import num

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package"),
    pytest.mark.xdist_group("html_report"),
]

# Every sample of a launch 30% either side of the commit's value: each launch is `unstable`,
# while its median (what the search compares) is the value itself.
SPREAD_MEASURE = r"""
value = float(open("value").read())
for i in range(5):
    print(f"verify_ms={value * (1 + 0.3 * ((i % 3) - 1)):.4f}")
"""
# A launch that dies with a traceback whose last line is one long word.
CRASH = (
    "def deep_function_name_that_is_long(x):\n"
    "    raise RuntimeError('CUDA error: an illegal memory access was encountered; ' + 'x' * 300)\n"
    "deep_function_name_that_is_long(1)\n"
)

# Words (runs of non-space) of table cells laid out over more than one line: a header or a
# number cut mid-word. Free text, paths and commands may break anywhere and are left out.
BROKEN_WORDS = """() => {
  const exempt = 'code, .text, .reason, .path, details, svg';
  const broken = [];
  for (const cell of document.querySelectorAll('th, td')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest(exempt)) continue;
      for (const m of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const rects = [...range.getClientRects()].filter(r => r.width > 0);
        const lines = new Set(rects.map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(cell.tagName + ': ' + m[0]);
      }
    }
  }
  return broken;
}"""

CHART = """() => {
  const svg = document.querySelector('svg.chart');
  const ys = el => { const b = el.getBBox(); return b.y + b.height / 2; };
  return {
    yticks: [...svg.querySelectorAll('text.ytick')].map(t => [t.textContent, ys(t)]),
    xticks: [...svg.querySelectorAll('text.xtick')].map(t => t.textContent),
    failed: [...svg.querySelectorAll('g.launch.failed')].map(ys),
    label: [...svg.querySelectorAll('text.failed-label')].map(t => [t.textContent, ys(t)]),
    values: [...svg.querySelectorAll('circle.launch')].map(c => +c.getAttribute('cy')),
  };
}"""

HEADER_WIDTHS = """() => {
  const tables = [...document.querySelectorAll('h2')].filter(h => h.textContent == 'Every launch');
  const table = tables[0].nextElementSibling.querySelector('table');
  return Object.fromEntries([...table.querySelectorAll('th')].map(
    th => [th.textContent, th.getBoundingClientRect().width]));
}"""


def _round(ticks: list[float]) -> bool:
    """Evenly spaced multiples of a step of 1, 2 or 5 times a power of ten."""
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    even = all(math.isclose(b - a, step, rel_tol=1e-6) for a, b in itertools.pairwise(ticks))
    multiples = all(abs(t / step - round(t / step)) < 1e-6 for t in ticks)
    return even and multiples and any(math.isclose(mantissa, m) for m in (1, 2, 5))


def _open(browser: Any, path: Path, width: int, shot: str) -> Any:  # noqa: F811
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(path.as_uri(), wait_until="load")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{shot}-{width}.png"), full_page=True)
    return page


def test_report_and_compare_pages_read_well_at_1400_and_800_pixels(
    cli: Cli,
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    commits = [{"value": str(v)} for v in [10.0] * 4 + [164.3] * 4]
    commits[0]["measure.py"] = SPREAD_MEASURE
    commits[2]["measure.py"] = CRASH  # launched by the search (4, then 2)
    commits[3]["measure.py"] = SPREAD_MEASURE
    repo = make_repo(tmp_path / "repo", commits)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    report = cli.bisect(repo.shas[0], repo.shas[-1])
    assert report["status"] == "found" and report["failed_launches"] >= 1
    log = cli.json("bisect", "log", "--json")
    failed = [v for v in log if v["value"] is None]
    assert failed and "x" * 300 in failed[0]["reason"].replace("\n", "")  # the long line
    html = tmp_path / "report.html"
    assert cli.run("bisect", "report", "--html", str(html)).returncode == 0
    a, b = log[0]["id"], log[1]["id"]
    compare = tmp_path / "compare.html"
    assert cli.run("query", "compare", str(a), str(b), "--html", str(compare)).returncode == 0
    stats = cli.json("query", "compare", str(a), str(b), "--json")

    for width in (1400, 800):
        page = _open(browser, html, width, "readable-report")
        assert page.evaluate(BROKEN_WORDS) == [], width
        # the page never scrolls sideways: wide tables scroll in their own box, the chart scales
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        headers = page.evaluate(HEADER_WIDTHS)
        for name in ("purpose", "configuration", "started", "stage times"):
            assert headers[name] >= 48, (width, headers)  # not squeezed to a few characters
        chart = page.evaluate(CHART)
        yticks = [float(text) for text, _ in chart["yticks"]]
        assert len(yticks) >= 3 and _round(yticks), chart["yticks"]
        xticks = [int(text) for text in chart["xticks"]]
        assert len(xticks) >= 2 and xticks[0] == 0, chart["xticks"]
        assert max(xticks) <= report["path_length"] - 1
        # failed launches: crosses in the band above the top tick, labelled 'failed'
        top = min(y for _, y in chart["yticks"])
        assert len(chart["failed"]) == len(failed)
        assert all(y < top - 4 for y in chart["failed"]), (chart["failed"], top)
        assert [text for text, _ in chart["label"]] == ["failed"]
        assert all(abs(y - chart["label"][0][1]) < 6 for y in chart["failed"])
        assert all(y > top - 1 for y in chart["values"])  # every value on the value axis
        page.close()

        page = _open(browser, compare, width, "readable-compare")
        assert page.evaluate(BROKEN_WORDS) == [], width
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        rows = {
            row[0]: row[1:]
            for row in page.evaluate(
                "[...document.querySelectorAll('tr')].map(r => [...r.cells].map(c => c.innerText))"
            )
            if row
        }
        for key in ("median", "p10", "p90", "min", "max"):
            assert rows[key] == [num(stats["a"]["stats"][key]), num(stats["b"]["stats"][key])]
        assert all("unstable" in cell for cell in rows["warnings"]), rows["warnings"]
        assert any(f.startswith("unstable") for f in stats["a"]["stats"]["flags"])
        page.close()


def test_chart_ticks_are_round_for_any_range() -> None:
    from perfbisect.html_chart import tick_text, ticks

    cases = [(9.9, 30.3), (0, 0), (-5, -5), (-3, 7), (0.0012, 0.0019), (1e6, 1.3e6), (1e-7, 3e-7)]
    cases.append((29.194, 29.194000000000003))  # one value, apart in the last float digit
    for lo, hi in cases:
        values = ticks(lo, hi)
        assert len(values) >= 2 and values[0] <= lo and values[-1] >= hi, (lo, hi, values)
        assert _round(values), (lo, hi, values)
        labels = [tick_text(v, values[1] - values[0]) for v in values]
        assert len(set(labels)) == len(labels) and all(len(t) <= 12 for t in labels), labels
