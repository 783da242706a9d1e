"""Modules talk through public names, and the plugin is in no import cycle.

An ast scan of ``pytest_graphleak/`` (no import of the package): a reach-in such as
``plugin._record`` or ``fixture._item`` from another module means a function lives in
the wrong place. The scan also checks that only the probes know metric names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphleak"


def modules() -> dict[str, tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return found


MODULES = modules()


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def imported_modules(name: str, tree: ast.Module) -> Iterator[tuple[str, str | None]]:
    """(module imported, name imported from it or None) for every import, nested ones too."""
    is_package = MODULES[name][0].name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full, None) if full in MODULES else (base, alias.name)


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
    assert "pytest_graphleak.plugin" in MEMBERS["_settings"]  # GraphleakFixture._settings
    assert reach_ins(name, tree) == [
        f"{name}:plugin._record",
        f"{name}:._settings of {', '.join(sorted(MEMBERS['_settings']))}",
    ]


def test_the_plugin_is_in_no_import_cycle() -> None:
    """The plugin imports the layers below it; none of them imports the plugin back
    (``distributed`` spawns ranks and gathers results, the pytest side is the plugin's)."""
    importers = sorted(name for name in MODULES if "pytest_graphleak.plugin" in dependencies(name))
    assert importers == []
    assert "pytest_graphleak.distributed" in dependencies("pytest_graphleak.plugin")


def test_metric_names_appear_only_in_the_probes() -> None:
    """The verdict, the diagnosis and the reports read what a metric is from its probe's
    declaration (``metrics.Metric``), never from its name."""
    from pytest_graphleak.probes import METRICS

    assert len(METRICS) >= 10
    found = [
        f"{path.relative_to(PACKAGE)}:{lineno}: {metric}"
        for name, (path, _) in MODULES.items()
        if not name.startswith("pytest_graphleak.probes")
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for metric in METRICS
        if metric in line
    ]
    assert found == []


#: The layers, lowest first (docs/DESIGN.md, "The layers"): a module imports only its own
#: layer and the layers below; keyed by the package's top-level module or folder.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("metrics", "patterns", "status", "result", "session", "values", "targets"),  # plain data
    ("verdict",),  # the pure judgement
    ("heap", "probes"),  # what is measured, gc state, user code
    ("engine", "diagnose"),  # the measuring engine; the diagnosis of a leak
    ("options",),  # the options table
    ("report",),  # renderings of results
    ("pipeline",),  # measure -> judge -> explain
    ("loop",),  # a check inside a running loop
    ("api", "distributed", "__init__"),  # the public front ends
    ("integrations", "cli", "demo", "plugin", "__main__"),  # the outer front ends
)
LAYER_OF = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def top_part(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def runtime_dependencies(name: str) -> set[str]:
    """What ``name`` imports when it runs: ``if TYPE_CHECKING:`` blocks left out."""
    tree = MODULES[name][1]
    checking = [
        node for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    ]  # fmt: skip
    hidden = {id(inner) for node in checking for inner in ast.walk(node)}
    kept = ast.Module(
        [node for node in ast.walk(tree)
         if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in hidden],
        [],
    )  # fmt: skip
    return {module for module, _ in imported_modules(name, kept) if module in MODULES} - {name}


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {top_part(name) for name in MODULES} <= set(LAYER_OF)


def test_no_layer_imports_a_higher_one() -> None:
    found = [
        f"{name} -> {dep}"
        for name in MODULES
        for dep in runtime_dependencies(name)
        if LAYER_OF.get(top_part(dep), 0) > LAYER_OF.get(top_part(name), 0)
    ]
    assert found == []


def test_the_package_has_no_import_circle() -> None:
    graph = {name: runtime_dependencies(name) for name in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[str] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                circles.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_no_module_finds_the_plugin_or_a_session_through_sys_modules() -> None:
    """State is handed over (``session.current()``), never looked up by module name."""
    found = [
        name for name, (path, _) in MODULES.items()
        if 'sys.modules.get("pytest_graphleak' in path.read_text(encoding="utf-8")
        or "sys.modules['pytest_graphleak" in path.read_text(encoding="utf-8")
    ]  # fmt: skip
    assert found == []
