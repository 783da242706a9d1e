"""Modules talk through public names, in the layer order of docs/DESIGN.md, with no
import circle and no session state kept at module level.

An ast scan of ``pytest_graphleak/`` and ``minigrad/`` (no import of either): a reach-in
such as ``plugin._record`` or ``fixture._item`` from another module means a function lives
in the wrong place. The scan also checks that only the probes know metric names, that
only ``heap/gcstate.py`` runs or changes the collector, that minigrad knows nothing of
pytest or the plugin, and that docs/DESIGN.md describes this tree. An import is also one
made by name (``import_module``, a dispatch string). Each exception is listed here, in
one place, with its reason (``*_ALLOWED``, ``TYPE_ONLY_CIRCLES``, ...), and each scan has
a test that feeds it a small synthetic source with the shapes it must catch.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_graphleak"
MINIGRAD = ROOT / "minigrad"


Modules = dict[str, tuple[Path, ast.Module]]


def modules(package: Path = PACKAGE) -> Modules:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return found


MODULES = modules()
MINIGRAD_MODULES = modules(MINIGRAD)
#: Every module a string may name (``"pytest_graphleak.cli.check_cmd"``): both trees.
KNOWN = {**MODULES, **MINIGRAD_MODULES}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _callee(node: object) -> str:
    """``f`` of ``f(...)`` or ``m.f(...)``; "" for anything else."""
    called = node.func if isinstance(node, ast.Call) else None
    if isinstance(called, ast.Name):
        return called.id
    return called.attr if isinstance(called, ast.Attribute) else ""


#: What names a module by a string and imports it: ``importlib.import_module``, ``__import__``.
_IMPORTERS = {"import_module", "__import__"}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` itself (``not TYPE_CHECKING`` runs)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def type_only_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes that never run: the body (not the ``else``) of an
    ``if TYPE_CHECKING:`` block, and annotations (a string one may name a module)."""
    hidden: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            hidden.extend(node.body)
        elif isinstance(node, (ast.AnnAssign, ast.arg)) and node.annotation is not None:
            hidden.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            hidden.append(node.returns)
    return {id(inner) for node in hidden for inner in ast.walk(node)}


def _named_module(text: str, known: Modules) -> str | None:
    """The module a dotted string names (``"pkg.cli.report_cmd"``, ``"pkg.cli:main"``,
    ``"pkg.mod.function"``): its longest prefix that is a known module."""
    dotted = text.split(":")[0]
    if not _DOTTED.fullmatch(dotted):
        return None
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        if ".".join(parts[:cut]) in known:
            return ".".join(parts[:cut])
    return None


def _relative(name: str, is_package: bool, target: str, level: int) -> str:
    parent = name.split(".")[: len(name.split(".")) - level + is_package]
    return ".".join([*parent, target] if target else parent)


def import_edges(
    name: str, tree: ast.AST, known: Modules | None = None
) -> Iterator[tuple[str, str | None, bool]]:
    """(module imported, name imported from it or None, type only) for every import,
    nested ones too, and every module named by a string: an ``import_module``/
    ``__import__`` argument, or any constant naming a known module (a dispatch table's
    ``("pytest_graphleak.cli.check_cmd", "run_check")``, a ``sys.modules`` key)."""
    known = KNOWN if known is None else known
    is_package = name in known and known[name][0].name == "__init__.py"
    hidden = type_only_nodes(tree)
    for node in ast.walk(tree):
        typing = id(node) in hidden
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, typing
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _relative(name, is_package, base, node.level)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full, None, typing) if full in known else (base, alias.name, typing)
        elif isinstance(node, ast.Call) and _callee(node) in _IMPORTERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                target = first.value
                if target.startswith("."):
                    level = len(target) - len(target.lstrip("."))
                    target = _relative(name, is_package, target.lstrip("."), level)
                yield target, None, typing
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            module = _named_module(node.value, known)
            if module is not None:
                yield module, None, typing


def imported_modules(
    name: str, tree: ast.AST, known: Modules | None = None
) -> Iterator[tuple[str, str | None]]:
    """(module imported, name imported from it or None) for every import, nested ones too,
    those under ``if TYPE_CHECKING:`` and those named by a string too."""
    for module, imported, _ in import_edges(name, tree, known):
        yield module, imported


def dynamic_imports(tree: ast.AST) -> list[str]:
    """``import_module(x)`` / ``__import__(x)`` calls whose module is no constant: what
    they import no scan can see."""
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _callee(node) in _IMPORTERS
        and not (node.args and isinstance(node.args[0], ast.Constant))
    ]


def dependencies(name: str) -> set[str]:
    return {module for module, _ in imported_modules(name, MODULES[name][1]) if module in MODULES}


def member_privates(tree: ast.Module) -> set[str]:
    """Private names a module defines on its classes: methods, class attributes and
    ``self._x`` attributes (what ``obj._x`` from elsewhere would reach into)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(member.name)
                elif isinstance(member, (ast.Assign, ast.AnnAssign)):
                    targets = member.targets if isinstance(member, ast.Assign) else [member.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return {name for name in names if private(name)}


def module_aliases(name: str, tree: ast.Module) -> dict[str, str]:
    """Local name -> package module, for ``import pytest_graphleak.x as y`` and
    ``from pytest_graphleak import x``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias, (module, imported) in zip(
                node.names, imported_modules(name, ast.Module([node], [])), strict=True
            ):
                if imported is None and module in MODULES:
                    aliases[alias.asname or alias.name.split(".")[0]] = module
    return aliases


def test_no_module_imports_another_modules_private_names() -> None:
    found = [
        f"{name}: from {module} import {imported}"
        for name, (_, tree) in MODULES.items()
        for module, imported in imported_modules(name, tree)
        if module in MODULES and module != name and imported is not None and private(imported)
    ]
    assert found == []


def reach_ins(name: str, tree: ast.Module) -> list[str]:
    """``x._name`` in module ``name`` where ``_name`` belongs to another module of the
    package: a module's private function (``plugin._record``) or a member private to
    another module's classes (``fixture._item``, ``fixture._resolve``)."""
    own = member_privates(tree)
    aliases = module_aliases(name, tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not private(node.attr):
            continue
        value = node.value.id if isinstance(node.value, ast.Name) else None
        if value in aliases:
            if aliases[value] != name:
                found.append(f"{value}.{node.attr}")
        elif value not in ("self", "cls") and node.attr not in own and node.attr in MEMBERS:
            found.append(f".{node.attr} of {', '.join(sorted(MEMBERS[node.attr]))}")
    return [f"{name}:{text}" for text in found]


MEMBERS: dict[str, set[str]] = {}
for _name, (_, _tree) in MODULES.items():
    for _attr in member_privates(_tree):
        MEMBERS.setdefault(_attr, set()).add(_name)


def test_no_module_reaches_into_another_modules_private_attributes() -> None:
    found = [text for name, (_, tree) in MODULES.items() for text in reach_ins(name, tree)]
    assert found == []


def test_the_scans_see_a_reach_in() -> None:
    """The scans above catch the reach-ins this package used to have."""
    code = "from pytest_graphleak import plugin\nfrom pytest_graphleak.api import _settings\n"
    code += "plugin._record(item, result)\nfixture._settings.override({})\n"
    tree = ast.parse(code)
    name = "pytest_graphleak.distributed"
    assert ("pytest_graphleak.api", "_settings") in list(imported_modules(name, tree))
    assert "pytest_graphleak.plugin.fixture" in MEMBERS["_settings"]  # GraphleakFixture._settings
    assert reach_ins(name, tree) == [
        f"{name}:plugin._record",
        f"{name}:._settings of {', '.join(sorted(MEMBERS['_settings']))}",
    ]


# -- the layers and the circles -----------------------------------------------------------
#: The layers, lowest first (docs/DESIGN.md, "The layers"): a module imports only its own
#: layer and the layers below; keyed by the package's top-level module or folder.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("exceptions",),  # the errors: import nothing of the package (results typed only)
    # plain data: imports only the errors
    (
        "metrics",
        "patterns",
        "status",
        "result",
        "session",
        "values",
        "targets",
        "baseline",
        "baseline_keys",
        "drawing",
        "paths",
    ),
    ("verdict",),  # the pure judgement
    ("heap", "probes"),  # what is measured, gc state, user code
    # measuring; the diagnosis and its words; the outlive audit
    ("engine", "diagnose", "words", "outlive"),
    ("options", "settings"),  # the options table, and settings resolved from it
    ("report",),  # renderings of results
    ("pipeline",),  # measure -> judge -> explain
    # a check inside a running loop, its windows, its end without a verdict
    ("loop", "loop_windows", "loop_unmeasured"),
    ("api", "distributed", "__init__"),  # the public front ends
    ("integrations", "cli", "demo", "plugin", "__main__"),  # the outer front ends
)
LAYER_OF = {part: level for level, parts in enumerate(LAYERS) for part in parts}
#: Layer 0, the errors, imports nothing of the package at run time (a result an error
#: carries is typed under ``TYPE_CHECKING``); layer 1, plain data, imports only layer 0.
ERRORS, PLAIN_DATA = 0, 1

#: Layer 1 imports nothing of the package but the errors; these runtime imports are the
#: exceptions, each with its reason.
LAYER_ONE_IMPORTS: dict[str, str] = {
    "pytest_graphleak.result -> pytest_graphleak.status": (
        "a CheckResult's status is status.check_status, the one status rule (both plain "
        "data); follow-up: the status rule could take the result's fields instead"
    ),
    "pytest_graphleak.result -> pytest_graphleak.drawing": (
        "a Diagnosis carries the retained graph it drew (plain data both): the drawing's "
        "three types in a module of their own, as the reports and diagnose/render use them"
    ),
    "pytest_graphleak.baseline -> pytest_graphleak.baseline_keys": (
        "the baseline file's entries are findings' keys: one subject in two modules, the "
        "file (reading, writing, the update) and the key (what makes two findings one)"
    ),
}

#: Imports made for annotations only (``if TYPE_CHECKING:``) that close an import circle:
#: each is one edge of a circle the runtime does not see, and each is debt. The edge that
#: closes it, with why it is there and what would open it. None today: issue 46 opened the
#: last three (the recorder's records moved to ``diagnose/observed``, ``START_SCANS`` to
#: the options table).
TYPE_ONLY_CIRCLES: dict[str, str] = {}

#: minigrad's own import circles (as the depth-first walk closes them), accepted: opening
#: them is minigrad's own work, and no part of the plugin depends on their shape.
MINIGRAD_CIRCLES: dict[str, str] = {
    "minigrad.autograd -> minigrad.tensor -> minigrad.autograd": (
        "the backward engine makes tensors (function-level imports of make_tensor) and "
        "Tensor is built on Node: one engine in two files"
    ),
    "minigrad.autograd -> minigrad.tensor -> minigrad.ops -> minigrad.autograd": (
        "the same knot through ops (ops makes Nodes; tensor binds its operators to ops)"
    ),
    "minigrad.tensor -> minigrad.ops -> minigrad.tensor": (
        "tensor.py binds its operators to ops at its end (ops builds on Tensor): the "
        "torch-like methods live on the class, each op in one place"
    ),
}

#: Modules that import a module whose name is computed at run time, which no scan can see.
DYNAMIC_IMPORTS: dict[str, str] = {
    "pytest_graphleak.cli": (
        "the subcommand's module, from its dispatch string (a constant, seen as an edge)"
    ),
    "pytest_graphleak.cli.target": "the user's target module (FILE.py::fn, module:fn)",
    "pytest_graphleak.distributed.factory": "the user's step factory module, in a rank",
    "pytest_graphleak.integrations.lightning": "the Lightning flavours (lightning.pytorch, "
    "pytorch_lightning), by name",
}


def top_part(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def runtime_dependencies(name: str, known: Modules | None = None) -> set[str]:
    """What ``name`` imports when it runs: ``if TYPE_CHECKING:`` blocks left out."""
    known = MODULES if known is None else known
    edges = import_edges(name, known[name][1], known)
    return {module for module, _, typing in edges if module in known and not typing} - {name}


def type_only_dependencies(name: str, known: Modules | None = None) -> set[str]:
    """What ``name`` imports for annotations only (``if TYPE_CHECKING:``)."""
    known = MODULES if known is None else known
    edges = import_edges(name, known[name][1], known)
    every = {module for module, _, _ in edges if module in known} - {name}
    return every - runtime_dependencies(name, known)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` where ``b`` is in a higher layer, or ``a`` is in layer 0 (the errors,
    which import nothing of the package), or ``a`` is in layer 1 (plain data, which
    imports only the errors) and ``b`` is not in layer 0."""
    found = []
    for name in sorted(graph):
        mine = LAYER_OF.get(top_part(name), len(LAYERS))
        for dep in sorted(graph[name]):
            theirs = LAYER_OF.get(top_part(dep), ERRORS)
            if theirs > mine or mine == ERRORS or (mine == PLAIN_DATA and theirs != ERRORS):
                found.append(f"{name} -> {dep}")
    return found


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle a depth-first walk closes, as ``a -> b -> a``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[str] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                found.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """The shortest path from ``start`` to ``goal`` (breadth first), or None."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        name = todo.pop(0)
        if name == goal:
            return paths[name]
        for dep in sorted(graph.get(name, ())):
            if dep not in paths:
                paths[dep] = [*paths[name], dep]
                todo.append(dep)
    return None


def type_only_circles(runtime: dict[str, set[str]], typing: dict[str, set[str]]) -> dict[str, str]:
    """Type-only edge ``a -> b`` that closes a circle (through any import, type-only or
    not) -> the circle, ``a -> b -> ... -> a``."""
    every = {
        name: runtime.get(name, set()) | typing.get(name, set()) for name in {*runtime, *typing}
    }
    found = {}
    for name in sorted(typing):
        for dep in sorted(typing[name] - runtime.get(name, set())):
            back = _path(every, dep, name)
            if back is not None:
                found[f"{name} -> {dep}"] = " -> ".join([name, *back])
    return found


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {top_part(name) for name in MODULES} <= set(LAYER_OF)


@functools.cache
def runtime_graph() -> dict[str, set[str]]:
    """Every module -> what it imports at run time. Built on first use, not at import:
    every xdist worker collects this file, and the scan costs seconds."""
    return {name: runtime_dependencies(name) for name in MODULES}


@functools.cache
def typing_graph() -> dict[str, set[str]]:
    """Every module -> what it imports for type checking only (built on first use)."""
    return {name: type_only_dependencies(name) for name in MODULES}


def test_no_layer_imports_a_higher_one() -> None:
    """Imports, function-level ones and those named by a string too, go down the layers;
    layer 0 imports nothing of the package, layer 1 only layer 0 but the listed exceptions."""
    found = layer_violations(runtime_graph())
    assert [edge for edge in found if edge not in LAYER_ONE_IMPORTS] == []
    assert set(LAYER_ONE_IMPORTS) <= set(found)  # none stale


def test_the_package_has_no_import_circle() -> None:
    assert circles(runtime_graph()) == []


def test_the_type_only_circles_are_the_listed_ones() -> None:
    """An ``if TYPE_CHECKING:`` import is for annotations only, but a circle it closes is
    still two modules that know each other: only the listed ones, each with its reason."""
    found = type_only_circles(runtime_graph(), typing_graph())
    assert {edge: found[edge] for edge in found if edge not in TYPE_ONLY_CIRCLES} == {}
    assert set(TYPE_ONLY_CIRCLES) <= set(found)  # none stale


def test_no_renderer_reads_the_probe_registry() -> None:
    """The reports read what a metric is (unit, counts, noise tolerance) from the result
    that carries it (``CheckResult.declared``): the probes installed where a report is
    read may differ from the run that wrote it (issue 37, item 1)."""
    renderers = [name for name in MODULES if name.startswith("pytest_graphleak.report")]
    renderers.append("pytest_graphleak.plugin.terminal")
    found = {
        name: sorted(dep for dep in dependencies(name) if dep.startswith("pytest_graphleak.probes"))
        for name in renderers
    }
    assert {name: deps for name, deps in found.items() if deps} == {}


def test_the_loop_reaches_the_diagnosis_through_one_module() -> None:
    """``loop.LoopCheck`` (and its windows, ``loop_windows``) asks the diagnosis for what
    it needs through ``diagnose.for_loop``
    (and ``pipeline.conclude``), never a diagnosis module's internals (issue 37, item 3)."""
    for loop in ("pytest_graphleak.loop", "pytest_graphleak.loop_windows"):
        reached = sorted(
            dep
            for dep in dependencies(loop)
            if dep.startswith(("pytest_graphleak.diagnose", "pytest_graphleak.words"))
        )
        assert reached == ["pytest_graphleak.diagnose.for_loop"], loop


def test_the_plugin_is_in_no_import_cycle() -> None:
    """The plugin imports the layers below it; none of them imports the plugin back
    (``distributed`` spawns ranks and gathers results, the pytest side is the plugin's)."""
    importers = sorted(name for name in MODULES if "pytest_graphleak.plugin" in dependencies(name))
    assert importers == []
    assert "pytest_graphleak.distributed" in dependencies("pytest_graphleak.plugin.marker")


def test_only_the_listed_modules_import_by_a_computed_name() -> None:
    found = {name for name, (_, tree) in MODULES.items() if dynamic_imports(tree)}
    assert found == set(DYNAMIC_IMPORTS)


def test_the_import_scan_sees_imports_by_name() -> None:
    """``importlib.import_module``, ``__import__`` and a dispatch table's strings are
    imports: a lower layer that reaches the plugin by name breaks the layers."""
    code = (
        "import importlib\n"
        "importlib.import_module('pytest_graphleak.plugin')\n"
        "__import__('pytest_graphleak.cli.check_cmd')\n"
        "importlib.import_module('..report.html', __package__)\n"
        "RUN = ('pytest_graphleak.demo', 'run_demo')\n"
        "ENTRY = 'pytest_graphleak.api:check'\n"
        "NOT_A_MODULE = 'pytest_graphleak.plugin is the pytest side'\n"
        "importlib.import_module(name)\n"
    )
    tree = ast.parse(code)
    name = "pytest_graphleak.diagnose.classify"
    edges = {module for module, _ in imported_modules(name, tree) if module in MODULES}
    assert edges == {
        "pytest_graphleak.plugin",
        "pytest_graphleak.cli.check_cmd",
        "pytest_graphleak.report.html",
        "pytest_graphleak.demo",
        "pytest_graphleak.api",
    }
    assert layer_violations({name: edges}) == [f"{name} -> {dep}" for dep in sorted(edges)]
    assert dynamic_imports(tree) == ["importlib.import_module(name)"]


def test_the_layer_scan_holds_layer_one_to_no_import() -> None:
    """Layer 1 imports nothing of the package but the errors (layer 0), not even another
    layer-1 module."""
    graph = {
        "pytest_graphleak.patterns": {"pytest_graphleak.metrics"},
        "pytest_graphleak.values": {"pytest_graphleak.exceptions"},
        "pytest_graphleak.verdict": {"pytest_graphleak.metrics"},
    }
    assert layer_violations(graph) == ["pytest_graphleak.patterns -> pytest_graphleak.metrics"]


def test_the_layer_scan_holds_the_errors_to_no_import() -> None:
    """``exceptions`` (layer 0) imports nothing of the package at run time, not even plain
    data: an error types the result it carries under ``TYPE_CHECKING`` only."""
    runtime = ast.parse("from pytest_graphleak.result import CheckResult\n")
    typed = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from pytest_graphleak.result import CheckResult\n"
    )
    for tree, expected in ((runtime, {"pytest_graphleak.result"}), (typed, set())):
        known = {**MODULES, "pytest_graphleak.exceptions": (PACKAGE / "exceptions.py", tree)}
        found = runtime_dependencies("pytest_graphleak.exceptions", known)
        assert found == expected
        assert layer_violations({"pytest_graphleak.exceptions": found}) == [
            f"pytest_graphleak.exceptions -> {dep}" for dep in sorted(found)
        ]
    assert LAYER_OF["exceptions"] == ERRORS
    assert runtime_graph()["pytest_graphleak.exceptions"] == set()


def test_the_circle_scan_counts_type_only_circles() -> None:
    """A ``TYPE_CHECKING`` import closes a circle the runtime does not see; its ``else:``
    branch, ``if not TYPE_CHECKING:`` and a string module name do run."""
    trees = {
        "pkg": ast.parse(""),
        "pkg.low": ast.parse(
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.high import Settings\n"
        ),
        "pkg.high": ast.parse("from pkg.low import Session\n"),
        "pkg.a": ast.parse(
            "import typing\nif typing.TYPE_CHECKING:\n    import pkg.c\nelse:\n    import pkg.b\n"
        ),
        "pkg.b": ast.parse("if not TYPE_CHECKING:\n    from pkg import a\n"),
        "pkg.c": ast.parse("X: 'pkg.a.Thing'\nRUN = ('pkg.a', 'main')\n"),
    }
    known = {name: (Path("pkg/x.py"), tree) for name, tree in trees.items()}
    runtime = {name: runtime_dependencies(name, known) for name in known}
    typing = {name: type_only_dependencies(name, known) for name in known}
    assert runtime["pkg.a"] == {"pkg.b"}
    assert runtime["pkg.c"] == {"pkg.a"}  # the string annotation alone would not count
    assert circles(runtime) == ["pkg.a -> pkg.b -> pkg.a"]
    assert type_only_circles(runtime, typing) == {
        "pkg.a -> pkg.c": "pkg.a -> pkg.c -> pkg.a",
        "pkg.low -> pkg.high": "pkg.low -> pkg.high -> pkg.low",
    }


# -- minigrad ---------------------------------------------------------------------------
_FOREIGN = ("pytest", "_pytest", "pytest_graphleak")


def foreign_imports(name: str, tree: ast.AST) -> list[str]:
    """What a minigrad module imports of pytest or of pytest_graphleak, by an import
    statement (type-only too), ``import_module`` or a string naming one of their modules."""
    return sorted(
        {module for module, _, _ in import_edges(name, tree) if module.split(".")[0] in _FOREIGN}
    )


def test_minigrad_imports_neither_pytest_nor_the_plugin() -> None:
    """The bundled engine stands alone: it is a stand-in for torch, which knows nothing of
    the plugin that measures it."""
    found = {name: foreign_imports(name, tree) for name, (_, tree) in MINIGRAD_MODULES.items()}
    assert {name: imports for name, imports in found.items() if imports} == {}
    assert not any(dynamic_imports(tree) for _, tree in MINIGRAD_MODULES.values())


def test_minigrad_has_only_its_listed_import_circles() -> None:
    graph = {name: runtime_dependencies(name, MINIGRAD_MODULES) for name in MINIGRAD_MODULES}
    assert circles(graph) == sorted(MINIGRAD_CIRCLES)


def test_the_minigrad_scan_sees_pytest_and_the_plugin() -> None:
    code = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import _pytest.fixtures\n"
        "def f():\n    import pytest\n    from pytest_graphleak import check\n"
        "    __import__('pytest_graphleak.probes')\n"
        "HOOK = 'pytest_graphleak.plugin:pytest_configure'\n"
    )
    assert foreign_imports("minigrad.ops", ast.parse(code)) == [
        "_pytest.fixtures",
        "pytest",
        "pytest_graphleak",
        "pytest_graphleak.plugin",
        "pytest_graphleak.probes",
    ]


# -- no lookup by name ------------------------------------------------------------------
_ROOT_NAME = "pytest_graphleak"
_PLUGIN_LOOKUPS = ("get_plugin", "getplugin", "has_plugin", "hasplugin")


def _names_sys(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(local names of the ``sys`` module, local names of ``sys.modules``)."""
    sys_names, modules_names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sys_names |= {alias.asname or "sys" for alias in node.names if alias.name == "sys"}
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and not node.level:
            modules_names |= {
                alias.asname or "modules" for alias in node.names if alias.name == "modules"
            }
    return sys_names, modules_names


def _is_sys_modules(node: ast.AST, sys_names: set[str], modules_names: set[str]) -> bool:
    """``sys.modules``, ``modules`` (``from sys import modules``), ``getattr(sys,
    "modules")``, ``vars(sys)["modules"]``, ``sys.__dict__["modules"]``."""
    if isinstance(node, ast.Name):
        return node.id in modules_names
    if isinstance(node, ast.Attribute):
        return (
            node.attr == "modules"
            and isinstance(node.value, ast.Name)
            and node.value.id in sys_names
        )
    if not (_callee(node) in ("getattr", "vars") or isinstance(node, ast.Subscript)):
        return False
    text = ast.unparse(node).replace('"', "'").replace(" ", "")
    return any(
        text in (f"getattr({s},'modules')", f"vars({s})['modules']", f"{s}.__dict__['modules']")
        for s in sys_names
    )


def _names_the_package(node: ast.AST) -> bool:
    return any(
        isinstance(inner, ast.Constant)
        and isinstance(inner.value, str)
        and inner.value.startswith(_ROOT_NAME)
        for inner in ast.walk(node)
    )


def lookups_by_name(tree: ast.AST, *, plugin: bool = False) -> list[str]:
    """Where a module finds one of the package's modules (or the plugin) by its name: a
    ``sys.modules`` key (subscript, ``get``/``pop``/``setdefault``, ``in``) that names
    ``pytest_graphleak``, whatever the quotes or however the key is built, and pytest's
    plugin manager asked for one of the plugin's own registrations (``graphleak-...``)
    anywhere but in the ``plugin`` that registers them."""
    sys_names, modules_names = _names_sys(tree)
    found = []
    for node in ast.walk(tree):
        keys: list[ast.AST] = []
        if isinstance(node, ast.Subscript) and _is_sys_modules(
            node.value, sys_names, modules_names
        ):
            keys = [node.slice]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _is_sys_modules(node.func.value, sys_names, modules_names)
        ):
            keys = [*node.args[:1]]
        elif isinstance(node, ast.Compare) and any(
            _is_sys_modules(other, sys_names, modules_names) for other in node.comparators
        ):
            keys = [node.left]
        elif not plugin and _callee(node) in _PLUGIN_LOOKUPS:
            keys = [
                arg
                for arg in getattr(node, "args", [])[:1]
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("graphleak")
            ]
        if any(_names_the_package(key) for key in keys) or (
            keys and _callee(node) in _PLUGIN_LOOKUPS
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")  # type: ignore[attr-defined]
    for function in ast.walk(tree):  # a walk over sys.modules that picks the package's
        if (
            isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(
                _is_sys_modules(inner, sys_names, modules_names) for inner in ast.walk(function)
            )
            and _names_the_package(function)
        ):
            found.append(f"{function.lineno}: {function.name}() reads sys.modules by a name")
    return sorted(set(found), key=lambda line: int(line.split(":")[0]))


def test_no_module_finds_the_plugin_or_a_session_through_sys_modules() -> None:
    """State is handed over (``session.current()``), never looked up by module name."""
    found = {
        name: lookups_by_name(tree, plugin=top_part(name) == "plugin")
        for name, (_, tree) in MODULES.items()
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_lookup_scan_sees_every_spelling() -> None:
    code = (
        "import sys\nimport sys as system\nfrom sys import modules as loaded\n"
        'a = sys.modules["pytest_graphleak.plugin"]\n'
        "b = sys.modules.get('pytest_graphleak.session')\n"
        "c = 'pytest_graphleak.plugin' in sys.modules\n"
        "d = system.modules[f'pytest_graphleak.{part}']\n"
        "e = loaded['pytest_graphleak' + '.plugin']\n"
        "f = getattr(sys, 'modules')['pytest_graphleak.plugin']\n"
        "g = config.pluginmanager.get_plugin('graphleak-session-report')\n"
        "h = sys.modules.get('torch')\n"
        "i = config.pluginmanager.get_plugin('terminalreporter')\n"
        "j = sys.modules[name]\n"
        "def ours():\n    return [m for n, m in sys.modules.items() if n.startswith(PKG)]\n"
        "def walk():\n    for name in list(sys.modules):\n"
        "        if name.startswith('pytest_graphleak.'):\n            yield name\n"
    )
    found = lookups_by_name(ast.parse(code))
    # 16: a walk over sys.modules for the package's names; not 14 (a name held in a
    # variable defined elsewhere is beyond an ast scan), not 11-13 (not the package's)
    assert [line.split(":")[0] for line in found] == ["4", "5", "6", "7", "8", "9", "10", "16"]
    assert len(lookups_by_name(ast.parse(code), plugin=True)) == 7  # its own registrations


# -- metric names -----------------------------------------------------------------------
#: Metric-name text outside ``probes/``, with its reason: what a renderer or the engine
#: should learn from a metric's declaration (or its bundle) instead.
METRIC_NAMES_ALLOWED: dict[str, str] = {}


def metric_name_uses(tree: ast.AST, metrics: Iterable[str]) -> set[str]:
    """String constants that spell a metric name or a piece of one: the name, its
    library prefix (``"torch."``), its suffix (``".nodes"``, an f-string's tail), and a
    ``startswith``/``endswith``/``removeprefix`` argument that begins or ends one, and a
    word compared with a name cut at its dots (``name.split(".")[0] == "torch"``)."""
    names = set(metrics)
    pieces = names | {name.split(".")[0] + "." for name in names}
    pieces |= {"." + name.split(".", 1)[1] for name in names if "." in name}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in pieces or any(name in node.value for name in names):
                found.add(repr(node.value))
        elif _callee(node) in ("startswith", "removeprefix", "endswith", "removesuffix"):
            args = [
                a
                for arg in getattr(node, "args", [])
                for a in (arg.elts if isinstance(arg, ast.Tuple) else [arg])
            ]
            head = _callee(node) in ("startswith", "removeprefix")
            for arg in args:
                text = arg.value if isinstance(arg, ast.Constant) else None
                if (
                    isinstance(text, str)
                    and text
                    and any(
                        name.startswith(text) if head else name.endswith(text) for name in names
                    )
                ):
                    found.add(repr(text))
        elif isinstance(node, ast.Compare) and _splits_a_name(node):
            words = {word for name in names for word in name.split(".")}
            found |= {
                repr(side.value)
                for side in [node.left, *node.comparators]
                if isinstance(side, ast.Constant) and side.value in words
            }
    return found


def _splits_a_name(node: ast.Compare) -> bool:
    """A side of the comparison cuts a string at its dots (``name.split(".")[0]``)."""
    return any(
        isinstance(inner, ast.Call)
        and _callee(inner) in ("split", "rsplit", "partition", "rpartition")
        and any(isinstance(arg, ast.Constant) and arg.value == "." for arg in inner.args)
        for side in [node.left, *node.comparators]
        for inner in ast.walk(side)
    )


def test_metric_names_appear_only_in_the_probes() -> None:
    """The verdict, the diagnosis and the reports read what a metric is from its probe's
    declaration (``metrics.Metric``), never from its name or a piece of it."""
    from pytest_graphleak.probes import METRICS

    assert len(METRICS) >= 10
    outside = {
        name: item
        for name, item in MODULES.items()
        if not name.startswith("pytest_graphleak.probes")
    }
    in_lines = [
        f"{path.relative_to(PACKAGE)}:{lineno}: {metric}"
        for path, _ in outside.values()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for metric in METRICS
        if metric in line
    ]  # comments and docstrings too
    assert in_lines == []
    found = {
        f"{name}: {text}"
        for name, (_, tree) in outside.items()
        for text in metric_name_uses(tree, METRICS)
    }
    assert sorted(found - set(METRIC_NAMES_ALLOWED)) == []
    assert set(METRIC_NAMES_ALLOWED) <= found  # none stale


def test_the_metric_scan_sees_pieces_of_names() -> None:
    code = (
        "a = metric.startswith('torch.')\nb = name.endswith(('.nodes', '_bytes'))\n"
        "c = f'{library}.tensors'\nd = name.removeprefix('minigrad')\n"
        "e = 'the torch.nodes count'\nf = 'torch' in sys.modules\ng = x.startswith('_')\n"
        "h = metric.split('.')[0] == 'process'\ni = 'rss_bytes' != name.rpartition('.')[2]\n"
        "j = lib == 'torch'\nk = path.split('/')[0] == 'torch'\n"
    )
    metrics = ["torch.nodes", "torch.tensors", "minigrad.nodes", "process.rss_bytes"]
    assert metric_name_uses(ast.parse(code), metrics) == {
        "'torch.'",
        "'.nodes'",
        "'_bytes'",
        "'.tensors'",
        "'minigrad'",
        "'the torch.nodes count'",
        "'process'",
        "'rss_bytes'",
    }


# -- no module-level session state ------------------------------------------------------
#: Module-level names that keep mutable state on purpose, and why. Each is a cache of a
#: pure function (same question, same answer, the whole run long), the session handover
#: itself, or a sentinel never changed. Anything else that
#: lives for a session belongs to ``session.Session`` (reached through
#: ``session.current()``) or to the object that owns it (a plugin instance, a check).
MODULE_STATE_ALLOWED: dict[str, str] = {
    "pytest_graphleak.integrations.lightning._CONCRETE": (
        "cache: one class per (callback class, imported Lightning flavours)"
    ),
    "pytest_graphleak.outlive.census._Walk._shared": (
        "cache: each type's kind for the audit's walk (heap/typetable: by the type only "
        "when it lives anyway, static or held by its module under its name; else by id "
        "with a weak reference, its entry gone with it: keeps nothing alive)"
    ),
    "pytest_graphleak.engine.reach._REACH": (
        "cache: is_user_module by module name (never by object: keeps nothing alive)"
    ),
    "pytest_graphleak.session._CURRENT": (
        "the handover itself: a ContextVar holds one value per context, set when a "
        "test's session is entered (or made on first use) and reset when it is left"
    ),
    "pytest_graphleak.words.chain.NONE": (
        "a sentinel (the empty link where a chain has none), read and never changed"
    ),
    "pytest_graphleak.session._FINDERS": (
        "the configured pytest runs' finders of their running test (one per run, pushed "
        "at configure, removed at unconfigure): how a check in any thread finds its test "
        "without --graphleak, where nothing is set up per test"
    ),
}
#: Functions cached with ``functools.cache``/``lru_cache``: pure, or reading what does not
#: change during a run (the interpreter, its install, source files), never a test's data.
PURE_CACHES = {
    "pytest_graphleak.heap.gcstate.interpreter_frozen",  # a fresh interpreter's freeze count
    "pytest_graphleak.heap.usercode._stdlib_dirs",
    "pytest_graphleak.heap.usercode._dirs_of",  # by the set of those imported so far
    "pytest_graphleak.heap.usercode.is_user_file",
    "pytest_graphleak.probes.warmup_tensors._mode_class",  # a class, made once
    "pytest_graphleak.diagnose.sites._scopes",  # a source file's function scopes
    "pytest_graphleak.diagnose.roots._normalized",  # an absolute path's normal form
    "pytest_graphleak.probes.process_probe.mallinfo2",  # the C library's function, or None
}
#: What a module-level name can hold that changes in place: containers, a namespace
#: whose attributes are bumped, a context variable (``.set``), and iterators that
#: ``next()`` advances (``itertools.count()``: a counter without a ``global``).
_CONTAINERS = {
    "list",
    "dict",
    "set",
    "bytearray",
    "defaultdict",
    "OrderedDict",
    "Counter",
    "deque",
    "WeakSet",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "SimpleNamespace",
    "ContextVar",
    "count",
    "cycle",
    "iter",
}
_MUTATORS = {
    "append",
    "extend",
    "insert",
    "remove",
    "pop",
    "popitem",
    "clear",
    "update",
    "add",
    "discard",
    "setdefault",
    "sort",
    "reverse",
    "appendleft",
    "popleft",
    "extendleft",
    "set",  # ContextVar.set
}


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at import, inside top-level ``if``/``try`` blocks too."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)
            for handler in getattr(node, "handlers", []):
                yield from _module_level(handler.body)
            yield from _module_level(getattr(node, "finalbody", []))
        else:
            yield node


def _mutable_classes(tree: ast.Module) -> set[str]:
    """Classes of this module whose instances can change (not frozen dataclasses,
    named tuples, enums, exceptions)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
            bases = " ".join(ast.unparse(b) for b in node.bases)
            if "frozen=True" not in decorators and not any(
                word in bases for word in ("NamedTuple", "Enum", "Error", "Warning", "Protocol")
            ):
                names.add(node.name)
    return names


def _assigned(node: ast.AST) -> list[ast.expr]:
    """The targets of an assignment (none for any other node)."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    return [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []


def _makes_container(node: ast.AST) -> bool:
    """An assignment of a mutable container: a literal, a comprehension, ``dict()``..."""
    value = getattr(node, "value", None) if _assigned(node) else None
    literals = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    return isinstance(value, literals) or (value is not None and _callee(value) in _CONTAINERS)


def module_containers(
    tree: ast.Module, classes: set[str] | None = None
) -> tuple[set[str], set[str]]:
    """(names bound at module level to a mutable container, or to another such name (an
    alias of the same object); names bound to an instance of a mutable class: the
    module's own, or ``classes``, those it imports from the package's other modules)."""
    containers, instances = set(), set()
    classes = _mutable_classes(tree) | (classes or set())
    for node in _module_level(tree.body):
        names = {t.id for t in _assigned(node) if isinstance(t, ast.Name)}
        value = getattr(node, "value", None)
        if _makes_container(node) or (isinstance(value, ast.Name) and value.id in containers):
            containers |= names
        elif names and _callee(value) in classes:
            instances |= names
    return containers, instances


def _imported_classes(tree: ast.Module, trees: dict[str, ast.Module]) -> set[str]:
    """The names under which ``tree`` calls a mutable class of another package module:
    ``Registry`` (or its ``as`` name) of ``from pkg.registry import Registry``, and every
    mutable class of a module it imports whole (``registry.Registry()``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                if whole in trees:
                    found |= _mutable_classes(trees[whole])
                elif node.module in trees and alias.name in _mutable_classes(trees[node.module]):
                    found.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in trees:
                    found |= _mutable_classes(trees[alias.name])
    return found


def class_containers(tree: ast.Module) -> dict[str, set[str]]:
    """Class name -> its class attributes bound to a mutable container (shared by every
    instance: as much module-level state as a global), less those its instances rebind
    (``self.x = ...``: each instance has its own)."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        names = {
            target.id
            for member in node.body
            if _makes_container(member)
            for target in _assigned(member)
            if isinstance(target, ast.Name)
        }
        rebound = {
            target.attr
            for inner in ast.walk(node)
            for target in _assigned(inner)
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        }
        if names - rebound:
            found[node.name] = names - rebound
    return found


_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.Module) -> Iterator[tuple[_Function, str]]:
    """Every function with the class it is defined in ("" outside a class)."""

    def visit(node: ast.AST, cls: str) -> Iterator[tuple[_Function, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, cls
                yield from visit(child, cls)
            else:
                yield from visit(child, cls)

    yield from visit(tree, "")


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    local = {a.arg for a in every if a is not None}
    declared = {
        n for node in ast.walk(function) if isinstance(node, ast.Global) for n in node.names
    }
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
    return local - declared


def _changed(node: ast.AST) -> ast.expr | None:
    """What ``node`` changes in place: ``x`` of ``x.append(...)``, ``x[k] = ...``,
    ``del x[k]``, ``x[k] += ...``, ``x.attr = ...``, ``next(x)``, ``setattr(x, ...)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        return node.args[0] if node.func.id in ("next", "setattr") else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.value if node.func.attr in _MUTATORS else None
    targets: list[ast.expr] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    for target in targets:
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            return target.value
    return None


def module_state(trees: dict[str, ast.Module]) -> list[str]:
    """Module-level state changed at run time, as ``module.NAME: why`` lines: a mutable
    container that a function (of any module) changes in place, an instance of a
    module's own mutable class kept at module level, a class attribute bound to a
    container and changed in place (``cls.x``, ``Class.x``, ``self.x`` never rebound),
    a ``global`` statement, an attribute set on a module (``setattr(module, ...)``,
    ``module.NAME = ...``); through a local alias too (``table = _TABLE``)."""
    held = {
        name: module_containers(tree, _imported_classes(tree, trees))
        for name, tree in trees.items()
    }
    found = {
        f"{name}.{instance}: a module-level instance of a mutable class"
        for name, (_, instances) in held.items()
        for instance in instances
    }
    for name, tree in trees.items():
        names: dict[str, tuple[str, str]] = {n: (name, n) for n in held[name][0]}
        modules: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in trees:
                        modules[alias.asname or alias.name] = full
                    elif node.module in trees and alias.name in held[node.module][0]:
                        names[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in trees:
                        modules[alias.asname] = alias.name
                    elif alias.name in ("sys", "importlib") or alias.name in trees:
                        modules.setdefault(alias.name.split(".")[0], alias.name)
        shared = class_containers(tree)
        for function, cls in _functions(tree):
            local = _local_names(function)
            aliases = _aliases(function, local, names, modules, held)
            for node in ast.walk(function):
                if isinstance(node, ast.Global):
                    found |= {
                        f"{name}.{n}: rebound by 'global' in {function.name}()" for n in node.names
                    }
                target = _changed(node)
                owner: tuple[str, str] | None = None
                on_module = _module_of(node, target, local, modules)
                if on_module:
                    found.add(
                        f"{on_module}: an attribute set on the module in {name}.{function.name}()"
                    )
                elif isinstance(target, ast.Name) and target.id in aliases:
                    owner = aliases[target.id]
                elif isinstance(target, ast.Name) and target.id not in local:
                    owner = names.get(target.id)
                elif (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and modules.get(target.value.id) in held
                    and target.attr in held[modules[target.value.id]][0]
                ):
                    owner = (modules[target.value.id], target.attr)
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    klass = cls if target.value.id in ("cls", "self") else target.value.id
                    if target.attr in shared.get(klass, ()):
                        owner = (name, f"{klass}.{target.attr}")
                if owner is not None:
                    found.add(f"{owner[0]}.{owner[1]}: changed in {name}.{function.name}()")
    return sorted(found)


def _held_by(
    value: ast.expr | None,
    names: dict[str, tuple[str, str]],
    modules: dict[str, str],
    held: dict[str, tuple[set[str], set[str]]],
) -> tuple[str, str] | None:
    """The module-level container ``value`` names: ``_TABLE`` or ``module._TABLE``."""
    if isinstance(value, ast.Name):
        return names.get(value.id)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        module = modules.get(value.value.id)
        if module in held and value.attr in held[module][0]:
            return module, value.attr
    return None


def _aliases(
    function: _Function,
    local: set[str],
    names: dict[str, tuple[str, str]],
    modules: dict[str, str],
    held: dict[str, tuple[set[str], set[str]]],
) -> dict[str, tuple[str, str]]:
    """Local names bound to a module-level container (``table = _TABLE``): a change
    through one changes the module's."""
    found = {}
    for node in ast.walk(function):
        for target in _assigned(node):
            value = getattr(node, "value", None)
            if isinstance(value, ast.Name) and value.id in local:
                continue  # a local of the same name, not the module's
            owner = _held_by(value, names, modules, held)
            if isinstance(target, ast.Name) and owner is not None:
                found[target.id] = owner
    return found


def _module_of(
    node: ast.AST, target: ast.expr | None, local: set[str], modules: dict[str, str]
) -> str:
    """The module ``node`` sets an attribute on (``setattr(module, ...)``,
    ``module.NAME = ...``, ``setattr(sys.modules[...], ...)``), as ``module.NAME`` where
    the name is known; "" for any other node."""
    if target is None:
        return ""
    setting = isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr"
    assigning = isinstance(node, (ast.Assign, ast.AugAssign)) and isinstance(
        getattr(node, "targets", [getattr(node, "target", None)])[0], ast.Attribute
    )
    if not (setting or assigning):
        return ""
    if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "sys.modules":
        return "sys.modules[...]"
    if not isinstance(target, ast.Name) or target.id in local or target.id not in modules:
        return ""
    module = modules[target.id]
    if module in ("sys", "importlib"):
        return ""
    attr = ""
    if setting and isinstance(node, ast.Call) and len(node.args) > 1:
        key = node.args[1]
        attr = str(key.value) if isinstance(key, ast.Constant) else "<computed>"
    elif assigning:
        first = getattr(node, "targets", [getattr(node, "target", None)])[0]
        attr = first.attr
    return f"{module}.{attr}"


def _state_name(line: str) -> str:
    return line.split(":", 1)[0]


def test_no_module_level_session_state() -> None:
    """What lives for a session is handed over (``session.current()``), never kept in a
    module-level list, dict, set, counter or object: only the listed caches are."""
    found = module_state({name: tree for name, (_, tree) in MODULES.items()})
    assert [line for line in found if _state_name(line) not in MODULE_STATE_ALLOWED] == []
    assert set(MODULE_STATE_ALLOWED) <= {_state_name(line) for line in found}  # none stale


def test_every_function_cache_is_declared_pure() -> None:
    cached = {
        f"{name}.{node.name}"
        for name, (_, tree) in MODULES.items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any("cache" in ast.unparse(d) for d in node.decorator_list)
    }
    assert cached == PURE_CACHES


def test_the_state_scan_sees_module_level_state() -> None:
    """The shapes session state has had in this package: a list another module changes
    (``gcstate.HELD``), a dict changed in place, a counter rebound with ``global``, a
    module-level object; constants read only are not state."""
    trees = {
        "pkg.gcstate": ast.parse(
            "HELD: list[object] = []\n_SEEN = {}\nTABLE = {'a': 1}\nWORDS = ('a',)\n"
            "_COUNT = 0\nclass Box:\n    pass\n_BOX = Box()\n"
            "def hold(x):\n    HELD.append(x)\n    _SEEN[x] = TABLE['a']\n"
            "def count():\n    global _COUNT\n    _COUNT += 1\n"
            "def shadow(HELD):\n    HELD.append(1)\n"
            "class Registry:\n    ALL: list[object] = []\n    KINDS = {'a': 1}\n"
            "    mine = []\n"
            "    def __init__(self):\n        self.mine = []\n        self.ALL.append(self)\n"
            "        self.mine.append(1)\n"
            "    @classmethod\n    def forget(cls):\n        cls.ALL.clear()\n"
        ),
        "pkg.audit": ast.parse(
            "import pkg.gcstate as g\nfrom pkg.gcstate import HELD\n"
            "def finish():\n    for held in list(HELD):\n        HELD.remove(held)\n"
            "def reset():\n    g._SEEN.clear()\n"
        ),
    }
    assert module_state(trees) == [
        "pkg.gcstate.HELD: changed in pkg.audit.finish()",
        "pkg.gcstate.HELD: changed in pkg.gcstate.hold()",
        "pkg.gcstate.Registry.ALL: changed in pkg.gcstate.__init__()",
        "pkg.gcstate.Registry.ALL: changed in pkg.gcstate.forget()",
        "pkg.gcstate._BOX: a module-level instance of a mutable class",
        "pkg.gcstate._COUNT: rebound by 'global' in count()",
        "pkg.gcstate._SEEN: changed in pkg.audit.reset()",
        "pkg.gcstate._SEEN: changed in pkg.gcstate.hold()",
    ]


#: The other forms module state takes (issue 46), each planted in ``pkg.state`` and used
#: from ``pkg.user`` (which imports ``pkg.state`` as ``state`` and ``Registry`` from
#: ``pkg.registry``), and the line the scan must find.
PLANTED = {
    "a counter advanced with next()": (
        "import itertools\n_IDS = itertools.count()\ndef new_id():\n    return next(_IDS)\n",
        "",
        "pkg.state._IDS: changed in pkg.state.new_id()",
    ),
    "a namespace attribute bumped": (
        "import types\n_RUN = types.SimpleNamespace(calls=0)\ndef called():\n    _RUN.calls += 1\n",
        "",
        "pkg.state._RUN: changed in pkg.state.called()",
    ),
    "a context variable set": (
        "from contextvars import ContextVar\n_NOW = ContextVar('now')\n",
        "def enter(x):\n    state._NOW.set(x)\n",
        "pkg.state._NOW: changed in pkg.user.enter()",
    ),
    "setattr on a module": (
        "LIMIT = 1\n",
        "def loosen():\n    setattr(state, 'LIMIT', 2)\n",
        "pkg.state.LIMIT: an attribute set on the module in pkg.user.loosen()",
    ),
    "an attribute assigned on a module": (
        "LIMIT = 1\n",
        "def loosen():\n    state.LIMIT = 2\n",
        "pkg.state.LIMIT: an attribute set on the module in pkg.user.loosen()",
    ),
    "a module dict aliased, then changed": (
        "_TABLE = {}\n",
        "def note(k):\n    table = state._TABLE\n    table[k] = 1\n",
        "pkg.state._TABLE: changed in pkg.user.note()",
    ),
    "a module dict aliased at module level": (
        "_TABLE = {}\nTABLE = _TABLE\ndef note(k):\n    TABLE[k] = 1\n",
        "",
        "pkg.state.TABLE: changed in pkg.state.note()",
    ),
    "an instance of another module's class": (
        "",
        "_KEPT = Registry()\n",
        "pkg.user._KEPT: a module-level instance of a mutable class",
    ),
}


@pytest.mark.parametrize("form", sorted(PLANTED))
def test_the_state_scan_sees_every_form_of_module_state(form: str) -> None:
    state, user, expected = PLANTED[form]
    trees = {
        "pkg.state": ast.parse(state),
        "pkg.registry": ast.parse("class Registry:\n    pass\n"),
        "pkg.user": ast.parse(
            "import pkg.state as state\nfrom pkg.registry import Registry\n" + user
        ),
    }
    assert module_state(trees) == [expected]


def test_the_state_scan_leaves_locals_and_constants_alone() -> None:
    """A local of the same name, a constant read, a frozen record and a module of the
    standard library changed are not the package's module state."""
    trees = {
        "pkg.state": ast.parse(
            "import itertools, sys\nfrom dataclasses import dataclass\n_IDS = itertools.count()\n"
            "LIMIT = 1\n@dataclass(frozen=True)\nclass Point:\n    x: int = 0\n"
            "ORIGIN = Point()\n"
            "def local(_IDS):\n    return next(_IDS)\n"
            "def read():\n    return LIMIT + ORIGIN.x\n"
            "def fresh():\n    ids = itertools.count()\n    return next(ids)\n"
        ),
    }
    assert module_state(trees) == []


# -- gc state has one owner -------------------------------------------------------------
#: What changes the collector's state or runs it: called or handed on (``collect or
#: gc.collect``), it is ``heap/gcstate.py``'s; ``garbage``/``callbacks`` when changed.
_GC_CHANGES = {"collect", "freeze", "unfreeze", "disable", "enable", "set_threshold", "set_debug"}
_GC_LISTS = {"garbage", "callbacks"}
GC_OWNER = "pytest_graphleak.heap.gcstate"
#: The gc calls outside ``heap/gcstate.py``, each with its reason: collections that leave
#: the collector's settings as they were. Each could be a ``gcstate`` helper (follow-ups).
GC_CALLS_ALLOWED: dict[str, str] = {
    "pytest_graphleak.engine.tracker: gc.collect": (
        "the sample's full collection (the default of after_step's collect) and the "
        "whole-heap check's first collection: the tracker measures after gc.collect()"
    ),
    "pytest_graphleak.probes.cuda_probe: gc.collect": (
        "the CUDA recheck's cleaning before it re-queries the allocator"
    ),
    "pytest_graphleak.diagnose.loop_recorder: gc.collect": (
        "frees again what the recorder's DEBUG_SAVEALL collection saved, before the sample counts"
    ),
    "pytest_graphleak.demo.story: gc.collect": (
        "the demo frees one run's model before the next run starts (no check is open)"
    ),
    "pytest_graphleak.demo.backends: gc.collect": (
        "the demo's counters start from a collected heap (no check is open)"
    ),
}


def gc_state_changes(tree: ast.AST) -> set[str]:
    """``gc.<what>`` that runs the collector or changes its state, however gc is imported
    (``import gc as g``, ``from gc import collect``, ``getattr(gc, "freeze")``)."""
    gc_names = {
        alias.asname or "gc"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "gc"
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "gc":
            found |= {f"gc.{a.name}" for a in node.names if a.name in _GC_CHANGES | _GC_LISTS}
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _GC_CHANGES
            and isinstance(node.value, ast.Name)
            and node.value.id in gc_names
        ):
            found.add(f"gc.{node.attr}")
        elif _callee(node) == "getattr" and isinstance(node, ast.Call) and len(node.args) > 1:
            target, attr = node.args[0], node.args[1]
            if (
                isinstance(target, ast.Name)
                and target.id in gc_names
                and isinstance(attr, ast.Constant)
                and attr.value in _GC_CHANGES | _GC_LISTS
            ):
                found.add(f"gc.{attr.value}")
        changed = _changed(node)
        if (
            isinstance(changed, ast.Attribute)
            and changed.attr in _GC_LISTS
            and isinstance(changed.value, ast.Name)
            and changed.value.id in gc_names
        ):
            found.add(f"gc.{changed.attr}")
    return found


def test_only_gcstate_changes_gc_state() -> None:
    """``heap/gcstate.py`` records and restores the collector's state; elsewhere only the
    listed collections run it."""
    found = {
        f"{name}: {change}"
        for name, (_, tree) in MODULES.items()
        if name != GC_OWNER
        for change in gc_state_changes(tree)
    }
    assert sorted(found - set(GC_CALLS_ALLOWED)) == []
    assert set(GC_CALLS_ALLOWED) <= found  # none stale
    assert {"gc.freeze", "gc.unfreeze", "gc.disable", "gc.set_debug"} <= gc_state_changes(
        MODULES[GC_OWNER][1]
    )


def test_the_gc_scan_sees_every_spelling() -> None:
    code = (
        "import gc\nimport gc as collector\nfrom gc import freeze as hold\n"
        "def f(collect=None):\n    (collect or gc.collect)()\n    collector.unfreeze()\n"
        "    getattr(gc, 'set_threshold')(1)\n    gc.callbacks.append(print)\n"
        "    del gc.garbage[:]\n    gc.get_objects()\n    gc.get_stats()\n    gc.isenabled()\n"
    )
    assert gc_state_changes(ast.parse(code)) == {
        "gc.collect",
        "gc.unfreeze",
        "gc.freeze",
        "gc.set_threshold",
        "gc.callbacks",
        "gc.garbage",
    }


# -- docs/DESIGN.md describes this tree -------------------------------------------------
DESIGN = ROOT / "docs" / "DESIGN.md"


def layout_parts(text: str) -> set[str]:
    """The top-level modules and folders the layout block ("## The layout") names: each
    entry starts two spaces in (``api.py``, ``probes/, heap/``); deeper lines describe."""
    block = text.split("## The layout", 1)[1].split("```")[1]
    parts = set()
    for line in block.splitlines():
        names = re.match(r"  ((?:\w+(?:/|\.py)(?:, )?)+)", line)
        if names:
            parts |= set(re.findall(r"(\w+)(?:/|\.py)", names[1]))
    return parts


def layer_table(text: str) -> dict[int, set[str]]:
    """The layers table ("### The layers"): layer number -> its parts."""
    section = text.split("### The layers", 1)[1].split("\n\n")[1]
    table = {}
    for line in section.splitlines():
        row = re.match(r"\|\s*(\d+)[^|]*\|(.*)\|\s*$", line)
        if row:
            table[int(row[1])] = {p.removesuffix("/") for p in re.findall(r"`([^`]+)`", row[2])}
    return table


def stale_references(text: str, package: Path = PACKAGE) -> list[str]:
    """``folder/module`` or ``folder/module.py`` (a folder of the package, or ``tests``)
    and bare ``module.py`` the text names that do not exist."""
    folders = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    found = []
    for match in re.finditer(r"(?<![\w/.])([a-z_]+)/([a-z_][a-z0-9_]*)(\.py)?\b", text):
        folder, name = match[1], match[2]
        where = package / folder if folder in folders else ROOT / "tests"
        if folder in folders | {"tests"} and not (
            (where / f"{name}.py").exists() or (where / name / "__init__.py").exists()
        ):
            found.append(match[0])
    for match in re.finditer(r"(?<![\w/.])([a-z_][a-z0-9_]*)\.py\b", text):
        if not any(path.name == match[0] for path in package.rglob(match[0])):
            found.append(match[0])
    return found


def test_the_design_layout_is_the_tree() -> None:
    """docs/DESIGN.md's layout names each top-level module and folder of the package,
    and nothing else; its layers table is ``LAYERS``; every module it names exists."""
    text = DESIGN.read_text(encoding="utf-8")
    assert layout_parts(text) == {top_part(name) for name in MODULES}
    assert layer_table(text) == {level: set(parts) for level, parts in enumerate(LAYERS)}
    assert stale_references(text) == []


def test_the_design_scan_sees_a_stale_layout() -> None:
    text = (
        "## The layout\n\n```\npytest_graphleak/\n  api.py, gone.py      front ends\n"
        "  engine/              tracker, reach (engine/reach.py, engine/gone.py)\n"
        "                       described further: not/an_entry.py\n```\n"
        "### The layers\n\n| layer | parts |\n|---|---|\n| 2 | `engine/`, `api` |\n"
        "| 1 plain data | `metrics` |\n\n`tests/test_gone.py`, `verdict.py`, `gone2.py`\n"
    )
    assert layout_parts(text) == {"api", "gone", "engine"}
    assert layer_table(text) == {2: {"engine", "api"}, 1: {"metrics"}}
    assert stale_references(text) == ["engine/gone.py", "tests/test_gone.py", "gone.py", "gone2.py"]
