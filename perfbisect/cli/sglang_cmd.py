"""`perfbisect sglang pinsets|wheelhouse`: the environments a range of SGLang commits needs,
and their wheels for a host without internet."""

from __future__ import annotations

from pathlib import Path

import typer

from perfbisect.cli.context import emit_json

app = typer.Typer(
    rich_markup_mode=None,
    help="SGLang ranges: the pin sets (environments) a range needs, and a wheelhouse for them.",
    no_args_is_help=True,
)

REPO = typer.Option(Path("."), "--repo", help="The SGLang checkout (a git repository).")
RANGE = typer.Option(..., "--range", help="GOOD..BAD: the first-parent commits between them.")
PINS = typer.Option(
    None, "--pins", help="Package names that alone key an environment (as [target] pins)."
)


def _range(text: str) -> tuple[str, str]:
    from perfbisect.errors import UsageError

    good, sep, bad = text.partition("..")
    if not sep or not good or not bad or bad.startswith("."):
        raise UsageError(f"--range {text!r}: expected GOOD..BAD (two revisions)")
    return good, bad


def _human(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


@app.command("pinsets")
def pinsets_command(
    range_: str = RANGE,
    repo: Path = REPO,
    pins: list[str] = PINS,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The pin sets of a range: one environment each, and the commits that use it."""
    from perfbisect.targets.sglang.pinsets import range_pins

    found = range_pins(repo, *_range(range_), tuple(pins or ()))
    rows = [
        {
            "pin_set": s.plan.digest,
            "label": s.plan.label(),
            "requirements": len(s.plan.requirements),
            "commits": len(s.commits),
            "first": s.commits[0],
            "last": s.commits[-1],
        }
        for s in found.sets
    ]
    if as_json:
        emit_json({"commits": len(found.commits), "pin_sets": rows, "unreadable": found.unreadable})
        return
    typer.echo(f"{len(found.commits)} commit(s), {len(rows)} pin set(s)")
    for row in rows:
        typer.echo(
            f"{row['pin_set']}  {row['commits']:>4} commit(s) {str(row['first'])[:12]}.."
            f"{str(row['last'])[:12]}  {row['requirements']} requirement(s): {row['label']}"
        )
    for sha, why in found.unreadable:
        typer.echo(f"{sha[:12]}  not buildable: {why}")


@app.command("wheelhouse")
def wheelhouse_command(
    folder: Path = typer.Argument(..., help="Where the wheels go (made if missing)."),
    range_: str = RANGE,
    repo: Path = REPO,
    pins: list[str] = PINS,
    python_version: str | None = typer.Option(
        None, "--python-version", help="The target host's Python, e.g. 3.12 (default: this one)."
    ),
    platform: list[str] = typer.Option(
        None,
        "--platform",
        help="The target host's platform tag, e.g. manylinux_2_28_x86_64 (every older "
        "manylinux is included); default: this machine's.",
    ),
    index_url: str | None = typer.Option(None, "--index-url", help="Package index to use."),
    find_links: str | None = typer.Option(
        None, "--find-links", help="A folder of wheels to take them from (alone: offline)."
    ),
    have: Path | None = typer.Option(
        None,
        "--have",
        help="A `pip freeze` of the target host (or bare names: any version): left out.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Resolve and list what each pin set needs; download nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Download the wheels every pin set of a range needs, for the target host; list them
    with their sizes. Exit 1 if a set cannot be resolved or a download failed."""
    from perfbisect.errors import UsageError
    from perfbisect.targets.sglang.envs import Sources
    from perfbisect.targets.sglang.pinsets import range_pins
    from perfbisect.targets.sglang.wheelhouse import TargetPython, build_wheelhouse, read_freeze

    if have is not None and not have.is_file():
        raise UsageError(f"--have {have}: no such file")
    found = range_pins(repo, *_range(range_), tuple(pins or ()))
    host = TargetPython(python_version, tuple(platform or ()))
    frozen = read_freeze(have.read_text()) if have else set()
    sources = Sources(find_links, index_url)
    house = build_wheelhouse(found.sets, folder, host, sources, frozen, download=not dry_run)
    failed = [r for r in house.sets if r.error] or bool(house.error)
    if as_json:
        emit_json(
            {
                "folder": str(folder),
                "for": host.describe(),
                "pin_sets": [
                    {
                        "pin_set": r.pin_set.plan.digest,
                        "label": r.pin_set.plan.label(),
                        "commits": len(r.pin_set.commits),
                        "wheels": [f"{n}=={v}" for n, v, _ in r.wheels],
                        "missing": r.missing,
                        "error": r.error,
                    }
                    for r in house.sets
                ],
                "files": [{"file": f, "bytes": b, "new": new} for f, b, new in house.files],
                "total_bytes": house.total_bytes,
                "left_out": house.left_out,
                "download_error": house.error,
            }
        )
    else:
        typer.echo(f"wheelhouse {folder} for {host.describe()}")
        for r in house.sets:
            what = (
                f"{len(r.wheels)} wheel(s)"
                if not r.error
                else f"CANNOT RESOLVE {r.missing or ''}: {r.error}"
            )
            typer.echo(
                f"pin set {r.pin_set.plan.digest} ({len(r.pin_set.commits)} commit(s)): "
                f"{what}; {r.pin_set.plan.label()}"
            )
            if dry_run:
                for name, version, file in r.wheels:
                    kept = f"{name}=={version}" in house.left_out
                    typer.echo(f"    {file}{'  (the host has it)' if kept else ''}")
        for name, size, new in house.files:
            typer.echo(f"{_human(size):>10}  {name}{'  (new)' if new else ''}")
        typer.echo(f"{len(house.files)} file(s), {_human(house.total_bytes)} in all")
        if house.left_out:
            typer.echo(f"left out (the host has them): {', '.join(house.left_out)}")
        if house.error:
            typer.echo(f"download failed: {house.error}")
    if failed:
        raise typer.Exit(1)
