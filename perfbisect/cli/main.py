"""The `perfbisect` command. Thin: parse, call the core, render. Errors are mapped here, once."""

from __future__ import annotations

import sys

import typer

from perfbisect.cli import bisect_cmd, cache_cmd, demo_cmd, probe_cmd, query_cmd, watch_cmd
from perfbisect.cli.context import Context

app = typer.Typer(
    name="perfbisect",
    help="Automated, noise-aware performance-regression bisection for LLM serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=None,  # help texts hold [env], ssh://[user@]host: not markup
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(bisect_cmd.app, name="bisect")
app.add_typer(query_cmd.app, name="query")
app.add_typer(probe_cmd.app, name="probe")
app.add_typer(cache_cmd.app, name="cache")
app.command("demo")(demo_cmd.demo)
app.command("watch")(watch_cmd.watch)


def _print_version(value: bool) -> None:
    if value:
        from perfbisect import __version__

        typer.echo(f"perfbisect {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    db: str | None = typer.Option(
        None,
        "--db",
        envvar="PERFBISECT_DB",
        help="History database: SQLAlchemy URL or SQLite file (default: user data dir).",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version and exit.",
    ),
) -> None:
    ctx.obj = Context(db_url=db)


@app.command()
def version() -> None:
    """Print the version."""
    from perfbisect import __version__

    typer.echo(__version__)


def run() -> None:
    from perfbisect import interrupts
    from perfbisect.errors import PerfbisectError

    as_json = "--json" in sys.argv[1:]
    interrupts.install()
    try:
        app()
    except PerfbisectError as exc:
        message = str(exc).replace("\n", " | ") if exc.exit_code != 130 else str(exc)
        _fail(message, exc.exit_code, type(exc).__name__, as_json)
    except KeyboardInterrupt:
        _fail("interrupted", 130, "Interrupted", as_json)


def _fail(message: str, code: int, kind: str, as_json: bool) -> None:
    """One line on stderr; with --json also one JSON object on stdout, so that a script that
    reads stdout always gets something it can parse."""
    print(f"perfbisect: error: {message}", file=sys.stderr)
    if as_json:
        import json

        print(json.dumps({"error": message, "kind": kind, "exit_code": code}))
    sys.exit(code)
