"""A library's own per-call reference cycles: cyclic garbage that is not the user's leak.

Libraries make reference cycles on every call: torchsde's Brownian interval tree (each
interval refers to its parent and its children), a module that keeps one of its own
bound methods as an attribute. Each cycle is freed by the next collection, so what it
holds piles up only between collections, and the cyclic-garbage count grows by what each
step made. That is the user's leak when the cycles keep an autograd graph (graph nodes,
or tensors that carry or require one), or when an object of the user's code is on one of
them (a hook, closure or object the user can change to break it). Otherwise it is the
library's churn: a note, not a failure (``split``).

``split(cyclic, garbage, walker)`` sorts the objects the collector found: the tensors
without a graph that no cycle with an object of the user's on it holds are taken out
(``Churn``) when an object of a library's class or function is on a cycle among them
(a cycle of plain dicts and lists may be the user's own); the rest stay the user's. It
reads objects only while it runs, and never raises (it runs inside a loop's
collection): what it cannot read stays the user's.
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.observed import Churn, Leaked
from pytest_graphleak.diagnose.render import library_of
from pytest_graphleak.diagnose.search import find_cycle
from pytest_graphleak.diagnose.sites import ENGINE_PACKAGES
from pytest_graphleak.heap.usercode import is_user_file, is_user_module

#: Objects of the user's code (and of a library's) looked at for a cycle, at most.
_PICKED = 20
#: Objects one such cycle search visits, at most (a cycle of garbage is all garbage).
_CYCLE_SEARCH = 2_000


def carries_graph(item: Leaked) -> bool:
    """A graph node, or a tensor that carries or requires an autograd graph (a tensor
    whose attributes cannot be read counts as one: never call the user's leak churn)."""
    if item.kind != TENSOR:
        return True
    try:
        return item.obj.grad_fn is not None or bool(item.obj.requires_grad)
    except Exception:
        return True


def split(
    cyclic: list[Leaked], garbage: Sequence[object], walker: ObjectEdges
) -> tuple[list[Leaked], Churn | None]:
    """``(the user's cyclic objects, the library's churn or None)``: a tensor without a
    graph goes to the churn unless a cycle on which an object of the user's code lies
    (among the collector's ``garbage``) holds it; graph-carrying ones stay the user's."""
    bare = [item for item in cyclic if not carries_graph(item)]
    if not bare:
        return cyclic, None
    found = _Garbage(garbage, {id(item.obj) for item in bare}, walker)
    try:
        held = found.objects(found.reached(found.holders))
        users = _picked(held, _is_users)
        if len(users) > _PICKED:  # more of the user's objects than are searched: theirs
            return cyclic, None
        users = [obj for obj in users if _on_a_cycle(obj, walker)]
        theirs = found.reached([id(obj) for obj in users])  # what the user's cycles hold
        users.clear()
        # A cycle of plain dicts and lists may be anyone's: only one on which an object
        # of a library's class (or function) lies is known to be the library's.
        owners = [obj for obj in _picked(held, library_of)[:_PICKED] if _on_a_cycle(obj, walker)]
        held.clear()
        library = [item for item in bare if id(item.obj) not in theirs]
        if not library or not owners:
            return cyclic, None
        churn = Churn(tensors=len(library), library=_library(owners))
        owners.clear()
        for item in library:
            if item.site is not None:
                churn.sites[item.site] = churn.sites.get(item.site, 0) + 1
        ids = {id(item) for item in library}
        library.clear()
        return [item for item in cyclic if id(item) not in ids], churn
    except Exception:  # an object that cannot be read: the cycles stay the user's
        return cyclic, None
    finally:
        bare.clear()
        found.clear()


class _Garbage:
    """The collector's garbage as references between ids: each plain object's edges to
    the other plain objects and to the tensors looked at (``tensors``)."""

    def __init__(self, garbage: Sequence[object], tensors: set[int], walker: ObjectEdges) -> None:
        self._pool = {id(obj): obj for obj in garbage if walker.backend_of(obj) is None}
        self._out: dict[int, list[int]] = {}
        #: The plain objects that refer to one of the tensors.
        self.holders: list[int] = []
        for oid, obj in self._pool.items():
            try:
                edges = list(walker.edges(obj))
            except Exception:  # an object whose attributes raise
                continue
            out = [id(c) for _, c in edges if id(c) in self._pool or id(c) in tensors]
            edges.clear()
            self._out[oid] = out
            if any(child in tensors for child in out):
                self.holders.append(oid)

    def reached(self, start: Iterable[int]) -> set[int]:
        """The ids reachable from ``start`` (included) along the garbage's references."""
        seen = set(start)
        queue = deque(seen)
        while queue:
            for child in self._out.get(queue.popleft(), ()):
                if child not in seen:
                    seen.add(child)
                    queue.append(child)
        return seen

    def objects(self, ids: Iterable[int]) -> list[Any]:
        """The plain objects among ``ids``."""
        return [self._pool[oid] for oid in ids if oid in self._pool]

    def clear(self) -> None:
        self._pool.clear()
        self._out.clear()


def _picked(objects: Iterable[Any], test: Callable[[Any], object]) -> list[Any]:
    """The first ``_PICKED`` + 1 of ``objects`` that pass ``test`` (one more: there are
    more than are searched)."""
    found: list[Any] = []
    for obj in objects:
        if len(found) > _PICKED:
            break
        if test(obj):
            found.append(obj)
    return found


def _is_users(obj: Any) -> bool:
    """A function or method of a user file, a paused frame of one, an instance of a
    user class."""
    if isinstance(obj, types.FrameType):
        return is_user_file(obj.f_code.co_filename)
    code = _code_of(obj)
    if code is not None:
        return is_user_file(code.co_filename)
    module = getattr(type(obj), "__module__", None)
    return module != "builtins" and is_user_module(module) is True


def _code_of(obj: Any) -> types.CodeType | None:
    """The code of a function, a bound method's function, or a paused generator."""
    func = obj.__func__ if isinstance(obj, types.MethodType) else obj
    for name in ("__code__", "gi_code", "cr_code", "ag_code"):
        code = getattr(func, name, None) if not isinstance(func, type) else None
        if isinstance(code, types.CodeType):
            return code
    return None


def _on_a_cycle(obj: object, walker: ObjectEdges) -> bool:
    path = find_cycle(obj, walker, max_visited=_CYCLE_SEARCH)
    if path is None:
        return False
    path.clear()
    return True


def _library(objects: Iterable[Any]) -> str:
    """The library whose objects are among ``objects`` (``sdelib``); the autograd
    engine's (``torch``) only when no other library's are there."""
    engine = ""
    for obj in objects:
        library = library_of(obj)
        if library and library not in ENGINE_PACKAGES:
            return library
        engine = engine or library
    return engine
