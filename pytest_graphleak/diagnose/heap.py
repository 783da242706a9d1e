"""Diagnosis without a step (a hand-written loop checked with ``track()``).

No step can be re-run, so nothing tells this step's objects from older ones. What the
roots hold now still names the culprit in the common cases:

- a container holding several graph-carrying tensors -> ``list-accumulation``;
- otherwise the root-reachable tensor with the largest autograd graph ->
  ``retained-grad-fn``;
- the verdict's own evidence of cycles (cyclic garbage grew) -> ``cycle``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.render import render_chain, render_dot
from pytest_graphleak.diagnose.roots import given_roots
from pytest_graphleak.diagnose.search import Path, shortest_path
from pytest_graphleak.diagnose.story import tell
from pytest_graphleak.heap.graphwalk import GraphWalk
from pytest_graphleak.result import Diagnosis, Verdict

_CONTAINERS = (list, dict, set, frozenset, deque, tuple)
_MIN_ACCUMULATED = 2
_GRAPH_LIMIT = 5_000


def _graph_tensor(obj: Any, walker: ObjectEdges) -> bool:
    found = walker.backend_of(obj)
    return found is not None and found[1] == TENSOR and getattr(obj, "grad_fn", None) is not None


def _tensor(obj: Any, walker: ObjectEdges) -> bool:
    found = walker.backend_of(obj)
    return found is not None and found[1] == TENSOR


def _accumulates(obj: object, walker: ObjectEdges, kept: Any = _graph_tensor) -> bool:
    if not isinstance(obj, _CONTAINERS) or len(obj) < _MIN_ACCUMULATED:
        return False
    items = obj.values() if isinstance(obj, dict) else obj
    count = 0
    for i, item in enumerate(items):
        if i >= 1000:
            break
        if kept(item, walker):
            count += 1
            if count >= _MIN_ACCUMULATED:
                return True
    return False


def _graph_size(tensor: Any, walker: ObjectEdges) -> tuple[int, str]:
    """The number of nodes of the tensor's graph, and as text ("5012+" past the bound)."""
    found = walker.backend_of(tensor)
    if found is None:
        return 0, "0"
    backend = found[0]
    graph = GraphWalk(backend.next_nodes, new_per_walk=_GRAPH_LIMIT)
    size = graph.count([backend.grad_fn(tensor)])
    return size, f"{size}+" if graph.truncated else str(size)


def diagnose_heap(
    verdict: Verdict,
    roots: Mapping[str, object],
    walker: ObjectEdges,
    *,
    memory_only: bool,
    graph_grew: bool = True,
) -> Diagnosis:
    notes = [
        "no step to re-run (hand-written loop): the diagnosis looked at the heap as it is; "
        "use graphleak.check(step) to get creation sites"
    ]
    labelled = given_roots(roots)
    path: Path | None = None
    if not graph_grew and not memory_only:  # tensors grew, graph nodes did not
        return _without_graph(labelled, walker, notes)
    try:
        path = shortest_path(labelled, lambda o: _accumulates(o, walker), walker)
        if path is not None:
            container: Any = path.objects[-1]  # a container _accumulates accepted
            items = container.values() if isinstance(container, dict) else container
            tensor = next(t for t in items if _graph_tensor(t, walker))
            edge_kind = "key" if isinstance(container, dict) else "index"
            _extend(path, tensor, edge_kind, container)
            chain = render_chain(path, walker)
            notes.append(f"{type(container).__name__} of {len(container)} graph-carrying items")
            return Diagnosis(
                "list-accumulation", chain=chain, notes=notes, dot=render_dot(path, None, walker)
            )
        best: tuple[tuple[int, str], Path] | None = None
        for label, value in labelled:
            if not _graph_tensor(value, walker):
                candidate = shortest_path(
                    [(label, value)], lambda o: _graph_tensor(o, walker), walker, max_visited=20_000
                )
            else:
                candidate = Path(label, [value], [])
            if candidate is None:
                continue
            size = _graph_size(candidate.objects[-1], walker)
            if best is None or size > best[0]:
                if best is not None:
                    best[1].clear()
                best = (size, candidate)
            else:
                candidate.clear()
        if best is not None and verdict.pattern != "cycle":
            size, path = best
            notes.append(f"its autograd graph has {size[1]} nodes")
            return Diagnosis(
                "retained-grad-fn",
                chain=render_chain(path, walker),
                notes=notes,
                dot=render_dot(path, None, walker),
            )
        if verdict.pattern == "cycle":
            notes.append("tensors or nodes were freed only by gc.collect(): a reference cycle")
            return Diagnosis("cycle", notes=notes)
        pattern = (
            "memory-growth"
            if memory_only
            else (verdict.pattern or "retained-grad-fn")
        )
        return Diagnosis(pattern, notes=notes)
    finally:
        if path is not None:
            path.clear()


def _without_graph(labelled: list[tuple[str, object]], walker: ObjectEdges,
                   notes: list[str]) -> Diagnosis:  # fmt: skip
    """Tensors grew and graph nodes did not: a container of tensors the roots reach is
    list-accumulation, else memory-growth; never retained-grad-fn (no graph grew)."""
    path = shortest_path(labelled, lambda o: _accumulates(o, walker, _tensor), walker)
    try:
        if path is None:
            story, fix = tell("memory-growth", graph_grew=False, tensors=True, has_chain=False)
            return Diagnosis("memory-growth", notes=notes, story=story, fix=fix)
        container: Any = path.objects[-1]  # a container of tensors
        items = container.values() if isinstance(container, dict) else container
        tensor = next(t for t in items if _tensor(t, walker))
        _extend(path, tensor, "key" if isinstance(container, dict) else "index", container)
        notes.append(f"{type(container).__name__} of {len(container)} tensors without a graph")
        story, fix = tell("list-accumulation", graph_grew=False, tensors=True, has_chain=True)
        return Diagnosis("list-accumulation", chain=render_chain(path, walker), notes=notes,
                         dot=render_dot(path, None, walker), story=story, fix=fix)  # fmt: skip
    finally:
        if path is not None:
            path.clear()


def _extend(path: Path, tensor: Any, kind: str, container: Any) -> None:
    from pytest_graphleak.diagnose.edges import Edge

    if kind == "key":
        key = next(k for k, v in container.items() if v is tensor)
        path.edges.append(Edge("key", key))
    else:
        index = next(i for i, v in enumerate(container) if v is tensor)
        path.edges.append(Edge("index", index))
    path.objects.append(tensor)
