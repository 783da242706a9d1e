"""Why a printed fix is not verified: one clause each, said after "not verified" on the
fix line (``diagnose.fix_verify`` decides which; the pipeline and the outlive audit say
the ones for a step they cannot re-run)."""

from __future__ import annotations

OFF = "fix verification is off (--graphleak-verify-fix=off)"
LOOP = "the step of a running loop (track(), a framework callback) cannot be re-run"
AUDIT = "the outlive audit does not re-run the test (--graphleak-outlive-sites=rerun does)"
FIXTURE_TEARDOWN = (
    "judged at a wider-scope fixture's teardown, after the tests that made the graph had "
    "ended: no test is run again for it, so no change was tried"
)
LIBRARY = "the line to change is in a library, not in your code"
NO_LINE = "no line to change was found"
CYCLE_UNTRIED = (
    "for a reference cycle, the changes tried are a closure's captured variable or a hook's "
    "bound method held weakly, a pack hook's return detached, a checkpoint made "
    "non-reentrant and a hook's handle removed after a backward, and none could be built "
    "for this one (a hook's handle is removed only where the hook is registered in a "
    "statement of its own and a later statement of the same block calls backward)"
)
CTX_UNTRIED = (
    "the cycle runs through a ctx attribute: the fix saves the tensor with "
    "ctx.save_for_backward in forward and reads ctx.saved_tensors in backward, a change "
    "in two functions, which is not tried"
)
NOTHING_BUILT = "no change could be built from that line"
NOT_RUN = "no function that the step calls runs that line"
#: Added to the advice when a change cut the graph but what it stores still piles up.
PILED_UP = (
    "; cutting the graph alone does not fix it here: with the graph cut, what it keeps "
    "still grew every step, so also bound or clear it (collections.deque(maxlen=N), or "
    "empty it once the values are used)"
)


def not_rerun(why: str) -> str:
    """The outlive audit's re-run mode does not run this test again (``why``: its
    refusal, ``plugin.outlive_rerun.refusal``)."""
    return f"the test is not run again, so no change was tried: {why}"


def rerun_failed(why: str) -> str:
    """The re-run that looks for a finding's sites did not pass (``why``: "its setup
    failed"): no line to change, no change tried."""
    return f"no change was tried: the test's re-run to find its sites did not pass ({why})"


def unreadable(path: str) -> str:
    return f"{path} could not be read"


def failed(exc: BaseException) -> str:
    """Verification itself raised (the leak is still reported)."""
    return f"verifying it failed: {type(exc).__name__}: {exc}"


def raised(exc: BaseException) -> str:
    """A change under which the step raised: no fix."""
    return f"raised {type(exc).__name__}"


def none_held(tried: int, ran: int, grown: list[str], *, runs: bool = False) -> str:
    """How the ``tried`` changes failed, never the changes themselves (a change that
    failed is not printed): ``ran`` of them ran and left ``grown`` growing (``runs``:
    the outlive audit's re-runs of the test, which left graphs alive in the holders
    ``grown``)."""
    how = [f"{tried - ran} could not run or raised"] if ran < tried else []
    if ran and runs:
        how.append(f"{ran} left graphs alive after the test in {', '.join(grown)}")
    elif ran:
        how.append(f"{ran} left {', '.join(grown)} growing")
    count = (
        f"none of the {tried} changes tried held"
        if tried > 1
        else "the one change tried did not hold"
    )
    return f"{count}: {' and '.join(how)}"


# Why a change could not be put in the step's code (``diagnose.fix_swap.NotSwappable``).

IN_LAMBDA = "the line is in a lambda"


def unparsable(message: str) -> str:
    return f"the changed file does not parse: {message}"


def no_def(function: str, line: int) -> str:
    return f"no def of {function} starts at line {line}"


def uncompilable(exc: BaseException) -> str:
    return f"the changed function does not compile: {exc}"


def code_not_found(function: str) -> str:
    return f"the compiled code of {function} was not found"


def other_closure(function: str) -> str:
    return f"{function} would close over other variables"
