"""`bisect report --html` and `query compare --html`, opened in a real headless Chromium
(Debian's `chromium`, driven through Playwright's CDP client with that executable): the page
loads with no console errors and no network request, names the culprit and the threshold, and
its chart has one mark per launch. Screenshots are kept in test-artifacts/ (or
$PERFBISECT_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXPERIMENT, Cli, make_repo, value_repo
from test_report_truth import MULTI_MEASURE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(
    os.environ.get("PERFBISECT_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts")
)

pytest.importorskip("playwright.sync_api", reason="playwright is in the test extras")
# One worker runs this module under pytest-xdist: its fixture is set up once, not per worker.
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package"),
    pytest.mark.xdist_group("html_report"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            yield launched
        finally:
            launched.close()


def open_page(browser: Any, path: Path, shot: str) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
    return page, errors, requests


def html_of(cli: Cli, session: int, out: Path, code: int) -> Path:
    result = cli.run("bisect", "report", str(session), "--html", str(out))
    assert result.returncode == code, result.stderr
    assert out.stat().st_size > 2000
    return out


def test_html_reports_of_every_kind_open_cleanly_in_chromium(
    cli: Cli, tmp_path: Path, browser: Any
) -> None:
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    found = value_repo(tmp_path / "repo", [10.0] * 4 + [30.0] * 4)
    cli.env["HF_TOKEN"] = "hf_html_secret_1234"
    s_found = cli.bisect(found.shas[0], found.shas[-1])
    amb = value_repo(tmp_path / "r2", [10.0] * 4 + [30.0] * 4)
    (tmp_path / "amb.toml").write_text(
        EXPERIMENT.replace('repo = "repo"', 'repo = "r2"').replace(
            'measure = "python3 measure.py"',
            f'build = "test $(git rev-parse HEAD) != {amb.shas[3]}"\nmeasure = "python3 measure.py"',
        )
        + '\n[env]\nHF_TOKEN = "hf_html_secret_1234"\n'
    )
    s_amb = cli.bisect(amb.shas[0], amb.shas[-1], "-c", "amb.toml", codes=(4,))
    multi = make_repo(
        tmp_path / "r3",
        [{"value": "10", "measure.py": MULTI_MEASURE}, {"value": "10"}, {"value": "30"}],
    )
    (tmp_path / "multi.toml").write_text(
        EXPERIMENT.replace('repo = "repo"', 'repo = "r3"')
        + '\n[axes.custom.flag]\nvalues = ["a", "b"]\nordered = false\n'
    )
    s_multi = cli.json(
        "bisect",
        "start",
        "-c",
        "multi.toml",
        "--good",
        f"commit={multi.shas[0]},flag=a",
        "--bad",
        f"commit={multi.shas[-1]},flag=b",
        "--json",
    )
    flat = value_repo(tmp_path / "r4", [10.0] * 3)
    (tmp_path / "flat.toml").write_text(EXPERIMENT.replace('repo = "repo"', 'repo = "r4"'))
    s_flat = cli.bisect(flat.shas[0], flat.shas[-1], "-c", "flat.toml", codes=(3,))
    cases = [
        ("found", s_found, 0),
        ("ambiguous", s_amb, 4),
        ("multi-axis", s_multi, 0),
        ("not-reproduced", s_flat, 3),
    ]
    for kind, report, code in cases:
        session = report["session"]
        path = html_of(cli, session, tmp_path / f"{kind}.html", code)
        text = path.read_text()
        assert "hf_html_secret_1234" not in text  # secrets stay redacted
        assert "<script" not in text and "http://" not in text.replace(
            "http://www.w3.org/2000/svg", ""
        )
        page, errors, requests = open_page(browser, path, f"report-{kind}")
        assert errors == [], (kind, errors)
        assert requests == [path.as_uri()], (kind, requests)  # nothing but the file itself
        body = page.inner_text("body")
        launches = cli.json("bisect", "log", str(session), "--json")
        assert page.locator("svg .launch").count() == len(launches), kind
        assert f"perfbisect session {session}" in body and report["status"] in body
        if report["threshold_ms"] is not None:
            assert f"threshold {report['threshold_ms']:.4g}" in body
        if report["culprit"]:
            first_bad = report["culprit"]["first_bad"]
            assert all(str(v) in body for v in first_bad.values()), kind
            titles = page.locator("svg circle.launch title").all_text_contents()
            assert any("host " in t and "Z" in t for t in titles)  # value, host and time
        if kind == "multi-axis":
            assert "Attribution" in body
        if kind == "ambiguous":
            assert "Unresolved" in body and "skip" in body
        if kind == "found":
            assert "Environment: last good launch" in body
            assert "commands" in body  # what to run to reproduce a launch
        page.close()

    log = cli.json("bisect", "log", str(s_found["session"]), "--json")
    out = tmp_path / "compare.html"
    result = cli.run("query", "compare", str(log[0]["id"]), str(log[1]["id"]), "--html", str(out))
    assert result.returncode == 0, result.stderr
    page, errors, requests = open_page(browser, out, "compare")
    assert errors == [] and requests == [out.as_uri()]
    body = page.inner_text("body")
    assert f"launch {log[0]['id']} vs launch {log[1]['id']}" in body
    assert "Environment differences" in body
    page.close()
