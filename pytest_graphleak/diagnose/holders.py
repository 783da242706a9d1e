"""What holds leaked objects when no chain from a root reaches them.

The chain search starts from roots the user knows (fixtures, ``self``, closure cells,
module globals). Some holders are none of these: a fixture fetched with
``request.getfixturevalue``, a list kept by a library, a thread's local variables, a
numpy array made with ``.numpy()`` (its ``base`` is the tensor, a link the cyclic GC
does not see). ``unrooted`` tries, in order:

- ``unrooted_holder``: a container that refers to a leaked object (``gc.get_referrers``,
  two calls at most: each costs a scan of the heap), and what refers to that container;
- ``thread_holders``: local variables of other threads' frames that are leaked objects;
- ``no_holder_note``: says that nothing was found, and why that may be.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import MAX_ITEMS, ObjectEdges, items_of
from pytest_graphleak.diagnose.observed import Observation
from pytest_graphleak.diagnose.search import (
    MAX_PER_ROOT,
    MAX_VISITED,
    Path,
    Searched,
    extend,
    find_cycle,
)
from pytest_graphleak.heap.containers import GROWABLE
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.paths import display_path
from pytest_graphleak.words import notes as said

_LOOKED_AT = 20  # leaked objects whose referrers are asked for


def unrooted_holder(obs: Observation, walker: ObjectEdges) -> Path | None:
    """``parent -> container -> leaked object`` for a container that holds a leaked
    object (``parent`` only when one refers to the container)."""
    chosen = sorted(obs.alive, key=lambda item: item.kind != TENSOR)[:_LOOKED_AT]
    held = [item.obj for item in chosen]
    mine = {id(held), id(chosen), id(obs.alive), id(obs), *(id(item) for item in obs.alive)}
    try:
        referrers = gc.get_referrers(*held)
        containers = [
            r
            for r in referrers
            if isinstance(r, GROWABLE) and id(r) not in mine and walker.walkable(r)
        ]
        referrers.clear()
        if not containers:
            return None
        # Not the first in the heap's order, which may differ from run to run: the one
        # that holds the most of them (its kind is part of the baseline key).
        ids = {id(obj) for obj in held}
        container = min(
            containers,
            key=lambda c: (-sum(id(item) in ids for item in items_of(c)), type(c).__name__, len(c)),
        )
        containers.clear()
        for obj in held:  # a loop, not a generator: its cell would refer to the container
            if any(item is obj for item in items_of(container)):
                path = Path(said.UNROOTED, [container], [])
                extend(path, obj)
                _prepend_parent(path, walker, mine)
                return path
        return None
    finally:
        held.clear()
        chosen.clear()


def _prepend_parent(path: Path, walker: ObjectEdges, mine: set[int]) -> None:
    """Put the object that holds the container in front of it, when one refers to it
    by name (a dict key or an attribute; not a closure cell or a frame)."""
    container = path.objects[0]
    mine = {*mine, id(path.objects), id(path)}
    referrers = gc.get_referrers(container)
    found: list[tuple[tuple[str, str, str], object, Edge]] = []
    try:
        for parent in referrers:
            named = isinstance(parent, dict) or hasattr(parent, "__dict__")
            if id(parent) in mine or not named:
                continue
            if isinstance(parent, types.FunctionType) or not walker.walkable(parent):
                continue
            for edge, child in walker.edges(parent):
                if child is container and edge.kind in ("key", "attr"):
                    found.append(((edge.kind, str(edge.key), type(parent).__name__), parent, edge))
                    break
        if found:  # by name, not by the heap's order (which may differ from run to run)
            _, parent, edge = min(found, key=lambda candidate: candidate[0])
            path.objects.insert(0, parent)
            path.edges.insert(0, edge)
    finally:
        referrers.clear()
        found.clear()


def plain_cycle(obs: Observation, walker: ObjectEdges) -> tuple[Path, tuple[Edge, Any]] | None:
    """A cycle of plain Python objects (from the collector's garbage) one of which refers
    to a cyclic leaked object: the cycle from that object back to itself, and the edge
    from it to the leaked object (``Record.out -> Tensor``)."""
    leaked = {id(item.obj): item.obj for item in obs.cyclic}
    try:
        for holder in obs.garbage:
            if walker.backend_of(holder) is not None or not walker.walkable(holder):
                continue
            try:
                edges = list(walker.edges(holder))
            except Exception:  # an object whose attributes raise
                continue
            for edge, child in edges:
                # ``in`` first: ``leaked.get(...) is child`` was true of every None.
                if id(child) in leaked and leaked[id(child)] is child:
                    path = find_cycle(holder, walker, max_visited=5_000)
                    if path is not None:
                        return path, (edge, child)
                    break
        return None
    finally:
        leaked.clear()


def thread_holders(obs: Observation) -> list[str]:
    """``local 'x' of work() at file.py:12 in thread 'Thread-3 (work)'`` for each
    leaked object that another thread's frame holds in a local variable."""
    ids = {id(item.obj) for item in obs.alive}
    if not ids:
        return []
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    here = threading.get_ident()
    found: list[str] = []
    stacks = sys._current_frames()
    for ident, frame in stacks.items():
        if ident == here:
            continue
        current: Any = frame
        while current is not None and len(found) < 5:
            try:
                local_vars = dict(current.f_locals)
            except Exception:
                local_vars = {}
            for name, value in local_vars.items():
                if id(value) in ids:
                    code = current.f_code
                    place = f"{display_path(code.co_filename)}:{current.f_lineno}"
                    thread = names.get(ident, str(ident))
                    found.append(said.thread_local(name, code.co_name, place, thread))
            local_vars.clear()
            current = current.f_back
    stacks.clear()
    return found


def not_reached(searched: Searched) -> str:
    """What the search from the roots proved when it found no chain: that none of them
    reaches the leaked objects (every root searched whole), or that none of what it saw
    does, and which roots it could not search whole (``Searched.cut``)."""
    if searched.whole:
        return said.NOT_REACHED
    cut = searched.cut
    return said.search_stopped(
        cut, searched.roots - len(cut), searched.visited, (MAX_VISITED, MAX_PER_ROOT, MAX_ITEMS)
    )


def no_holder_note(obs: Observation, searched: Searched) -> str:
    """Nothing the diagnosis can see refers to the leaked objects: say why that may be."""
    held = [item.obj for item in obs.alive[:_LOOKED_AT]]
    mine = {id(held), id(obs.alive), id(obs), *(id(item) for item in obs.alive)}
    try:
        referrers = [r for r in gc.get_referrers(*held) if id(r) not in mine]
    finally:
        held.clear()
    if referrers:
        kinds = ", ".join(sorted({type(r).__name__ for r in referrers})[:5])
        referrers.clear()
        return said.referred_to(not_reached(searched), kinds)
    return said.unreferred(not_reached(searched))


def unrooted(
    obs: Observation, walker: ObjectEdges, notes: list[str], searched: Searched
) -> Path | None:
    """The search from the roots found no chain (``searched``): a container that holds
    the leak anyway, a thread's locals, or a note that says nothing was found and why
    that may be."""
    path = unrooted_holder(obs, walker)
    if path is not None:
        notes.append(said.found_by_referrers(not_reached(searched)))
        return path
    threads = thread_holders(obs)
    if threads:
        notes.append(said.held_by_threads(threads))
    else:
        notes.append(no_holder_note(obs, searched))
    return None
