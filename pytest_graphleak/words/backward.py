"""Does a later statement run a backward through a container's tensors?

``backward_after`` reads the function (or module) that has a ``stored at:`` line with
``ast``: when a statement that runs after the line (the rest of the loop turn, the next
turn up to the line, then what follows the loop) runs a backward through the container
(``torch.stack(pending[-4:]).mean().backward()``, a name bound from it, ``for x in
pending: x.backward()``), ``.item()`` or ``.detach()`` on the line would break that
backward (``lines.deferred_fix``). A read inside ``len()``, ``.item()``, ``.detach()``
or ``print()`` passes no graph on.
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

from pytest_graphleak.result import CreationSite


def backward_after(site: CreationSite, holder: str) -> tuple[int, str, bool] | None:
    """``(line number, text, sliced)`` of a statement that runs after ``site`` in its
    function (or module) and runs a backward through what ``holder`` keeps: ``holder``
    (or a name made from it) in the tensor a ``.backward()`` is called on, or in the
    arguments of ``backward(...)`` / ``grad(...)``. A statement earlier in the loop that
    has the stored line runs after it too, in the next turn. ``sliced``: the code reads
    ``holder[a:b]`` (a deque would not do). None when there is none."""
    source = "".join(linecache.getlines(site.filename))
    try:
        tree = ast.parse(source)
        wanted = ast.unparse(ast.parse(holder, mode="eval").body)
    except (SyntaxError, ValueError):
        return None
    scope = _innermost(tree, site.lineno, (ast.FunctionDef, ast.AsyncFunctionDef)) or tree
    loop = _innermost(scope, site.lineno, (ast.For, ast.AsyncFor, ast.While))
    statements = sorted(
        (node for node in ast.walk(scope) if isinstance(node, ast.stmt) and node is not scope),
        key=lambda node: (node.lineno, node.col_offset),
    )
    sliced = any(
        isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)
        and ast.unparse(node.value) == wanted
        for node in ast.walk(scope)
    )  # fmt: skip
    end = (loop.end_lineno or loop.lineno) if loop is not None else 0
    after = [node for node in statements if node.lineno > site.lineno]
    turn = [node for node in after if node.lineno <= end]  # the rest of this turn
    if loop is not None:  # then the next turn, up to the stored line
        turn += [node for node in statements if loop.lineno < node.lineno < site.lineno]
    made = {wanted}  # holder, and names bound from it after the stored line
    for statement in turn + [node for node in after if node.lineno > end]:
        if _backward_in(statement, made):
            text = ast.get_source_segment(source, statement) or ast.unparse(statement)
            return statement.lineno, " ".join(text.split()), sliced
    return None


def _innermost(tree: ast.AST, lineno: int, kinds: tuple[type[ast.AST], ...]) -> Any:
    """The innermost node of ``kinds`` in ``tree`` whose lines hold ``lineno`` (None)."""
    found: list[Any] = [node for node in ast.walk(tree)
                        if isinstance(node, kinds) and node is not tree]  # fmt: skip
    found = [node for node in found if node.lineno <= lineno <= (node.end_lineno or node.lineno)]
    return max(found, key=lambda node: node.lineno, default=None)


def _backward_in(statement: ast.stmt, made: set[str]) -> bool:
    """Does this (simple) statement run a backward through ``made``? Names it binds from
    ``made`` are added to it (``total = sum(pending)``, ``for x in pending:``)."""
    if isinstance(statement, (ast.For, ast.AsyncFor)) and _uses(statement.iter, made):
        made.update(_names(statement.target))  # for x in pending: x.backward()
    if isinstance(statement, _COMPOUND):  # its body's statements are walked one by one
        return False
    if any(isinstance(node, ast.Call) and _runs_backward(node, made)
           for node in ast.walk(statement)):  # fmt: skip
        return True
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = statement.value
        if value is not None and _uses(value, made):
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]  # fmt: skip
            for target in targets:
                made.update(_names(target))
    return False


#: Statements whose body holds statements of their own (walked one by one).
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
             ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # fmt: skip


#: Calls whose result carries no graph of what they are given (``n = len(pending)``,
#: ``x.item()``, ``x.detach()``).
_NO_GRAPH_OUT = frozenset({"detach", "item", "tolist", "numpy", "float", "int", "bool", "len",
                           "str", "repr", "print", "format", "isinstance", "id"})  # fmt: skip


def _uses(node: ast.AST, made: set[str]) -> bool:
    """Does ``node`` read a tensor of ``made`` in a way that keeps its graph? A read
    inside ``len(...)``, ``.item()``, ``.detach()``... does not count."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in _NO_GRAPH_OUT:
            return False
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and ast.unparse(node) in made:
        return True
    return any(_uses(child, made) for child in ast.iter_child_nodes(node))


def _names(target: ast.expr) -> set[str]:
    return {ast.unparse(node) for node in ast.walk(target) if isinstance(node, ast.Name)}


def _runs_backward(call: ast.Call, made: set[str]) -> bool:
    """``<made>.backward()``, ``torch.autograd.backward(<made>)``, ``autograd.grad(...)``."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "backward" and isinstance(func, ast.Attribute) and _uses(func.value, made):
        return True
    return name in ("backward", "grad") and any(_uses(arg, made) for arg in call.args)
