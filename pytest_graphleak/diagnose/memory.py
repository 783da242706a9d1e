"""What holds the memory when only memory grew (``memory-growth``).

No tensor or graph node leaks, yet bytes grow: a list of numpy arrays, a cache dict, or
an array replaced each step by a bigger one (``preds = torch.cat((preds, logits))``).
Two surveys of what the roots reach, one step apart, find it:

- containers by identity: length before and after (the first survey holds every object
  it saw until the end, so an id cannot be reused by another object meanwhile);
- arrays by slot (the object holding them and the edge, e.g. ``state.__dict__['preds']``):
  bytes before and after, so an array replaced by a bigger one in the same slot counts.

The holder is what grew by the most bytes; the chain to it is searched like any other
chain. Both surveys are bounded in objects and references read (never in seconds: the
holder is part of a finding's baseline key, the same on a quiet and a loaded machine),
and drop everything on return.

The step between the surveys records where tensors are made (the torch site recorder;
without torch it runs under ``tracemalloc``, for numpy arrays), so the line that made what
grows (the ``torch.cat`` that rebuilt the buffer, the ``append``'s argument) is that of the
grown tensor, or of the container's newest entries: not the lines every step runs
(``loss.backward()``, ``optimizer.step()``), which also allocate. The recorder sees only
tensors: for a numpy array or bytes while torch is loaded, one more step runs under
``tracemalloc`` and the allocation record of what is then in the grown slot (or the
container's newest entries) names the line. When neither can tell, the caller falls back
on ``sites.memory_sites``.

An array is never a search's target (a search does not pass into it): the chain goes to
the slot's holder, then takes the slot's edge (``Trainer.history -> ndarray``).
"""

from __future__ import annotations

import contextlib
import sys
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import ObjectEdges, items_of
from pytest_graphleak.diagnose.search import MAX_PER_ROOT, Path, shortest_path
from pytest_graphleak.diagnose.sites import (
    creation_site,
    recorder_trouble,
    site_recorder,
    user_frame_of,
)
from pytest_graphleak.diagnose.stored import MISSING, follow_edge
from pytest_graphleak.heap.containers import GROWABLE
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.metrics import BYTES, format_amount
from pytest_graphleak.probes.autograd.bundle import Site, SiteRecorder
from pytest_graphleak.result import CreationSite
from pytest_graphleak.words import notes as said

_MAX_OBJECTS = 100_000
#: References read in all, over every root's turns (see ``survey``).
MAX_READ = 400_000
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
        return found[0].data_bytes(obj)
    except Exception:  # sparse, meta or exotic tensors: no plain storage to weigh
        return None


def survey(roots: Sequence[tuple[str, object]], walker: ObjectEdges) -> Survey:
    """Breadth first from every root; as in the chain search, each root may queue at most
    ``MAX_PER_ROOT`` objects, so one reaching a huge dataset cannot starve the others.

    The roots take turns, ``_CHUNK`` references each (round robin, an object's references
    spread over several turns): within the budget a small root is walked as deep as
    a huge one, whatever the order of the roots; the budget is counted in references
    read, so what it sees is the same however slow the machine is."""
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
    read = 0
    turns = deque(index for index, queue in enumerate(queues) if queue)
    try:
        while turns and len(seen) < _MAX_OBJECTS and read < MAX_READ:
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
            read += len(chunk) or 1
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


@dataclass
class _Growth:
    """What grew by the most bytes over the surveyed step: an array slot (``holder`` and
    ``edge``: a search never passes into an array, so the chain ends at the holder and
    then takes that edge) or a container (``length``: its entries after the step)."""

    nbytes: int = 0
    what: str = ""
    target: object = None
    holder: object = None
    edge: Edge | None = None
    length: int = 0
    added: list[object] = field(default_factory=list)

    def clear(self) -> None:
        self.target = self.holder = None
        self.added.clear()


def _largest_growth(before: Survey, after: Survey, walker: ObjectEdges) -> _Growth:
    grown = _Growth()
    for key, (size, array) in after.slots.items():
        old = before.slots.get(key)
        if old is not None and size - old[0] > grown.nbytes:
            grown.nbytes, grown.target, grown.edge = size - old[0], array, key[1]
            grown.holder = after.held.get(key[0])
            was, now = format_amount(old[0], BYTES), format_amount(size, BYTES)
            grown.what = f"{was} -> {now} in the same place"
    for held, length in after.lengths.items():
        old_length = before.lengths.get(held)
        if old_length is None or length <= old_length:
            continue
        container = before.held[held]
        added = _added_bytes(container, old_length, length, walker)
        if added > grown.nbytes:
            grown.nbytes, grown.target, grown.holder, grown.edge = added, container, None, None
            grown.what = f"{type(container).__name__} of {old_length} -> {length} entries"
            grown.length = length
            grown.added = _newest(container, length - old_length)
    return grown


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
    grown = _Growth()
    recorder = site_recorder(walker.backends)
    # Not both: the recorder's own work under tracemalloc made an Adam step 70x slower.
    tracing = recorder is None and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start(25)
    try:
        try:
            with recorder if recorder is not None else contextlib.nullcontext():
                step()
        except Exception as exc:
            notes.append(said.step_raised(f"{type(exc).__name__}: {exc}"))
            return None, []
        trouble = recorder_trouble(recorder)
        if trouble:
            notes.append(trouble)
        after = survey(roots, walker)
        grown = _largest_growth(before, after, walker)
        if grown.target is None:
            return None, []
        made = _made_at(grown.added or [grown.target], recorder)
        if tracing:
            tracemalloc.stop()
            tracing = False
        if not made and recorder is not None:  # a numpy array or bytes while torch runs
            made = _made_by_next_step(step, grown, notes, walker)
        path = _path_to(roots, grown, walker)
        if path is not None:
            notes.append(f"grows by {format_amount(grown.nbytes, BYTES)} per step: {grown.what}")
        return path, made
    finally:
        if tracing:
            tracemalloc.stop()
        if recorder is not None:
            recorder.forget()
        grown.clear()
        before.release()
        if after is not None:
            after.release()


def _path_to(
    roots: Sequence[tuple[str, object]], grown: _Growth, walker: ObjectEdges
) -> Path | None:
    """The chain to what grew: to a slot's holder, then the slot's edge to its array."""
    if grown.edge is None:
        target = grown.target
        return shortest_path(roots, lambda obj: obj is target, walker)
    holder = grown.holder
    for label, obj in roots:  # an array that is a root itself (a module global)
        if obj is grown.target:
            return Path(label, [obj])
    if holder is None:
        return None
    path = shortest_path(roots, lambda obj: obj is holder, walker)
    if path is not None:
        path.edges.append(grown.edge)
        path.objects.append(grown.target)
    return path


def _made_by_next_step(
    step: Callable[[], object], grown: _Growth, notes: list[str], walker: ObjectEdges
) -> list[CreationSite]:
    """The line that made what grows, when the site recorder could not tell (a
    numpy array, bytes): one more step under ``tracemalloc``, then the allocation record
    of the array now in the grown slot, or of the container's newest entries. Those are
    made by the user's line that builds them, never by ``loss.backward()`` or
    ``optimizer.step()`` (which also allocate every step, so a count of the lines whose
    allocations grew names them too)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(25)
    objects: list[object] = []
    try:
        try:
            step()
        except Exception as exc:
            notes.append(said.step_raised(f"{type(exc).__name__}: {exc}"))
            return []
        if grown.edge is not None:
            now = (
                follow_edge(grown.holder, grown.edge, walker)
                if grown.holder is not None
                else MISSING
            )
            if now is not MISSING and now is not grown.target:
                objects.append(now)
        elif isinstance(grown.target, GROWABLE) and len(grown.target) > grown.length:
            objects = _newest(grown.target, len(grown.target) - grown.length)
        return _made_at(objects, None)
    finally:
        objects.clear()
        if started:
            tracemalloc.stop()


def _newest(container: Any, count: int) -> list[object]:
    items = container if isinstance(container, set) else reversed(items_of(container))
    return list(islice(items, min(count, _SAMPLE_ITEMS)))


def _made_at(objects: list[object], recorder: SiteRecorder | None) -> list[CreationSite]:
    """The user lines that made ``objects``: a tensor's as the site recorder saw it, any
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
