"""What holds the memory when only memory grew (``memory-growth``).

No tensor or graph node leaks, yet bytes grow: a list of numpy arrays, a cache dict, or
an array replaced each step by a bigger one (``preds = torch.cat((preds, logits))``).
Two surveys of what the roots reach, one step apart, find it:

- containers by identity: length before and after (the first survey holds every object
  it saw until the end, so an id cannot be reused by another object meanwhile);
- arrays by slot (the object holding them and the edge, e.g. ``state.__dict__['preds']``):
  bytes before and after, so an array replaced by a bigger one in the same slot counts.

The holder is what grew by the most bytes; the chain to it is searched like any other
chain. Both surveys are bounded in objects and seconds, and drop everything on return.

The step between the surveys records where tensors are made (the torch site recorder;
without torch it runs under ``tracemalloc``, for numpy arrays), so the line that made what
grows (the ``torch.cat`` that rebuilt the buffer, the ``append``'s argument) is that of the
grown tensor, or of the container's newest entries: not the lines every step runs
(``loss.backward()``, ``optimizer.step()``), which also allocate. When it cannot tell (a
numpy array while torch is loaded), the caller falls back on ``sites.memory_sites``.
"""

from __future__ import annotations

import contextlib
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR, TorchBackend
from pytest_graphleak.diagnose.edges import Edge, ObjectEdges, items_of
from pytest_graphleak.diagnose.search import MAX_PER_ROOT, Path, shortest_path
from pytest_graphleak.diagnose.sites import (
    Site,
    creation_site,
    make_torch_recorder,
    user_frame_of,
)
from pytest_graphleak.heap.containers import GROWABLE
from pytest_graphleak.metrics import BYTES, format_amount
from pytest_graphleak.result import CreationSite

_MAX_OBJECTS = 100_000
_MAX_SECONDS = 1.0
#: References of one object looked at per turn of a root (see ``survey``).
_CHUNK = 64
_SAMPLE_ITEMS = 50  # new items of a container weighed one by one, at most


@dataclass
class Survey:
    #: every object visited by id, so that ids stay unique until ``release``
    held: dict[int, object] = field(default_factory=dict)
    #: container id -> its length
    lengths: dict[int, int] = field(default_factory=dict)
    #: (holder id, edge) -> (bytes, the array); arrays are numpy arrays, tensors, bytes
    slots: dict[tuple[int, Edge], tuple[int, object]] = field(default_factory=dict)

    def release(self) -> None:
        self.held.clear()
        self.lengths.clear()
        self.slots.clear()


def array_bytes(obj: object, walker: ObjectEdges) -> int | None:
    """Bytes of the data behind a numpy array, a tensor or a bytes-like object."""
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return int(obj.nbytes)
    found = walker.backend_of(obj)
    if found is None or found[1] != TENSOR:
        return None
    try:
        if found[0].name == "torch":
            return int(obj.untyped_storage().nbytes())  # type: ignore[attr-defined]
        return int(obj.numpy().nbytes)  # type: ignore[attr-defined]
    except Exception:  # sparse, meta or exotic tensors: no plain storage to weigh
        return None


def survey(roots: Sequence[tuple[str, object]], walker: ObjectEdges) -> Survey:
    """Breadth first from every root; as in the chain search, each root may queue at most
    ``MAX_PER_ROOT`` objects, so one reaching a huge dataset cannot starve the others.

    The roots take turns, ``_CHUNK`` references each (round robin, an object's references
    spread over several turns): within the time budget a small root is walked as deep as
    a huge one, whatever the order of the roots and however slow the machine is."""
    found = Survey()
    seen = found.held
    queues: list[deque[object]] = [deque() for _ in roots]
    #: per root: the object being expanded and its references, read lazily
    expanding: list[tuple[object, Iterator[tuple[Edge, object]]] | None] = [None] * len(roots)
    charged = [0] * len(roots)
    for index, (_, obj) in enumerate(roots):
        if id(obj) not in seen and walker.walkable(obj):
            seen[id(obj)] = obj
            queues[index].append(obj)
    deadline = time.perf_counter() + _MAX_SECONDS
    turns = deque(index for index, queue in enumerate(queues) if queue)
    try:
        while turns and len(seen) < _MAX_OBJECTS and time.perf_counter() < deadline:
            index = turns.popleft()
            current = expanding[index]
            if current is None:
                obj = queues[index].popleft()
                if isinstance(obj, GROWABLE):
                    found.lengths[id(obj)] = len(obj)
                current = (obj, walker.edges(obj))
            obj, references = current
            try:
                chunk = list(islice(references, _CHUNK))
            except Exception:  # an object whose attributes raise: skip the rest of it
                chunk = []
            for edge, child in chunk:  # weigh array slots; queue within the root's share
                size = array_bytes(child, walker)
                if size is not None:
                    found.slots[(id(obj), edge)] = (size, child)
                share_left = charged[index] < MAX_PER_ROOT
                if share_left and id(child) not in seen and walker.walkable(child):
                    seen[id(child)] = child
                    charged[index] += 1
                    queues[index].append(child)
            expanding[index] = current if len(chunk) == _CHUNK else None
            if expanding[index] is not None or queues[index]:
                turns.append(index)
    finally:
        for queue in queues:
            queue.clear()
        expanding.clear()
    return found


def _item_bytes(item: object, walker: ObjectEdges) -> int:
    size = array_bytes(item, walker)
    if size is not None:
        return size
    if isinstance(item, (tuple, list)) and len(item) <= 16:  # (obs, action, reward) rows
        return sys.getsizeof(item) + sum(_item_bytes(x, walker) for x in item)
    return sys.getsizeof(item)


def _added_bytes(container: Any, before: int, after: int, walker: ObjectEdges) -> int:
    """Bytes of what a container gained (its newest entries, weighed up to a sample)."""
    added = after - before
    # A set has no order: any members are as good a sample.
    items = container if isinstance(container, set) else reversed(items_of(container))
    newest = list(islice(items, min(added, _SAMPLE_ITEMS)))
    if not newest:
        return 0
    weighed = sum(_item_bytes(item, walker) for item in newest)
    return weighed * added // len(newest)


def growing_holder(
    roots: Sequence[tuple[str, object]],
    step: Callable[[], object],
    walker: ObjectEdges,
    notes: list[str],
) -> tuple[Path | None, list[CreationSite]]:
    """The chain to the container or array slot that grew by the most bytes over one
    step (or None; a note says by how much), and the lines that made what it gained."""
    before = survey(roots, walker)
    after: Survey | None = None
    target: object = None
    added: list[object] = []
    torch = next((b for b in walker.backends if isinstance(b, TorchBackend)), None)
    recorder = make_torch_recorder(torch.torch) if torch is not None else None
    # Not both: the recorder's own work under tracemalloc made an Adam step 70x slower.
    tracing = recorder is None and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start(25)
    try:
        try:
            with recorder if recorder is not None else contextlib.nullcontext():
                step()
        except Exception as exc:
            notes.append(f"the step raised during diagnosis: {type(exc).__name__}: {exc}")
            return None, []
        after = survey(roots, walker)
        best = 0
        what = ""
        for key, (size, array) in after.slots.items():
            old = before.slots.get(key)
            if old is not None and size - old[0] > best:
                best, target = size - old[0], array
                was, now = format_amount(old[0], BYTES), format_amount(size, BYTES)
                what = f"{was} -> {now} in the same place"
        for held, length in after.lengths.items():
            old_length = before.lengths.get(held)
            if old_length is None or length <= old_length:
                continue
            container = before.held[held]
            grown = _added_bytes(container, old_length, length, walker)
            if grown > best:
                best, target = grown, container
                what = f"{type(container).__name__} of {old_length} -> {length} entries"
                added = _newest(container, length - old_length)
        if target is None:
            return None, []
        made = _made_at(added or [target], recorder)
        path = shortest_path(roots, lambda obj: obj is target, walker)
        if path is not None:
            notes.append(f"grows by {format_amount(best, BYTES)} per step: {what}")
        return path, made
    finally:
        if tracing:
            tracemalloc.stop()
        if recorder is not None:
            recorder.forget()
        target = None
        added.clear()
        before.release()
        if after is not None:
            after.release()


def _newest(container: Any, count: int) -> list[object]:
    items = container if isinstance(container, set) else reversed(items_of(container))
    return list(islice(items, min(count, _SAMPLE_ITEMS)))


def _made_at(objects: list[object], recorder: Any) -> list[CreationSite]:
    """The user lines that made ``objects``: a tensor's as the torch recorder saw it, any
    other object's from its allocation record (tracemalloc)."""
    counts: dict[Site, int] = {}
    for obj in objects:
        site = recorder.site_of_tensor(obj) if recorder is not None else None
        if site is None and tracemalloc.is_tracing():
            traceback = tracemalloc.get_object_traceback(obj)
            site = user_frame_of(traceback) if traceback is not None else None
        if site is not None:
            counts[site] = counts.get(site, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1]))
    return [creation_site(site, count) for site, count in ranked]
