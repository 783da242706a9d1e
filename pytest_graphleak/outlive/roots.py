"""The outlive audit's roots and opt-outs (``outlive/audit``): the test module's and the
user's other modules' globals, the test class's attributes (a ``request.cls`` attribute
that a live class-scoped fixture set is that fixture's), the live wider-scope fixtures,
and the objects a ``graphleak_outlive_keep`` entry names, found without importing or
computing anything. A test is an ``AuditedTest`` and a fixture definition a
``FixtureDef`` (``outlive/subjects``): no pytest import, no pytest object read.
"""

from __future__ import annotations

import contextlib
import fnmatch
import sys
import types
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pytest_graphleak.heap.usercode import is_user_module
from pytest_graphleak.outlive.found import Holder
from pytest_graphleak.outlive.subjects import AuditedTest, FixtureDef
from pytest_graphleak.words import outlive as said

_SKIP_GLOBALS = (types.ModuleType, types.BuiltinFunctionType, type(sys))


def globals_of(module: types.ModuleType, only: Collection[str] | None = None) -> Iterable[Holder]:
    """The module's globals as roots (``only``: those names alone)."""
    prefix = module.__name__
    names = vars(module)
    items = list(names.items()) if only is None else [(n, names[n]) for n in only if n in names]
    for name, value in items:
        if not name.startswith("__") and not isinstance(value, _SKIP_GLOBALS):
            yield Holder(
                f"global '{prefix}.{name}'",
                f"{prefix}.{name}",
                value,
                read=reader(names, name, value),
            )


def global_values(module: types.ModuleType) -> list[Any]:
    """The values of ``globals_of(module)`` and a few it leaves out (modules, builtins:
    the gate skips them), read without making a holder each."""
    return [value for name, value in list(vars(module).items()) if not name.startswith("__")]


def reader(names: Mapping[str, Any], name: str, value: object) -> Any:
    return lambda: names.get(name, value)


def class_attributes(
    cls: type, set_by: Mapping[int, tuple[type, dict[str, FixtureDef]]] | None = None
) -> Iterable[Holder]:
    """The class's attributes (and its user bases'); one that a live class-scoped fixture
    set on ``request.cls`` is that fixture's, as its value would be (``set_by``)."""
    for klass in cls.__mro__:
        if klass is object or is_user_module(klass.__module__) is False:
            continue
        owners = (set_by or {}).get(id(klass), (klass, {}))[1]
        for name, value in list(vars(klass).items()):
            if name.startswith("__") or isinstance(
                value, (types.FunctionType, staticmethod, classmethod, property)
            ):
                continue
            qualified = f"{klass.__module__}.{klass.__qualname__}.{name}"
            label = said.CLASS_ATTRIBUTE.format(klass.__qualname__, name)
            owner = owners.get(name)
            if owner is not None and owner.cached_result is not None:
                yield Holder(
                    label + owned_by(owner),
                    qualified,
                    value,
                    fixture=True,
                    owner=owner,
                    exclusive=True,
                )
                continue
            yield Holder(label, qualified, value, read=reader(klass.__dict__, name, value))


#: Objects one graphleak_outlive_keep entry may name (a pattern over many attributes).
_MAX_RESOLVED = 256
MISSING = object()
#: Values never excluded by identity: shared by everything, holding nothing.
_ATOMS = (type(None), bool, int, float, complex, str, bytes, types.ModuleType)


def resolve_name(pattern: str) -> list[object]:
    """The objects a ``graphleak_outlive_keep`` entry names now: its longest dotted prefix
    already in ``sys.modules``, then attributes already set there (a module's globals, a
    class's attributes along its MRO, an instance's ``__dict__``; a part with ``*`` or
    ``?`` matches names there). Nothing is imported and no attribute is computed (no
    ``getattr``: a lazy module attribute or a property is not run). A fixture's name
    resolves to nothing here: the audit matches it by name."""
    parts = pattern.split(".")
    found: list[object] = []
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if isinstance(module, types.ModuleType):
            found = [module]
            parts = parts[cut:]
            break
    else:
        return []
    for part in parts:
        wild = any(c in part for c in "*?[")
        following: list[object] = []
        for obj in found:
            for value in static_attributes(obj, part, wild):
                if len(following) < _MAX_RESOLVED:
                    following.append(value)
        found = following
    return [obj for obj in found if not isinstance(obj, _ATOMS)]


def static_attributes(obj: object, part: str, wild: bool) -> Iterable[object]:
    """``obj``'s attributes named ``part`` (a pattern when ``wild``), read statically."""
    tables: list[Any] = []
    if isinstance(obj, type):
        tables = [vars(klass) for klass in obj.__mro__ if klass is not object]
    else:
        with contextlib.suppress(TypeError):  # no __dict__ (slots, builtins)
            tables = [vars(obj)]
    seen: set[str] = set()
    for table in tables:
        if not wild:
            value = table.get(part, MISSING)
            if value is not MISSING:
                yield value
                return
            continue
        for name, value in list(table.items()):
            if isinstance(name, str) and name not in seen and fnmatch.fnmatchcase(name, part):
                seen.add(name)
                yield value


def live_fixtures(test: AuditedTest) -> Iterable[Holder]:
    """The values of the wider-scope fixtures ``test`` uses that are still set up."""
    for name, fixturedef in test.fixtures.items():
        cached = fixturedef.cached_result
        if fixturedef.scope == "function" or not cached or cached[2] is not None:
            continue
        if name in ("request", "pytestconfig", "graphleak"):
            continue
        yield Holder(fixture_label(fixturedef), name, cached[0], fixture=True, owner=fixturedef)


#: The class-scoped fixture pytest runs a unittest class's setUpClass in, and its class.
_SETUP_CLASS = "_unittest_setUpClass_fixture_"


def _setup_class(fixturedef: FixtureDef) -> str | None:
    """The unittest class whose setUpClass this fixture runs (None: a plain fixture)."""
    name = str(fixturedef.argname)
    return name.removeprefix(_SETUP_CLASS) if name.startswith(_SETUP_CLASS) else None


def fixture_label(fixturedef: FixtureDef) -> str:
    return said.fixture_label(_setup_class(fixturedef), str(fixturedef.argname), fixturedef.scope)


def owned_by(fixturedef: FixtureDef) -> str:
    """The label's tail for a class attribute a class-scoped fixture set."""
    return said.set_by(_setup_class(fixturedef), str(fixturedef.argname))


def still_kept(fixturedef: FixtureDef) -> str:
    return said.still_kept(_setup_class(fixturedef), str(fixturedef.argname))
