"""Breadth-first searches over labelled references: shortest chain and cycles.

A search keeps the objects it has seen in a local dict (so that ids stay unique while it
runs, which matters for torch graph nodes whose Python wrappers come and go) and drops
them when it returns: the returned ``Path`` is the only thing that refers to objects, and
the caller renders it to strings and drops it at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.diagnose.edges import Edge, ObjectEdges, holds_references
from pytest_graphleak.heap.quiet import silenced

#: Budgets of one search: objects visited and seconds spent.
MAX_VISITED = 300_000
MAX_SECONDS = 2.0
#: Objects one root may have walked: a root that reaches a huge dataset must not use up
#: the budget before the other roots have been searched.
MAX_PER_ROOT = 25_000


@dataclass
class Path:
    """Objects from a root to a target and the edges between them (len(edges) == len-1)."""

    root_label: str
    objects: list[object] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def clear(self) -> None:
        self.objects.clear()
        self.edges.clear()


@silenced
def shortest_path(
    roots: Sequence[tuple[str, object]],
    is_target: Callable[[object], bool],
    walker: ObjectEdges,
    *,
    max_visited: int = MAX_VISITED,
) -> Path | None:
    """Shortest labelled path from any root to an object for which ``is_target`` holds.

    All roots start at depth 0, in the given order, so that on a tie the first root wins.
    Each object queued is charged to the root it was reached from; past ``MAX_PER_ROOT``
    that root queues nothing more, so a root that reaches a huge dataset cannot starve
    the others.
    """
    # id -> (object, parent id or None, edge from the parent, root index)
    seen: dict[int, tuple[object, int | None, Edge | None, int]] = {}
    queue: deque[int] = deque()
    labels = [label for label, _ in roots]
    charged = [0] * len(roots)
    try:
        for index, (_, obj) in enumerate(roots):
            if id(obj) in seen or not walker.walkable(obj):
                continue
            seen[id(obj)] = (obj, None, None, index)
            if is_target(obj):
                return _walk_back(Path(labels[index]), seen, id(obj))
            queue.append(id(obj))
        deadline = time.perf_counter() + MAX_SECONDS
        visited = 0
        while queue:
            current = queue.popleft()
            obj, _, _, root_index = seen[current]
            if charged[root_index] >= MAX_PER_ROOT:
                continue  # that root's share is spent: its queued objects stay unexpanded
            visited += 1
            if visited > max_visited or (visited % 1024 == 0 and time.perf_counter() > deadline):
                return None
            try:
                out = list(walker.edges(obj))
            except Exception:  # an object whose attributes raise: skip it
                continue
            for edge, child in out:
                cid = id(child)
                if cid in seen or not holds_references(child, walker) or not walker.walkable(child):
                    continue
                seen[cid] = (child, current, edge, root_index)
                if is_target(child):
                    return _walk_back(Path(labels[root_index]), seen, cid)
                if charged[root_index] < MAX_PER_ROOT:
                    charged[root_index] += 1
                    queue.append(cid)
        return None
    finally:
        seen.clear()
        queue.clear()


def _walk_back(path: Path, seen: Mapping[int, tuple[Any, ...]], last: int | None) -> Path:
    """``path`` with the objects and edges from the search's start to ``last`` put in
    front (``seen``: id -> (object, parent id, edge from the parent, ...))."""
    objects: list[object] = []
    edges: list[Edge] = []
    while last is not None:
        obj, last, edge = seen[last][:3]
        objects.append(obj)
        if edge is not None:
            edges.append(edge)
    path.objects[:0] = reversed(objects)
    path.edges[:0] = reversed(edges)
    return path


def extend(path: Path, obj: object) -> None:
    """Append ``obj``, held by the container that ``path`` ends at, and the edge to it."""
    container: Any = path.objects[-1]
    if isinstance(container, dict):
        edge = Edge("key", next(k for k, v in container.items() if v is obj))
    elif isinstance(container, (list, tuple, deque)):
        edge = Edge("index", next(i for i, v in enumerate(container) if v is obj))
    else:
        edge = Edge("member")
    path.edges.append(edge)
    path.objects.append(obj)


@silenced
def find_cycle(start: object, walker: ObjectEdges, *, max_visited: int = 50_000) -> Path | None:
    """The shortest labelled cycle from ``start`` back to itself, or None."""
    target = id(start)
    seen: dict[int, tuple[object, int | None, Edge | None]] = {target: (start, None, None)}
    queue: deque[int] = deque([target])
    visited = 0
    try:
        while queue and visited < max_visited:
            current = queue.popleft()
            obj = seen[current][0]
            visited += 1
            try:
                out = list(walker.edges(obj))
            except Exception:
                continue
            for edge, child in out:
                cid = id(child)
                if cid == target:  # objects: start ... current, start (at both ends)
                    return _walk_back(Path("", [start], [edge]), seen, current)
                if cid in seen or not holds_references(child, walker) or not walker.walkable(child):
                    continue
                seen[cid] = (child, current, edge)
                queue.append(cid)
        return None
    finally:
        seen.clear()
        queue.clear()
