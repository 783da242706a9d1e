"""The garbage collector's state: the one module that changes it.

A check changes gc while it measures and must leave it exactly as the user had it,
after a clean run, a leak, a step that raises and a Ctrl-C:

* automatic collection is off, so cyclic garbage waits for the check's own
  ``gc.collect()`` (that is what the cyclic-garbage probe counts); a check that samples
  only every k-th step (window mode) gives the user's collection back between samples
  (``release``) and takes it again for the step that ends in a sample (``hold``);
* debug flags are cleared (``DEBUG_SAVEALL`` would keep every collected object alive);
* ``gc.freeze()`` makes ``gc.get_objects()`` return only the objects created since, so a
  sample costs O(new objects), not O(heap).

The user's state is recorded when a check begins, never earlier: objects the user froze
before importing the plugin are as much theirs as those frozen after. When the user has
frozen objects, the check does not freeze at all: gc cannot unfreeze a chosen set, so
ours could not be undone without unfreezing theirs (or keeping what the check left alive
frozen forever). It then sees the whole unfrozen heap instead (``whole_heap``): exact,
O(unfrozen heap) per sample, and the freeze count stays theirs.
"""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
from collections.abc import Iterator
from functools import cache

from pytest_graphleak import session

_FRESH_FROZEN = "import gc; gc.collect(); print(gc.get_freeze_count())"


@cache
def interpreter_frozen() -> int:
    """Objects the interpreter keeps frozen by itself: none, except on CPython 3.12, whose
    every full collection moves its immortal objects (a few hundred) to the permanent
    generation. Learned once from a fresh interpreter: in this one they may already sit
    with the user's. Unknown (0): every frozen object counts as the user's (exact, slower)."""
    if sys.version_info[:2] != (3, 12) or sys.implementation.name != "cpython":
        return 0
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _FRESH_FROZEN],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return int(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


def user_frozen_count() -> int:
    """Objects frozen by someone other than the interpreter. After a check's unfreeze,
    3.12's own objects sit unfrozen until its next full collection freezes them again:
    harmless, and not counted here."""
    frozen = gc.get_freeze_count()
    return max(0, frozen - interpreter_frozen()) if frozen else 0


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Automatic collection off while a bounded walk of the heap runs, then as it was.

    A chain search makes tens of thousands of short-lived objects (edges, its queue's
    entries) and drops them all when it returns; on a big heap those allocations set off
    a full collection of everything (0.3-2 s at 1.5M objects) that frees nothing of the
    user's. Nothing the walk sees changes: it only reads what the roots reach."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def collect_young() -> int:
    """A collection of the two younger generations: where everything a step made lies
    when automatic collection was off during it. A long run sampled every k-th step
    (window mode) collects so after the sampled step: the steps between samples run with
    the user's own gc, which looks after the oldest generation. A full collection also
    empties the interpreter's free lists (~70 us after a training step, where this takes
    ~15 us, and the next step refills them)."""
    return gc.collect(1)


class Measuring:
    """gc as a check needs it from ``begin()`` to ``end()``.

    ``objects()`` is the one "objects since the freeze" mechanism: the objects created
    since the last ``freeze()``, or the whole unfrozen heap when the user froze objects
    (``whole_heap``; then ``freeze()`` does nothing)."""

    def __init__(self) -> None:
        #: what the user set: automatic collection, thresholds, debug flags
        self._saved: tuple[bool, tuple[int, ...], int] | None = None
        self._froze = False
        self.whole_heap = False
        #: gc is as the check needs it (off, no debug flags); False between ``release()``
        #: and ``hold()``.
        self.held = False
        #: Told that this check began (the outlive audit's census), and told when it ends.
        self._told: list[session.CheckSpan] = []

    def begin(self) -> None:
        if self._saved is None:
            self._told = list(session.current().spans)
            for span in self._told:
                span.check_begins()
        self._saved = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
        self.whole_heap = user_frozen_count() > 0
        self.hold()

    def hold(self) -> None:
        """Automatic collection off and debug flags cleared, until ``release()``."""
        gc.disable()
        gc.set_debug(0)
        self.held = True

    def release(self) -> None:
        """The user's automatic collection and debug flags back while the check waits
        for its next sample; the freeze stays (it is what makes a sample cheap)."""
        if self._saved is not None and self.held:
            self._restore()

    def _restore(self) -> None:
        assert self._saved is not None
        enabled, threshold, debug = self._saved
        gc.set_debug(debug)
        gc.set_threshold(*threshold)
        (gc.enable if enabled else gc.disable)()
        self.held = False

    def freeze(self) -> None:
        """Move the baseline: later ``objects()`` see only what is created from now on."""
        if self._saved is not None and not self.whole_heap:
            gc.freeze()
            self._froze = True

    @staticmethod
    def objects() -> list[object]:
        return gc.get_objects()

    def collect_saving(self) -> list[object]:
        """One full collection that hands back what it freed (``DEBUG_SAVEALL``), leaving
        ``gc.garbage`` as it was. The caller owns the list and should clear it."""
        start = len(gc.garbage)
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
        finally:
            gc.set_debug(0)
        garbage = gc.garbage[start:]
        del gc.garbage[start:]
        return garbage

    def end(self) -> None:
        """Put everything back; safe to call more than once."""
        if self._froze:  # only ever when the user had frozen nothing: unfreeze is exact
            gc.unfreeze()
            self._froze = False
        if self._saved is not None:
            self._restore()
            self._saved = None
            told, self._told = self._told, []
            for span in told:
                span.check_ends()
