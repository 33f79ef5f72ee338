"""The `perfbisect` command. Thin: parse, call the core, render. Errors are mapped here, once."""

from __future__ import annotations

import sys

import typer

from perfbisect.cli import bisect_cmd, demo_cmd, probe_cmd, query_cmd
from perfbisect.cli.context import Context

app = typer.Typer(
    name="perfbisect",
    help="Automated, noise-aware performance-regression bisection for LLM serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(bisect_cmd.app, name="bisect")
app.add_typer(query_cmd.app, name="query")
app.add_typer(probe_cmd.app, name="probe")
app.command("demo")(demo_cmd.demo)


@app.callback()
def main(
    ctx: typer.Context,
    db: str | None = typer.Option(
        None,
        "--db",
        envvar="PERFBISECT_DB",
        help="History database: SQLAlchemy URL or SQLite file (default: user data dir).",
    ),
) -> None:
    ctx.obj = Context(db_url=db)


@app.command()
def version() -> None:
    """Print the version."""
    from perfbisect import __version__

    typer.echo(__version__)


def run() -> None:
    from perfbisect.errors import PerfbisectError

    try:
        app()
    except PerfbisectError as exc:
        message = str(exc).replace("\n", " | ") if exc.exit_code != 130 else str(exc)
        print(f"perfbisect: error: {message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("perfbisect: interrupted", file=sys.stderr)
        sys.exit(130)
