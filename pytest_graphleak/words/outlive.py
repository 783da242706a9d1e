"""The outlive audit's words: a finding's reason and notes, what its re-run found or could
not, why no site is named, and the summary's notes on what the audit could not see.
``outlive/`` finds and counts; this module words it, from names and numbers only."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_graphleak.result import JUDGED_AT_FIXTURE_TEARDOWN

#: A holder the keep list (``graphleak_outlive_keep``) names: the root of what it keeps.
KEPT_ON_PURPOSE = "kept on purpose"
#: What the first run's story says when the re-run is its source.
FOUND_BY = (
    "created at and stored at: from one more run of the test (--graphleak-outlive-sites=rerun)"
)
#: The re-run's own notes start with these (no "created at: unknown" is added after them).
RAN_AGAIN, NOT_RUN_AGAIN = "the test ran once more", "the test is not run again"
NO_SITE_KEPT = "created at: unknown (no site recorded for what it keeps)"
NO_STORING_LINE = "stored at: no user line of the re-run changed the holder"
IN_PLACE = (
    "an in-place op (+=, add_()) extended the graph of a tensor that had none or an "
    "older one: each test that does so chains its graph onto the same one"
)
CALL_NOT_RUN, NOT_COUNTED = "its call phase did not run", "it could not be counted"
#: Templates (``str.format``): the audit failed in a test (node id, error type, error); a
#: re-run refused (why), or failed (``PHASE_FAILED``, or another why).
AUDIT_FAILED = "outlive audit failed in {}: {}: {}"
NOT_RERUN = NOT_RUN_AGAIN + " to find its sites: {}"
PHASE_FAILED = "its {} failed"
RERUN_FAILED = RAN_AGAIN + " to find its sites, but {}: created at and stored at unknown"
MADE_BEFORE = (
    "created at: unknown (sites are recorded for {} graphs only, and the test that "
    "made it ran before)"
)
HOLDERS_NAMED = "at most {} holders are named per test: what other holders keep was not looked for"
KEPT_BY = "made during {}; kept by {} until its teardown"
CLASS_ATTRIBUTE = "class attribute '{}.{}'"


def rerun_left_none(call_error: str) -> str:
    """The re-run left nothing in this holder (``call_error``: what its call raised)."""
    raised = f"raised {call_error} in its call and " if call_error else ""
    return (
        f"{RAN_AGAIN} to find where its graphs were made, and that run {raised}left "
        "none in this holder: created at and stored at unknown"
    )


def no_sites(libraries: str, *, hint: bool = True) -> str:
    """``libraries`` (their names) record no creation site while a test runs; ``hint``:
    say how to find them."""
    tail = (
        (
            "; --graphleak-outlive-sites=rerun runs a test with a finding once more to find "
            "them and the line that stored the graph"
        )
        if hint
        else ""
    )
    return (
        f"created at: unknown ({libraries} creation sites are not recorded while a test runs{tail})"
    )


def unseen(reached: bool | None, count: int, first: str, visited: int, gate: int) -> str:
    """The summary's note on graphs left alive that no holder search named: ``reached``, a
    first look (the climb from the graphs, or the walk from the roots) found roots holding
    them; else the roots reach more than ``gate`` objects; the search stops at
    ``visited``."""
    tests = f"{count} test{'s' if count != 1 else ''}"
    budget = f"stops at {visited:,} objects"
    if reached:
        return (
            f"outlive audit: {tests} left graphs alive that a first, unlabelled look "
            f"found your roots holding but the holder search did not name (it follows "
            f"fewer references than that look, and {budget}): not reported; the first: "
            f"{first}"
        )
    return (
        f"outlive audit: in {tests} your roots reach more than {gate:,} objects, so "
        f"only the holder search looked for the graphs left alive, and it {budget}: "
        f"one kept past that is not named; the first: {first}"
    )


def reason(tensors: int, nodes: str, maker: str, *, in_place: bool, fixture: str) -> str:
    """What a finding left alive: ``tensors`` graph-carrying tensors (0: graph nodes
    alone) and ``nodes`` graph nodes made during ``maker``; ``fixture``: the wider-scope
    fixture it was judged at ("" for the test's own teardown)."""
    if in_place:
        old = "a tensor" if tensors <= 1 else f"{tensors} tensors"
        return (
            f"{old} whose graph {maker} extended in place ({nodes} graph nodes), "
            "still alive after its teardown"
        )
    nouns = "tensor" if tensors == 1 else "tensors"
    what = (
        f"{tensors} graph-carrying {nouns} ({nodes} graph nodes)"
        if tensors
        else f"{nodes} graph nodes"
    )
    if fixture:
        return f"{what} made during {maker}{JUDGED_AT_FIXTURE_TEARDOWN}{fixture}"
    return f"{what} made during {maker} still alive after its teardown"


def fixture_label(setup_class: str | None, fixture: str, scope: str) -> str:
    """A wider-scope fixture as a holder: its name and scope, or the unittest class."""
    if setup_class is not None:
        return f"class {setup_class} (setUpClass)"
    return f"fixture '{fixture}' ({scope} scope)"


def set_by(setup_class: str | None, fixture: str) -> str:
    """The label's tail for a class attribute a class-scoped fixture set."""
    return " (set by setUpClass)" if setup_class is not None else f" (set by fixture '{fixture}')"


def still_kept(setup_class: str | None, fixture: str) -> str:
    """The fixture's (or the unittest class's) own teardown left the graph in place."""
    kept = (
        f"{setup_class} still kept it after tearDownClass ran"
        if setup_class is not None
        else f"fixture '{fixture}' still kept it after its own teardown code ran"
    )
    return f"{kept} (one that clears it there keeps nothing)"


def tests_text(nodeids: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b, c and 2 more tests``."""
    if len(nodeids) > 3:
        return f"{', '.join(nodeids[:3])} and {len(nodeids) - 3} more tests"
    return " and ".join([", ".join(nodeids[:-1]), nodeids[-1]] if len(nodeids) > 1 else nodeids)
