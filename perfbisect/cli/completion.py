"""Shell completion: ``--show-completion SHELL`` and ``--install-completion SHELL`` for the
shell named, or the current one when none is. Typer's own options detect the shell and ignore
one named after them (``--show-completion fish`` printed bash's script); the scripts and the
completion itself stay Typer's."""

from __future__ import annotations

import typer

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


def show_completion(ctx: typer.Context, _param: object, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from typer._completion_shared import get_completion_script

    shell = _completion_shell(value)
    typer.echo(
        get_completion_script(prog_name="perfbisect", complete_var=COMPLETE_VAR, shell=shell)
    )
    raise typer.Exit()


def install_completion(ctx: typer.Context, _param: object, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from typer._completion_shared import install

    shell, path = install(
        shell=_completion_shell(value), prog_name="perfbisect", complete_var=COMPLETE_VAR
    )
    typer.echo(f"{shell} completion installed in {path}; it takes effect in a new shell")
    raise typer.Exit()


COMPLETE_VAR = "_PERFBISECT_COMPLETE"


def completion_args(args: list[str]) -> list[str]:
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
