"""Text rendering of probe results (the JSON form is the result itself)."""

from __future__ import annotations

import shutil
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

STYLE = {"present": "green", "different": "yellow", "absent": "red"}


def _console() -> Console:
    # Matrices are wide: use the terminal's width, or 160 columns when piped (not rich's 80).
    return Console(width=shutil.get_terminal_size((160, 40)).columns)


def render_env_propagation(result: dict[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    console.print(
        f"[bold]env-propagation[/] on {escape(result['host'])} "
        f"(methods: {', '.join(result['methods'])})"
    )
    stages = result["stages"]
    table = Table()
    for column in ("variable", "method", *stages):
        table.add_column(column, overflow="fold")  # values are copied: fold, never cut
    for name in result["variables"]:
        first = True
        for method in result["methods"]:
            cells = result["matrix"].get(name, {}).get(method)
            if cells is None:
                continue
            row = []
            for stage in stages:
                cell = cells.get(stage)
                if cell is None:
                    row.append("")
                    continue
                text = cell["value"] if cell["status"] != "absent" else "absent"
                if cell["status"] == "different":
                    text = f"≠ {text}"
                row.append(f"[{STYLE[cell['status']]}]{escape(str(text))}[/]")
            table.add_row(escape(name) if first else "", method, *row)
            first = False
    console.print(table)
    # Sources in full, one line each, below the table: they are what people copy.
    for name in result["variables"]:
        source = result["sources"].get(name, {})
        origin = [
            "delivered by perfbisect" if source.get("delivered") else "",
            source.get("perfbisect", ""),
            *source.get("host", []),
        ]
        for line in (o for o in origin if o):
            console.print(f"[bold]{escape(name)}[/] source: {escape(line)}", soft_wrap=True)
    for hint in result["hints"]:
        console.print(f"[yellow]hint[/] ({hint['kind']}): {escape(hint['message'])}")
    for method, notes in result.get("notes", {}).items():
        for note in notes:
            console.print(f"[dim]{method}: {escape(note)}[/]")
    ssh = result.get("ssh") or {}
    if ssh.get("sshd") or ssh.get("sshd_error"):
        console.print(f"[dim]sshd: {escape(ssh.get('sshd') or ssh.get('sshd_error') or '')}[/]")
    if result.get("reference") is None:
        console.print(
            "[dim]the host user's login environment could not be read: hints that compare "
            "with it are off[/]"
        )
    for method, reason in result["errors"].items():
        if reason.startswith("not run:"):
            console.print(f"[yellow]{method} {escape(reason)}[/]")
        else:
            console.print(f"[red]{method} failed:[/] {escape(reason)}")


def render_hardware(snapshot: dict[str, Any], console: Console | None = None) -> None:
    console = console or _console()
    gpus = snapshot.get("gpus", [])
    nccl = snapshot.get("nccl") or {}
    head = f"{snapshot.get('host')} ({snapshot.get('address')})"
    if not gpus:
        console.print(f"{head}: no NVIDIA GPU: {snapshot.get('nvml') or snapshot.get('error')}")
        return
    console.print(
        f"[bold]{head}[/]: driver {snapshot.get('driver')}, CUDA driver "
        f"{snapshot.get('cuda_driver')}, NCCL {nccl.get('version', '?')} "
        f"({nccl.get('library', 'not found')})"
    )
    table = Table(
        "gpu",
        "name",
        "SM MHz",
        "mem MHz",
        "PCIe",
        "power W",
        "temp C",
        "throttle",
        "ECC",
        "mem MiB",
    )
    for g in gpus:
        table.add_row(
            str(g["index"]),
            str(g["name"]),
            f"{g['sm_clock_mhz']}/{g['sm_clock_max_mhz']}",
            f"{g['mem_clock_mhz']}/{g['mem_clock_max_mhz']}",
            f"gen{g['pcie_gen']}x{g['pcie_width']} (max gen{g['pcie_gen_max']}x{g['pcie_width_max']})",
            f"{g['power_w']}/{g['power_limit_w']}",
            str(g["temperature_c"]),
            ",".join(g["throttle_reasons"] or []) or "-",
            f"{g['ecc_errors'].get('corrected')}/{g['ecc_errors'].get('uncorrected')}",
            f"{g['memory_used_mib']}/{g['memory_total_mib']}",
        )
    console.print(table)
    if snapshot.get("topology"):
        console.print(snapshot["topology"])
