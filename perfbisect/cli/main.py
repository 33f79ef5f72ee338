"""The `perfbisect` command. Thin: parse, call the core, render. Errors are mapped here, once."""

from __future__ import annotations

import sys
from typing import Any

import typer
import typer.core
import typer.main

from perfbisect.cli import bisect_cmd, cache_cmd, demo_cmd, probe_cmd, query_cmd
from perfbisect.cli.context import Context

app = typer.Typer(
    name="perfbisect",
    help="Automated, noise-aware performance-regression bisection for LLM serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Typer's own completion options detect the shell and ignore one named after them
    # (`--show-completion fish` printed bash's script): ours take the shell, else detect it.
    add_completion=False,
    rich_markup_mode=None,  # help texts hold [env], ssh://[user@]host: not markup
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(bisect_cmd.app, name="bisect")
app.add_typer(query_cmd.app, name="query")
app.add_typer(probe_cmd.app, name="probe")
app.add_typer(cache_cmd.app, name="cache")
app.command("demo")(demo_cmd.demo)


def _version_text() -> str:
    from perfbisect import __version__

    return f"perfbisect {__version__}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(_version_text())
        raise typer.Exit()


SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion_shell(value: str) -> str:
    """The shell named, or (the option given alone) the one this command runs under."""
    from perfbisect.errors import UsageError

    shell = value
    if not shell:
        from typer._completion_shared import _get_shell_name

        shell = _get_shell_name() or ""
    if shell not in SHELLS:
        raise UsageError(
            f"shell {shell or '(not detected)'!r} has no completion: name one of {', '.join(SHELLS)}"
        )
    return shell


def _show_completion(ctx: typer.Context, _param: object, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from typer._completion_shared import get_completion_script

    shell = _completion_shell(value)
    typer.echo(
        get_completion_script(prog_name="perfbisect", complete_var=COMPLETE_VAR, shell=shell)
    )
    raise typer.Exit()


def _install_completion(ctx: typer.Context, _param: object, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from typer._completion_shared import install

    shell, path = install(
        shell=_completion_shell(value), prog_name="perfbisect", complete_var=COMPLETE_VAR
    )
    typer.echo(f"{shell} completion installed in {path}; it takes effect in a new shell")
    raise typer.Exit()


COMPLETE_VAR = "_PERFBISECT_COMPLETE"


def command() -> typer.core.TyperGroup:
    """The click command behind `perfbisect`. An argument's help shows its name and text, not
    the Python type Typer adds (``kinds... <list[str]>``): an argument's type is no metavar
    that Typer lets a command set."""
    group = typer.main.get_command(app)

    def visit(cmd: Any) -> None:
        for param in cmd.params:
            if isinstance(param, typer.core.TyperArgument):
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        for sub in getattr(cmd, "commands", {}).values():
            visit(sub)

    visit(group)
    assert isinstance(group, typer.core.TyperGroup)
    return group


def _completion_args(args: list[str]) -> list[str]:
    """``--show-completion`` / ``--install-completion`` given without a shell: the current
    shell (an empty value, detected by the option's callback)."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg in ("--show-completion", "--install-completion") and (
            i + 1 == len(out) or out[i + 1].startswith("-")
        ):
            out.insert(i + 1, "")
            break
    return out


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
        callback=_install_completion,
        help="Install completion for this shell: bash, zsh, fish or powershell "
        "(default: the current shell).",
    ),
    show_completion: str | None = typer.Option(
        None,
        "--show-completion",
        metavar="[SHELL]",
        is_eager=True,
        expose_value=False,
        callback=_show_completion,
        help="Print the completion script for this shell (default: the current shell).",
    ),
) -> None:
    ctx.obj = Context(db_url=db)


@app.command()
def version() -> None:
    """Print the version (as --version does)."""
    typer.echo(_version_text())


def run() -> None:
    from perfbisect import interrupts
    from perfbisect.errors import PerfbisectError

    as_json = "--json" in sys.argv[1:]
    misplaced = _global_option_after_command(sys.argv[1:])
    if misplaced:
        _fail(misplaced, 2, "UsageError", as_json)
    from typer._completion_classes import completion_init

    completion_init()  # the shells' completion requests (_PERFBISECT_COMPLETE) as Typer's
    interrupts.install()
    try:
        command()(args=_completion_args(sys.argv[1:]), prog_name="perfbisect")
    except PerfbisectError as exc:
        message = str(exc).replace("\n", " | ") if exc.exit_code != 130 else str(exc)
        _fail(message, exc.exit_code, type(exc).__name__, as_json)
    except KeyboardInterrupt:
        _fail("interrupted", 130, "Interrupted", as_json)


def _global_option_after_command(args: list[str]) -> str | None:
    """``--db`` given after the command (``perfbisect bisect status --db x.db``): what to say,
    with the command line that works. Click would only say "No such option: --db"."""
    import shlex

    command_at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if command_at is None or (command_at > 0 and args[command_at - 1] == "--db"):
        return None  # `--db X` before the command: X is no command
    for i, arg in enumerate(args[command_at:], start=command_at):
        if arg == "--":
            return None
        if arg == "--db" or arg.startswith("--db="):
            taken = args[i : i + 2] if arg == "--db" else [arg]
            rest = args[:i] + args[i + len(taken) :]
            fixed = shlex.join(["perfbisect", *taken, *rest])
            return f"--db is an option of perfbisect itself: give it before the command: {fixed}"
    return None


def _fail(message: str, code: int, kind: str, as_json: bool) -> None:
    """One line on stderr; with --json also one JSON object on stdout, so that a script that
    reads stdout always gets something it can parse. Ctrl-C is no error: said as what it is."""
    prefix = "perfbisect: " if code == 130 else "perfbisect: error: "
    print(f"{prefix}{message}", file=sys.stderr)
    if as_json:
        import json

        print(json.dumps({"error": message, "kind": kind, "exit_code": code}))
    sys.exit(code)
