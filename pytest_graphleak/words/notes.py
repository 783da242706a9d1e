"""The notes of a diagnosis: what its steps (re-run, or a running loop's recorded ones)
left alive, what a cycle freed, a holder seen growing, a second holder, and why no
holder, line or site could be named. ``diagnose/`` finds and counts; this module words
what it found, from names and numbers only."""

from __future__ import annotations

from pytest_graphleak.heap.graphwalk import NEW_PER_WALK
from pytest_graphleak.metrics import count_of

TOO_LARGE = (
    "the leaked graph is too large to walk whole (it must stay freeable): graph "
    "node counts here are lower bounds, and only its first "
    f"{NEW_PER_WALK:,} nodes have a creation site"
)
GROWING_SITES = (
    "sites: the lines that made what grows (the grown tensor or "
    "array, or the growing container's newest entries)"
)
TRACED_SITES = "sites: lines whose Python/numpy allocations grew over 2 steps (tracemalloc)"


def steps_word(rerun: bool) -> str:
    """The steps the diagnosis looked at: re-run ones, or a running loop's recorded ones."""
    return "diagnostic steps" if rerun else "recorded steps of the loop"


def step_raised(error: str) -> str:
    return f"the step raised during diagnosis: {error}"


def tracing_raised(exc: BaseException) -> str:
    return f"the step raised while tracing memory: {type(exc).__name__}: {exc}"


def still_alive(runs: int, steps: str, later: int, tensors: int, nodes: int) -> str:
    return (
        f"made by {runs} {steps} and still alive {later}+ steps later: "
        f"{count_of(tensors, 'tensor')}, {count_of(nodes, 'graph node')}"
    )


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
    return (
        f"{not_reached}: a reference cycle that the collector cannot free holds them "
        "(part of it is inside torch)"
    )


def holds_recorded(container: str, length: int, runs: int) -> str:
    """A container on the chain holds what several recorded steps of a loop made."""
    return f"{container} on the chain (len {length}) holds what each of {runs} recorded steps made"


def holds_some_recorded(container: str, length: int, runs: int, recorded: int, period: int) -> str:
    """... or what some of them made, of a leak slower than one object a step."""
    return (
        f"{container} on the chain (len {length}) holds what {runs} of {recorded} recorded "
        f"steps made, and the counts grow by about one every {period} steps"
    )


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
LOOP_RAISED = "the loop raised during the step after the judged one"

# Why a loop's leak has no ``stored at:`` line (``diagnose.for_loop.settle``: the step
# after the judged one is watched for it), by what followed the judged step.
ENDED_NOT_STORED = (
    f"{LOOP_ENDED}: no later step ran in which to see the line that stores the leak (stored at)"
)
RAISED_NOT_STORED = f"{LOOP_RAISED}: no stored-at line"
NOT_STORED_NEXT_STEP = (
    "no user line changed the holder during the loop's next step, so no stored-at line "
    "(stored less often than once a step, or by library code that no user line calls)"
)
NO_ARRAYS = (
    "no holder named: the loop's roots reach no tensor or array (a holder is "
    "looked for from them: give track() or the callback the objects that keep "
    "state)"
)
NO_LONGER_REACHED = (
    "no holder named: the array that grew is no longer reached from the loop's roots"
)
NO_STORED_AT = (
    "no stored-at line: no user line put a new array in its place during the "
    "loop's next step (it grew in place, or by library code)"
)


def none_grew(count: int, *, cut: bool) -> str:
    """None of the ``count`` weighed arrays grew (``cut``: more were found than weighed)."""
    which = (
        f"none of the {count} largest arrays the loop's roots reach grew"
        if cut
        else f"none of the {count} arrays the loop's roots reach grew"
        if count > 1
        else "the one array the loop's roots reach did not grow"
    )
    smaller = "what grows is smaller than them, " if cut else ""
    return (
        f"no holder named: {which} during the loop's next step ({smaller}grows less "
        "often than once a step, or is held where the roots do not lead)"
    )


def grew_by(added: str, now: str, *, rebuilt: bool) -> str:
    """The holder's array grew by ``added`` (now ``now``): rebuilt, or grown in place."""
    how = "a new array in the same place" if rebuilt else "the same array"
    return f"grew by {added} during the loop's next step (now {now}): {how}"


# No chain from the roots (``diagnose.holders``): what the search proved, and where the
# holder may be instead.

#: The root label of a chain that starts at a holder no root reaches.
UNROOTED = "unknown root"
NOT_REACHED = "no chain from a fixture, global, closure or self reaches the leaked objects"


def search_stopped(cut: list[str], others: int, visited: int, limits: tuple[int, int, int]) -> str:
    """The search stopped at its budget (``limits``: objects in all, from one root, the
    newest entries of a container) before it saw all that the roots ``cut`` reach;
    ``others``: the roots it searched whole."""
    most, per_root, items = limits
    named = ", ".join(cut[:3]) + (f" and {len(cut) - 3} more" if len(cut) > 3 else "")
    whole = (
        f"; no chain from the {count_of(others, 'other root')}, searched whole" if others else ""
    )
    return (
        "no chain found from a fixture, global, closure or self to the leaked objects: the "
        f"search stopped at its budget (it looked at {visited:,} objects: at most "
        f"{most:,} in all, {per_root:,} from one root, the newest "
        f"{items:,} entries of a container) before it had seen all that {named} "
        f"{'reaches' if len(cut) == 1 else 'reach'}{whole}"
    )


def thread_local(name: str, function: str, place: str, thread: str) -> str:
    return f"local '{name}' of {function}() at {place} in thread '{thread}'"


def held_by_threads(locals_: list[str]) -> str:
    return "held by the local variables of a thread that is still running: " + "; ".join(locals_)


def referred_to(not_reached: str, kinds: str) -> str:
    return f"no holder found: {not_reached}; they are referred to by: {kinds}"


def unreferred(not_reached: str) -> str:
    """Nothing the diagnosis can see refers to the leaked objects: why that may be."""
    return (
        f"no holder found: {not_reached}, and no Python object refers to them. "
        "They may be held from C++ "
        "(autograd hooks, saved tensors, a custom Function's ctx, an extension), by the "
        "local variables of a thread that is still running, or as the base of a numpy "
        "array made with .numpy() (the array keeps its tensor alive; Python's gc does "
        "not see that link)"
    )


def found_by_referrers(not_reached: str) -> str:
    return (
        f"{not_reached}: "
        f"the chain ({UNROOTED} -> ...) starts at what holds them, found by asking who "
        "refers to them (e.g. a fixture fetched with request.getfixturevalue, or a "
        "library's own list)"
    )


# The heap as it is (``diagnose.heap``: a hand-written loop that cannot re-run a step).

NO_LINES = (
    "no created-at or stored-at line: a running loop's steps cannot be re-run and none "
    "was recorded before this judgement, so the diagnosis looked at the heap as it is "
    "(graphleak.check(step) re-runs a step and names the lines)"
)
CYCLES_FREED = (
    "each step's tensors or graph nodes were freed only by gc.collect(): a reference cycle "
    "holds them, and the check's own collection after each step freed it before the "
    "diagnosis could draw it; graphleak.check(step) re-runs the step and draws the cycle"
)


def container_of(kind: str, length: int, *, graph: bool) -> str:
    """The container the roots reach, of ``length`` graph-carrying items (or tensors)."""
    what = "graph-carrying items" if graph else "tensors without a graph"
    return f"{kind} of {length} {what}"


def graph_size(size: str) -> str:
    """``size``: the node count as text ("5012+" past the walk's bound)."""
    return f"its autograd graph has {size} {'node' if size == '1' else 'nodes'}"


def churn(library: str, per_step: float, line: str, via: str) -> str:
    """A library's own cycles held ``per_step`` tensors without a graph each step, made
    at ``line`` ("" unknown), through the library line ``via`` ("" none)."""
    count = f"{per_step:.0f}" if per_step == int(per_step) else f"{per_step:.1f}"
    who = f"the library {library}" if library else "a library"
    made = f" (created at {line}" + (f" via {via})" if via else ")") if line else ""
    return (
        f"{who} makes {count} {'tensor' if count == '1' else 'tensors'} a step that "
        f"only the cyclic collector frees{made}: its own reference cycles hold them, "
        "they carry no autograd graph and none of your objects is on those cycles, so "
        "they are not a leak of yours (every gc.collect() frees them all)"
    )


def watch_failed(failure: str) -> str:
    """The note on a line watch that failed (``stored.LineWatch.failure``)."""
    return f"stored at: unknown, the line watch that looks for it failed ({failure})"


def grown(name: str, before: int, now: int, every: str, *, sized: bool, rebuilt: bool) -> str:
    """A holder on the chain, seen growing while steps ran: ``sized`` a container (its
    length), else an object (its attributes); ``rebuilt``: a longer copy put in its place."""
    if not sized:
        gained = count_of(now - before, "attribute")
        return f"{name} on the chain gains {gained} {every} ({before} -> {now})"
    if rebuilt:  # ``h = h + [loss]``: a new list in its place, one entry longer
        return (
            f"{name} on the chain is replaced by a longer one {every} (len {before} -> "
            f"{now}): each step's copy keeps the old entries and adds new ones"
        )
    return f"{name} on the chain grows by {now - before} {every} (len {before} -> {now})"


def second_holder(kept: str, total: str, other: str, plural: bool, chain: str, where: str) -> str:
    """Another holder keeps ``other`` of the ``total`` graph-carrying tensors a step leaves."""
    return (
        f"a second holder: the holder above keeps {kept} of the "
        f"{total} graph-carrying tensors each step leaves; the other "
        f"{other} {'are' if plural else 'is'} kept by "
        f"{chain}{where}. Fix both, or the check fails again on this one"
    )


def recording_failed(doing: str, exc: BaseException) -> str:
    return f"the creation-site recording failed to {doing}: {type(exc).__name__}: {exc}"


def unread_outputs(failures: int, first: str) -> str:
    """The site recorder could not read what ``failures`` operations returned."""
    ops = "operation" if failures == 1 else f"{failures} operations"
    return (
        f"the creation-site recorder could not read what {ops} of the step returned "
        f"(first: {first}); where those were made is unknown"
    )
