"""A user's function with one statement changed, compiled from its source and swapped in
where the step calls it, in memory only.

``find_function`` walks from the step and its roots (closure cells, the globals of user
functions, user modules, classes and instances, bounded) to the live function whose code
runs the line to change. ``compile_changed`` compiles that function's ``def`` from the
edited file text with the file's name and line numbers (lines after an inserted line
keep their numbers), inside a wrapper that gives it the same free variables (and its
class, for ``super()`` and private names), and returns the new code object; nothing is
executed. ``swapped`` puts it in place as the function's ``__code__``, so every caller
(a bound method, a decorator's wrapper, the marker's step) runs it, and puts the
original back in a ``finally`` (also on Ctrl-C). No file is written.
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pytest_graphleak.diagnose.fix_source import Edit, Source, changed_lines
from pytest_graphleak.exceptions import NotSwappable
from pytest_graphleak.heap.usercode import is_user_file
from pytest_graphleak.words import verify as why

#: Objects the walk visits at most (a test's reach is small; this bounds a huge one).
MAX_VISITS = 20_000
#: Items of one container the walk looks at.
MAX_ITEMS = 200
_WRAPPER = "__graphleak_fix__"
#: A def or class made by hand needs its (empty) type parameters from Python 3.12 on.
_TYPE_PARAMS: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}


def find_function(
    filename: str, lineno: int, starts: Iterable[object]
) -> types.FunctionType | None:
    """The live function whose own code (not a nested function's) runs ``lineno`` of
    ``filename``, or, when only an enclosing one is reachable (a ``def`` inside the
    test), that one; None when the walk finds neither."""
    best: tuple[int, types.FunctionType] | None = None
    for func in _reachable_functions(starts):
        depth = _depth_of(func.__code__, filename, lineno, 0)
        if depth is not None and (best is None or depth < best[0]):
            best = (depth, func)
            if depth == 0:
                break
    return best[1] if best is not None else None


def _depth_of(code: types.CodeType, filename: str, lineno: int, depth: int) -> int | None:
    """0 when ``code`` runs ``lineno`` itself, k when a function k levels inside it does."""
    if code.co_filename != filename:
        return None
    if any(line == lineno for _, _, line in code.co_lines()):
        return depth
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found = _depth_of(const, filename, lineno, depth + 1)
            if found is not None:
                return found
    return None


def _reachable_functions(starts: Iterable[object]) -> Iterator[types.FunctionType]:
    queue: list[object] = list(starts)
    seen: set[int] = set()
    visits = 0
    while queue and visits < MAX_VISITS:
        obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visits += 1
        if isinstance(obj, types.FunctionType):
            yield obj
        queue.extend(_next(obj))
    queue.clear()


def _next(obj: object) -> list[object]:
    """What the walk follows from ``obj``: only toward the user's code."""
    if isinstance(obj, types.FunctionType):
        found: list[object] = [
            cell.cell_contents for cell in obj.__closure__ or () if _filled(cell)
        ]
        found.extend(getattr(obj, "__wrapped__", None) for _ in (0,) if hasattr(obj, "__wrapped__"))
        if is_user_file(obj.__code__.co_filename):
            found.extend(list(obj.__globals__.values())[: MAX_ITEMS * 5])
        return found
    if isinstance(obj, types.MethodType):
        return [obj.__func__, obj.__self__]
    if isinstance(obj, (staticmethod, classmethod)):
        return [obj.__func__]
    if isinstance(obj, property):
        return [obj.fget, obj.fset]
    if isinstance(obj, types.ModuleType):
        return list(vars(obj).values()) if is_user_file(getattr(obj, "__file__", "")) else []
    if isinstance(obj, type):
        return list(vars(obj).values()) if _user_class(obj) else []
    if isinstance(obj, dict):
        return list(obj.values())[:MAX_ITEMS]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)[:MAX_ITEMS]
    wrapped = getattr(type(obj), "__wrapped__", None)  # functools.partial, lru_cache
    found = [getattr(obj, "func", None)] if type(obj).__name__ == "partial" else []
    if type(obj).__name__ == "_lru_cache_wrapper":
        found.append(getattr(obj, "__wrapped__", None))
    if _user_class(type(obj)):
        found.append(type(obj))
        attributes = _own_dict(obj)
        if attributes is not None:
            found.extend(list(attributes.values())[:MAX_ITEMS])
    return [item for item in found if item is not None and item is not wrapped]


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  # an empty cell raises
    except ValueError:
        return False
    return True


def _own_dict(obj: object) -> dict[str, Any] | None:
    try:
        found = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None
    return found if isinstance(found, dict) else None


def _user_class(cls: type) -> bool:
    """A class of the user's: its module's file is theirs; for a class whose module is
    not in ``sys.modules`` (loaded with ``importlib.util.module_from_spec`` and never
    registered, a file run with ``exec``), the file of one of its own functions."""
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    if module is not None:
        return is_user_file(getattr(module, "__file__", "") or "")
    try:
        own = list(vars(cls).values())[:MAX_ITEMS]
    except TypeError:  # no __dict__ to read
        return False
    return any(is_user_file(code.co_filename) for code in map(_code_of, own) if code is not None)


def _code_of(value: object) -> types.CodeType | None:
    """The code of a function, or of the one a ``staticmethod``/``classmethod``/
    ``property`` wraps."""
    for inner in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
        if isinstance(inner, types.FunctionType):
            return inner.__code__
    return None


def compile_changed(func: types.FunctionType, source: Source, edit: Edit) -> types.CodeType:
    """The code of ``func`` with ``edit`` applied (see the module docstring); raises
    ``NotSwappable`` saying why it cannot be had."""
    code = func.__code__
    if code.co_name == "<lambda>":
        raise NotSwappable(why.IN_LAMBDA)
    text = "\n".join(changed_lines(source, edit)) + "\n"
    try:
        tree = ast.parse(text, source.filename)
    except SyntaxError as exc:
        raise NotSwappable(why.unparsable(exc.msg)) from None
    found = _def_of(tree, code)
    if found is None:
        raise NotSwappable(why.no_def(code.co_name, code.co_firstlineno))
    node, owner = found
    _keep_line_numbers(node, edit)
    node.decorator_list = []
    body: list[ast.stmt] = [node]
    if owner is not None:  # the class keeps super() and private names working
        body = [
            ast.ClassDef(
                name=owner.name,
                bases=[],
                keywords=[],
                body=[node],
                decorator_list=[],
                **_TYPE_PARAMS,
            )
        ]
    free = [name for name in code.co_freevars if name != "__class__" or owner is None]
    wrapper = ast.FunctionDef(
        name=_WRAPPER,
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[
            *[
                ast.Assign(targets=[ast.Name(name, ast.Store())], value=ast.Constant(None))
                for name in free
            ],
            *body,
            ast.Return(ast.Constant(None)),
        ],
        decorator_list=[],
        **_TYPE_PARAMS,
    )
    module = ast.Module(body=[wrapper], type_ignores=[])
    ast.copy_location(wrapper, node)
    ast.fix_missing_locations(module)
    try:
        compiled = compile(module, source.filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise NotSwappable(why.uncompilable(exc)) from None
    new = _code_named(compiled, code.co_name, node.lineno)  # its decorators are left out
    if new is None:
        raise NotSwappable(why.code_not_found(code.co_name))
    if new.co_freevars != code.co_freevars:
        raise NotSwappable(why.other_closure(code.co_name))
    if sys.version_info >= (3, 11):  # the name a traceback shows stays the user's
        return new.replace(co_qualname=code.co_qualname)
    return new


def _def_of(
    tree: ast.Module, code: types.CodeType
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None] | None:
    """The ``def`` of ``code`` (its first line is its first decorator's) and the class
    whose body holds it directly."""
    parents: dict[int, ast.AST] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            parents[id(child)] = parent
    for node in ast.walk(tree):
        if (
            not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            or node.name != code.co_name
        ):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if first == code.co_firstlineno:
            owner = parents.get(id(node))
            return node, owner if isinstance(owner, ast.ClassDef) else None
    return None


def _keep_line_numbers(node: ast.AST, edit: Edit) -> None:
    """Lines after the edited ones get their old numbers back; the edited lines all map
    into the lines they replaced (a traceback points at the line that was changed)."""
    shift = edit.added
    if not shift:
        return
    new_last = edit.last + shift
    for child in ast.walk(node):
        for attr in ("lineno", "end_lineno"):
            line = getattr(child, attr, None)
            if line is None:
                continue
            if line > new_last:
                setattr(child, attr, line - shift)
            elif line > edit.last:
                setattr(child, attr, edit.last)


def _code_named(code: types.CodeType, name: str, first: int) -> types.CodeType | None:
    for const in code.co_consts:
        if not isinstance(const, types.CodeType):
            continue
        if const.co_name == name and const.co_firstlineno == first:
            return const
        found = _code_named(const, name, first)
        if found is not None:
            return found
    return None


@contextmanager
def swapped(func: types.FunctionType, code: types.CodeType) -> Iterator[None]:
    """``func`` runs ``code`` inside the block; its own code is back after it, however
    the block ends (an exception, Ctrl-C)."""
    original = func.__code__
    func.__code__ = code
    try:
        yield
    finally:
        func.__code__ = original
