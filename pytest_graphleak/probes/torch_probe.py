"""torch: alive tensors, autograd graph nodes and bytes of unique tensor storages.

Tensors are found among the gc-tracked objects: the start set once at ``start`` (what
the step reaches, or the whole heap; kept as weak references by id, so tensors that die
later stop counting), the tensors the warmup steps used (``adopt``, at the end of
warmup), then only the objects created since the last freeze.
Graph nodes are counted by ``heap.graphwalk`` from every live tensor's ``grad_fn`` and
from node objects held directly (scanning gc for nodes alone undercounts: a node has a
Python wrapper only once Python touched it). The walk is bounded so that a deep graph
stays freeable; past the bound the count is a lower bound, and ``notes()`` says so.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable, KeysView, Sequence
from functools import partial
from itertools import chain, compress
from typing import Any

from pytest_graphleak.heap.graphwalk import GraphWalk, grad_fn_of
from pytest_graphleak.metrics import BYTES, OBJECTS, Metric
from pytest_graphleak.probes.base import ProbeBase
from pytest_graphleak.probes.warmup_tensors import WarmupTensors

TENSORS = Metric("torch.tensors", OBJECTS, "tensors")
NODES = Metric("torch.nodes", OBJECTS, "nodes")
#: Exact: the sum of distinct storages, no allocator in between.
STORAGE_BYTES = Metric("torch.storage_bytes", BYTES, "memory")


class TorchProbe(ProbeBase):
    name = "torch"
    absent = "torch is not imported"
    metrics = (TENSORS, NODES, STORAGE_BYTES)
    #: Tensors alive before the check (``total`` in ``total += loss``) carry graphs that
    #: grow without any new Python object: they are found once, in the start set.
    needs_heap = True

    def __init__(self) -> None:
        self._baseline = WeakBaseline()
        #: Older tensors found at the end of warmup, until ``absorb`` moves them into
        #: the baseline (the sample in between must not count a fresh one twice).
        self._adopted = WeakBaseline()
        # type -> is it a Tensor / an autograd Node; isinstance on torch's metaclasses
        # and on the Node ABC is slow, a dict lookup per object is not.
        self._is_tensor: dict[type, bool] = {}
        self._is_node: dict[type, bool] = {}
        #: torch.Tensor and its subclasses, found once per check (at start and again at
        #: the end of warmup, for subclasses a step defines) rather than in every sample.
        self._tensor_types: set[type] = set()
        self._graph = GraphWalk()

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
        self._baseline = WeakBaseline()
        self._adopted = WeakBaseline()
        self._graph = GraphWalk()
        self._tensor_types = _subclasses(sys.modules["torch"].Tensor)
        # The baseline keeps tensors only, so no node pass is needed here.
        self._baseline.add(_pick(heap, self._tensor_types))

    def warmup_recorder(self) -> WarmupTensors:
        return WarmupTensors()

    def adopt(self, objects: list[Any]) -> None:
        """Tensors alive before the check that the start set may lack (the ones the
        warmup steps used, see ``warmup_tensors``): counted from the next sample on.
        Empties the list."""
        self._adopted.add(objects)

    def absorb(self, fresh: Sequence[object]) -> None:
        self._tensor_types = _subclasses(sys.modules["torch"].Tensor)
        tensors, _ = self._kinds(fresh)
        self._baseline.add(tensors)
        adopted, self._adopted = self._adopted, WeakBaseline()
        self._baseline.add(list(adopted.alive()))  # each id once

    def collectable(self, fresh: Sequence[object]) -> int:
        # Only fresh tensors can be cyclic garbage: frozen objects are never collected.
        # Called around gc.collect() in every sample, so one counting pass, no list.
        # (Empty when only the gc probe was asked for: then this probe was never started.)
        kinds = self._tensor_types or _subclasses(sys.modules["torch"].Tensor)
        return sum(map(kinds.__contains__, map(type, fresh)))

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        tensors, held_nodes = self._kinds(fresh)
        if self._adopted.count():
            known = set(map(id, tensors))
            known.update(self._baseline.ids())
            tensors.extend(t for t in self._adopted.alive() if id(t) not in known)
        base = self._baseline.alive()
        try:
            return {
                TENSORS.name: float(len(tensors) + len(base) + self._baseline.unweakrefable),
                NODES.name: float(count_nodes(chain(tensors, base), held_nodes, self._graph)),
                STORAGE_BYTES.name: float(storage_bytes(tensors, self._baseline, base)),
            }
        finally:
            tensors.clear()
            base.clear()
            held_nodes.clear()

    def notes(self) -> list[str]:
        if not self._graph.truncated:
            return []
        return [
            f"{NODES.name} is a lower bound: the graph is too large to walk whole (at most "
            f"{self._graph.new_per_walk:,} new nodes per sample, so that it can still be freed)"
        ]

    def stop(self) -> None:
        self._baseline = WeakBaseline()
        self._adopted = WeakBaseline()
        self._graph = GraphWalk()
        self._is_tensor.clear()
        self._is_node.clear()
        self._tensor_types = set()


class WeakBaseline:
    """Tensors alive before the measured steps, held weakly so they can still die.

    Kept as ``id -> weakref.ref``, not a ``WeakSet``: a set compares colliding members
    with ``==``, which for tensors is elementwise and raises on a second ``add``.
    """

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}
        #: Tensors that refuse weak references: counted, assumed to stay alive.
        self.unweakrefable = 0
        #: id -> the storage key and bytes of a remembered tensor, with the tensor's
        #: ``data_ptr()`` when they were read (see ``storage_bytes``).
        self.storages: dict[int, tuple[int, tuple[int, int], int]] = {}
        #: ((remembered count, addresses of the alive tensors), their storage table, total)
        self._table: tuple[tuple[int, list[int]], dict[tuple[int, int], int], int] | None
        self._table = None
        #: Some remembered tensor is a fake (found once here, not in every sample).
        self.fakes = False

    def add(self, tensors: list[Any]) -> None:
        """Remember ``tensors`` (each once) and empty the list, so the caller keeps none."""
        self.fakes = self.fakes or bool(_fake_kinds(tensors))
        self._table = None
        try:
            for tensor in tensors:
                key = id(tensor)
                if key in self._refs:
                    continue
                # Runs when the tensor dies, before its id can be reused. It holds the two
                # dicts, not this baseline, so the baseline is in no reference cycle.
                forget = partial(_forget, self._refs, self.storages, key)
                try:
                    self._refs[key] = weakref.ref(tensor, forget)
                except TypeError:
                    self.unweakrefable += 1
        finally:
            tensors.clear()

    def alive(self) -> list[Any]:
        """The remembered tensors still alive (strong references: clear the list)."""
        return [tensor for ref in list(self._refs.values()) if (tensor := ref()) is not None]

    def ids(self) -> KeysView[int]:
        """The ids of the remembered tensors alive now (a death forgets its id at once)."""
        return self._refs.keys()

    def table(self, tensors: list[Any]) -> tuple[dict[tuple[int, int], int], int]:
        """``(storage key -> bytes, total)`` for ``tensors``: this baseline's ``alive()``
        tensors, in that order (fakes left out). Reused whole while they sit at the same
        addresses (parameters and optimizer state, sampled after every step of a long
        run): one C-speed pass instead of the per-tensor loop. They are the same tensors
        while no one died (a death shrinks ``_refs``; ``add()`` drops the table).
        Shared: only read it."""
        try:
            stamp = (len(self._refs), list(map(_data_ptr(), tensors)))
        except Exception:  # a tensor without an address (sparse, nested): no reuse
            sizes = _storage_sizes(tensors, self)
            return sizes, sum(sizes.values())
        if self._table is None or self._table[0] != stamp:
            sizes = _storage_sizes(tensors, self)
            self._table = (stamp, sizes, sum(sizes.values()))
        return self._table[1], self._table[2]

    def count(self) -> int:
        """Remembered tensors alive now, the unweakrefable ones included."""
        return len(self._refs) + self.unweakrefable


def _forget(refs: dict[int, Any], storages: dict[int, Any], key: int, _ref: object) -> None:
    refs.pop(key, None)
    storages.pop(key, None)


def tensors_among(objects: Sequence[object]) -> list[Any]:
    """The tensors among ``objects``, in one C-speed pass: every live tensor's type is in
    the closure of ``torch.Tensor.__subclasses__()``, so no pass over the objects' types
    is needed to find them."""
    torch: Any = sys.modules["torch"]
    return _pick(objects, _subclasses(torch.Tensor))


def _subclasses(root: type) -> set[type]:
    """``root`` and every class derived from it, however indirectly."""
    found, todo = {root}, [root]
    while todo:
        subclasses: list[type] = todo.pop().__subclasses__()
        for sub in subclasses:
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _pick(objects: Sequence[object], kinds: set[type]) -> list[Any]:
    if not kinds:
        return []
    return list(compress(objects, map(kinds.__contains__, map(type, objects))))


def count_nodes(
    tensors: Iterable[Any], held_nodes: Iterable[Any], graph: GraphWalk | None = None
) -> int:
    """Distinct autograd nodes reachable from the tensors' grad_fn and the held nodes
    (within ``graph``'s bound: a lower bound once ``graph.truncated``)."""
    starts = list(held_nodes)
    items = list(tensors)
    try:  # a comprehension: one attribute read per tensor, no call (a sample's hot loop)
        starts += [node for tensor in items if (node := tensor.grad_fn) is not None]
    except Exception:  # exotic subclasses, views made under no_grad: no graph to count
        starts += [node for tensor in items if (node := grad_fn_of(tensor)) is not None]
    items.clear()
    try:
        return (graph or GraphWalk()).count(starts)
    finally:
        starts.clear()


def fake_tensor_type() -> type | None:
    """torch.compile's ``FakeTensor`` class, if torch has loaded it (never imported here)."""
    module = sys.modules.get("torch._subclasses.fake_tensor")
    found = getattr(module, "FakeTensor", None)
    return found if isinstance(found, type) else None


def storage_bytes(
    tensors: Iterable[Any],
    baseline: WeakBaseline | None = None,
    baseline_tensors: list[Any] | None = None,
) -> int:
    """Bytes of the distinct storages behind the tensors (views share one storage).

    A storage is keyed by (device index, address): ``get_device()`` is -1 on the CPU and
    the index elsewhere, a plain C call (``str(storage.device)`` made a device object and
    a string per tensor: 3/4 of this function's time on a BERT's 164 tensors, and a
    sample runs after every step of a long run in window mode).

    The baseline's tensors (parameters, optimizer state) are the same every step: their
    key and bytes are kept and reused while ``tensor.data_ptr()`` is unchanged (a new or
    resized storage has a new address), one C call instead of four. Given apart as
    ``baseline_tensors``, their whole table is reused while no address changed."""
    sizes = _storage_sizes(_without_fakes(list(tensors)), baseline)
    if baseline is None or not baseline_tensors:
        return sum(sizes.values())
    known, total = baseline.table(
        _without_fakes(baseline_tensors) if baseline.fakes else baseline_tensors
    )
    # Two storages at one address (a view of a parameter, say): the larger counts.
    return total + sum(max(0, nbytes - known.get(key, 0)) for key, nbytes in sizes.items())


def _data_ptr() -> Any:
    return sys.modules["torch"].Tensor.data_ptr


def _fake_kinds(items: list[Any]) -> set[type]:
    fake = fake_tensor_type()
    if fake is None:
        return set()
    return {kind for kind in set(map(type, items)) if issubclass(kind, fake)}


def _without_fakes(items: list[Any]) -> list[Any]:
    fakes = _fake_kinds(items)  # torch.compile's stand-ins own no memory (and warn when asked)
    return [tensor for tensor in items if type(tensor) not in fakes] if fakes else items


def _storage_sizes(
    items: Iterable[Any], baseline: WeakBaseline | None
) -> dict[tuple[int, int], int]:
    sizes: dict[tuple[int, int], int] = {}
    known = baseline.storages if baseline is not None else {}
    for tensor in items:
        try:
            entry = known.get(id(tensor))
            if entry is not None and entry[0] == tensor.data_ptr():
                _, key, nbytes = entry
            else:
                storage = tensor.untyped_storage()
                pointer = storage.data_ptr()
                if pointer == 0:
                    continue
                key = (tensor.get_device(), pointer)
                nbytes = storage.nbytes()
                if baseline is not None and id(tensor) in baseline.ids():
                    known[id(tensor)] = (tensor.data_ptr(), key, nbytes)
        except Exception:  # sparse, nested or meta tensors have no plain storage
            continue
        if sizes.get(key, 0) < nbytes:  # two storages at one address: the larger counts
            sizes[key] = nbytes
    return sizes
