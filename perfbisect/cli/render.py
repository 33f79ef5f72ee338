"""Terminal rendering (rich) of reports, history and comparisons. No logic beyond layout.

Every user value goes through ``escape`` (rich would read ``[mlx5_0]`` or ``[/x]`` as markup)
and no identifying value is cut: columns fold instead of ending in an ellipsis, and when the
output is not a terminal the console is as wide as ``COLUMNS`` says, or else wide enough for
whole rows. Tables show commits by their 12-digit short form (whole in JSON and on request).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from perfbisect.bisect.report.report_model import (
    Fidelity,
    Interval,
    MergeDescent,
    Report,
    Step,
    counted,
)
from perfbisect.errors import lead_with_error
from perfbisect.formatting import (
    cfg,
    clock,
    confidence_text,
    descent_lines,
    interval,
    num,
    search_text,
    short_hashes,
    verification_text,
)
from perfbisect.targets.sglang.startup import ready_brief, summary_text

STATUS_STYLE = {
    "found": "bold green",
    "endpoints-not-reproduced": "bold yellow",
    "ambiguous": "bold yellow",
    "provisional": "bold yellow",
}
VERDICT_STYLE = {
    "good": "green",
    "bad": "red",
    "intermediate": "cyan",
    "skip": "magenta",
    "unclear": "yellow",
}


# Piped output is read by programs (grep, awk, a CI log): no line of it is wrapped, whatever its
# length (a log path under a long cache directory once wrapped at 200 columns and broke a grep),
# unless the user set COLUMNS for it (`COLUMNS=100 perfbisect query history | less`).
PIPED_WIDTH = 100_000


def width_for(stream: Any) -> int | None:
    """The width to lay out for: the terminal's own (None: rich asks it), else COLUMNS when it
    is a positive number, else wide enough for any line."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH


def console(stderr: bool = False) -> Console:
    """A console that never truncates: the terminal's width, COLUMNS when piped and set, or one
    wide enough for any line (tables then take the width their cells need, no more)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=width_for(stream))


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=escape(title) if title else None)
    for col in columns:
        table.add_column(escape(col), overflow="fold")
    return table


def _step_line(step: Step, unit: str) -> str:
    subject = f" {step.commit.subject}" if step.commit else ""
    return escape(
        f"{interval(step.last_good_ms)} -> {interval(step.first_bad_ms)} {unit} at "
        f"{cfg(step.first_bad)}{subject} (verified: {verification_text(step)})"
    )


def _culprit(out: Console, report: Report) -> None:
    culprit = report.culprit
    if culprit is None:
        return
    unit = report.metric
    # the same verdict as its row in the table: a level of its own between the endpoints
    # (a stacked regression's first step) is "intermediate" there and here
    culprit_point = report.point(culprit.position)
    verdict = culprit_point.verdict.value if culprit_point else "bad"
    label = "first bad" if verdict == "bad" else f"first worse ({verdict})"
    if report.remaining is not None:
        label = f"provisional {label}"
    c = culprit.commit
    # the configuration once (a commit's sha is the configuration), its subject beside it
    subject = f" {c.subject}" if c else ""
    out.print(
        f"[bold]{label} ({escape(culprit.axis)}):[/] {escape(cfg(culprit.first_bad))}"
        f"{escape(subject)}  {escape(interval(culprit.first_bad_ms))}",
        soft_wrap=True,
    )
    if c:
        out.print(f"    {escape(c.author)}, {c.date}")
    out.print(
        f"[bold]last good:[/] {escape(cfg(culprit.last_good))}  "
        f"{escape(interval(culprit.last_good_ms))}",
        soft_wrap=True,
    )
    eff = culprit.effect_ms
    if eff:
        basis = f"; from {culprit.effect_basis}" if culprit.effect_basis else ""
        out.print(
            f"effect: {eff.delta:+.4g} {escape(unit)} (interval {eff.lo:+.4g} .. "
            f"{eff.hi:+.4g}{escape(basis)})",
            soft_wrap=True,
        )
    out.print(f"verified: {escape(verification_text(culprit))}", soft_wrap=True)
    if culprit.confidence is not None:
        out.print(f"confidence: {confidence_text(culprit.confidence)}")


def render_report(report: Report, out: Console | None = None) -> None:
    out = out or console()
    status = report.status.value
    unit = report.metric
    out.print(
        f"[{STATUS_STYLE.get(status, 'bold')}]session {report.session}: {status}[/] "
        f"— {escape(report.message)}"
    )
    if report.remaining is not None:
        out.print(f"[yellow]provisional:[/] {escape(report.remaining)}", soft_wrap=True)
    if report.threshold_ms is not None:
        direction = "higher" if report.higher_is_better else "lower"
        within = (
            f" [{num(report.threshold_interval[0])}, {num(report.threshold_interval[1])}]"
            if report.threshold_interval
            else ""
        )
        out.print(
            f"threshold: {num(report.threshold_ms)}{within} {escape(unit)} ({direction} is "
            f"better; {escape(report.threshold_basis)}); noise: {report.noise_rel_sd:.1%} "
            "launch-to-launch"
        )
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(warning)}")
    table = _table(
        "pos",
        "configuration",
        "verdict",
        f"{unit} median [interval] launches",
        "note",
        title="configurations evaluated (path order)",
    )
    for point in report.path:
        verdict = point.verdict.value
        table.add_row(
            str(point.position),
            escape(short_hashes(cfg(point.config))),
            f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]",
            escape(interval(point.ms)),
            escape(point.note),
        )
    out.print(table)
    for word, meaning in report.legend.items():
        out.print(f"  [{VERDICT_STYLE.get(word, '')}]{word}[/]: {escape(meaning)}")
    _culprit(out, report)
    for line in descent_lines(report.descent):
        out.print(f"[bold]merge:[/] {escape(line)}", soft_wrap=True)
    if report.attribution:
        table = _table("axes switched to bad", "verdict", f"effect ({unit})", title="attribution")
        for row in report.attribution:
            table.add_row(
                escape("+".join(row.axes)),
                row.verdict.value,
                f"{row.effect_ms:+.4g}" if row.effect_ms is not None else "-",
            )
        out.print(table)
        sets = [" + ".join(s) for s in report.culprit_axes]
        out.print(f"[bold]culprit axes:[/] {escape('; '.join(sets))}")
        for st in report.steps:
            out.print(
                f"    {escape(st.axis)}: {escape(cfg(st.last_good))} -> {_step_line(st, unit)}"
            )
    elif len(report.steps) > 1:
        out.print(f"[bold]the regression came in {len(report.steps)} steps:[/]")
        for st in report.steps:
            mark = " (crosses the threshold)" if st.crosses_threshold else ""
            out.print(f"    {_step_line(st, unit)}{mark}")
    if report.fidelity is not None:
        _fidelity(out, report.fidelity, unit)
    for spec in report.speculation:
        ratio = f"{spec.speedup:.2f}x" if spec.speedup is not None else "-"
        verdict = (
            " ([yellow]speculation is slower[/])"
            if spec.speedup is not None and spec.speedup < 1
            else ""
        )
        out.print(
            f"speculation at the {spec.end} end ({escape(cfg(spec.config))}): {ratio}{verdict}; "
            "client tokens/s with "
            + (", ".join(num(v) for v in spec.with_tokens_s) or "-")
            + ", without "
            + (", ".join(num(v) for v in spec.without_tokens_s) or "-")
        )
    for u in report.seen:
        out.print(
            f"[cyan]seen, not searched:[/] between {escape(cfg(u.good))} and "
            f"{escape(cfg(u.bad))}: {escape(u.why)}"
        )
    for u in report.creep:
        out.print(
            f"[cyan]creep:[/] between {escape(cfg(u.good))} and {escape(cfg(u.bad))}: "
            f"{escape(u.why)}"
        )
    for u in report.unresolved:
        out.print(
            f"[yellow]unresolved:[/] between {escape(cfg(u.good))} (good) and "
            f"{escape(cfg(u.bad))} (bad): {escape(u.why)}"
        )
    for d in report.drift:
        change = d["change"]
        out.print(
            f"[yellow]drift:[/] the {d['endpoint']} endpoint measured "
            f"{num(d['before']['median'])} before ({d['before']['first'][:10]} .. "
            f"{d['before']['last'][:10]}, sessions {d['before']['sessions']}) and "
            f"{num(d['now']['median'])} now ({change['delta']:+.4g})"
            + (
                ""
                if d.get("firm", True)
                else " on one launch now: a slow launch explains that as well (a launch more "
                "would tell)"
            )
        )
        for item in d.get("env_diff", [])[:20]:
            out.print(
                f"    {escape(str(item['key']))}: {escape(_plain(item['before']))} -> "
                f"{escape(_plain(item['now']))}"
            )
    failed = f" ({report.failed_launches} failed)" if report.failed_launches else ""
    if report.reused_launches:
        failed += (
            f"; {counted(len(report.reused_launches), 'search launch')} reused from earlier "
            "sessions (`--fresh` launches everything)"
        )
    out.print(f"search: {escape(search_text(report.search))}", soft_wrap=True)
    out.print(
        f"evaluations: {counted(report.evaluations, 'configuration')}, launches: "
        f"{report.launches}{failed}"
        + (f" in {counted(report.rounds, 'round')}" if report.rounds else "")
        + "; "
        f"time to this answer: {clock(report.time_spent_s)} in launch stages"
    )
    for line in summary_text(report.startup or {}):
        out.print(f"start-up, {line}", soft_wrap=True)
    if report.log_dir:
        out.print(f"logs: {escape(report.log_dir)}", soft_wrap=True)


def _fidelity(out: Console, f: Fidelity, unit: str) -> None:
    out.print(
        f"[bold]proxy launches:[/] {escape(f.proxy)}; the search ran on {f.searched_on} "
        f"launches ({f.proxy_launches} proxy, {f.full_launches} full)"
    )
    if f.fallback:
        out.print(f"[yellow]fallback:[/] {escape(f.fallback)}")
    for c in f.checks:
        mark = "[green]confirmed[/]" if c.confirmed else "[yellow]not confirmed[/]"
        values = " / ".join(
            ", ".join(num(v) for v in side) or "-" for side in (c.good_values, c.bad_values)
        )
        out.print(
            f"full model, interleaved: {escape(cfg(c.last_good))} -> {escape(cfg(c.first_bad))}: "
            f"{mark}; {escape(c.note)} ({escape(unit)} launches: {values})"
        )


def _plain(value: Any) -> str:
    """A stored value as a person reads it (no Python reprs of dicts or long floats)."""
    if isinstance(value, float):
        return num(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    return "-" if value is None else str(value)


PLAIN_ROWS = 40  # longer tables print as aligned plain text: rich's layout of 200 rows takes 0.5 s


def render_rows(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    full_hashes: bool = False,
    compact: bool = False,
) -> None:
    """A table of plain values; commit hashes in it short unless ``full_hashes``; ``compact``:
    without borders (a rule under the header, a space between columns: ten columns in 80)."""
    shown = (lambda text: text) if full_hashes else short_hashes
    cells = [[shown(_plain(v)) if v is not None else "" for v in row] for row in rows]
    widths = _column_widths(columns, cells)
    if len(rows) > PLAIN_ROWS:
        line = "  ".join
        lines = [title, line(str(c).ljust(w) for c, w in zip(columns, widths, strict=False))]
        lines.append(line("-" * w for w in widths))
        lines += [
            line(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells
        ]
        sys.stdout.write("\n".join(lines) + "\n")
        return
    table = _table(*columns, title=title)
    if compact:
        table.box, table.show_edge, table.pad_edge = box.SIMPLE_HEAD, False, False
        table.padding = (0, 0)  # (the box itself puts a space between columns)
    out = console()
    # Ids, numbers and short hashes keep their line: when the table is too wide, the widest
    # columns (reasons, stage times, paths) give way, not a hash folded mid-digits. Columns
    # keep their line narrowest first while those left still get 8 characters each (or their
    # whole text, when shorter; when even the narrowest would leave less, all fold alike).
    # Those that fold share what is left, the narrowest first taking no more than its text
    # (rich would otherwise measure a fold column by its longest word and squeeze the kept
    # ones to fit it).
    room = out.width - _borders(len(widths), compact)
    folding = sorted(range(len(widths)), key=lambda i: widths[i])

    def least(columns: list[int]) -> int:  # what folding columns need: 8 each, or their text
        return sum(min(8, widths[j]) for j in columns)

    while folding and room - widths[folding[0]] >= least(folding[1:]):
        i = folding.pop(0)
        room -= widths[i]
        table.columns[i].no_wrap = True
    if folding and room >= least(folding):
        for left, i in enumerate(folding):
            share = min(widths[i], room // (len(folding) - left))
            table.columns[i].max_width = share
            room -= share
    for row in cells:
        table.add_row(*(escape(c) for c in row))
    out.print(table)


def render_dry_run(result: dict[str, Any], out: Console | None = None) -> None:
    """Every command of the first launch, in order, as a person would check them."""
    out = out or Console(soft_wrap=True, highlight=False)
    out.print(f"[bold]first configuration:[/] {escape(cfg(result['configuration']))}")
    out.print(f"path: {result['path_length']} configurations; axes: {', '.join(result['axes'])}")
    for stage, command in result["commands"].items():
        lines = command if isinstance(command, list) else [command]
        for line in lines:
            # Commands contain brackets (python[all]) that rich would read as markup.
            out.print(f"[cyan]{stage}:[/] {escape(str(line))}")


def render_status(data: dict[str, Any], resume: str | None = None) -> None:
    """`bisect status`: whose session, where it stands, the culprit once found (provisional
    while the session has not finished), and the report's row per configuration; ``resume``:
    the command that continues an interrupted session."""
    out = console()
    name = f" ({data['name']})" if data["name"] else ""
    outcome = f" -> {data['outcome']}" if data["outcome"] else ""
    owner = data["owner"]
    out.print(
        f"session {data['session']}{escape(name)}: {data['status']}{outcome}; started "
        f"{data['created_at'][:19]}Z by "
        + (f"{escape(str(owner['user']))}, " if owner.get("user") else "")
        + f"pid {owner['pid']} on {escape(str(owner['host']))}; "
        f"{counted(data['launches'], 'launch')} ({data['failed_launches']} failed), "
        f"{clock(data['stage_seconds'])} in stages"
        + (f", about {clock(data['estimate_left_s'])} left" if data["estimate_left_s"] else ""),
        soft_wrap=True,
    )
    if data["message"]:
        out.print(escape(data["message"]), soft_wrap=True)
    if resume:
        out.print(f"`{escape(resume)}` continues it", soft_wrap=True)
    culprit = data["culprit"]
    if culprit:
        label = "provisional culprit" if data["provisional"] else "culprit"
        commit = culprit.get("commit")
        subject = f" {commit['subject']}" if commit else ""
        bad, good = culprit.get("first_bad_ms"), culprit.get("last_good_ms")
        out.print(
            f"[bold]{label}:[/] {escape(cfg(culprit['first_bad']))}{escape(subject)} "
            f"(position {culprit['position']}): {escape(_interval_json(bad))}; last good "
            f"{escape(cfg(culprit['last_good']))}: {escape(_interval_json(good))}",
            soft_wrap=True,
        )
    for line in descent_lines([MergeDescent.from_json(d) for d in data.get("descent", [])]):
        out.print(f"[bold]merge:[/] {escape(line)}", soft_wrap=True)
    if data["remaining"]:
        out.print(f"[yellow]provisional:[/] {escape(data['remaining'])}", soft_wrap=True)
    render_rows(
        "verdicts (one per configuration, as in the report)",
        ["pos", "configuration", "verdict", "median [interval] launches", "note"],
        [
            (
                v["position"],
                cfg(v["config"]),
                v["verdict"],
                _interval_json(
                    {"median": v["median"], "ci": v["ci"], "launches": v["launches"]}
                    if v["median"] is not None
                    else None
                ),
                v["note"],
            )
            for v in data["verdicts"]
        ],
    )
    for word, meaning in data["legend"].items():
        out.print(f"  {word}: {escape(meaning)}", soft_wrap=True)


def _interval_json(ms: dict[str, Any] | None) -> str:
    if not ms:
        return "-"
    return interval(Interval(ms["median"], ms["ci"][0], ms["ci"][1], ms["launches"]))


def _slow_odds(slow: float | None) -> str:
    """The posterior's probability that a launch ran slow, as the log shows it ("-": the
    rule engine's sessions, which have none)."""
    if slow is None:
        return "-"
    return "<1%" if slow < 0.01 else ">99%" if slow > 0.99 else f"{slow:.0%}"


def render_log(
    session: int, entries: Sequence[dict[str, Any]], descent: Sequence[MergeDescent] = ()
) -> None:
    """`bisect log`: every launch with its value or failure, its configuration's verdict,
    whether it counts in that configuration's numbers, and its log; below, the searches inside
    a merge the launches include (the report's lines)."""
    columns = ["#", "id", "purpose", "config", "value", "counted", "P(slow)", "verdict"]
    columns += ["ready (s)", "log"]
    rows = [
        [
            str(e["seq"]),
            str(e["id"]),
            e["purpose"],
            cfg(e["config"]),
            num(e["value"])
            if e["value"] is not None
            else f"{e['stage']}: {lead_with_error(e['reason'] or 'failed')}",
            "kept" if e["kept"] else f"set aside: {e['set_aside']}" if e["kept"] is False else "-",
            _slow_odds(e.get("slow")),
            e["verdict"] or "-",
            ready_brief(e.get("timings") or {}),
            e["log"] or "",
        ]
        for e in entries
    ]
    out = console()
    compact = _row_width(columns, rows) > out.width
    if compact:
        failed = [e["value"] is None for e in entries]
        columns, rows = _narrow_log(out, columns, rows, failed)
    render_rows(f"session {session} launches", columns, rows, compact=compact)
    if any(e["kept"] and (e.get("slow") or 0) >= 0.5 for e in entries):
        out.print(
            "kept at P(slow) >= 50%: the posterior holds every launch of that configuration slow,"
            " so they stay in its numbers (nothing else tells its level); the search weighed"
            " each by its probability"
        )
    for line in descent_lines(descent):
        console().print(f"[bold]merge:[/] {escape(line)}", soft_wrap=True)


def _narrow_log(
    out: Console, columns: list[str], rows: list[list[str]], failed: list[bool]
) -> tuple[list[str], list[list[str]]]:
    """The log for a terminal narrower than its rows: what repeats or runs long is said once,
    above the table (the launches' log directory, each set-aside reason, each failure), and the
    columns with nothing to tell ("-" in every row: no start-up stages, the rule engine's
    P(slow)) are left out, so the columns that tell launches apart keep their line instead of
    every column folding into a letter or two (a log path took twelve lines a launch at 80)."""
    value, counted, log = columns.index("value"), columns.index("counted"), columns.index("log")
    names, folder = _log_names([row[log] for row in rows])
    if folder:  # whole on its line, to be copied, however narrow the terminal
        out.print(escape(f"logs in {folder}"), soft_wrap=True)
    notes: dict[str, int] = {}
    for row, name, failure in zip(rows, names, failed, strict=True):
        row[log] = name
        for column, note, short in (
            (counted, row[counted].startswith("set aside: "), "aside"),
            (value, failure, "failed"),
        ):
            if note:
                key = notes.setdefault(row[column], len(notes) + 1)
                row[column] = f"{short} [{key}]"
    for text, key in notes.items():
        out.print(escape(f"[{key}] {text}"))
    shown = [i for i, _ in enumerate(columns) if any(row[i] != "-" for row in rows)]
    names = ["ready" if c == "ready (s)" else c for c in columns]  # (its values carry the unit)
    return [names[i] for i in shown], [[row[i] for i in shown] for row in rows]


def _row_width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The width a bordered table of these cells takes on one line per row."""
    widths = _column_widths(columns, rows)
    return sum(widths) + _borders(len(widths), compact=False)


def _column_widths(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[int]:
    """Each column's width: its header's or its longest cell's."""
    return [max(len(str(c)) for c in col) for col in zip(columns, *rows, strict=False)]


def _borders(columns: int, compact: bool) -> int:
    """The characters a table's borders take on a line: a space between columns (compact),
    else a rule and a space each side of every column."""
    return columns - 1 if compact else 3 * columns + 1


def _log_names(logs: Sequence[str]) -> tuple[list[str], str]:
    """The launches' log files named within the deepest directory they share (a session's;
    an explanation's launches lie one below), and that directory; unchanged and "" when they
    share none below the root."""
    present = [log for log in logs if log]
    if not present or not all(os.path.isabs(log) for log in present):
        return list(logs), ""
    folder = os.path.commonpath([os.path.dirname(log) for log in present])
    if folder == os.path.dirname(folder):  # the root: nothing worth saying once
        return list(logs), ""
    return [os.path.relpath(log, folder) if log else "" for log in logs], folder + os.sep
