"""Roots the user knows: the given ones, closure cells of the step, user module globals.

The caller passes labelled roots (``fixture 'state'``, ``self``, ``local 'model'``). The
step the plugin passes is usually its own wrapper around the test function: we look
through wrappers (``functools.partial``, ``__wrapped__``, bound methods, closure cells
holding functions) for the user's functions, add their closure cells
(``closure 'NAME'``) and the globals of their modules (``global 'NAME'``), and the
globals of the modules where the leaked objects were made.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytest_graphleak.diagnose.edges import is_private
from pytest_graphleak.heap.usercode import is_private_module

Roots = list[tuple[str, object]]

_SKIP_GLOBAL_TYPES = (types.ModuleType, types.BuiltinFunctionType)


def user_functions(step: Callable[[], object] | None, *, depth: int = 3) -> list[Any]:
    """User-defined functions behind ``step`` (through wrappers and closures)."""
    found: list[Any] = []
    seen: set[int] = set()
    frontier: list[Any] = [step] if step is not None else []
    for _ in range(depth + 1):
        nxt: list[Any] = []
        for obj in frontier:
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, functools.partial):
                nxt.append(obj.func)
                continue
            if isinstance(obj, types.MethodType):
                nxt.append(obj.__func__)
                continue
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is not None:
                nxt.append(wrapped)
            if not isinstance(obj, types.FunctionType):
                continue
            if not is_private(obj):
                found.append(obj)
            for cell in obj.__closure__ or ():
                try:
                    content = cell.cell_contents
                except ValueError:
                    continue
                if callable(content):
                    nxt.append(content)
        frontier = nxt
    return found


def _absolute(path: str) -> str:
    """``os.path.abspath``, remembered for absolute paths (they do not depend on the
    working directory): every module's file is compared on each diagnosis, thousands."""
    return _normalized(path) if os.path.isabs(path) else os.path.abspath(path)


@functools.lru_cache(maxsize=8192)
def _normalized(path: str) -> str:
    return os.path.normpath(path)


def _user_modules(functions: Iterable[Any], filenames: Iterable[str]) -> list[types.ModuleType]:
    """Modules of the user's functions and of the files where leaked objects were made."""
    modules: list[types.ModuleType] = []
    seen: set[str] = set()

    def add(module: types.ModuleType | None) -> None:
        if module is None or module.__name__ in seen or is_private_module(module.__name__):
            return
        seen.add(module.__name__)
        modules.append(module)

    for fn in functions:
        add(sys.modules.get(getattr(fn, "__module__", "") or ""))
    wanted = {_absolute(f) for f in filenames if f and not f.startswith("<")}
    if wanted:
        by_file: dict[str, types.ModuleType] = {}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                by_file[_absolute(path)] = module
        for path in sorted(wanted):
            add(by_file.get(path))
    return modules


def given_roots(roots: Mapping[str, object]) -> Roots:
    """The caller's labelled roots, minus pytest's and the plugin's own objects."""
    return [(label, value) for label, value in roots.items() if not is_private(value)]


def all_roots(
    roots: Mapping[str, object], step: Callable[[], object] | None, site_files: set[str]
) -> Roots:
    """The given roots, the closure cells of the user's functions behind ``step``, and the
    globals of their modules and of the files in ``site_files`` (where leaked objects
    were made)."""
    functions = user_functions(step)
    found = given_roots(roots)
    for fn in functions:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            with contextlib.suppress(ValueError):  # a cell not filled yet
                found.append((f"closure '{name}'", cell.cell_contents))
    namespaces = [vars(module) for module in _user_modules(functions, site_files)]
    # A module not in sys.modules (loaded with importlib.util.module_from_spec and never
    # registered, a file run with exec): its functions' globals are its namespace.
    seen = {id(names) for names in namespaces}
    for fn in functions:
        names = fn.__globals__
        if id(names) not in seen and not is_private_module(str(names.get("__name__", ""))):
            seen.add(id(names))
            namespaces.append(names)
    for names in namespaces:
        for name, value in list(names.items()):
            if not name.startswith("__") and not isinstance(value, _SKIP_GLOBAL_TYPES):
                found.append((f"global '{name}'", value))
    namespaces.clear()
    return found
