"""The candidate fixes that add a statement after one (``fix_candidates``): an
accumulating object's own ``reset()`` (or ``clear()``) after the line that feeds it, a
container's ``clear()`` right after the later backward that reads what it keeps, an
``lru_cache``'s ``cache_clear()`` after the call that fills it. Each is an ``Edit`` of one
statement (``fix_source``)."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from pytest_graphleak.diagnose.fix_source import (
    STORES,
    Edit,
    Source,
    indent_of,
    node_text,
    one_line,
    plain,
    statement_at,
)
from pytest_graphleak.result import CreationSite, Link
from pytest_graphleak.words.backward import backward_after

_LRU = "_lru_cache_wrapper"


def clear_after_backward(source: Source, statement: ast.stmt) -> list[Edit]:
    """``holder.clear()`` right after the later statement that runs a backward through
    what ``holder.append(x)`` keeps (``torch.stack(pending[-4:]).mean().backward()``):
    the tensors are needed with their graphs until then, so detaching them here would
    break it (``words.backward``). Only where that statement is in the same file and
    names the holder itself (not a helper that takes it under another name)."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in STORES
        and plain(call.func.value)
    ):
        return []
    holder = node_text(source, call.func.value)
    line = source.lines[statement.lineno - 1].strip()
    later = backward_after(CreationSite(source.filename, statement.lineno, line, 1), holder)
    if later is None:
        return []
    backward = statement_at(source.tree, later[0])
    if backward is None or holder not in node_text(source, backward):
        return []
    return [after(source, backward, f"{holder}.clear()", "reset")]


def resets(source: Source, statement: ast.stmt) -> list[Edit]:
    """``metric.update(x)`` on an object that accumulates: ``metric.reset()`` after it
    (the object's own method; a type without it raises, and the candidate is dropped)."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return []
    holder = call.func.value
    if call.func.attr in STORES or not plain(holder):
        return []
    name = node_text(source, holder)
    return [
        after(source, statement, f"{name}.{method}()", "reset") for method in ("reset", "clear")
    ]


def after(source: Source, statement: ast.stmt, text: str, kind: str) -> Edit:
    """``text`` as a statement of its own right after ``statement``."""
    assert statement.end_lineno is not None
    old = source.lines[statement.lineno - 1 : statement.end_lineno]
    new = (*old, indent_of(old[0]) + text)
    return Edit(
        source.filename,
        statement.lineno,
        statement.end_lineno,
        new,
        f"{one_line(old)}; then {text}",
        kind,
    )


def cache_name(links: Sequence[Link]) -> str:
    """How the chain reaches an ``lru_cache`` on it: the global name of the cached
    function (``features``), or ``.name`` for one kept as an attribute (``self.embed =
    cached``); "" for none."""
    for at in range(1, len(links)):
        if links[at].type != _LRU:
            continue
        before = links[at - 1]
        if before.kind == "root" and before.type == "global":
            return before.name
        if before.edge == "attribute" and before.key:
            return f".{before.key}"
    return ""


def cache_clears(source: Source, name: str, statement: ast.stmt) -> list[Edit]:
    """``<cached>.cache_clear()`` after the statement that calls the cached function: the
    line to change when it calls it (spelled as it does, ``self.embed``), else, for a
    global one, the first statement of another function that calls it: what it cached is
    used by then."""
    spelled = _calls(source, statement, name)
    if spelled:
        return [after(source, statement, f"{spelled}.cache_clear()", "cache_clear")]
    if name.startswith("."):
        return []
    for node in ast.walk(source.tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name == name:
            continue
        for each in node.body:
            if isinstance(each, (ast.Expr, ast.Assign, ast.AugAssign)) and _calls(
                source, each, name
            ):
                return [after(source, each, f"{name}.cache_clear()", "cache_clear")]
    return []


def _calls(source: Source, statement: ast.stmt, name: str) -> str:
    """How ``statement`` spells the cached function it calls (``features``,
    ``self.embed`` for ``.embed``); "" when it calls none."""
    for call in ast.walk(statement):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        if isinstance(func, ast.Name) and func.id == name:
            return name
        if isinstance(func, ast.Attribute) and name == f".{func.attr}" and plain(func):
            return node_text(source, func)
    return ""
