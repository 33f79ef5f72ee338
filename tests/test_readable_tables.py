"""Tables people read in a terminal: commits as 12-digit short hashes (whole in JSON and with
--full-hashes), and piped tables as wide as COLUMNS says when it is set (whole lines when it is
not: tests/test_report_truth.py covers a 250-character log path)."""

from __future__ import annotations

from pathlib import Path

from conftest import EXPERIMENT, PRINTED_MEASURE, Cli, make_repo

CRASH = (
    "def deep_function_name_that_is_long(x):\n"
    "    raise RuntimeError('CUDA error: an illegal memory access was encountered; ' + 'x' * 200)\n"
    "deep_function_name_that_is_long(1)\n"
)


def _session_with_a_crash(cli: Cli, tmp_path: Path) -> list[dict]:  # type: ignore[type-arg]
    """A found regression whose path holds one commit that crashes with a long traceback."""
    commits = [{"value": str(v)} for v in [10.0] * 4 + [30.0] * 4]
    commits[0]["measure.py"] = PRINTED_MEASURE
    # position 2: the model's second launch after the endpoints (4, then 2) on this path
    commits[2]["measure.py"] = CRASH
    commits[3]["measure.py"] = PRINTED_MEASURE
    repo = make_repo(tmp_path / "repo", commits)
    (tmp_path / "perfbisect.toml").write_text(EXPERIMENT)
    report = cli.bisect(repo.shas[0], repo.shas[-1])
    assert report["status"] == "found"
    launches: list[dict] = cli.json("query", "history", "--json")  # type: ignore[assignment,type-arg]
    assert any(v["status"] != "ok" for v in launches)  # the crash is in the history
    return launches


def _rows(stdout: str, ids: list[int]) -> dict[int, list[str]]:
    """Each launch's lines in a rich table: from its `│ id ` line to the next row or border."""
    rows: dict[int, list[str]] = {}
    current: int | None = None
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1].isdigit() and int(cells[1]) in ids:
            current = int(cells[1])
            rows[current] = [line]
        elif current is not None and line.startswith("│"):
            rows[current].append(line)
        else:
            current = None
    return rows


def test_history_shows_short_hashes_within_columns_and_full_ones_on_request(
    cli: Cli, tmp_path: Path
) -> None:
    launches = _session_with_a_crash(cli, tmp_path)
    shas = {v["config"]["commit"] for v in launches}
    assert all(len(sha) == 40 for sha in shas)  # JSON keeps whole hashes

    cli.env["COLUMNS"] = "100"
    piped = cli.run("query", "history")
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)  # COLUMNS honoured
    assert not any(sha in piped.stdout for sha in shas)
    rows = _rows(piped.stdout, [v["id"] for v in launches])
    assert len(rows) == len(launches)
    for launch in launches:
        # the short hash on the row's first line, whole (not folded over two lines)
        assert launch["config"]["commit"][:12] in rows[launch["id"]][0], rows[launch["id"]]
    # a session with only measured launches: each row takes at most three lines at 100 columns
    # (four with full hashes; the stage times, checkout and measure, can take three)
    ok = [v["id"] for v in launches if v["status"] == "ok"]
    for launch in launches:
        if launch["status"] == "ok":
            only = cli.run("query", "history", "--config", f"commit={launch['config']['commit']}")
            for row in _rows(only.stdout, ok).values():
                assert len(row) <= 3, "\n".join(row)

    del cli.env["COLUMNS"]
    full = cli.run("query", "history", "--full-hashes")
    assert full.returncode == 0, full.stderr
    assert all(sha in full.stdout for sha in shas)  # on request, whole and on one line
    log = cli.run("bisect", "log")
    assert not any(sha in log.stdout for sha in shas)
    assert all(sha[:12] in log.stdout for sha in shas)
    for entry in cli.json("bisect", "log", "--json"):
        assert entry["log"] in log.stdout  # no COLUMNS: whole lines, paths not cut
    sessions = cli.run("query", "sessions")
    culprit = cli.json("bisect", "report", "--json")["culprit"]["first_bad"]["commit"]
    assert culprit[:12] in sessions.stdout and culprit not in sessions.stdout
    assert culprit in cli.run("query", "sessions", "--full-hashes").stdout


def test_a_terminal_too_narrow_for_the_short_columns_still_shows_every_column(
    cli: Cli, tmp_path: Path
) -> None:
    launches = _session_with_a_crash(cli, tmp_path)
    cli.env["COLUMNS"] = "60"
    narrow = cli.run("query", "history")
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60
    top = next(line for line in narrow.stdout.splitlines() if line.startswith("┏"))
    widths = [len(part) for part in top.strip("┏┓").split("┳")]
    assert len(widths) == 9 and min(widths) >= 3, top  # no column squeezed to nothing
    assert len(_rows(narrow.stdout, [v["id"] for v in launches])) == len(launches)


def test_a_launch_log_in_a_narrow_terminal_names_its_folder_once_and_each_file_whole(
    cli: Cli, tmp_path: Path
) -> None:
    _session_with_a_crash(cli, tmp_path)
    entries = cli.json("bisect", "log", "--json")
    # the session's logs, an explanation's launches in a folder below it
    folder = Path(entries[0]["log"]).parent
    assert all(Path(e["log"]).is_relative_to(folder) for e in entries)
    assert any(Path(e["log"]).parent != folder for e in entries)
    cli.env["COLUMNS"] = "80"
    narrow = cli.run("bisect", "log")
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    # the folder said once, above the table, whole on its line (to be copied); the rest fits
    said = [line for line in lines if line.startswith("logs in ")]
    assert said == [f"logs in {folder}/"], said
    rest = [line for line in lines if line not in said]
    assert max(len(line) for line in rest) <= 80, max(rest, key=len)
    # a borderless table: a row starts with its launch's number and id, folds under them
    rows: dict[int, list[str]] = {}
    for line in lines[lines.index(next(x for x in lines if x.startswith("───"))) + 1 :]:
        words = line.split()
        if len(words) > 2 and words[0].isdigit() and words[1].isdigit():
            rows[int(words[0])] = [line]
        elif rows and line.startswith(" "):
            rows[max(rows)].append(line)
        else:
            break
    assert sorted(rows) == [e["seq"] for e in entries]
    start = next(x for x in lines if x.startswith("#  id")).index(" log") + 1
    for e in entries:
        row = rows[e["seq"]]
        # each launch's log named within the folder (an explanation's folds at its folder's
        # slash, the session's own on one line), and its commit's short hash whole
        name = str(Path(e["log"]).relative_to(folder))
        assert "".join(line[start:].strip() for line in row) == name, row
        # a launch on one line a folder of its path (the log path had taken twelve)
        assert len(row) == name.count("/") + 1, "\n".join(row)
        assert e["config"]["commit"][:12] in row[0], row
    # the crash's long reason said once above, keyed from its row, not folded down the table
    crash = next(e for e in entries if e["value"] is None)
    assert "failed [1]" in rows[crash["seq"]][0]
    assert any(x.startswith("[1] ") and "illegal memory access" in x for x in lines)
    del cli.env["COLUMNS"]
    wide = cli.run("bisect", "log")  # piped, no COLUMNS: whole paths in the column, as before
    assert "logs in " not in wide.stdout
    assert all(e["log"] in wide.stdout for e in entries)
