"""Changes for a step that leaks into two holders (``Diagnosis.second_stored_at``): a
change of one holder's line leaves the other growing, so each candidate for the first
line is tried together with a candidate of the same kind for the second (``.item()``
with ``.item()``, ``.detach()`` with ``.detach()``; else the second line's first), as
one edit of the lines from the first change to the second, when both lines are in the
same function (a change is compiled and swapped in one function at a time).
"""

from __future__ import annotations

import ast

from pytest_graphleak.diagnose.fix_source import Edit, Source

#: Candidates of the first line tried in a pair, at most (each pair costs a re-run).
MAX_PAIRS = 3


def both_holders(source: Source, first: list[Edit], second: list[Edit]) -> list[Edit]:
    """The paired edits (see the module docstring); [] when none can be built."""
    pairs = []
    for one in first[:MAX_PAIRS]:
        other = next((e for e in second if e.kind == one.kind), second[0] if second else None)
        if other is None:
            continue
        early, late = sorted((one, other), key=lambda e: e.first)
        if early.last >= late.first or not _same_function(source.tree, early.first, late.first):
            continue
        middle = source.lines[early.last : late.first - 1]
        shown = f"{one.shown} (and line {other.first}: {other.shown})"
        pairs.append(
            Edit(
                source.filename,
                early.first,
                late.last,
                (*early.new, *middle, *late.new),
                shown,
                one.kind,
            )
        )
    return pairs


def _same_function(tree: ast.Module, a: int, b: int) -> bool:
    """Lines ``a`` and ``b`` are run by the same function (its own body, not a nested
    one's)."""
    return _innermost(tree, a) is _innermost(tree, b) is not None


def _innermost(tree: ast.Module, line: int) -> ast.AST | None:
    functions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(functions, key=lambda node: node.lineno, default=None)
