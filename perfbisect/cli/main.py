"""The `perfbisect` command. Thin: parse, call the core, render. Errors are mapped here, once."""

from __future__ import annotations

import sys
from typing import Any

import typer
import typer.core
import typer.main

from perfbisect import interrupts  # the standard library only: no start-up cost
from perfbisect.cli import (
    bisect_cmd,
    cache_cmd,
    completion,
    demo_cmd,
    probe_cmd,
    query_cmd,
    sglang_cmd,
    watch_cmd,
)
from perfbisect.cli.context import Context

app = typer.Typer(
    name="perfbisect",
    help="Automated, noise-aware performance-regression bisection for LLM serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,  # ours (cli/completion.py) take the shell named
    rich_markup_mode=None,  # help texts hold [env], ssh://[user@]host: not markup
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(bisect_cmd.app, name="bisect")
app.add_typer(query_cmd.app, name="query")
app.add_typer(probe_cmd.app, name="probe")
app.add_typer(cache_cmd.app, name="cache")
app.add_typer(sglang_cmd.app, name="sglang")
app.command("demo")(demo_cmd.demo)
app.command("watch")(watch_cmd.watch)


def _version_text() -> str:
    from perfbisect import __version__

    return f"perfbisect {__version__}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(_version_text())
        raise typer.Exit()


def command() -> typer.core.TyperGroup:
    """The click command behind `perfbisect`, its options' metavars named."""
    group = typer.main.get_command(app)

    def visit(cmd: Any) -> None:
        for param in cmd.params:
            if (
                isinstance(param, typer.core.TyperOption)
                and not param.is_flag
                and param.metavar is None
                and param.name
            ):
                # An option without a metavar of its own shows its name, not `<list[str]>`.
                param.metavar = f"<{param.name.replace('_', '-')}>"
        for sub in getattr(cmd, "commands", {}).values():
            visit(sub)

    visit(group)
    assert isinstance(group, typer.core.TyperGroup)
    return group


@app.callback()
def main(
    ctx: typer.Context,
    db: str | None = typer.Option(
        None,
        "--db",
        envvar="PERFBISECT_DB",
        metavar="<url|file>",
        help="History database: SQLAlchemy URL or SQLite file (default: user data dir). "
        "Before the command: perfbisect --db FILE bisect ...",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version and exit.",
    ),
    install_completion: str | None = typer.Option(
        None,
        "--install-completion",
        metavar="[SHELL]",
        is_eager=True,
        expose_value=False,
        callback=completion.install_completion,
        help="Install completion for this shell: bash, zsh, fish or powershell "
        "(default: the current shell).",
    ),
    show_completion: str | None = typer.Option(
        None,
        "--show-completion",
        metavar="[SHELL]",
        is_eager=True,
        expose_value=False,
        callback=completion.show_completion,
        help="Print the completion script for this shell (default: the current shell).",
    ),
) -> None:
    ctx.obj = Context(db_url=db)


@app.command()
def version() -> None:
    """Print the version (as --version does)."""
    typer.echo(_version_text())


def run() -> None:
    from perfbisect.errors import PerfbisectError

    as_json = "--json" in sys.argv[1:]
    misplaced = _global_option_after_command(sys.argv[1:])
    if misplaced:
        _fail(misplaced, 2, "UsageError", as_json)
    from typer._completion_classes import completion_init

    completion_init()  # the shells' completion requests (_PERFBISECT_COMPLETE) as Typer's
    interrupts.install()
    try:
        command()(args=completion.completion_args(sys.argv[1:]), prog_name="perfbisect")
    except PerfbisectError as exc:
        stopped = exc.exit_code in interrupts.STOPPED_EXIT_CODES
        message = str(exc).replace("\n", " | ") if not stopped else str(exc)
        _fail(message, exc.exit_code, type(exc).__name__, as_json)
    except KeyboardInterrupt as stop:
        what, code = interrupts.stopped_by(stop)
        _fail(what, code, "Interrupted", as_json)


def _global_option_after_command(args: list[str]) -> str | None:
    """``--db`` given after the command (``perfbisect bisect status --db x.db``): what to say,
    with the command line that works. Click would only say "No such option: --db"."""
    command_at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if command_at is None or (command_at > 0 and args[command_at - 1] == "--db"):
        return None  # `--db X` before the command: X is no command
    for i, arg in enumerate(args[command_at:], start=command_at):
        if arg == "--":
            return None
        if arg == "--db" or arg.startswith("--db="):
            taken = args[i : i + 2] if arg == "--db" else [arg]
            rest = args[:i] + args[i + len(taken) :]
            import shlex

            from perfbisect.invocation import executable  # the store's URL code: only here

            fixed = shlex.join([*executable(), *taken, *rest])
            return f"--db is an option of perfbisect itself: give it before the command: {fixed}"
    return None


def _fail(message: str, code: int, kind: str, as_json: bool) -> None:
    """One line on stderr; with --json also one JSON object on stdout, so that a script that
    reads stdout always gets something it can parse. Ctrl-C (or SIGTERM, SIGHUP) is no error:
    said as what it is."""
    prefix = "perfbisect: " if code in interrupts.STOPPED_EXIT_CODES else "perfbisect: error: "
    print(f"{prefix}{message}", file=sys.stderr)
    if as_json:
        import json

        print(json.dumps({"error": message, "kind": kind, "exit_code": code}))
    sys.exit(code)
