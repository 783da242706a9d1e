"""Cycles that hold leaked objects: find one, and say which link of it is the bug.

The links that make a training step's tensors cyclic run through autograd's own objects,
most of them kept in C++ where the collector cannot see them:

- a custom ``torch.autograd.Function`` whose forward stores a tensor on ``ctx`` as an
  attribute (``ctx.out = out``): the output's ``grad_fn`` *is* that ctx, so
  ``out -> grad_fn (ctx) -> .out -> out`` (pytorch/pytorch#25340);
- a hook on a tensor (``register_hook``) or on its ``grad_fn`` (``register_hook``,
  ``register_prehook``) whose closure or bound method refers back to the tensor, or to
  the object that holds it; torch keeps node hooks in C++ (``torch_hooks`` reads them
  for the search);
- a reentrant checkpoint's ctx, which keeps ``run_function``;
- a saved-tensor pack hook that returns the tensor itself (no Python link at all:
  ``pack_hook_cycle`` finds it from the hook recorded when the node was made).

``find_first`` searches a cycle through the leaked objects (node hooks read while it
runs); ``cycle_story`` reads the found cycle's links and returns the notes and the fix
for the link that makes it.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import linecache
import sys
import types
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.diagnose.backends import NODE, TENSOR, Backend
from pytest_graphleak.diagnose.churn import carries_graph
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.facts import cycle_links_of
from pytest_graphleak.diagnose.observed import Leaked, Observation, SeenCycle
from pytest_graphleak.diagnose.render import drawing, render_cycle
from pytest_graphleak.diagnose.search import Path, find_cycle
from pytest_graphleak.heap.graphwalk import grad_fn_of
from pytest_graphleak.heap.usercode import is_user_file, library_label
from pytest_graphleak.paths import display_path
from pytest_graphleak.result import CreationSite
from pytest_graphleak.words import cycles as words

#: Leaked objects a cycle is searched from, at most (tensors first).
_STARTS = 8


def find_first(leaked: Sequence[Leaked], walker: ObjectEdges) -> Path | None:
    """A cycle through one of the leaked objects; tensors are tried first. The hooks torch
    keeps on graph nodes are links of the search."""
    # What grew first: a cycle that holds a graph, not one of a library's bare tensors.
    ordered = sorted(leaked, key=lambda item: (not carries_graph(item), item.kind != TENSOR))[
        :_STARTS
    ]
    with contextlib.ExitStack() as reading:  # hooks a library keeps outside Python
        for backend in walker.backends:
            reading.enter_context(backend.reading_hooks())
        return _search(ordered, walker)


def _search(ordered: list[Leaked], walker: ObjectEdges) -> Path | None:
    for item in ordered:
        path = find_cycle(item.obj, walker)
        if path is not None:
            return path
    return None


def see_cycle(cyclic: list[Leaked], backends: list[Backend], seen: SeenCycle | None) -> SeenCycle:
    """``seen`` with the objects one collection of a running loop freed added: counted with
    their sites, and the first cycle through them drawn (plain text: they are freed next)."""
    if seen is None:
        seen = SeenCycle(cycle=[], drawing=None, notes=[], fix="")
    seen.freed += len(cyclic)
    for item in cyclic:
        if item.site is not None:
            seen.sites[item.site] = seen.sites.get(item.site, 0) + 1
    if seen.cycle:
        return seen
    walker = ObjectEdges(backends)
    path = find_first(cyclic, walker)
    if path is not None:
        try:
            seen.cycle = render_cycle(path, walker)
            seen.cycle_links = cycle_links_of(path, walker)
            seen.notes, seen.fix = cycle_story(path, walker, collectable=True)
            seen.drawing = drawing(None, path, walker)
            seen.change_at = hook_sites(path)
        finally:
            path.clear()
    return seen


def cycle_story(path: Path, walker: ObjectEdges, *, collectable: bool) -> tuple[list[str], str]:
    """``(notes, fix)`` for the link of the cycle that the user wrote; ``fix`` is "" when
    the pattern's usual fix applies."""
    for i, edge in enumerate(path.edges):
        obj = path.objects[i]
        if edge.kind == "attr" and edge.key == "run_function":
            return [words.CHECKPOINT], ""
        found = walker.backend_of(obj)
        if found is None or edge.kind != "attr":
            continue
        backend, kind = found
        key = str(edge.key)
        hook = path.objects[i + 2] if i + 2 < len(path.objects) else None
        outside = backend.name if backend.hooks_outside_python and not collectable else ""
        if kind == NODE and key in backend.node_hook_tables:
            node = backend.node_name(obj)
            where = words.node_hook(node, backend.node_hook_tables[key])
            return _hook_story(where, hook, held_by=outside)
        if (kind, key) in backend.tensor_hook_tables:
            return _hook_story(words.TENSOR_HOOK, hook, held_by=outside)
        ctx = backend.ctx_attribute(obj, key) if kind == NODE else None
        if ctx is not None:
            library = _library_of(backend, obj)
            if library:  # not the user's forward to edit: their own link of the cycle
                told = _library_ctx_story(backend, obj, ctx, library, path, walker, collectable)
                if told is not None:
                    return told
            return _ctx_story(backend, obj, ctx, path.objects[i + 1], walker, collectable)
    return [], ""


def _function_name(backend: Backend, node: Any) -> str:
    forward = getattr(node, "_forward_cls", None) or getattr(type(node), "function", None)
    return getattr(forward, "__name__", "") or backend.node_name(node).removesuffix("Backward")


def _ctx_story(
    backend: Backend, node: Any, attr: str, value: object, walker: ObjectEdges, collectable: bool
) -> tuple[list[str], str]:
    found = walker.backend_of(value)
    held = "" if found is not None and found[1] == TENSOR else type(value).__name__
    return words.ctx_story(
        _function_name(backend, node),
        attr,
        held,
        collectable=collectable,
        grad_fn_is_ctx=backend.ctx_is_grad_fn,
        issue=backend.ctx_issue,
    )


def _library_of(backend: Backend, node: Any) -> str:
    """The library file of a custom autograd Function's ``forward`` (``odelib/solver.py``),
    or "" when the forward is the user's code."""
    forward = getattr(getattr(node, "_forward_cls", None), "forward", None)
    code = getattr(forward, "__code__", None)
    if code is None or not backend.ctx_is_grad_fn or is_user_file(code.co_filename):
        return ""
    return library_label(code.co_filename)


def _library_ctx_story(
    backend: Backend,
    node: Any,
    attr: str,
    library: str,
    path: Path,
    walker: ObjectEdges,
    collectable: bool,
) -> tuple[list[str], str] | None:
    """A library's Function keeps on its ctx (``ctx.func``) an object of the user's that
    holds the Function's output (``Flow.xt``): the fix is the user's line that stores it,
    the library's internals are the note. None when no link of the cycle is the user's."""
    link = _user_link(path, walker)
    if link is None:
        return None
    holder, name = link
    owner = type(holder).__name__
    stored = stored_line(type(holder), name)
    where = (f"{display_path(stored[0])}:{stored[1]}", stored[2], stored[3]) if stored else None
    return words.library_ctx_story(
        _function_name(backend, node),
        library,
        attr,
        owner,
        name,
        collectable=collectable,
        stored=where,
    )


def _user_link(path: Path, walker: ObjectEdges) -> tuple[object, str] | None:
    """The first link of the cycle that is an attribute of an object of the user's own
    class: ``(the object, the attribute)``."""
    for i, edge in enumerate(path.edges):
        obj = path.objects[i]
        if edge.kind != "attr" or walker.backend_of(obj) is not None:
            continue
        module = sys.modules.get(type(obj).__module__)
        if is_user_file(getattr(module, "__file__", None)):
            return obj, str(edge.key)
    return None


def stored_line(cls: type, name: str) -> tuple[str, int, str, str] | None:
    """``(file, line, target, value)`` of the assignment ``self.<name> = value`` in the
    source of ``cls`` (its methods, then its file), read with ``ast``; None if none."""
    try:
        filename = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        return None
    if filename is None:
        return None
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    for scope in [*scopes, tree]:
        for node in ast.walk(scope):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == name:
                    value = ast.get_source_segment(source, node.value) or ast.unparse(node.value)
                    return filename, node.lineno, ast.unparse(target), value
    return None


def _hook_story(where: str, hook: object, *, held_by: str) -> tuple[list[str], str]:
    """The hook's words: a bound method names its owner, any other hook is a closure."""
    method = None
    if isinstance(hook, types.MethodType):
        method = (type(hook.__self__).__name__, getattr(hook, "__qualname__", "the hook"))
    return words.hook_story(where, method, held_by=held_by)


def hook_sites(path: Path) -> list[CreationSite]:
    """The line to change of a cycle through a function of the user's (a hook, a closure,
    a bound method): where it is defined, its ``def`` or ``lambda`` line; [] for none."""
    for obj in path.objects:
        func = getattr(obj, "__func__", obj)  # a bound method's function
        code = getattr(func, "__code__", None)
        if (
            isinstance(func, types.FunctionType)
            and code is not None
            and is_user_file(code.co_filename)
        ):
            line = linecache.getline(code.co_filename, code.co_firstlineno).strip()
            return [CreationSite(code.co_filename, code.co_firstlineno, line, 1, func.__qualname__)]
    return []


def pack_hook_cycle(obs: Observation) -> tuple[list[str], str] | None:
    """A tensor kept by its own grad_fn through a saved-tensor pack hook (no Python link:
    the node keeps its own output outside Python, ``Backend.saves_own_output``)."""
    if not obs.pack_hooks:
        return None
    for leaked in obs.alive:
        backend = leaked.backend
        if leaked.kind != TENSOR:
            continue
        grad_fn = grad_fn_of(leaked.obj)
        if grad_fn is None:
            continue
        seq = backend.sequence_nr(grad_fn)
        hook = obs.pack_hooks.get(seq) if seq is not None else None
        if hook is None or not backend.saves_own_output(grad_fn):
            continue
        named = f"{hook.name} ({display_path(hook.filename)}:{hook.lineno})"
        return words.pack_hook_story(
            backend.describe(leaked.obj), backend.node_name(grad_fn), named
        )
    return None
