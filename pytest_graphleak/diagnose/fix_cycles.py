"""Changes for a reference cycle through a closure of the user's (a hook, a ``lambda``
stored on the tensor it captures): the captured variable held weakly.

A closure that refers to its own tensor (``def save_cam(grad): ... held ...`` registered
on ``held``; ``out._backward = lambda: out.grad``) closes the cycle through its cell. The
change keeps the closure and what it computes, and takes the tensor out of the cell: a
``weakref.ref`` to it is made just before, under another name, and the closure calls it
where it read the variable::

    held_ref = weakref.ref(held)
    def save_cam(grad):
        ... held_ref() ...

The variable itself is left alone, so everything else the function does with it is
unchanged. One candidate per captured variable that the enclosing function binds, in the
order the closure reads them; ``weakref`` is imported in the function where the file
does not import it. A variable that cannot be weakly referenced (a ``dict``) raises in
the re-run, and the candidate is dropped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterable

from pytest_graphleak.diagnose.fix_source import Edit, Source, char_col, indent_of, one_line

_Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
#: A cycle link through a closure's cell (``diagnose.edges``: ``closure 'NAME'``).
_CLOSURE = re.compile(r"\bclosure '([A-Za-z_][A-Za-z0-9_]*)'")


def weak_captures(
    source: Source, lineno: int, weakref_name: str | None, on_cycle: Collection[str] = ()
) -> list[Edit]:
    """The edits for the closure whose ``def`` or ``lambda`` is on ``lineno`` (the
    cycle's line to change, ``Diagnosis.change_at``). ``weakref_name``: the name the
    file's module imported ``weakref`` under; None: the edit imports it. ``on_cycle``:
    the captured variables the cycle runs through (its ``closure 'NAME'`` links): only
    those are tried when the closure reads any (holding another weakly leaves the cycle
    as it is)."""
    found = _closure_at(source.tree, lineno)
    if found is None:
        return []
    closure, enclosing, statement = found
    bound = _bound_in(enclosing)
    names = [name for name in _free_reads(closure) if name in bound]
    if any(name in on_cycle for name in names):
        names = [name for name in names if name in on_cycle]
    return [_weakly(source, statement, closure, name, weakref_name) for name in names]


def cycle_closures(cycle: Iterable[str]) -> list[str]:
    """The captured variables a cycle's links name (``function f.<locals>.g closure
    'held'``), in the cycle's order."""
    return [match for link in cycle for match in _CLOSURE.findall(link)]


def _closure_at(
    tree: ast.Module, lineno: int
) -> tuple[_Function, ast.FunctionDef | ast.AsyncFunctionDef, ast.stmt] | None:
    """The function defined on ``lineno`` inside another function, that function, and
    the statement of the enclosing function's body that holds it (the ``def`` itself, or
    the statement a ``lambda`` is in)."""
    for outer in ast.walk(tree):
        if not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for statement in _statements(outer.body):
            if _compound(statement) and not isinstance(
                statement, (ast.FunctionDef, ast.AsyncFunctionDef)
            ):
                continue  # its own statements are looked at one by one
            for node in ast.walk(statement):
                if (
                    isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                    and node.lineno == lineno
                    and _owner(statement, node) is None
                ):
                    return node, outer, statement
    return None


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a function's body, those inside its ``if``/``for``/``with``/
    ``try`` blocks too, not those of nested functions or classes."""
    found = []
    for statement in body:
        found.append(statement)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            found.extend(_statements(getattr(statement, field, None) or []))
        for handler in getattr(statement, "handlers", None) or []:
            found.extend(_statements(handler.body))
    return found


def _compound(statement: ast.stmt) -> bool:
    return hasattr(statement, "body")


def _owner(statement: ast.stmt, node: ast.AST) -> ast.AST | None:
    """A function inside ``statement`` (not ``statement`` itself) that holds ``node``:
    then ``node`` is not the enclosing function's own closure."""
    for inner in ast.walk(statement):
        if inner is node or inner is statement:
            continue
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and any(
            child is node for child in ast.walk(inner)
        ):
            return inner
    return None


def _bound_in(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names the function binds itself: its parameters and the targets it assigns."""
    args = function.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    for statement in _statements(function.body):
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _free_reads(closure: _Function) -> list[str]:
    """Names the closure reads but does not bind, in the order it first reads them."""
    params = closure.args
    own = {a.arg for a in [*params.posonlyargs, *params.args, *params.kwonlyargs]}
    own.update(a.arg for a in (params.vararg, params.kwarg) if a is not None)
    body = closure.body if isinstance(closure.body, list) else [closure.body]
    names: list[ast.Name] = [
        node for part in body for node in ast.walk(part) if isinstance(node, ast.Name)
    ]
    own.update(n.id for n in names if isinstance(n.ctx, ast.Store))
    reads = sorted(
        (n for n in names if isinstance(n.ctx, ast.Load) and n.id not in own),
        key=lambda n: (n.lineno, n.col_offset),
    )
    return list(dict.fromkeys(n.id for n in reads))


def _weakly(
    source: Source, statement: ast.stmt, closure: _Function, name: str, weakref_name: str | None
) -> Edit:
    assert statement.end_lineno is not None
    lines = list(source.lines[statement.lineno - 1 : statement.end_lineno])
    ref = unused_name(source, f"{name}_ref")
    body = closure.body if isinstance(closure.body, list) else [closure.body]
    reads = [
        node
        for part in body
        for node in ast.walk(part)
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
    ]
    for node in sorted(reads, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        row = node.lineno - statement.lineno
        start = char_col(lines[row], node.col_offset)
        end = char_col(lines[row], node.end_col_offset or 0)
        lines[row] = f"{lines[row][:start]}{ref}(){lines[row][end:]}"
    pad = indent_of(lines[0])
    module = weakref_name or "weakref"
    made = f"{ref} = {module}.ref({name})"
    head = [f"{pad}import weakref"] if weakref_name is None else []
    new = (*head, f"{pad}{made}", *lines)
    shown = f"{made}; {one_line([line for line in lines if f'{ref}()' in line])}"
    return Edit(source.filename, statement.lineno, statement.end_lineno, new, shown, "weak")


def unused_name(source: Source, name: str) -> str:
    """``name``, or ``name_2``... when the file already uses it."""
    used = {node.id for node in ast.walk(source.tree) if isinstance(node, ast.Name)}
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    return candidate
