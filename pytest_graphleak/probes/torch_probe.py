"""torch: alive tensors, autograd graph nodes and bytes of unique tensor storages.

Tensors are found among the gc-tracked objects: the whole heap once at ``start`` (kept
as weak references by id, so tensors that die later stop counting), then only the
objects created since the last ``gc.freeze()``. Graph nodes are counted by walking
``grad_fn.next_functions`` from every live tensor and from node objects held directly:
node wrappers exist only while someone holds them, so scanning gc for nodes undercounts.
Nodes are deduplicated by ``id`` during one walk (the walk holds them meanwhile, so ids
cannot be reused) and all dropped when the walk ends.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable, Sequence
from itertools import compress
from typing import Any

from pytest_graphleak.probes.base import BYTES, OBJECTS


class TorchProbe:
    name = "torch"
    units = {  # noqa: RUF012
        "torch.tensors": OBJECTS,
        "torch.nodes": OBJECTS,
        "torch.storage_bytes": BYTES,
    }
    #: Tensors alive before the check (``total`` in ``total += loss``) carry graphs that
    #: grow without any new Python object: they are found once in the whole heap.
    needs_heap = True

    def __init__(self) -> None:
        # id -> weak reference; not a WeakSet: a set compares colliding members with
        # ``==``, which for tensors is elementwise and raises on a second absorb.
        self._baseline: dict[int, weakref.ref[Any]] = {}
        # Baseline tensors that refuse weak references: counted, assumed to stay alive.
        self._unweakrefable = 0
        # type -> is it a Tensor / an autograd Node; isinstance on torch's metaclasses
        # and on the Node ABC is slow, a dict lookup per object is not.
        self._is_tensor: dict[type, bool] = {}
        self._is_node: dict[type, bool] = {}

    def available(self) -> bool:
        return "torch" in sys.modules

    # -- classification of gc objects ------------------------------------------------
    def _kinds(self, objects: Sequence[object]) -> tuple[list[Any], list[Any]]:
        """(tensors, node objects) among ``objects``.

        Runs at C speed over the objects: one ``map(type, ...)`` pass finds the distinct
        types (only new types are classified in Python), then ``compress`` picks the
        tensors and nodes. The whole-heap scan at ``start`` is the one O(heap) pass.
        """
        torch: Any = sys.modules["torch"]
        is_tensor, is_node = self._is_tensor, self._is_node
        kinds = set(map(type, objects))
        for kind in kinds.difference(is_tensor):
            flag = is_tensor[kind] = issubclass(kind, torch.Tensor)
            is_node[kind] = not flag and issubclass(kind, torch.autograd.graph.Node)
        tensor_kinds = {kind for kind in kinds if is_tensor[kind]}
        node_kinds = {kind for kind in kinds if is_node[kind]}
        return _pick(objects, tensor_kinds), _pick(objects, node_kinds)

    # -- protocol ----------------------------------------------------------------------
    def start(self, heap: Sequence[object]) -> None:
        self._baseline = {}
        self._unweakrefable = 0
        # One C-speed pass over the whole heap: every live tensor's type is a subclass of
        # torch.Tensor, so the closure of __subclasses__() names them all and no pass is
        # needed to find the heap's distinct types (nor one for node objects: the
        # baseline keeps tensors only).
        torch: Any = sys.modules["torch"]
        self._remember(_pick(heap, _subclasses(torch.Tensor)))

    def absorb(self, fresh: Sequence[object]) -> None:
        tensors, _ = self._kinds(fresh)
        self._remember(tensors)

    def _remember(self, tensors: list[Any]) -> None:
        baseline = self._baseline
        forget = baseline.pop
        for tensor in tensors:
            key = id(tensor)
            if key in baseline:
                continue
            try:
                # The callback runs when the tensor dies, before its id can be reused.
                baseline[key] = weakref.ref(tensor, lambda _ref, key=key: forget(key, None))
            except TypeError:
                self._unweakrefable += 1

    def collectable(self, fresh: Sequence[object]) -> int:
        # Only fresh tensors can be cyclic garbage: frozen objects are never collected.
        tensors, _ = self._kinds(fresh)
        return len(tensors)

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        tensors, held_nodes = self._kinds(fresh)
        alive = (ref() for ref in self._baseline.values())
        tensors.extend(tensor for tensor in alive if tensor is not None)
        try:
            return {
                "torch.tensors": float(len(tensors) + self._unweakrefable),
                "torch.nodes": float(count_nodes(tensors, held_nodes)),
                "torch.storage_bytes": float(storage_bytes(tensors)),
            }
        finally:
            tensors.clear()
            held_nodes.clear()

    def stop(self) -> None:
        self._baseline = {}
        self._is_tensor.clear()
        self._is_node.clear()


def _subclasses(root: type) -> set[type]:
    """``root`` and every class derived from it, however indirectly."""
    found, todo = {root}, [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _pick(objects: Sequence[object], kinds: set[type]) -> list[Any]:
    if not kinds:
        return []
    return list(compress(objects, map(kinds.__contains__, map(type, objects))))


def count_nodes(tensors: Iterable[Any], held_nodes: Iterable[Any]) -> int:
    """Distinct autograd nodes reachable from the tensors' grad_fn and the held nodes."""
    seen: dict[int, Any] = {}  # holds the wrappers for the walk so ids stay unique
    stack: list[Any] = list(held_nodes)
    for tensor in tensors:
        try:
            grad_fn = tensor.grad_fn
        except Exception:  # exotic subclasses may refuse; they simply carry no graph here
            continue
        if grad_fn is not None:
            stack.append(grad_fn)
    try:
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            for edge in getattr(node, "next_functions", ()):
                child = edge[0]
                if child is not None and id(child) not in seen:
                    stack.append(child)
        return len(seen)
    finally:
        seen.clear()
        stack.clear()


def storage_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind the tensors (views share one storage)."""
    sizes: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            nbytes = storage.nbytes()
            device = str(storage.device)
        except Exception:  # sparse, nested or meta tensors have no plain storage
            continue
        if pointer == 0:
            continue
        key = (device, pointer)
        sizes[key] = max(sizes.get(key, 0), int(nbytes))
    return sum(sizes.values())
