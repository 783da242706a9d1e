"""Modules talk through public names, in the layer order of docs/DESIGN.md, with no
import circle and no session state kept at module level.

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


# -- no module-level session state ------------------------------------------------------
#: Module-level names that keep mutable state on purpose, and why. Each is a cache of a
#: pure function (same question, same answer, the whole run long). Anything else that
#: lives for a session belongs to ``session.Session`` (reached through
#: ``session.current()``) or to the object that owns it (a plugin instance, a check).
MODULE_STATE_ALLOWED: dict[str, str] = {
    "pytest_graphleak.integrations.lightning._CONCRETE":
        "cache: one class per (callback class, imported Lightning flavours)",
    "pytest_graphleak.engine.reach._REACH":
        "cache: is_user_module by module name (never by object: keeps nothing alive)",
    "pytest_graphleak.session._FINDERS":
        "the configured pytest runs' finders of their running test (one per run, pushed "
        "at configure, removed at unconfigure): how a check in any thread finds its test "
        "without --graphleak, where nothing is set up per test",
}  # fmt: skip
#: Functions cached with ``functools.cache``/``lru_cache``: pure, or reading what does not
#: change during a run (the interpreter, its install, source files), never a test's data.
PURE_CACHES = {
    "pytest_graphleak.heap.gcstate.interpreter_frozen",  # a fresh interpreter's freeze count
    "pytest_graphleak.heap.usercode._stdlib_dirs",
    "pytest_graphleak.heap.usercode._dirs_of",  # by the set of those imported so far
    "pytest_graphleak.heap.usercode.is_user_file",
    "pytest_graphleak.engine.warmup_tensors._mode_class",  # a class, made once
    "pytest_graphleak.diagnose.sites._scopes",  # a source file's function scopes
}
_CONTAINERS = {
    "list", "dict", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque",
    "WeakSet", "WeakKeyDictionary", "WeakValueDictionary",
}  # fmt: skip
_MUTATORS = {
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "add",
    "discard", "setdefault", "sort", "reverse", "appendleft", "popleft", "extendleft",
}  # fmt: skip


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


def _callee(node: object) -> str:
    """``f`` of ``f(...)`` or ``m.f(...)``; "" for anything else."""
    called = node.func if isinstance(node, ast.Call) else None
    if isinstance(called, ast.Name):
        return called.id
    return called.attr if isinstance(called, ast.Attribute) else ""


def _makes_container(node: ast.AST) -> bool:
    """An assignment of a mutable container: a literal, a comprehension, ``dict()``..."""
    value = getattr(node, "value", None) if _assigned(node) else None
    literals = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    return isinstance(value, literals) or (value is not None and _callee(value) in _CONTAINERS)


def module_containers(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound at module level to a mutable container, names bound to an instance
    of one of the module's own mutable classes)."""
    containers, instances = set(), set()
    classes = _mutable_classes(tree)
    for node in _module_level(tree.body):
        names = {t.id for t in _assigned(node) if isinstance(t, ast.Name)}
        if _makes_container(node):
            containers |= names
        elif names and _callee(getattr(node, "value", None)) in classes:
            instances |= names
    return containers, instances


def class_containers(tree: ast.Module) -> dict[str, set[str]]:
    """Class name -> its class attributes bound to a mutable container (shared by every
    instance: as much module-level state as a global), less those its instances rebind
    (``self.x = ...``: each instance has its own)."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        names = {
            target.id for member in node.body if _makes_container(member)
            for target in _assigned(member) if isinstance(target, ast.Name)
        }  # fmt: skip
        rebound = {
            target.attr for inner in ast.walk(node) for target in _assigned(inner)
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        }  # fmt: skip
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
    declared = {n for node in ast.walk(function) if isinstance(node, ast.Global)
                for n in node.names}  # fmt: skip
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
    return local - declared


def _changed(node: ast.AST) -> ast.expr | None:
    """What ``node`` changes in place: ``x`` of ``x.append(...)``, ``x[k] = ...``,
    ``del x[k]``, ``x[k] += ...``, ``x.attr = ...``."""
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
    a ``global`` statement."""
    held = {name: module_containers(tree) for name, tree in trees.items()}
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
        shared = class_containers(tree)
        for function, cls in _functions(tree):
            local = _local_names(function)
            for node in ast.walk(function):
                if isinstance(node, ast.Global):
                    found |= {f"{name}.{n}: rebound by 'global' in {function.name}()"
                              for n in node.names}  # fmt: skip
                target = _changed(node)
                owner: tuple[str, str] | None = None
                if isinstance(target, ast.Name) and target.id not in local:
                    owner = names.get(target.id)
                elif (
                    isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and modules.get(target.value.id) in held
                    and target.attr in held[modules[target.value.id]][0]
                ):  # fmt: skip
                    owner = (modules[target.value.id], target.attr)
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    klass = cls if target.value.id in ("cls", "self") else target.value.id
                    if target.attr in shared.get(klass, ()):
                        owner = (name, f"{klass}.{target.attr}")
                if owner is not None:
                    found.add(f"{owner[0]}.{owner[1]}: changed in {name}.{function.name}()")
    return sorted(found)


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
