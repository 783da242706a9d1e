"""Turn paths of live objects into plain data: the culprit chain and the cycle as
strings, the retained graph as a ``drawing.Drawing`` (the reports draw it: ``report.dot``).

The chain reads the way the user would reach the object in code::

    fixture 'state' -> dict['losses'] -> list(len=12) -> Tensor(shape=(), grad_fn=MeanBackward0)

An object left through a named edge (dict key, attribute, closure cell) is written as
``type`` + edge (``dict['losses']``, ``Trainer.history``); one left through an index is
described on its own (``list(len=12)``); tensors and graph nodes are always described.
"""

from __future__ import annotations

import contextvars
import itertools
import sys
import types
from collections import deque
from typing import Any

from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.search import Path
from pytest_graphleak.drawing import Drawing, DrawingEdge, DrawingNode
from pytest_graphleak.heap.containers import SIZED
from pytest_graphleak.heap.edge import SUSPENDED, Edge
from pytest_graphleak.heap.usercode import is_user_module, top_package

#: Longest run of graph nodes written out in a chain before the middle is elided.
_MAX_NODE_RUN = 4
#: Objects drawn in a ``Drawing`` (besides the chain's root), at most.
MAX_DRAWN = 40


def describe(obj: Any, walker: ObjectEdges) -> str:
    """One line naming an object: ``list(len=12)``, ``Tensor(shape=(), grad_fn=...)``."""
    found = walker.backend_of(obj)
    if found is not None:
        try:
            return found[0].describe(obj)
        except Exception:
            return type(obj).__name__
    if isinstance(obj, SUSPENDED):  # generator train_loop()
        return f"{type(obj).__name__} {getattr(obj, '__qualname__', '?')}()"
    if isinstance(obj, types.MethodType):
        return f"bound method {getattr(obj, '__qualname__', '?')}"
    if isinstance(obj, types.FunctionType):
        return f"function {getattr(obj, '__qualname__', '?')}"
    if isinstance(obj, type):
        return f"class {obj.__qualname__}"
    if isinstance(obj, SIZED):
        return f"{type(obj).__name__}(len={len(obj)})"
    if type(obj) is contextvars.ContextVar:
        return f"ContextVar({obj.name!r})"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray) and obj.dtype == object:
        return f"{type(obj).__name__}(shape={obj.shape}, dtype={obj.dtype})"
    return type(obj).__name__


def _short_type(obj: Any, walker: ObjectEdges) -> str:
    """``describe`` less a container's length, and a class without the word "class"."""
    if isinstance(obj, type):
        return obj.__qualname__
    if isinstance(obj, SIZED):
        return type(obj).__name__
    return describe(obj, walker)


def _labels(
    objects: list[Any], edges: list[Edge], walker: ObjectEdges, *, owners: bool = False
) -> list[str]:
    """One label per object, merged with the edge that leaves it when that edge is named
    (for a tensor or graph node: an attribute). ``owners``: an object of a library's
    class is written as that library's (``sdelib's _Interval._parent``), so that its
    private attributes do not read as the user's."""
    labels: list[str] = []
    for i, obj in enumerate(objects):
        out = edges[i] if i < len(edges) else None
        ours = walker.backend_of(obj) is not None
        if out is not None and (out.kind == "attr" if ours else out.named):
            label = _short_type(obj, walker) + out.text()
        else:
            label = describe(obj, walker)
        library = library_of(obj) if owners and not ours else ""
        labels.append(f"{library}'s {label}" if library else label)
    return labels


def library_of(obj: object) -> str:
    """The library whose class (or function) ``obj`` is (``sdelib``); "" for the user's
    code, the standard library's and built-in types."""
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        module = getattr(obj, "__module__", None)
    else:
        module = getattr(type(obj), "__module__", None)
    top = top_package(module)
    if not top or top == "builtins" or top in sys.stdlib_module_names:
        return ""
    return top if is_user_module(module) is False else ""


def _elide_node_runs(labels: list[str], is_node: list[bool]) -> list[str]:
    """Shorten long runs of graph nodes: ``A -> B -> ... (7 more nodes) -> Z``."""
    out: list[str] = []
    pairs = zip(labels, is_node, strict=True)
    for nodes, group in itertools.groupby(pairs, key=lambda pair: pair[1]):
        run = [label for label, _ in group]
        if nodes and len(run) > _MAX_NODE_RUN:
            run = [*run[:2], f"... ({len(run) - 3} more graph nodes)", run[-1]]
        out.extend(run)
    return out


def render_chain(path: Path, walker: ObjectEdges) -> list[str]:
    labels = _labels(path.objects, path.edges, walker)
    is_node = [_is_node(obj, walker) for obj in path.objects]
    return [path.root_label, *_elide_node_runs(labels, is_node)]


def render_cycle(
    path: Path, walker: ObjectEdges, hanging: tuple[Edge, Any] | None = None
) -> list[str]:
    """The objects of a cycle with edge labels; the last entry is the first object again.

    ``hanging``: the edge from the cycle's first object to a leaked object that is not
    on the cycle itself (``Record.out -> Tensor(...)``), named after the closing entry.
    """
    labels = _labels(path.objects, path.edges, walker, owners=True)
    if labels:
        labels[-1] = labels[-1] + " (the same object: the cycle closes)"
        if hanging is not None:
            edge, leaked = hanging
            first = path.objects[0]
            library = library_of(first) if walker.backend_of(first) is None else ""
            holder = (
                ("" if not library else f"{library}'s ") + _short_type(first, walker) + edge.text()
            )
            labels[-1] += f", and {holder} holds {describe(leaked, walker)}"
    return labels


def _is_node(obj: Any, walker: ObjectEdges) -> bool:
    found = walker.backend_of(obj)
    return found is not None and found[1] == "node"


def drawing(
    chain_path: Path | None, cycle_path: Path | None, walker: ObjectEdges
) -> Drawing | None:
    """The chain (or cycle) and the graph behind its last tensor or node, as plain data
    (``drawing.Drawing``: at most ``MAX_DRAWN`` objects besides the root); None when there
    is no path. The reports draw it (``report.dot``)."""
    path = chain_path or cycle_path
    if path is None or not path.objects:
        return None
    drawn = Drawing()
    ids: dict[int, int] = {}  # id(object) -> its index in drawn.nodes

    def node(obj: Any) -> int:
        if id(obj) not in ids:
            ids[id(obj)] = len(drawn.nodes)
            kind = "node" if _is_node(obj, walker) else "object"  # drawn to stand out
            drawn.nodes.append(DrawingNode(describe(obj, walker), kind))
        return ids[id(obj)]

    def arrow(source: int, target: Any, kind: str, label: str = "") -> None:
        drawn.edges.append(DrawingEdge(source, node(target), kind, label))

    if chain_path is not None:
        drawn.nodes.append(DrawingNode(chain_path.root_label, "root"))
        arrow(0, path.objects[0], "root")
    for i, edge in enumerate(path.edges):
        arrow(node(path.objects[i]), path.objects[i + 1], "reference", edge.text().strip())
    # The retained autograd graph behind the last tensor/node of the path.
    start = next((o for o in reversed(path.objects) if walker.backend_of(o) is not None), None)
    if start is not None:
        frontier: deque[Any] = deque([start])
        holder: list[Any] = []  # keeps torch node wrappers alive so their ids stay unique
        while frontier and len(ids) < MAX_DRAWN:
            obj = frontier.popleft()
            for edge, child in walker.edges(obj):
                if edge.kind not in ("grad_fn", "next") or len(ids) >= MAX_DRAWN:
                    continue
                known = id(child) in ids
                holder.append(child)
                arrow(node(obj), child, "graph")
                if not known:
                    frontier.append(child)
        holder.clear()
    return drawn
