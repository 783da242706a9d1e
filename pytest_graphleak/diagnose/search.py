"""Breadth-first searches over labelled references: shortest chain and cycles.

A search keeps the objects it has seen in a local dict (so that ids stay unique while it
runs, which matters for torch graph nodes whose Python wrappers come and go) and drops
them when it returns: the returned ``Path`` is the only thing that refers to objects, and
the caller renders it to strings and drops it at once.

Every budget is counted in work (objects visited, heap scans), never in seconds: the
chain a search finds is part of a finding's baseline key, so the same code must give the
same chain on a quiet laptop and on a loaded CI runner. ``find_chain`` says what it
proved (``Searched``): the chain, or which roots it searched whole and which it had to
cut (``holders.not_reached`` words it). ``shortest_path`` is its chain alone.

The chain search from the roots is helped by a search the other way when the leaked
objects are known (``seeds``) and a first look from the roots (``FIRST_LOOK`` references
read: most chains are short) found none: ``ancestors`` climbs from them through
``gc.get_referrers`` (one scan of the heap a level) to the roots they hang from, and the
search from the roots then walks only those objects. A root that reaches a huge dataset
costs nothing then; the walk from the roots still labels every edge, so the chain is as
true as a plain search's. When the climb cannot tell (nothing found within its levels,
too many referrers, a link gc does not see), the plain search runs.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.diagnose.edges import ObjectEdges, holds_references, partly_read
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.heap.gcstate import collection_paused
from pytest_graphleak.heap.quiet import silenced

#: Budgets of one search from the roots, in objects: visited in all, and queued from one
#: root (a root that reaches a huge dataset must not use up the budget before the other
#: roots have been searched).
MAX_VISITED = 300_000
MAX_PER_ROOT = 25_000
#: Budgets of the climb from the leaked objects: levels (each one scan of the heap) and
#: the objects it may collect before it gives up (a climb that spreads that wide reached
#: the library's or the interpreter's objects, not a chain the roots hold).
MAX_LEVELS = 12
MAX_ANCESTORS = 20_000
#: Comparisons the climb's heap scans may make in all: a level's ``gc.get_referrers``
#: compares every reference of every tracked object with each object of the level, so
#: a level costs (tracked objects) x (objects climbed from). On a heap of 1.5M objects
#: that is 20 objects climbed from in all (a level from 38 leaked objects took 0.15 s of
#: one core); past it the plain search decides.
MAX_COMPARED = 30_000_000
#: References a first look from the roots may read before the climb (which scans the
#: heap once a level) is worth its cost: most chains are short and found here.
FIRST_LOOK = 10_000


@dataclass
class Path:
    """Objects from a root to a target and the edges between them (len(edges) == len-1)."""

    root_label: str
    objects: list[object] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def clear(self) -> None:
        self.objects.clear()
        self.edges.clear()


@dataclass
class Searched:
    """What one chain search proved: the chain, or what it saw and what it could not."""

    path: Path | None = None
    #: Roots whose search was cut before all they reach was looked at (their share or
    #: the search's budget ran out, or a container was read only in part), in root order.
    cut: list[str] = field(default_factory=list)
    roots: int = 0  # how many roots were searched
    visited: int = 0
    read: int = 0  # references read

    @property
    def whole(self) -> bool:
        """No chain: proved for every root (each was searched whole)."""
        return self.path is None and not self.cut


def shortest_path(
    roots: Sequence[tuple[str, object]],
    is_target: Callable[[object], bool],
    walker: ObjectEdges,
    *,
    max_visited: int = MAX_VISITED,
    seeds: Sequence[object] = (),
) -> Path | None:
    """The chain of ``find_chain``, or None."""
    return find_chain(roots, is_target, walker, max_visited=max_visited, seeds=seeds).path


@silenced
def find_chain(
    roots: Sequence[tuple[str, object]],
    is_target: Callable[[object], bool],
    walker: ObjectEdges,
    *,
    max_visited: int = MAX_VISITED,
    seeds: Sequence[object] = (),
) -> Searched:
    """Shortest labelled path from any root to an object for which ``is_target`` holds.

    All roots start at depth 0, in the given order, so that on a tie the first root wins.
    ``seeds``: targets known by identity (the leaked objects): after a first look from
    the roots (``FIRST_LOOK`` references read) finds nothing, the search walks only what climbs
    from them to a root (``ancestors``), then, if that finds no chain, everything, as
    below.

    Each object queued is charged to the root it was reached from; past ``MAX_PER_ROOT``
    that root queues nothing more, so a root that reaches a huge dataset cannot starve
    the others. Deterministic: the same objects give the same chain, however slow the
    machine. Automatic collection waits while it runs (``collection_paused``)."""
    with collection_paused():
        return _find_chain(roots, is_target, walker, max_visited, seeds)


def _find_chain(
    roots: Sequence[tuple[str, object]],
    is_target: Callable[[object], bool],
    walker: ObjectEdges,
    max_visited: int,
    seeds: Sequence[object],
) -> Searched:
    if seeds:
        first = _breadth_first(roots, is_target, walker, max_visited, None, max_read=FIRST_LOOK)
        if first.path is not None or not first.cut:  # found, or proved none: every root whole
            return first
        above = ancestors(seeds, [obj for _, obj in roots], walker)
        if above is not None:
            try:
                found = _breadth_first(roots, is_target, walker, max_visited, above)
            finally:
                above.clear()
            if found.path is not None:
                return found
    return _breadth_first(roots, is_target, walker, max_visited, None)


def _breadth_first(
    roots: Sequence[tuple[str, object]],
    is_target: Callable[[object], bool],
    walker: ObjectEdges,
    max_visited: int,
    inside: set[int] | None,
    *,
    max_read: int | None = None,
) -> Searched:
    """The search from the roots (``inside``: only through these objects, and with no
    share per root: the climb already chose them; ``max_read``: references read, at
    most, beyond the object being read)."""
    # id -> (object, parent id or None, edge from the parent, root index)
    seen: dict[int, tuple[object, int | None, Edge | None, int]] = {}
    queue: deque[int] = deque()
    labels = [label for label, _ in roots]
    share = MAX_PER_ROOT if inside is None else max_visited
    charged = [0] * len(roots)
    cut: set[int] = set()
    outcome = Searched(roots=len(roots))
    try:
        for index, (_, obj) in enumerate(roots):
            if id(obj) in seen or not walker.walkable(obj):
                continue
            seen[id(obj)] = (obj, None, None, index)
            if is_target(obj):
                outcome.path = _walk_back(Path(labels[index]), seen, id(obj))
                return outcome
            if inside is None or id(obj) in inside:  # a root the climb did not meet: no chain
                queue.append(id(obj))
        while queue:
            current = queue.popleft()
            obj, _, _, root_index = seen[current]
            if charged[root_index] >= share:
                cut.add(root_index)  # that root's share is spent: its queue stays unexpanded
                continue
            if outcome.visited >= max_visited or (
                max_read is not None and outcome.read >= max_read
            ):
                cut.update(seen[i][3] for i in (current, *queue))
                break
            outcome.visited += 1
            try:
                out = list(walker.edges(obj))
            except Exception:  # an object whose attributes raise: skip it
                continue
            outcome.read += len(out)
            if partly_read(obj):
                cut.add(root_index)
            for edge, child in out:
                cid = id(child)
                if cid in seen or (inside is not None and cid not in inside):
                    continue
                if not holds_references(child, walker) or not walker.walkable(child):
                    continue
                seen[cid] = (child, current, edge, root_index)
                if is_target(child):
                    outcome.path = _walk_back(Path(labels[root_index]), seen, cid)
                    return outcome
                if charged[root_index] < share:
                    charged[root_index] += 1
                    queue.append(cid)
                else:
                    cut.add(root_index)
        outcome.cut = [labels[index] for index in sorted(cut)]
        return outcome
    finally:
        seen.clear()
        queue.clear()


def ancestors(
    seeds: Sequence[object], roots: Sequence[object], walker: ObjectEdges
) -> set[int] | None:
    """The ids of the objects that refer, directly or through others, to a seed, climbed
    level by level (``gc.get_referrers``: one scan of the heap a level) until a level
    meets a root, and one level more (an instance's ``__dict__`` is a level of its own
    here, not a link of a chain); None when no root is met within ``MAX_LEVELS`` levels
    (fewer when its scans would compare more than ``MAX_COMPARED`` pairs: a big heap, a
    wide level) or the climb spreads past ``MAX_ANCESTORS`` objects (the plain search
    decides then).

    Types, modules' namespaces and roots are not climbed past: every instance refers to
    its type, every function to its module's namespace, and a chain starts at a root.
    Only objects a chain may pass through are kept (``walker.walkable``)."""
    root_ids = {id(obj) for obj in roots}
    kept: dict[int, object] = {id(obj): obj for obj in seeds}  # ids unique while it runs
    frontier: list[object] = list(seeds)
    climbing: list[object] = []
    mine = {id(kept), id(frontier), id(climbing), id(seeds)}
    met_at: int | None = None
    tracked, compared = _tracked_objects(), 0
    try:
        for level in range(MAX_LEVELS):
            if met_at is not None and level > met_at + 1:
                break
            climbing.extend(obj for obj in frontier if _climbed_past(obj, root_ids))
            frontier.clear()
            compared += tracked * len(climbing)
            if not climbing or compared > MAX_COMPARED:
                break
            referrers = gc.get_referrers(*climbing)
            climbing.clear()
            mine.add(id(referrers))
            for obj in referrers:
                if id(obj) in kept or id(obj) in mine or not walker.walkable(obj):
                    continue
                kept[id(obj)] = obj
                frontier.append(obj)
                if id(obj) in root_ids and met_at is None:
                    met_at = level
            referrers.clear()
            if len(kept) > MAX_ANCESTORS:  # spread too wide: met, that is enough; else none
                return set(kept) if met_at is not None else None
        return set(kept) if met_at is not None else None
    finally:
        kept.clear()
        frontier.clear()
        climbing.clear()


def _tracked_objects() -> int:
    """How many objects one ``gc.get_referrers`` scan goes through (the list is dropped
    before the climb scans: it would be a referrer of everything)."""
    return len(gc.get_objects())


def _climbed_past(obj: object, root_ids: set[int]) -> bool:
    """May the climb go on from ``obj`` to what refers to it (see ``ancestors``)?"""
    if id(obj) in root_ids or isinstance(obj, type):
        return False
    return not (isinstance(obj, dict) and "__builtins__" in obj and "__name__" in obj)


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
