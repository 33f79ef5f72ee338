"""`perfbisect cache list|clean`: what the cache holds, and freeing it."""

from __future__ import annotations

import typer

from perfbisect.cli.context import emit_json

app = typer.Typer(
    rich_markup_mode=None,
    help="What perfbisect keeps on disk (worktrees, logs, environments), and freeing it.",
    no_args_is_help=True,
)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


@app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Each kind of cached item: where, how much, how many."""
    import dataclasses
    import time

    from perfbisect.cachedir import list_cache
    from perfbisect.cli.render import render_rows
    from perfbisect.paths import cache_dir

    entries = list_cache()
    if as_json:
        emit_json({"cache": str(cache_dir()), "entries": [dataclasses.asdict(e) for e in entries]})
        return
    typer.echo(f"cache: {cache_dir()}")
    render_rows(
        "cache",
        ["kind", "size", "items", "newest", "path", "what"],
        [
            (
                e.kind,
                _human(e.bytes),
                e.items,
                time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(e.newest)) if e.newest else "-",
                e.path,
                e.what,
            )
            for e in entries
        ],
    )


@app.command("clean")
def clean_command(
    kinds: list[str] = typer.Argument(
        None,
        help="Kinds to remove (default: worktrees). See `perfbisect cache list`.",
    ),
    all_kinds: bool = typer.Option(False, "--all", help="Every kind."),
    older_than_days: float | None = typer.Option(
        None,
        "--older-than-days",
        metavar="<days>",
        help="Only items not used for this many days.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Remove cached items; the history database is never touched."""
    from perfbisect.cachedir import KINDS, clean_cache

    chosen = list(KINDS) if all_kinds else (kinds or ["worktrees"])
    removed = clean_cache(chosen, older_than_days)
    if as_json:
        emit_json({"removed": removed})
        return
    typer.echo(f"removed {len(removed)} item(s) of {', '.join(chosen)}")
