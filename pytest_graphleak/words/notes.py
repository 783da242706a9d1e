"""The notes of a diagnosis made from steps (re-run, or a running loop's recorded ones):
what they left alive, what a cycle freed, what the walk could not finish. ``diagnose``
counts; this module words the counts."""

from __future__ import annotations

from pytest_graphleak.heap.graphwalk import NEW_PER_WALK
from pytest_graphleak.metrics import count_of

TOO_LARGE = (
    "the leaked graph is too large to walk whole (it must stay freeable): graph "
    "node counts here are lower bounds, and only its first "
    f"{NEW_PER_WALK:,} nodes have a creation site"
)
GROWING_SITES = ("sites: the lines that made what grows (the grown tensor or "
                 "array, or the growing container's newest entries)")  # fmt: skip
TRACED_SITES = "sites: lines whose Python/numpy allocations grew over 2 steps (tracemalloc)"


def steps_word(rerun: bool) -> str:
    """The steps the diagnosis looked at: re-run ones, or a running loop's recorded ones."""
    return "diagnostic steps" if rerun else "recorded steps of the loop"


def step_raised(error: str) -> str:
    return f"the step raised during diagnosis: {error}"


def tracing_raised(exc: BaseException) -> str:
    return f"the step raised while tracing memory: {type(exc).__name__}: {exc}"


def still_alive(runs: int, steps: str, later: int, tensors: int, nodes: int) -> str:
    return (f"made by {runs} {steps} and still alive {later}+ steps later: "
            f"{count_of(tensors, 'tensor')}, {count_of(nodes, 'graph node')}")  # fmt: skip


def none_alive(steps: str) -> str:
    return f"no tensor or graph node made by the {steps} stayed alive"


def cyclic(tensors: int, nodes: int) -> str:
    """What the re-run steps made that only the collector frees."""
    return (
        f"{count_of(tensors, 'tensor')} and {count_of(nodes, 'graph node')} made by the "
        "diagnostic steps are freed only by gc.collect(): they are kept by a reference cycle"
    )


def loop_freed(freed: int) -> str:
    """What a running loop's collections freed among its recorded steps' objects."""
    return (
        f"{count_of(freed, 'tensor or graph node', 'tensors and graph nodes')} made by the "
        "recorded steps of the loop were freed only by the check's gc.collect() after each "
        "step: they are kept by a reference cycle"
    )


def uncollectable(not_reached: str) -> str:
    """No chain from the roots (``not_reached`` says how far it looked), yet a cycle."""
    return (f"{not_reached}: a reference cycle that the collector cannot free holds them "
            "(part of it is inside torch)")  # fmt: skip


def holds_recorded(container: str, length: int, runs: int) -> str:
    """A container on the chain holds what several recorded steps of a loop made."""
    return f"{container} on the chain (len {length}) holds what each of {runs} recorded steps made"


def holds_some_recorded(container: str, length: int, runs: int, recorded: int, period: int) -> str:
    """... or what some of them made, of a leak slower than one object a step."""
    return (f"{container} on the chain (len {length}) holds what {runs} of {recorded} recorded "
            f"steps made, and the counts grow by about one every {period} steps")  # fmt: skip


def took(seconds: float) -> str:
    return f"diagnosis took {seconds:.2f} s"


# A running loop's growing memory (``diagnose.loop_memory``): the holder weighed again
# after the loop's next step, or why none is named.


def loop_gone(why: str) -> str:
    return (
        "no holder named: only memory grew, and a loop's growing array is found by weighing "
        f"the arrays its roots reach again after one more step; {why}"
    )


LOOP_ENDED = "the loop ended at the judged step"
NO_ARRAYS = (
    "no holder named: the loop's roots reach no tensor or array (a holder is "
    "looked for from them: give track() or the callback the objects that keep "
    "state)"
)
NO_LONGER_REACHED = ("no holder named: the array that grew is no longer "
                     "reached from the loop's roots")  # fmt: skip
NO_STORED_AT = (
    "no stored-at line: no user line put a new array in its place during the "
    "loop's next step (it grew in place, or by library code)"
)


def none_grew(count: int, *, cut: bool) -> str:
    """None of the ``count`` weighed arrays grew (``cut``: more were found than weighed)."""
    which = (
        f"none of the {count} largest arrays the loop's roots reach grew"
        if cut else
        f"none of the {count} arrays the loop's roots reach grew" if count > 1 else
        "the one array the loop's roots reach did not grow"
    )  # fmt: skip
    smaller = "what grows is smaller than them, " if cut else ""
    return (f"no holder named: {which} during the loop's next step ({smaller}grows less "
            "often than once a step, or is held where the roots do not lead)")  # fmt: skip


def grew_by(added: str, now: str, *, rebuilt: bool) -> str:
    """The holder's array grew by ``added`` (now ``now``): rebuilt, or grown in place."""
    how = "a new array in the same place" if rebuilt else "the same array"
    return f"grew by {added} during the loop's next step (now {now}): {how}"
