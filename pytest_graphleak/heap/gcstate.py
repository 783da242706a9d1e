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
from collections.abc import Callable, Iterator
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
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return int(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


def user_frozen_count() -> int:
    """Objects frozen by someone other than the interpreter. After a check's unfreeze,
    3.12's own objects sit unfrozen until its next full collection freezes them again:
    harmless, and not counted here."""
    frozen = gc.get_freeze_count()
    return max(0, frozen - interpreter_frozen()) if frozen else 0


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
        #: The session's freezes this check lifted (``HeldFreeze``), resumed by ``end()``.
        self._lifted: list[session.Freeze] = []

    def begin(self) -> None:
        if self._saved is None:  # a check sees the heap as the user froze it, not the audit
            self._lifted = list(session.current().freezes)
            for held in self._lifted:
                held.lift()
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
            lifted, self._lifted = self._lifted, []
            for held in lifted:
                held.resume()


class HeldFreeze:
    """A freeze held across one test by the outlive audit (``engine/outlive``), so that
    after the test ``gc.get_objects()`` returns only what the test made and kept.

    A check that begins inside the test (the marker, the fixture, a framework callback)
    lifts it: the check must see the heap as the user froze it. ``on_lift`` runs first
    (the audit notes what the test made so far), and the freeze comes back when the
    last check ends (after ``on_resume``), so what the test makes after it is seen
    again. Never held when the user has frozen objects: gc cannot unfreeze ours alone.
    Held, it is listed in the session (``session.current().freezes``), where the checks
    of the test, its threads included, find it, and which releases it if the test ends
    still holding it.

    ``gc.get_freeze_count()`` walks the whole frozen heap (0.2 s on 200k objects), so
    whether someone else froze or unfroze meanwhile is told by two markers instead: one
    made just before our freeze (frozen by it) and one just after (left unfrozen).
    """

    def __init__(self, on_lift: Callable[[], None],
                 on_resume: Callable[[], None] = lambda: None) -> None:  # fmt: skip
        self._on_lift = on_lift
        self._on_resume = on_resume
        self._depth = 0  # checks running now
        self._frozen = False
        self._before: list[None] | None = None
        self._after: list[None] | None = None
        self.held = False
        self._listed_in: list[session.Freeze] | None = None

    def hold(self) -> bool:
        """Freeze and list it in this context's session; False (nothing done) when the
        user froze objects."""
        if user_frozen_count() > 0:  # O(frozen objects): none, as a rule
            return False
        self._freeze()
        self.held = True
        self._listed_in = session.current().freezes
        self._listed_in.append(self)
        return True

    def _freeze(self) -> None:
        self._before = [None]
        gc.freeze()
        self._after = [None]
        self._frozen = True

    def lift(self) -> None:
        self._depth += 1
        if self._depth == 1 and self._frozen:
            self._on_lift()
            gc.unfreeze()
            self._frozen = False

    def resume(self) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self.held and not self._frozen:
            self._on_resume()
            self._freeze()

    def fresh_objects(self) -> list[object] | None:
        """``gc.get_objects()``: the objects made since the freeze; None when it is not
        ours alone any more (someone froze or unfroze meanwhile) or not held."""
        if not (self.held and self._frozen):
            return None
        objects = gc.get_objects()
        before = after = False
        for obj in objects:
            if obj is self._before:
                before = True
            elif obj is self._after:
                after = True
        if before or not after:
            objects.clear()
            return None
        return objects

    def release(self, *, intact: bool | None = None) -> None:
        """Unfreeze (when the freeze is still ours alone: ``intact``, or looked up) and
        take it off the session's list; safe twice."""
        if self._listed_in is not None and self in self._listed_in:
            self._listed_in.remove(self)
        self._listed_in = None
        if self.held and self._frozen:
            if intact is None:
                fresh = self.fresh_objects()
                intact = fresh is not None
                if fresh is not None:
                    fresh.clear()
            if intact:
                gc.unfreeze()
        self.held = False
        self._frozen = False
        self._before = self._after = None


@contextlib.contextmanager
def audit_freeze_lifted() -> Iterator[None]:
    """The session's freezes (the outlive audit's) lifted for a whole check, its diagnosis
    included: ``gc.get_referrers`` and ``gc.get_objects`` never look at frozen objects, so
    under the audit's freeze a diagnosis would find no referrer of what the test made
    before the check (a fixture's dict: "no holder found"). Nested lifts count."""
    held = list(session.current().freezes)
    for freeze in held:
        freeze.lift()
    try:
        yield
    finally:
        for freeze in held:
            freeze.resume()
