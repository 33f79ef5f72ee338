"""Terminal rendering (rich) of reports, progress, history and comparisons. No logic beyond layout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

STATUS_STYLE = {
    "found": "bold green",
    "endpoints-not-reproduced": "bold yellow",
    "ambiguous": "bold yellow",
}
VERDICT_STYLE = {
    "good": "green",
    "bad": "red",
    "intermediate": "cyan",
    "skip": "magenta",
    "unclear": "yellow",
}


def _cfg(config: dict[str, Any]) -> str:
    parts = []
    for key, value in config.items():
        parts.append(str(value)[:12] if key == "commit" else f"{key}={value}")
    return ",".join(parts)


def _ms(ms: dict[str, Any] | None) -> str:
    if not ms:
        return "-"
    lo, hi = ms["ci"]
    return f"{ms['median']:.4g} [{lo:.4g}, {hi:.4g}] n={ms.get('launches', '?')}"


class ConsoleProgress:
    """Progress on stderr: steps done/expected, the current configuration and stage."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.expected = 0
        self.done = 0

    def started(self, session_id: int, path_length: int, expected_steps: int) -> None:
        self.expected = expected_steps
        self.console.print(
            f"session {session_id}: {path_length} configurations on the path, "
            f"about {expected_steps} steps"
        )

    def stage(self, request: Any, stage: str) -> None:
        self.console.print(
            f"  [{self.done}/{self.expected}] {request.config.label()} "
            f"({request.purpose.value}): {stage}",
            style="dim",
        )

    def launched(self, request: Any, result: Any, replayed: bool) -> None:
        what = f"{result.value:.4g}" if result.ok else f"failed: {str(result.reason)[:120]}"
        tag = " (stored)" if replayed else ""
        self.console.print(f"  {request.config.label()} ({request.purpose.value}) -> {what}{tag}")

    def verdict(self, point: Any) -> None:
        self.done += 1
        style = VERDICT_STYLE.get(point.verdict.value, "")
        est = point.estimate
        value = f"{est.median:.4g} [{est.lo:.4g}, {est.hi:.4g}]" if est else "-"
        self.console.print(
            f"[{self.done}/{self.expected}] {point.config.label()}: "
            f"[{style}]{point.verdict.value.upper()}[/] {value}"
        )


def render_report(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    status = report["status"]
    unit = report.get("metric", "value")
    console.print(
        f"[{STATUS_STYLE.get(status, 'bold')}]session {report['session']}: {status}[/] "
        f"— {report.get('message', '')}"
    )
    threshold = report.get("threshold_ms")
    if threshold is not None:
        direction = "higher" if report.get("higher_is_better") else "lower"
        console.print(
            f"threshold: {threshold:.4g} {unit} ({direction} is better); noise: "
            f"{report.get('noise_rel_sd', 0):.1%} launch-to-launch"
        )
    table = Table(title="configurations evaluated (path order)", show_lines=False)
    for col in ("pos", "configuration", "verdict", f"{unit} median \\[interval] launches", "note"):
        table.add_column(col)
    for point in report.get("path", []):
        verdict = point["verdict"]
        table.add_row(
            str(point["position"]),
            _cfg(point["config"]),
            f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]",
            _ms(point.get("ms")),
            (point.get("reason") or "")[:80],
        )
    console.print(table)
    culprit = report.get("culprit")
    if culprit:
        console.print(
            f"[bold]first bad ({culprit['axis']}):[/] {_cfg(culprit['first_bad'])}  "
            f"{_ms(culprit.get('first_bad_ms'))}"
        )
        commit = culprit.get("commit")
        if commit:
            console.print(
                f"    {commit['sha']}\n    {commit['subject']}\n    "
                f"{commit['author']}, {commit['date']}"
            )
        console.print(
            f"[bold]last good:[/] {_cfg(culprit['last_good'])}  {_ms(culprit.get('last_good_ms'))}"
        )
        eff = culprit.get("effect_ms")
        if eff:
            console.print(
                f"effect: {eff['delta']:+.4g} {unit} (interval {eff['ci'][0]:+.4g} .. "
                f"{eff['ci'][1]:+.4g}); verified with interleaved launches: "
                f"{'yes' if culprit.get('verified') else 'no'}"
            )
    steps = report.get("steps", [])
    if report.get("attribution"):
        table = Table("axes switched to bad", "verdict", f"effect ({unit})", title="attribution")
        for row in report["attribution"]:
            effect = row.get("effect_ms")
            table.add_row(
                "+".join(row["axes"]),
                row["verdict"],
                f"{effect:+.4g}" if effect is not None else "-",
            )
        console.print(table)
        sets = [" + ".join(s) for s in report.get("culprit_axes", [])]
        console.print(f"[bold]culprit axes:[/] {'; '.join(sets)}")
        for st in steps:
            sha = (
                f" {st['commit']['sha'][:12]} {st['commit']['subject']}" if st.get("commit") else ""
            )
            console.print(
                f"    {st['axis']}: {_cfg(st['last_good'])} -> {_cfg(st['first_bad'])}{sha} "
                f"({_ms(st.get('last_good_ms'))} -> {_ms(st.get('first_bad_ms'))})"
            )
    elif len(steps) > 1:
        console.print(f"[bold]the regression came in {len(steps)} steps:[/]")
        for st in steps:
            mark = (
                " (crosses the threshold)"
                if culprit and st["position"] == culprit["position"]
                else ""
            )
            sha = (
                f" {st['commit']['sha'][:12]} {st['commit']['subject']}" if st.get("commit") else ""
            )
            console.print(
                f"    {_ms(st.get('last_good_ms'))} -> {_ms(st.get('first_bad_ms'))} at "
                f"{_cfg(st['first_bad'])}{sha}{mark}"
            )
    for a, b in report.get("unresolved", []):
        console.print(f"[yellow]unresolved:[/] between {_cfg(a)} (good) and {_cfg(b)} (bad)")
    for d in report.get("drift", []):
        change = d["change"]
        console.print(
            f"[yellow]drift:[/] the {d['endpoint']} endpoint measured "
            f"{d['before']['median']:.4g} before ({d['before']['first'][:10]} .. "
            f"{d['before']['last'][:10]}, sessions {d['before']['sessions']}) and "
            f"{d['now']['median']:.4g} now ({change['delta']:+.4g})"
        )
        for item in d.get("env_diff", [])[:20]:
            console.print(f"    {item['key']}: {item['before']!r} -> {item['now']!r}")
    console.print(f"evaluations: {report.get('evaluations')}, launches: {report.get('launches')}")


def render_rows(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console(highlight=False).print(table)


def write_plot(report: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from perfbisect.errors import UsageError

        raise UsageError("--plot needs matplotlib: pip install 'perfbisect[plot]'") from None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colours = {"good": "tab:green", "bad": "tab:red", "skip": "tab:purple", "unclear": "tab:orange"}
    for point in report.get("path", []):
        x = point["position"]
        ms = point.get("ms")
        if ms is None:
            ax.axvline(x, color=colours["skip"], alpha=0.3, linestyle=":")
            continue
        lo, hi = ms["ci"]
        ax.errorbar(
            [x],
            [ms["median"]],
            yerr=[[ms["median"] - lo], [hi - ms["median"]]],
            fmt="o",
            color=colours.get(point["verdict"], "black"),
            capsize=3,
        )
        for value in point.get("launch_values", []):
            ax.plot([x], [value], ".", color="grey", alpha=0.5)
    if report.get("threshold_ms") is not None:
        ax.axhline(report["threshold_ms"], color="black", linestyle="--", label="threshold")
    culprit = report.get("culprit")
    if culprit and culprit.get("position") is not None:
        ax.axvline(culprit["position"] - 0.5, color="tab:red", alpha=0.4, label="first bad")
    ax.set_xlabel("position on the path (good -> bad)")
    ax.set_ylabel(report.get("metric", "value"))
    ax.set_title(f"perfbisect session {report['session']}: {report['status']}")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_dry_run(result: dict[str, Any], console: Console | None = None) -> None:
    """Every command of the first launch, in order, as a person would check them."""
    console = console or Console(soft_wrap=True)
    console.print(f"[bold]first configuration:[/] {_cfg(result['configuration'])}")
    console.print(
        f"path: {result['path_length']} configurations; axes: {', '.join(result['axes'])}"
    )
    for stage, command in result["commands"].items():
        lines = command if isinstance(command, list) else [command]
        for line in lines:
            # Commands contain brackets (python[all]) that rich would read as markup.
            console.print(f"[cyan]{stage}:[/] {escape(str(line))}", highlight=False)
