"""What a running loop (``loop.LoopCheck``) asks of the diagnosis: its one entrance.

A loop records the creation sites of a few steps before the judged one, hands what it
recorded to ``pipeline.conclude`` as an ``Observation``, then watches during the next
step: the holder's chain (``stored at:``) or, for memory growth, the arrays its roots
reach. The loop imports nothing else of ``diagnose/``, so the recorder, the watches and
how a watch's findings enter the diagnosis can change without touching the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from pytest_graphleak.diagnose.loop_memory import GrowthWatch
from pytest_graphleak.diagnose.loop_recorder import LoopRecorder
from pytest_graphleak.diagnose.observed import Observation
from pytest_graphleak.diagnose.sites import per_step
from pytest_graphleak.diagnose.stored import LiveWatch, root_reader, watch_failed
from pytest_graphleak.result import Diagnosis
from pytest_graphleak.words import notes as said
from pytest_graphleak.words.fix import choose_fix

__all__ = [
    "After",
    "LoopRecorder",
    "NextStepWatch",
    "Observation",
    "heap_observation",
    "settle",
    "watch_holder",
]


class NextStepWatch(Protocol):
    """A watch over the step after the judged one (``LiveWatch``, ``GrowthWatch``)."""

    def start(self) -> None: ...

    def stop(self) -> tuple[Any, Any]: ...


def heap_observation(*, follow: bool) -> Observation:
    """The observation of a leak no step was recorded for: the heap as it is, and (when
    ``follow``) the next step watched."""
    return Observation(0, 0, wants_follow=follow)


def watch_holder(follow: tuple[Any, Any], roots: Callable[[], Mapping[str, object]]) -> LiveWatch:
    """Watch the chain the diagnosis found (``Observation.follow``) during the next step,
    reading its root again from the loop's ``roots`` where it can."""
    path, walker = follow
    return LiveWatch(path, walker, root_reader(path, roots))


#: What followed the judged step: the next step ran to its end, the loop ended, or the
#: next step raised.
After = Literal["step", "ended", "raised"]
#: The note when no storing line was seen, and why a memory watch saw nothing, by ``After``.
_UNSEEN = {
    "step": said.NOT_STORED_NEXT_STEP,
    "ended": said.ENDED_NOT_STORED,
    "raised": said.RAISED_NOT_STORED,
}
_GROWTH_UNSEEN = {"step": "", "ended": said.LOOP_ENDED, "raised": said.LOOP_RAISED}


def settle(watch: NextStepWatch, diagnosis: Diagnosis | None, *, after: After) -> None:
    """Stop ``watch`` after the next step and put what it saw into ``diagnosis``: a memory
    watch's holder and lines, or the lines that stored the leak (the fix is then chosen
    again, worded for them); else a note saying why none (``after``: what followed the
    judged step)."""
    ran, why, unseen = after == "step", _GROWTH_UNSEEN[after], _UNSEEN[after]
    changes, via = watch.stop()
    if isinstance(watch, GrowthWatch):
        if diagnosis is None:
            watch.release()
        else:
            watch.settle(diagnosis, ran=ran, why=why)
            diagnosis.fix = choose_fix(diagnosis)
    elif diagnosis is not None and changes:
        diagnosis.stored_at = per_step(changes, 1, via)
        diagnosis.fix = choose_fix(diagnosis)  # worded for the line just found
    elif diagnosis is not None and isinstance(watch, LiveWatch) and watch.failure:
        diagnosis.notes.append(watch_failed(watch.failure))  # not "no line was seen"
    elif diagnosis is not None:
        diagnosis.notes.append(unseen)
