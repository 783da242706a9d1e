"""Changes for a reference cycle through a hook of the user's that is not a closure
(``fix_cycles`` holds a closure's captured variable weakly):

- a **bound method registered as a hook** (``t.grad_fn.register_hook(self._on_grad)``,
  ``module.register_forward_hook(self.record)``): the autograd node or the module keeps
  the method, the method its object, and the object the tensor. The change reads the
  method through a ``weakref.WeakMethod`` made just before, where the hook passed to a
  ``register_*hook`` call reads ``self.NAME`` (the call's argument, or the assignment of
  the local name passed)::

      on_grad_ref = weakref.WeakMethod(self._on_grad)
      t.grad_fn.register_hook((lambda *args, **kwargs: on_grad_ref()(*args, **kwargs)
                               if on_grad_ref() is not None else None))

  Only that read changes, so another hook assigned to the same name (another branch)
  is registered as it was. The hook still runs while its object lives and does nothing
  once it is gone, when nothing can read what it records.
- a **saved-tensor pack hook that returns its input** (``saved_tensors_hooks(_identity,
  ...)`` with ``def _identity(x): return x``): the saved output keeps its own
  ``grad_fn`` alive through the packed value. The change returns it detached
  (``return x.detach()``), as PyTorch's docs ask of a pack hook that keeps the tensor.

- a **closure kept by a reentrant checkpoint's ctx** (``CheckpointFunctionBackward
  (ctx).run_function``, then the closure's captured variable): torch's reentrant
  ``checkpoint`` keeps the function on its autograd node, so a closure that reaches the
  output closes a cycle. The change is the non-reentrant checkpoint on the call that
  passes the function (``checkpoint(run_block, x, use_reentrant=False)``), which
  PyTorch recommends and which keeps no function on the node.

- a **hook removed with its handle**: a ``register_*hook`` statement of its own that
  registers the hook on the cycle, with a later statement of its block that calls
  ``backward``: the handle kept and removed after that backward (one edit over those
  lines). Elsewhere the facts name no place where the hook has run and can go.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable

from pytest_graphleak.diagnose.fix_cycles import unused_name
from pytest_graphleak.diagnose.fix_source import (
    Edit,
    Source,
    indent_of,
    node_text,
    one_line,
    replace_node,
    statement_at,
)
from pytest_graphleak.words.cycles import UNHOOK

#: A cycle link through a bound method's object (``diagnose.edges``).
_BOUND = re.compile(r"\bbound method (?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)\.__self__")
#: A cycle link through a saved tensor packed by a hook (``diagnose.edges``).
_PACKED = re.compile(r"packed by saved-tensor pack hook ([A-Za-z_]\w*) \((.+):(\d+)\)")
_REGISTER = re.compile(r"^register_\w*hook$")
#: A cycle link through the function a reentrant checkpoint keeps on its ctx.
_CHECKPOINT = "CheckpointFunctionBackward (ctx).run_function"
#: The function a cycle link names (``function train_step.<locals>.run_block closure``).
_FUNCTION = re.compile(r"\bfunction (?:[\w.<>]+\.)?([A-Za-z_]\w*) closure\b")


def hook_edits(
    source: Source, cycle: Iterable[str], weakref_name: str | None, lineno: int = 0
) -> list[Edit]:
    """The edits of ``source`` for the cycle whose links are ``cycle`` (see the module
    docstring). ``weakref_name``: the name the file imported ``weakref`` under; None: the
    edit imports it. ``lineno``: the cycle's line to change in this file (a closure's
    ``def`` or ``lambda``), 0 for none."""
    links = list(cycle)
    methods = {name for link in links for name in _BOUND.findall(link)}
    reads = _hook_reads(source, methods)
    edits = [_weak_method(source, read, weakref_name) for read in reads]
    for name, filename, line in pack_hooks(links):
        if filename == source.filename:
            edits.extend(_detached_return(source, name, line))
    if any(_CHECKPOINT in link for link in links):
        names = {name for link in links for name in _FUNCTION.findall(link)}
        edits.extend(_non_reentrant(source, names))
    edits.extend(removed_handles(source, lineno, reads))
    return [edit for edit in edits if edit is not None]


def pack_hooks(cycle: Iterable[str]) -> list[tuple[str, str, int]]:
    """(name, file, line of its ``def``) of each saved-tensor pack hook a cycle's links
    name."""
    return [
        (name, os.path.abspath(filename), int(line))
        for link in cycle
        for name, filename, line in _PACKED.findall(link)
    ]


def _hook_reads(source: Source, methods: set[str]) -> list[ast.Attribute]:
    """Where a ``register_*hook`` call's hook (its first argument) reads one of
    ``methods`` of ``self``: the argument itself, or the ``self.NAME`` in the assignment
    of the local name passed (``hook = ... if weak else self._on_grad``): only that read
    changes, so a hook that is no bound method (the other branch) is registered as it
    was."""
    if not methods:
        return []
    found: list[ast.Attribute] = []
    for function in ast.walk(source.tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assigned: dict[str, list[ast.Attribute]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                reads = [n for n in ast.walk(node.value) if _is_method(n, methods)]
                for target in node.targets:
                    if isinstance(target, ast.Name) and reads:
                        assigned.setdefault(target.id, []).extend(reads)  # type: ignore[arg-type]
        for call in ast.walk(function):
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and _REGISTER.match(call.func.attr)
                and call.args
            ):
                continue
            hook = call.args[0]
            if isinstance(hook, ast.Attribute) and _is_method(hook, methods):
                found.append(hook)
            elif isinstance(hook, ast.Name):
                found.extend(assigned.get(hook.id, []))
    return list({id(read): read for read in found}.values())


def _is_method(node: ast.AST, methods: set[str]) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in methods
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _weak_method(source: Source, read: ast.Attribute, weakref_name: str | None) -> Edit | None:
    statement = statement_at(source.tree, read.lineno)
    if statement is None or statement.end_lineno is None:
        return None
    ref = unused_name(source, f"{read.attr.lstrip('_') or 'hook'}_ref")
    weak = f"(lambda *args, **kwargs: {ref}()(*args, **kwargs) if {ref}() is not None else None)"
    lines = replace_node(source, statement, read, weak)
    pad = indent_of(source.lines[statement.lineno - 1])
    made = f"{ref} = {weakref_name or 'weakref'}.WeakMethod({node_text(source, read)})"
    head = [f"{pad}import weakref"] if weakref_name is None else []
    new = (*head, f"{pad}{made}", *lines)
    shown = f"{made}; {one_line(lines)}"
    return Edit(source.filename, statement.lineno, statement.end_lineno, new, shown, "weak")


def _non_reentrant(source: Source, functions: set[str]) -> list[Edit]:
    """``use_reentrant=False`` on each ``checkpoint(...)`` call that passes one of
    ``functions`` (any, when the cycle names none) with it not already ``False``."""
    edits = []
    for call in ast.walk(source.tree):
        if not (isinstance(call, ast.Call) and call.args and _name_of(call.func) == "checkpoint"):
            continue
        first = call.args[0]
        if functions and not (isinstance(first, ast.Name) and first.id in functions):
            continue
        statement = statement_at(source.tree, call.lineno)
        if statement is None or statement.end_lineno is None:
            continue
        given = next((k for k in call.keywords if k.arg == "use_reentrant"), None)
        value = given.value if given is not None else None
        if isinstance(value, ast.Constant) and value.value is False:
            continue
        if value is not None:
            lines = replace_node(source, statement, value, "False")
        else:  # the call rewritten with the keyword added after its arguments
            text = node_text(source, call)
            head = text[:-1].rstrip().rstrip(",")
            lines = replace_node(source, statement, call, f"{head}, use_reentrant=False)")
        lines = tuple("\n".join(lines).split("\n"))  # a call over several lines stays so
        edits.append(
            Edit(
                source.filename,
                statement.lineno,
                statement.end_lineno,
                lines,
                one_line(lines),
                "checkpoint",
            )
        )
    return edits


def _name_of(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _detached_return(source: Source, name: str, lineno: int) -> list[Edit]:
    """``return x.detach()`` for the pack hook ``name`` defined on ``lineno`` when its
    one ``return`` gives back its own argument."""
    for function in ast.walk(source.tree):
        if not (
            isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            and function.name == name
            and function.lineno == lineno
        ):
            continue
        params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
        if len(params) != 1 or len(returns) != 1 or returns[0].value is None:
            return []
        value = returns[0].value
        if not (isinstance(value, ast.Name) and value.id == params[0]):
            return []
        lines = replace_node(source, returns[0], value, f"{value.id}.detach()")
        end = returns[0].end_lineno or returns[0].lineno
        return [Edit(source.filename, returns[0].lineno, end, lines, one_line(lines), "detach")]
    return []


def removed_handles(source: Source, lineno: int, reads: list[ast.Attribute]) -> list[Edit]:
    """The handle of each ``register_*hook`` statement whose hook is the closure defined on
    ``lineno`` or one of the bound-method ``reads`` kept, and removed after the first later
    statement of its block that calls ``.backward`` (not in a ``def`` or ``class``)."""
    defined = {
        node.name
        for node in ast.walk(source.tree)
        if isinstance(node, _DEFS) and node.lineno == lineno
    }
    edits = []
    blocks = [
        getattr(node, field)
        for node in ast.walk(source.tree)
        for field in ("body", "orelse", "finalbody")
        if isinstance(getattr(node, field, None), list)
    ]
    for block in blocks:
        for at, statement in enumerate(block):
            call = statement.value if isinstance(statement, ast.Expr | ast.Assign) else None
            targets = statement.targets if isinstance(statement, ast.Assign) else [None]
            if not (
                isinstance(call, ast.Call)
                and call.args
                and len(targets) == 1
                and _REGISTER.match(_name_of(call.func))
            ):
                continue
            hook = call.args[0]
            ours = (
                (isinstance(hook, ast.Lambda) and hook.lineno == lineno)
                or (isinstance(hook, ast.Name) and hook.id in defined)
                or any(hook is read for read in reads)
            )
            after = next((s for s in block[at + 1 :] if _backward_in(s)), None)
            if ours and after is not None:
                edits.append(_unhooked(source, statement, targets[0], after))
    return edits


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _backward_in(statement: ast.stmt) -> bool:
    return not isinstance(statement, (*_DEFS, ast.ClassDef)) and any(
        isinstance(node, ast.Call) and _name_of(node.func) == "backward"
        for node in ast.walk(statement)
    )


def _unhooked(
    source: Source, statement: ast.stmt, target: ast.expr | None, after: ast.stmt
) -> Edit:
    """Lines from ``statement`` (the registration) to ``after`` (the backward): the
    handle kept (the name it is assigned to, else a new one) and removed after them."""
    last = after.end_lineno or after.lineno
    lines = list(source.lines[statement.lineno - 1 : last])
    pad = indent_of(lines[0])
    handle = target.id if isinstance(target, ast.Name) else unused_name(source, "hook_handle")
    if target is None:
        lines[0] = f"{pad}{handle} = {lines[0][len(pad) :]}"
    end = (statement.end_lineno or statement.lineno) - statement.lineno + 1
    shown = UNHOOK.format(
        one_line(lines[:end]), handle, one_line(source.lines[after.lineno - 1 : last])
    )
    return Edit(
        source.filename,
        statement.lineno,
        last,
        (*lines, f"{pad}{handle}.remove()"),
        shown,
        "unhook",
    )
