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
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Slice)
        and ast.unparse(node.value) == wanted
        for node in ast.walk(scope)
    )
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
        called = _helper_backward(statement, made, tree, scope)
        if called is not None:
            helper, found, reads = called
            text = ast.get_source_segment(source, found) or ast.unparse(found)
            return found.lineno, f"{' '.join(text.split())} in {helper}()", sliced or reads
    return None


def _helper_backward(
    statement: ast.stmt, made: set[str], tree: ast.Module, scope: ast.AST
) -> tuple[str, ast.stmt, bool] | None:
    """One level of calls: a function of the module, or a method of the class that holds
    ``scope`` called on its first parameter (``self.flush()``), given the container or
    what holds it, whose own statements run a backward through it (``torch.stack(
    self.pending).mean().backward()``). ``(its name, that statement, whether it reads a
    slice of the container)``, or None."""
    if isinstance(statement, _COMPOUND):
        return None
    for call in (node for node in ast.walk(statement) if isinstance(node, ast.Call)):
        callee, bound = _resolve(call, tree, scope)
        if callee is None:
            continue
        inside = _renamed(made, bound, callee)
        if not inside:
            continue
        body = sorted(
            (
                node
                for node in ast.walk(callee)
                if isinstance(node, ast.stmt) and node is not callee
            ),
            key=lambda node: (node.lineno, node.col_offset),
        )
        for found in body:
            if _backward_in(found, inside):
                reads = any(
                    isinstance(node, ast.Subscript)
                    and isinstance(node.slice, ast.Slice)
                    and ast.unparse(node.value) in inside
                    for node in ast.walk(callee)
                )
                return callee.name, found, reads
    return None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _resolve(
    call: ast.Call, tree: ast.Module, scope: ast.AST
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, list[tuple[str, str]]]:
    """The function ``call`` runs, when the module says which, and ``(the caller's text,
    the callee's parameter)`` for what it is given (the receiver of a method first)."""
    func = call.func
    callee: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    given: list[str] = []
    if isinstance(func, ast.Name):  # flush(st): a function of the module
        callee = _def_named(tree.body, func.id)
    elif isinstance(func, ast.Attribute) and isinstance(scope, _FUNCTIONS) and scope.args.args:
        receiver = scope.args.args[0].arg  # self.flush(): a method of the same class
        owner = next(
            (
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and scope in node.body
            ),
            None,
        )
        if owner is not None and ast.unparse(func.value) == receiver:
            callee = _def_named(owner.body, func.attr)
            given.append(receiver)
    if callee is None:
        return None, []
    params = [arg.arg for arg in [*callee.args.posonlyargs, *callee.args.args]]
    given.extend(ast.unparse(arg) for arg in call.args)
    bound = list(zip(given, params, strict=False))
    names = {arg.arg for arg in callee.args.kwonlyargs} | set(params)
    bound += [(ast.unparse(k.value), k.arg) for k in call.keywords if k.arg in names]
    return callee, bound


def _def_named(body: list[ast.stmt], name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((node for node in body if isinstance(node, _FUNCTIONS) and node.name == name), None)


def _renamed(
    made: set[str], bound: list[tuple[str, str]], callee: ast.FunctionDef | ast.AsyncFunctionDef
) -> set[str]:
    """``made`` as the callee names it: ``st["pending"]`` given as ``state`` is
    ``state["pending"]`` there; a module global it reads as it is stays itself."""
    params = {arg.arg for arg in ast.walk(callee.args) if isinstance(arg, ast.arg)}
    inside: set[str] = set()
    for text in made:
        for outer, param in bound:
            if text == outer:
                inside.add(param)
            elif text.startswith(outer) and text[len(outer)] in ".[":
                inside.add(param + text[len(outer) :])
        root = text.split(".", 1)[0].split("[", 1)[0]
        if root not in params and root != "self":  # a global the helper reads by name
            inside.add(text)
    return inside


def _innermost(tree: ast.AST, lineno: int, kinds: tuple[type[ast.AST], ...]) -> Any:
    """The innermost node of ``kinds`` in ``tree`` whose lines hold ``lineno`` (None)."""
    found: list[Any] = [
        node for node in ast.walk(tree) if isinstance(node, kinds) and node is not tree
    ]
    found = [node for node in found if node.lineno <= lineno <= (node.end_lineno or node.lineno)]
    return max(found, key=lambda node: node.lineno, default=None)


def _backward_in(statement: ast.stmt, made: set[str]) -> bool:
    """Does this (simple) statement run a backward through ``made``? Names it binds from
    ``made`` are added to it (``total = sum(pending)``, ``for x in pending:``)."""
    if isinstance(statement, (ast.For, ast.AsyncFor)) and _uses(statement.iter, made):
        made.update(_names(statement.target))  # for x in pending: x.backward()
    if isinstance(statement, _COMPOUND):  # its body's statements are walked one by one
        return False
    if any(
        isinstance(node, ast.Call) and _runs_backward(node, made) for node in ast.walk(statement)
    ):
        return True
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = statement.value
        if value is not None and _uses(value, made):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                made.update(_names(target))
    return False


#: Statements whose body holds statements of their own (walked one by one).
_COMPOUND = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)


#: Calls whose result carries no graph of what they are given (``n = len(pending)``,
#: ``x.item()``, ``x.detach()``).
_NO_GRAPH_OUT = frozenset(
    {
        "detach",
        "item",
        "tolist",
        "numpy",
        "float",
        "int",
        "bool",
        "len",
        "str",
        "repr",
        "print",
        "format",
        "isinstance",
        "id",
    }
)


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
