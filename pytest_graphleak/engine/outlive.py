"""The outlive census: autograd graph objects a test made that are still alive after it.

``Census.begin()`` when the test's call phase starts: one ``gc.freeze()`` (O(1)), so
that after the test ``gc.get_objects()`` lists only the objects made since. ``finish()``
after its teardown: one collection of the young generations (``gc.collect(1)``: the
frozen heap is not scanned), then a look at each survivor's type: tensors that carry a
graph (``grad_fn``) and graph nodes held directly, torch's and minigrad's. Then the
freeze is lifted. The cost is O(objects the test made and kept), whatever the heap
holds (``benchmarks/bench_outlive.py``).

A check that runs inside the test lifts the freeze while it measures (``HeldFreeze``);
the graph objects made before it are remembered by weak reference, and what the check's
own steps made and kept is the check's to judge, not the census's.

Minigrad's creation sites are recorded while the census runs (one frame walk per new
tensor or node), so a finding can say where it was made without running anything again.

A torch tensor alive before the test whose graph the test extended in place (``TOTAL +=
loss``, ``state["total"].add_(loss)``) is no new object, so the scan of the young
generation misses it. ``grown_in_place(roots)`` finds it: the census notes torch's
autograd sequence counter when the test starts and after its teardown; when it moved
(the test made graph nodes at all), a walk of at most ``WALK_MAX`` objects, ``WALK_DEPTH``
references deep from the roots (the test module's globals, the class's attributes, the
live wider-scope fixtures) looks for tensors whose ``grad_fn`` was numbered in between.
A test that made no graph node pays two reads of the counter only.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any

from pytest_graphleak.diagnose.backends import NODE, TENSOR, Backend, TorchBackend, active_backends
from pytest_graphleak.heap.gcstate import HeldFreeze


def _graph_objects(objects: list[Any], backends: list[Backend]) -> list[Any]:
    """The tensors with a ``grad_fn`` and the graph nodes among ``objects``."""
    found: list[Any] = []
    for obj in objects:
        for backend in backends:
            kind = backend.kind(obj)
            if kind is None:
                continue
            if kind == NODE:
                found.append(obj)
            elif kind == TENSOR:
                try:
                    if obj.grad_fn is not None:
                        found.append(obj)
                except Exception:  # an exotic subclass: not the user's graph
                    pass
            break
    return found


#: The walk for tensors grown in place: references deep from a root, objects at most,
#: items read from one container.
WALK_DEPTH = 3
WALK_MAX = 2_000
WALK_ITEMS = 64
_SKIP, _TENSOR, _ITEMS, _VALUES, _ATTRS = range(5)
#: Skipped before any lookup: the values most containers hold.
_ATOMS = frozenset({int, float, str, bool, type(None), bytes})
_LEAVES = (int, float, complex, str, bytes, bool, type(None), range, types.ModuleType, type,
           types.FunctionType, types.BuiltinFunctionType, types.MethodType, weakref.ProxyType,
           weakref.CallableProxyType, weakref.ref)  # fmt: skip


class _Walk:
    """The bounded walk: each object's type is classified once per census (a dict lookup
    after that), and empty containers are never queued."""

    def __init__(self, tensor_type: type) -> None:
        self._tensor_type = tensor_type
        self._kinds: dict[type, int] = {}

    def kind(self, tp: type) -> int:
        found = self._kinds.get(tp)
        if found is None:
            if issubclass(tp, _LEAVES):
                found = _SKIP
            elif issubclass(tp, self._tensor_type):
                found = _TENSOR
            elif issubclass(tp, dict):
                found = _VALUES
            elif issubclass(tp, (list, tuple, set, frozenset)) or tp.__name__ == "deque":
                found = _ITEMS
            else:
                found = _ATTRS
            self._kinds[tp] = found
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
        taken = 0
        for value in values:
            tp = type(value)
            if tp in _ATOMS:
                continue
            kind = self.kind(tp)
            if kind == _SKIP or (kind in (_ITEMS, _VALUES) and not len(value)):
                continue
            into.append(value)
            taken += 1
            if taken >= WALK_ITEMS:
                break

    def grown(self, roots: Iterable[object], torch: TorchBackend, lo: int, hi: int,
              skip: set[int], checked: list[tuple[int, int]]) -> list[Any]:  # fmt: skip
        """Tensors within the bounds whose ``grad_fn`` torch numbered in [lo, hi), outside
        the ranges a check inside the test numbered (``checked``)."""
        seen: set[int] = set()
        grown: list[Any] = []
        frontier = list(roots)
        try:
            for depth in range(WALK_DEPTH + 1):
                following: list[Any] = []
                for obj in frontier:
                    key = id(obj)
                    if key in seen or len(seen) >= WALK_MAX:
                        continue
                    seen.add(key)
                    kind = self.kind(type(obj))
                    if kind == _TENSOR:
                        grad_fn = getattr(obj, "grad_fn", None)
                        number = torch.sequence_nr(grad_fn) if grad_fn is not None else None
                        if (
                            number is not None and lo <= number < hi and key not in skip
                            and not any(a <= number < b for a, b in checked)
                        ):  # fmt: skip
                            grown.append(obj)
                    elif kind != _SKIP and depth < WALK_DEPTH:
                        with contextlib.suppress(Exception):  # an object that refuses reads
                            self.children(obj, kind, following)
                frontier.clear()
                frontier = following
            return grown
        finally:
            frontier.clear()


class Census:
    """One test's census (see the module docstring)."""

    def __init__(self) -> None:
        self._freeze = HeldFreeze(self._note_before_check, self._note_check_end)
        #: torch's sequence numbers the checks inside the test used, [first, end): what
        #: their steps grew is theirs to judge (their tensors are frozen again after them,
        #: so they would pass for tensors alive before the test).
        self._checked_seq: list[tuple[int, int]] = []
        self._before_check: list[weakref.ref[Any]] = []
        self._recording: bool | None = None  # minigrad's setting before the test
        #: The minigrad module recording was switched on in: a test may remove it from
        #: sys.modules (a lazy-import test does), and the setting must still go back.
        self._minigrad: Any = None
        #: Why this test could not be counted ("" when it was).
        self.skipped = ""
        self.backends: list[Backend] = []
        #: torch's autograd sequence counter at the start and after the teardown.
        self._torch: TorchBackend | None = None
        self._seq: tuple[int, int] | None = None
        self._check_start: int | None = None

    def begin(self) -> bool:
        """Start counting; False when the user froze objects (gc cannot tell ours apart)."""
        if not self._freeze.hold():
            self.skipped = "the test session froze objects with gc.freeze()"
            return False
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "autograd"):
            with contextlib.suppress(Exception):  # a torch without the counter: no walk
                self._torch = TorchBackend(torch)
                self._seq = (self._torch.current_sequence_nr(), 0)
        mg = sys.modules.get("minigrad")
        if mg is not None and hasattr(mg, "record_creation_sites"):
            self._recording = mg.record_creation_sites(True)
            self._minigrad = mg
        return True

    def stop_recording(self) -> None:
        """Creation sites are recorded during the call phase only."""
        if self._recording is not None:
            self._minigrad.record_creation_sites(self._recording)
            self._recording, self._minigrad = None, None

    def _counter_now(self) -> int | None:
        if self._torch is None:
            return None
        try:
            return self._torch.current_sequence_nr()
        except Exception:  # a torch without the counter
            return None

    def _note_check_end(self) -> None:
        """The last check running ends: close the sequence numbers it used."""
        start, end = self._check_start, self._counter_now()
        if start is not None and end is not None:
            self._checked_seq.append((start, end))
        self._check_start = None

    def _note_before_check(self) -> None:
        """A check begins: remember (weakly) the graph tensors the test made so far."""
        self._check_start = self._counter_now()
        fresh = gc.get_objects()
        try:
            for obj in _graph_objects(fresh, active_backends()):
                # a torch node has no weak references: the check judges it
                with contextlib.suppress(TypeError):
                    self._before_check.append(weakref.ref(obj))
        finally:
            fresh.clear()

    def finish(self) -> list[Any]:
        """The graph objects the test made that are alive now. The caller owns the list
        and must clear it; the freeze is lifted here, also on error."""
        self.stop_recording()
        intact: bool | None = None
        try:
            if not self._freeze.held:
                return []
            # The young generations only: O(what the test made), and no full collection,
            # which would reset the collector's count of long-lived objects to the few
            # unfrozen ones and so make it collect the whole heap again and again once the
            # freeze is lifted. What the test made that reached the oldest generation and
            # is garbage now is not collected here: no root reaches it, so it is never named.
            gc.collect(1)
            if self._seq is not None and self._torch is not None:
                with contextlib.suppress(Exception):
                    self._seq = (self._seq[0], self._torch.current_sequence_nr() - 1)
            fresh = self._freeze.fresh_objects()
            intact = fresh is not None
            if fresh is None:
                self.skipped = "the test froze or unfroze objects itself (gc.freeze())"
                return []
            self.backends = active_backends()
            try:
                found = _graph_objects(fresh, self.backends)
            finally:
                fresh.clear()
            seen = {id(obj) for obj in found}
            for ref in self._before_check:
                obj = ref()
                if obj is not None and id(obj) not in seen:
                    found.append(obj)
            return found
        finally:
            self._before_check.clear()
            self._freeze.release(intact=intact)

    @property
    def made_torch_nodes(self) -> bool:
        """torch numbered graph nodes during the test (read after ``finish()``)."""
        return self._seq is not None and self._seq[1] > self._seq[0]

    def grown_in_place(self, roots: Iterable[object], found: list[Any]) -> list[Any]:
        """Torch tensors reachable from ``roots``, not in ``found`` (so alive before the
        test), whose graph the test extended in place (see the module docstring), outside
        the checks that ran inside the test. Call after ``finish()``; the caller owns the
        list and must clear it."""
        torch, seq = self._torch, self._seq
        if torch is None or seq is None or seq[1] <= seq[0]:
            return []  # no graph node was made during the test
        return _Walk(torch.torch.Tensor).grown(roots, torch, seq[0], seq[1],
                                               {id(obj) for obj in found}, self._checked_seq)

    def abandon(self) -> None:
        """Lift the freeze without counting (the test was not run, or is opted out)."""
        self.stop_recording()
        self._before_check.clear()
        self._freeze.release()
