"""The outlive census: which autograd graphs a test made are still alive, told without
touching the garbage collector's state.

Every graph node carries its place in creation order, told by its library's bundle
(``probes/autograd``: the bundle's ``node_counter`` and its backend's ``sequence_nr``;
torch numbers its nodes per thread, minigrad process-wide). ``Census.begin()`` reads
each library's counter when the test's call phase starts, ``finish()`` after its
teardown; a tensor whose ``grad_fn`` was numbered in between, or a node so numbered, was
made during the test (``made_during``). Nothing is frozen, collected or patched, so
``gc.collect()``, ``gc.get_objects()`` and ``gc.freeze()`` inside the test do what they
do without the plugin, and nothing the test leaves as garbage is kept a moment longer.
A test that numbered no node costs two readings of the counters.

Where to look: what the test made and kept sits in the collector's young generations
(``gc.get_objects(0)`` and ``(1)``: a few thousand objects, whatever the heap holds)
unless a collection of an older generation, or a ``gc.freeze()``, moved it on meanwhile.
``begin()`` notes the collector's counts of those collections and puts a marker object
in the youngest generation; ``young()`` lists the graph objects the test made from the
young generations when both say nothing moved, and None otherwise: then the audit
searches what its roots reach for graphs numbered during the test (bounded by the
search's budgets, see ``outlive/explain``).

A tensor alive before the test whose graph the test extended in place (``TOTAL +=
loss``) is an old object with a new ``grad_fn``: not in the young generations.
``grown_near(roots)`` walks at most ``WALK_MAX`` objects, ``WALK_DEPTH`` references deep
from the roots nearest the test (its module's globals, its class's attributes, the live
wider-scope fixtures) for such tensors, of the libraries whose backend says that graphs
grow in place (``grows_in_place``: torch's); the backend's ``grown_in_place`` tells them
from new ones (torch's: its version counter moved, and the node its in-place op
extended is none, or one numbered before the test).

A check that ran inside the test (the marker, the fixture, a framework callback) tells
the census when it began and ended (``session.current().spans``): what its steps
numbered is the check's to judge, not the audit's. A library that records creation
sites itself (the bundle's ``record_sites``: minigrad's, one frame walk per new tensor
or node) records them while the census runs.

Limits (docs/limits.md): torch numbers nodes per thread, so graphs a test makes in
another thread are not told apart.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from pytest_graphleak import session
from pytest_graphleak.heap.containers import SIZED
from pytest_graphleak.heap.quiet import silenced
from pytest_graphleak.heap.typetable import TypeTable
from pytest_graphleak.probes.autograd import (
    BUNDLES,
    NODE,
    TENSOR,
    Backend,
    active_backends,
    loaded,
)

#: (library, first number, end) of the spans the census ignores: the checks inside the test.
_Span = tuple[str, int, int]


class Census:
    """One test's census (see the module docstring)."""

    def __init__(self, kinds: TypeKinds | None = None) -> None:
        #: library -> its node counter when the test began (None: not imported then).
        self._start: dict[str, int | None] = {}
        #: library -> imported when the test began, but its counter could not be read.
        self._unread: dict[str, bool] = {}
        #: library -> [start, end) of the numbers the test's nodes got (after ``finish``).
        self._range: dict[str, tuple[int, int]] = {}
        self._checked: list[_Span] = []
        self._check_start: dict[str, int | None] | None = None
        self._check_depth = 0
        #: (switch, module, setting before the test) of each library whose creation-site
        #: recording the census switched on; the module is kept: a test may remove it
        #: from sys.modules (a lazy-import test does), and the setting must still go back.
        self._recording: list[tuple[Any, Any, bool]] = []
        self._listed_in: list[Any] | None = None
        #: Why this test could not be counted ("" when it was).
        self.skipped = ""
        self.backends: list[Backend] = []
        #: A marker in the youngest generation, and the collector's count of collections
        #: of the older ones, when the test began (``young``).
        self._marker: _Marker | None = None
        #: Which types are tensor or graph node types (kept by the audit across tests).
        self._kinds = kinds if kinds is not None else TypeKinds()
        self._older_collections = 0
        self._frozen = 0
        #: The newest module in sys.modules when the test began (``modules_imported``).
        self._last_module: str | None = None

    # -- the counters ---------------------------------------------------------------------
    @staticmethod
    def _counters(*, end: bool = False) -> dict[str, int | None]:
        """Each autograd library's next node number now (None: not imported), from its
        bundle's ``node_counter``; at an ``end``, one that reads by making a node (torch's)
        gives that node's own number, so that the reading is not counted as the test's."""
        found: dict[str, int | None] = {bundle.name: None for bundle in BUNDLES}
        for bundle, module in loaded():
            with contextlib.suppress(Exception):  # a version of the library without one
                found[bundle.name] = bundle.node_counter(module, end)
        return found

    def begin(self) -> bool:
        """Read the counters; True (the census never needs to step aside)."""
        self._older_collections = _older_collections()
        self._marker = _Marker()
        self._frozen = gc.get_freeze_count()
        self._last_module = next(reversed(sys.modules), None)
        self._start = self._counters()
        self._unread = {lib: n is None and lib in sys.modules for lib, n in self._start.items()}
        for bundle, module in loaded():
            if bundle.record_sites is not None:
                before = bundle.record_sites(module, True)
                if before is not None:
                    self._recording.append((bundle.record_sites, module, before))
        self._listed_in = session.current().spans
        self._listed_in.append(self)
        return True

    def stop_recording(self) -> None:
        """Creation sites are recorded during the call phase only."""
        recording, self._recording = self._recording, []
        for switch, module, before in recording:
            switch(module, before)

    # -- checks inside the test (``session.current().spans``) -----------------------------
    def check_begins(self) -> None:
        self._check_depth += 1
        if self._check_depth == 1:
            self._check_start = self._counters()

    def check_ends(self) -> None:
        self._check_depth = max(0, self._check_depth - 1)
        if self._check_depth or self._check_start is None:
            return
        end = self._counters(end=True)
        for library, first in self._check_start.items():
            last = end.get(library)
            if last is not None:
                self._checked.append((library, 0 if first is None else first, last))
        self._check_start = None

    # -- after the teardown ---------------------------------------------------------------
    def finish(self) -> bool:
        """Close the test's range; True when it numbered graph nodes (something to look
        for). The backends are those of the libraries imported now."""
        self.stop_recording()
        self._unlist()
        return self._close()

    def _close(self) -> bool:
        end = self._counters(end=True)
        self._range = {}
        for library, last in end.items():
            if last is None or self._unread.get(library):
                continue  # not imported, or its counter could not be read at the start
            first = self._start.get(library)
            first = 0 if first is None else first  # imported during the test: all its own
            if last > first:
                self._range[library] = (first, last)
        if not self._range:
            return False
        self.backends = active_backends()
        return True

    def modules_imported(self) -> set[str]:
        """The modules first imported during the test: sys.modules keeps insertion order,
        so they follow the newest one at its start (none known when that one was removed
        from sys.modules meanwhile)."""
        imported: set[str] = set()
        for name in reversed(list(sys.modules)):
            if name == self._last_module:
                return imported
            imported.add(name)
        return set()

    def so_far(self) -> Census | None:
        """What the test numbered until now, told as a finished census would (None: no
        graph node yet). For a wider-scope fixture torn down in the test's own teardown:
        what its value keeps is judged then, before pytest drops it (``outlive/audit``).
        This census goes on unchanged."""
        view = Census(self._kinds)
        view._marker, view._frozen = self._marker, self._frozen
        view._older_collections = self._older_collections
        view._start, view._checked = self._start, list(self._checked)
        view._unread = dict(self._unread)
        return view if view._close() else None

    @silenced
    def young(self, *, whole: bool = False) -> list[Any] | None:
        """The graph objects the test made that the collector tracks (call after
        ``finish()``; the caller owns the list and must clear it), found among the
        objects made since ``begin()`` (``since``); None when those are not known. With
        ``whole``, after a collection moved them on, among all (a pass over the heap)."""
        objects = self.since()
        if objects is None:  # moved on by a collection: the whole heap is looked at
            if not whole or self._marker is None or gc.get_freeze_count() != self._frozen:
                return None
            objects = gc.get_objects()
        try:
            # One object per type first (a few hundred types for thousands of objects),
            # so that only the objects of graph types are looked at one by one; the
            # types in one C pass, a sample object only of a type not seen before.
            present = set(map(type, objects))
            graph_types = self._kinds.graph_types(present, objects, self.kind)
            present.clear()
            if not graph_types:
                return []
            # the graph objects picked in C (a whole heap is a million objects)
            graphs = itertools.compress(objects, map(graph_types.__contains__, map(type, objects)))
            return [obj for obj in graphs if self.made_during(obj)]
        finally:
            objects.clear()

    def since(self) -> list[object] | None:
        """The young generations (the caller owns the list), when they hold all the
        objects made since ``begin()``: no older generation was collected meanwhile and
        the marker is still there (nothing was frozen); else None."""
        marker = self._marker
        objects = gc.get_objects(0)
        objects.extend(gc.get_objects(1))
        if _older_collections() == self._older_collections and any(
            obj is marker for obj in objects
        ):
            return objects
        objects.clear()
        return None

    @silenced
    def grown_near(self, roots: Iterable[object]) -> list[Any]:
        """Tensors within a short walk of ``roots`` whose graph the test extended in place
        (old objects: not in the young generations). The caller owns the list."""
        growing = [b for b in self.backends if b.grows_in_place and b.name in self._range]
        if not growing:
            return []
        return _Walk(growing).grown(roots, self)

    def _made(self, library: str, number: int | None) -> bool:
        span = self._range.get(library)
        if number is None or span is None or not span[0] <= number < span[1]:
            return False
        return not any(lib == library and a <= number < b for lib, a, b in self._checked)

    def made_during(self, obj: object) -> bool:
        """A tensor whose graph, or a graph node that, the test made (outside its checks)."""
        for backend in self.backends:
            kind = backend.kind(obj)
            if kind is None:
                continue
            node: Any = obj
            if kind == TENSOR:
                try:
                    node = obj.grad_fn  # type: ignore[attr-defined]
                except Exception:  # an exotic subclass: not the user's graph
                    return False
                if node is None:
                    return False
            return self._made(backend.name, backend.sequence_nr(node))
        return False

    def grown_in_place(self, obj: object) -> bool:
        """A tensor alive before the test whose graph it extended in place (its backend's
        ``grown_in_place``, for the test's range of node numbers)."""
        for backend in self.backends:
            if backend.grows_in_place and backend.kind(obj) == TENSOR:
                start = self._range.get(backend.name, (0, 0))[0]
                return backend.grown_in_place(obj, start)
        return False

    def kind(self, obj: object) -> str | None:
        for backend in self.backends:
            kind = backend.kind(obj)
            if kind is not None:
                return kind
        return None

    def _unlist(self) -> None:
        if self._listed_in is not None and self in self._listed_in:
            self._listed_in.remove(self)
        self._listed_in = None

    def abandon(self) -> None:
        """Stop without counting (the test was not run, or its teardown raised)."""
        self.stop_recording()
        self._unlist()
        self._checked.clear()


class TypeKinds:
    """Which types are tensor or graph node types, learnt once per type and kept across
    tests without keeping a type alive (``heap/typetable``)."""

    def __init__(self) -> None:
        self._table: TypeTable[bool] = TypeTable()
        #: The graph types among the table's held ones (one C set operation finds them).
        self._graph_held: set[type] = set()

    def graph_types(
        self, present: set[type], objects: list[Any], kind: Callable[[object], str | None]
    ) -> set[type]:
        """The graph types among ``present`` (the types of ``objects``; the caller's set
        is not changed); a type not seen before is told by ``kind`` of one of its
        objects."""
        found = present.intersection(self._graph_held)
        unseen: set[type] = set()
        for tp in present.difference(self._table.held):  # types kept weakly, or new
            graph = self._table.get(tp)
            if graph is None:
                unseen.add(tp)
            elif graph:
                found.add(tp)
        for obj in objects if unseen else ():
            tp = type(obj)
            if tp in unseen:
                unseen.discard(tp)
                graph = kind(obj) is not None
                self._table.put(tp, graph)
                if graph:
                    found.add(tp)
                    if tp in self._table.held:
                        self._graph_held.add(tp)
                if not unseen:
                    break
        return found


class _Marker:
    """Made when the test begins: while it is in the young generations, so is all that
    the test made since (a collection or a freeze moves them on together)."""


def _older_collections() -> int:
    """Collections of the two older generations so far (each moves young objects on)."""
    stats = gc.get_stats()
    return int(stats[1]["collections"]) + int(stats[2]["collections"])


#: The walk for tensors grown in place: references deep from a root, objects at most,
#: items read from one container.
WALK_DEPTH = 3
WALK_MAX = 2_000
WALK_ITEMS = 64
_SKIP, _TENSOR, _ITEMS, _VALUES, _ATTRS, _UNKNOWN = range(6)
_SIZED_KINDS = (_ITEMS, _VALUES)
#: Skipped before any lookup: the values most containers hold.
_ATOMS = frozenset({int, float, str, bool, type(None), bytes})
_LEAVES = (
    int,
    float,
    complex,
    str,
    bytes,
    bool,
    type(None),
    range,
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    weakref.ProxyType,
    weakref.CallableProxyType,
    weakref.ref,
)


class _Walk:
    """The bounded walk: each object's type is classified once per process (one dict
    lookup after that, inlined in the loops: this walk runs after every test that made
    graph nodes), and empty containers are never queued."""

    #: (backend names) -> type -> its kind: shared by the walks of every test.
    _shared: ClassVar[dict[tuple[str, ...], TypeTable[int]]] = {}

    def __init__(self, backends: list[Backend]) -> None:
        self._backends = backends
        self._kinds = self._shared.setdefault(tuple(b.name for b in backends), TypeTable())

    def kind(self, obj: object) -> int:
        tp = type(obj)
        found = self._kinds.get(tp)
        if found is None:
            if issubclass(tp, _LEAVES):
                found = _SKIP
            elif any(backend.kind(obj) == TENSOR for backend in self._backends):
                found = _TENSOR
            elif issubclass(tp, dict):
                found = _VALUES
            elif issubclass(tp, SIZED):  # the one container rule (heap/containers)
                found = _ITEMS
            else:
                found = _ATTRS
            self._kinds.put(tp, found)
        return found

    def children(self, obj: Any, kind: int, into: list[Any]) -> None:
        """Queue what ``obj`` refers to (items, values or instance attributes)."""
        if kind == _VALUES:
            values: Iterable[Any] = obj.values()
        elif kind == _ITEMS:
            values = obj
        else:
            attrs = getattr(obj, "__dict__", None)
            if type(attrs) is not dict:
                return
            values = attrs.values()
        known = self._kinds.held.get
        taken = 0
        for value in values:
            tp = type(value)
            if tp in _ATOMS:
                continue
            kind = known(tp, _UNKNOWN)
            if kind == _UNKNOWN:
                kind = self.kind(value)
            if kind == _SKIP or (kind in _SIZED_KINDS and not len(value)):
                continue
            into.append(value)
            taken += 1
            if taken >= WALK_ITEMS:
                break

    def grown(self, roots: Iterable[object], census: Census) -> list[Any]:
        seen: set[int] = set()
        grown: list[Any] = []
        frontier = list(roots)
        known = self._kinds.held.get
        try:
            for depth in range(WALK_DEPTH + 1):
                following: list[Any] = []
                last = depth == WALK_DEPTH
                for obj in frontier:
                    if id(obj) in seen:
                        continue
                    if len(seen) >= WALK_MAX:
                        break
                    seen.add(id(obj))
                    kind = known(type(obj), _UNKNOWN)
                    if kind == _UNKNOWN:
                        kind = self.kind(obj)
                    if kind == _TENSOR:
                        if census.grown_in_place(obj) and census.made_during(obj):
                            grown.append(obj)
                    elif kind != _SKIP and not last:
                        try:
                            self.children(obj, kind, following)
                        except Exception:  # an object that refuses reads: not entered
                            continue
                frontier.clear()
                frontier = following
            return grown
        finally:
            frontier.clear()


__all__ = ["NODE", "TENSOR", "Census"]
