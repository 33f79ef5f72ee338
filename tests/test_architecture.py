"""The package's shape: no import circle, the engine's layers import only downwards, and a
target kind plugs in with its own declaration and one registry entry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import perfbisect

PACKAGE = Path(perfbisect.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("perfbisect", *path.relative_to(PACKAGE).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every perfbisect module ``path`` imports, at module level or inside functions (lazy
    imports still make a circle), except under ``if TYPE_CHECKING``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, modules) - {m} for m, p in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_circle() -> None:
    graph = _graph()
    assert len(graph) > 50  # the walk found the package
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_circle_would_be_found() -> None:
    # the checker itself: a made-up circle is reported with its path
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


ENGINE_LAYERS = (
    "axis_sets",
    "posterior",
    "engine_state",
    "search.machine",
    "search.hypotheses",
    "search.model",
    "search.planner",
    "search.stop",
    "search.pairs",
    "search.segment",
    "search.steps",
    "search.searcher",
    "search.attribution",
    "rules.slow_launches",
    "rules.levels",
    "rules.verification",
    "rules.audit",
    "rules.endpoints",
    "rules.engine",
    "rules.multiaxis",
)


def test_the_engine_layers_import_only_downwards() -> None:
    graph = _graph()
    rank = {f"perfbisect.bisect.{name}": i for i, name in enumerate(ENGINE_LAYERS)}
    for module, i in rank.items():
        above = [m for m in graph[module] if rank.get(m, -1) > i]
        assert not above, f"{module} imports {above}, a layer above it"
        lines = len(Path(_modules()[module]).read_text().splitlines())
        assert lines <= 450, f"{module} has {lines} lines"
    # and no searcher reaches I/O: hosts, the store, targets, the CLI
    for module in rank:
        io = [m for m in graph[module] if m.split(".")[1] in ("hosts", "store", "targets", "cli")]
        assert not io, f"{module} imports {io}"


# bisect/'s folders and what each may import: the shared base (values, stats, the search space,
# the posterior's arithmetic, the engines' state and driver interface) sits at the top of
# bisect/; the two engines (search/, the model and the default; rules/, the earlier one, kept for
# comparison) stand on it and not on each other; the report reads any engine's final state
# through the shared base alone; the session drives all, and only its engines module names the
# rule engine, so rules/ can be deleted by editing one file.
BISECT_FOLDERS = {
    "shared": {"shared"},
    "search": {"shared", "search"},
    "rules": {"shared", "rules"},
    "report": {"shared", "report"},
    "session": {"shared", "search", "report", "session"},
}
# Imports that cross the folders against that order, each with its reason.
BISECT_CROSSINGS = {
    # the speed-up row of the report is defined with the baseline phase that measures it
    ("perfbisect.bisect.report.report_model", "perfbisect.bisect.session.baseline"),
    # `--engine rules`: the one place a session builds the rule engine
    ("perfbisect.bisect.session.engines", "perfbisect.bisect.rules.engine"),
    ("perfbisect.bisect.session.engines", "perfbisect.bisect.rules.multiaxis"),
}


def _bisect_folder(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in BISECT_FOLDERS else "shared"


def test_the_bisect_folders_import_only_in_their_order() -> None:
    graph = _graph()
    bisect = {m for m in graph if m.startswith("perfbisect.bisect.")}
    assert {_bisect_folder(m) for m in bisect} == set(BISECT_FOLDERS)
    against = [
        f"{m} -> {d}"
        for m in sorted(bisect)
        for d in sorted(graph[m] & bisect)
        if _bisect_folder(d) not in BISECT_FOLDERS[_bisect_folder(m)]
        and (m, d) not in BISECT_CROSSINGS
    ]
    assert not against, against
    for m, d in BISECT_CROSSINGS:  # an exception that no longer happens is taken off the list
        assert d in graph[m], (m, d)


def test_a_new_target_kind_needs_its_declaration_and_one_registry_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfbisect.errors import ExperimentError
    from perfbisect.experiment import load_experiment
    from perfbisect.targets import kinds
    from perfbisect.targets.kind import KindCheck, TargetKind
    from perfbisect.targets.registry import make_target

    def check_echo(ctx: KindCheck) -> None:
        if ctx.target["words"] < 1:
            raise ctx.checker.fail(("target",), "words", "must be at least 1")

    echo = TargetKind(
        name="echo",
        schema={"kind": ((str,), True), "words": ((int,), True)},
        factory="tests_echo_kind:EchoTarget",
        default_metric=("words_per_s", r"wps=([0-9.]+)"),
        check=check_echo,
    )
    (tmp_path / "tests_echo_kind.py").write_text(
        "class EchoTarget:\n"
        "    def __init__(self, experiment, cache_dir):\n"
        "        self.experiment, self.cache_dir = experiment, cache_dir\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(kinds.KINDS, "echo", echo)  # the one registry line

    good = tmp_path / "good.toml"
    good.write_text('[target]\nkind = "echo"\nwords = 3\n')
    experiment = load_experiment(good)
    assert experiment.metric.name == "words_per_s"  # the kind's default metric
    target = make_target(experiment, tmp_path)
    assert type(target).__name__ == "EchoTarget"
    bad = tmp_path / "bad.toml"
    bad.write_text('[target]\nkind = "echo"\nwords = 0\n')
    with pytest.raises(ExperimentError, match=r"bad.toml:3: key 'target.words': must be at least"):
        load_experiment(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text('[target]\nkind = "echo"\nword = 3\n')
    with pytest.raises(ExperimentError, match=r"unknown key \(known: kind, words\)"):
        load_experiment(typo)


def test_the_programs_run_on_hosts_stand_alone() -> None:
    # perfbisect/remote/*.py are read as files and copied to hosts, where perfbisect may not
    # be installed: they import nothing of perfbisect, and perfbisect never imports them.
    graph = _graph()
    programs = {m for m in graph if m.startswith("perfbisect.remote.")}
    assert {"perfbisect.remote.reference_server", "perfbisect.remote.hardware_probe"} <= programs
    for program in programs:
        assert not graph[program], f"{program} imports {graph[program]}"
    importers = {m: deps & programs for m, deps in graph.items() if deps & programs}
    assert not importers, importers


def test_each_kind_schema_is_its_typed_options() -> None:
    # The [target] keys a kind accepts are its options dataclass's fields, typed from their
    # annotations, required exactly when they have no default.
    from perfbisect.targets.command_kind import CommandOptions
    from perfbisect.targets.kind import parse_options, schema_of
    from perfbisect.targets.kinds import KINDS
    from perfbisect.targets.sglang.kind import SglangOptions

    assert schema_of(CommandOptions)["measure"] == ((str,), True)
    assert schema_of(CommandOptions)["timeout_s"] == ((int, float), False)
    assert schema_of(SglangOptions)["extra_args"] == ((list,), False)
    assert schema_of(SglangOptions)["proxy"] == ((dict,), False)
    for kind in KINDS.values():
        assert kind.schema["kind"] == ((str,), True)
    typed = parse_options(
        SglangOptions,
        {
            "kind": "sglang",
            "model": "m",
            "draft_model": "d",
            "extra_args": ["--x", 1],
            "requests": 8,
        },
    )
    assert typed.extra_args == ("--x", 1) and typed.requests == 8 and typed.concurrency == 4


# The package's layers, lowest first; a module imports only from its own layer or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "errors",
        "config",
        "paths",
        "redact",
        "checks",
        "samples",
        "interrupts",
        "folder_lock",
        "code_areas",
    ),
    ("cachedir", "store", "invocation"),
    ("experiment",),
    ("hosts",),
    ("launch",),
    ("probes", "remote"),
    ("targets",),
    ("executors",),
    ("bisect",),
    ("explain",),
    ("formatting", "html_chart", "html_report", "demo", "watch"),
    ("cli", "__main__"),
)
# Declarations the experiment file is checked against: the launch methods' names and each
# target kind's options. They sit with their code but import only from the lowest layer.
DECLARATIONS = {
    "perfbisect.launch.method",
    "perfbisect.targets.kind",
    "perfbisect.targets.kinds",
    "perfbisect.targets.command_kind",
    "perfbisect.targets.reference.kind",
    "perfbisect.targets.sglang.kind",
}


def _layer(module: str) -> int:
    if module in DECLARATIONS:
        return 1  # right below the experiment file
    top = module.split(".")[1] if "." in module else ""
    if not top:
        return 0  # the package itself (its version)
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = _graph()
    upward = [
        f"{m} -> {d}" for m, deps in sorted(graph.items()) for d in deps if _layer(d) > _layer(m)
    ]
    assert not upward, upward
    for declaration in DECLARATIONS:  # they stay light: the loader imports every one
        heavy = [d for d in graph[declaration] if _layer(d) > 1]
        assert not heavy, (declaration, heavy)
