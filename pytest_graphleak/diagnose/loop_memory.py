"""What holds a running loop's growing memory (``memory-growth`` in a loop).

A step check finds the holder by surveying what the roots reach, running the step once
more and surveying again (``memory.growing_holder``). A loop cannot re-run a step, but
it runs the next one itself: at the judgement (a leak verdict, so a clean run pays
nothing) the arrays and tensors the roots reach are weighed, and the largest of them
("slots": the object and the edge that lead to an array, e.g. ``TrainState.all_preds``,
or a root that is an array itself) are weighed again after the loop's next step. The
slot that grew by the most bytes is the holder (``preds = torch.cat([preds, out])`` puts
a bigger tensor in the same slot every step).

During that step the slots are watched line by line (``stored.LiveWatch``): the user line
after which the growing slot held a new array is its ``stored at:`` line, and the array
now there was made under the torch site recorder (or, for a numpy array, under
``tracemalloc``): its ``created at:`` line. When the loop ends at the judged step, or
raises during the next one, nothing is weighed again and the note says so.

Everything held here (the slots' holders, the arrays now in them) is dropped by
``settle``; the caller's trace function and tracemalloc state are restored by ``stop``.
"""

from __future__ import annotations

import contextlib
import tracemalloc
import types
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.facts import set_chain
from pytest_graphleak.diagnose.memory import array_bytes, survey
from pytest_graphleak.diagnose.render import drawing
from pytest_graphleak.diagnose.roots import Roots, all_roots
from pytest_graphleak.diagnose.search import Path, shortest_path
from pytest_graphleak.diagnose.sites import (
    creation_site,
    per_step,
    recorder_trouble,
    site_recorder,
    user_frame_of,
)
from pytest_graphleak.diagnose.stored import (
    MISSING,
    LineWatch,
    LiveWatch,
    follow_edge,
    root_reader,
    watch_failed,
)
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.metrics import BYTES, format_amount
from pytest_graphleak.probes.autograd.bundle import Site
from pytest_graphleak.result import Diagnosis
from pytest_graphleak.words import notes as said

#: The largest array slots weighed again after the next step (weights updated in place
#: are among them; a buffer smaller than all of them is missed, and the note says so).
SLOTS = 64


@dataclass
class Slot:
    """Where an array sits: ``holder`` and the edge out of it, or a root (``holder`` None,
    read again by its label)."""

    label: str  # the root's label, for a root slot
    holder: object
    edge: Edge | None
    nbytes: int
    kind: str  # "tensor" or "array"
    array: object = None  # what it holds now (at the judgement, then after each line)
    #: reads a root that is a module global or a closure cell again (None: a loop root)
    reader: Callable[[], object] | None = None
    #: after the next step: its bytes, and the line that made the array then held
    nbytes_after: int | None = None
    made_at: Site | None = None
    lines: Counter[Site] = field(default_factory=Counter)


def loop_roots(roots: Mapping[str, object], files: Collection[str] = ()) -> Roots:
    """The loop's roots, the closure cells and module globals of the user functions among
    them (``roots={"step": train_step}``: its state is a global), and the globals of the
    modules of ``files`` (where the recorded steps made tensors)."""
    found = all_roots(roots, None, set(files))
    for value in list(roots.values()):
        if isinstance(value, (types.FunctionType, types.MethodType)):
            found.extend(item for item in all_roots({}, value, set()) if item not in found)
    return found


def weigh_slots(roots: Roots, walker: ObjectEdges) -> list[Slot]:
    """The ``SLOTS`` largest array slots the roots reach, parameters left out (a weight
    is updated in place: it never grows)."""
    found = survey(roots, walker)
    slots: list[Slot] = []
    try:
        for label, obj in roots:
            size = array_bytes(obj, walker)
            if size is not None and not _parameter(obj):
                slot = Slot(label, None, None, size, _kind(obj, walker), obj)
                if label.startswith(("global ", "closure ")):  # not one of the loop's roots
                    slot.reader = root_reader(Path(label, [obj]), dict)
                slots.append(slot)
        for (holder_id, edge), (size, array) in found.slots.items():
            if edge.kind in ("attr", "key", "closure", "local") and not _parameter(array):
                holder = found.held.get(holder_id)
                if holder is not None:
                    slots.append(Slot("", holder, edge, size, _kind(array, walker), array))
    finally:
        found.release()
    slots.sort(key=lambda slot: -slot.nbytes)
    del slots[SLOTS:]
    return slots


def _kind(obj: object, walker: ObjectEdges) -> str:
    found = walker.backend_of(obj)
    return TENSOR if found is not None and found[1] == TENSOR else "array"


def _parameter(obj: object) -> bool:
    """A trained weight (a leaf that requires grad): updated in place, never rebuilt."""
    try:
        return bool(getattr(obj, "requires_grad", False)) and obj.grad_fn is None  # type: ignore[attr-defined]
    except Exception:  # no grad_fn, or a no_grad view changed in place since (it raises)
        return False


class _SlotLines(LineWatch):
    """``LineWatch``'s trace functions, charging each change to the slot that changed."""

    def __init__(self, slots: list[Slot], read: Callable[[], list[object]]) -> None:
        # No chain to fingerprint: the fields the trace functions use, and the slots.
        self.last: Site | None = None
        self.changes: Counter[Site] = Counter()
        self.via: dict[Site, str] = {}
        self.library_line = ""
        self.slots = slots
        self.read = read
        self.failure = ""

    def _check(self) -> None:
        for slot, now in zip(self.slots, self.read(), strict=True):
            if now is not slot.array:
                if self.last is not None:
                    slot.lines[self.last] += 1
                    self.changes[self.last] += 1
                    if self.library_line:
                        self.via.setdefault(self.last, self.library_line)
                slot.array = now


class GrowthWatch:
    """``start()`` after the judged step, ``stop()`` after the next one (as
    ``stored.LiveWatch``), then ``settle(diagnosis, note)``."""

    def __init__(
        self,
        slots: list[Slot],
        walker: ObjectEdges,
    ) -> None:
        self.slots = slots
        #: more arrays were found than are weighed (the smallest were left out)
        self.cut = len(slots) >= SLOTS
        self.walker = walker
        #: reads the loop's roots again (set by the loop before ``start``)
        self.roots: Callable[[], Mapping[str, object]] = dict
        #: files whose module globals are roots too (``loop_roots``)
        self.files: set[str] = set()
        self._lines = _SlotLines(slots, self._read_all)
        self._live = LiveWatch(None, walker, None, lines=self._lines)
        tensors = any(slot.kind == TENSOR for slot in slots)
        self._recorder = site_recorder(walker.backends) if tensors else None
        # Not both: the recorder's own work under tracemalloc slows a step many times.
        arrays = any(slot.kind != TENSOR for slot in slots)
        self._tracing = self._recorder is None and arrays and not tracemalloc.is_tracing()
        self._entered = False
        self.ran = False

    def _read_all(self) -> list[object]:
        """What each slot holds now (the roots read once: a loop's locals are a copy)."""
        given: Mapping[str, object] | None = None
        found: list[object] = []
        for slot in self.slots:
            if slot.holder is not None:
                assert slot.edge is not None
                found.append(follow_edge(slot.holder, slot.edge, self.walker))  # a buffer too
                continue
            if slot.label.startswith(("global ", "closure ")):
                found.append(slot.reader() if slot.reader is not None else MISSING)
                continue
            if given is None:
                try:
                    given = self.roots()
                except Exception:  # a reader that fails is as good as a missing root
                    given = {}
            found.append(given.get(slot.label, MISSING))
        return found

    def start(self) -> None:
        # Only slots that can be read again as they were found are watched (a change
        # before the first line would otherwise be charged to it).
        now = self._read_all()
        self.slots[:] = [
            slot for slot, obj in zip(self.slots, now, strict=True) if obj is slot.array
        ]
        now.clear()
        if self._tracing:
            tracemalloc.start(25)
        if self._recorder is not None:
            self._recorder.__enter__()
            self._entered = True
        self._live.start()

    def stop(self) -> tuple[Counter[Site], dict[Site, str]]:
        """Weigh the slots again and read where their arrays were made (while the
        recording runs), then restore the trace function, the mode and tracemalloc."""
        try:
            changes, via = self._live.stop()  # checks the slots once more first
            for slot in self.slots:
                now = slot.array
                slot.nbytes_after = array_bytes(now, self.walker) if now is not MISSING else None
                slot.made_at = self._made_at(now) if slot.lines else None
            return changes, via
        finally:
            if self._entered and self._recorder is not None:
                with contextlib.suppress(Exception):  # another mode left on top of ours
                    self._recorder.__exit__(None, None, None)
                self._entered = False
            if self._tracing:
                tracemalloc.stop()
                self._tracing = False

    def _made_at(self, obj: object) -> Site | None:
        if self._recorder is not None:
            site = self._recorder.site_of_tensor(obj)
            if site is not None:
                return site
        if tracemalloc.is_tracing():
            traceback = tracemalloc.get_object_traceback(obj)
            return user_frame_of(traceback) if traceback is not None else None
        return None

    def settle(self, diagnosis: Diagnosis, *, ran: bool, why: str) -> None:
        """Name the slot that grew (chain, created at, stored at) in ``diagnosis``; or
        say why none is named. ``ran``: the next step ran to its end."""
        try:
            if not ran:
                diagnosis.notes.append(said.loop_gone(why))
                return
            self._name_grown(diagnosis)
            trouble = recorder_trouble(self._recorder)
            failed = self._lines.failure and watch_failed(self._lines.failure)
            diagnosis.notes.extend(note for note in (trouble, failed) if note)
        finally:
            self.release()

    def _name_grown(self, diagnosis: Diagnosis) -> None:
        grown = [
            slot
            for slot in self.slots
            if slot.nbytes_after is not None and slot.nbytes_after > slot.nbytes
        ]
        if not grown:
            diagnosis.notes.append(said.none_grew(len(self.slots), cut=self.cut))
            return
        slot = max(grown, key=lambda s: (s.nbytes_after or 0) - s.nbytes)
        path = self._path_to(slot)
        if path is None:
            diagnosis.notes.append(said.NO_LONGER_REACHED)
            return
        try:
            set_chain(diagnosis, path, self.walker)
            diagnosis.drawing = diagnosis.drawing or drawing(path, None, self.walker)
        finally:
            path.clear()
        after = slot.nbytes_after or 0
        added, now = format_amount(after - slot.nbytes, BYTES), format_amount(after, BYTES)
        diagnosis.notes.append(said.grew_by(added, now, rebuilt=bool(slot.lines)))
        if slot.made_at is not None or slot.lines:  # the next step showed its lines
            diagnosis.notes[:] = [note for note in diagnosis.notes if note != said.NO_LINES]
        if slot.made_at is not None:
            diagnosis.sites = [creation_site(slot.made_at, 1)]
        if slot.lines:
            diagnosis.stored_at = per_step(slot.lines, 1, self._lines.via)
        else:
            diagnosis.notes.append(said.NO_STORED_AT)

    def _path_to(self, slot: Slot) -> Path | None:
        """The chain to the slot's array: to its holder, then the slot's edge (a search
        does not pass into a numpy array, so it is never a search's target)."""
        if slot.holder is None:
            return Path(slot.label, [slot.array])
        holder = slot.holder
        roots = loop_roots(self.roots(), self.files)
        path = shortest_path(roots, lambda o: o is holder, self.walker)
        if path is not None:
            assert slot.edge is not None
            path.edges.append(slot.edge)
            path.objects.append(slot.array)
        return path

    def release(self) -> None:
        for slot in self.slots:
            slot.holder = slot.array = slot.reader = None
        self.slots.clear()
        if self._recorder is not None:
            self._recorder.forget()
        self.roots = dict


def watch_growth(
    diagnosis: Diagnosis,
    roots: Mapping[str, object],
    walker: ObjectEdges,
    *,
    next_step: bool,
    files: Collection[str] = (),
) -> GrowthWatch | None:
    """At a loop's memory-growth judgement: the largest slots to weigh after the next
    step, or None with a note when no next step will be watched (``next_step`` False:
    judged after the loop ended) or the roots reach no array."""
    if not next_step:
        diagnosis.notes.append(said.loop_gone(said.LOOP_ENDED))
        return None
    slots = weigh_slots(loop_roots(roots, files), walker)
    if not slots:
        diagnosis.notes.append(said.NO_ARRAYS)
        return None
    watch = GrowthWatch(slots, walker)
    watch.files = set(files)
    return watch
