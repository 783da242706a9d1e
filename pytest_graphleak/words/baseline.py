"""What a run says of the baseline file (``--graphleak-baseline``) after its own sentence
(``plugin/baseline.BaselineRun.lines``): the file written or rewritten, entries matched
under an older spelling, entries this run did not check. Worded from names and numbers
only; the headings the reports share are ``pytest_graphleak.baseline``'s."""

from __future__ import annotations

from pytest_graphleak.baseline import VERSION, Update

#: The flag that writes the file (the options table's ``baseline_update``).
UPDATE_FLAG = "--graphleak-baseline-update"


def wrote(done: Update, path: str) -> str:
    """The file written (or an older version rewritten) from this run's findings."""
    if done.rewritten_from is None:
        rekeyed = (
            f", {done.rekeyed} judged at a fixture's teardown keyed on that fixture now"
            if done.rekeyed
            else ""
        )
        rekeyed += (
            ""
            if not done.cycles
            else ", 1 cycle keyed on its links now"
            if done.cycles == 1
            else f", {done.cycles} cycles keyed on their links now"
        )
        pruned = (
            f", {len(done.pruned)} removed as their tests no longer exist" if done.pruned else ""
        )
        return (
            f"graphleak baseline: wrote {len(done.entries)} findings to {path} "
            f"({len(done.added)} added, {len(done.removed)} removed as fixed"
            f"{pruned}{rekeyed})"
        )
    dropped = (
        f"; {done.dropped} entries of tests that did not run were dropped" if done.dropped else ""
    )
    return (
        f"graphleak baseline: rewrote {path} from version {done.rewritten_from} to "
        f"{VERSION}: {len(done.entries)} findings, {done.reasons_kept} "
        f"reasons kept{dropped}"
    )


def _written_so(written: bool) -> str:
    return "this update wrote them so" if written else f"{UPDATE_FLAG} writes them so"


def respelled(count: int, merged: int, path: str, written: bool) -> str:
    """``count`` entries written before a holder read every dict key as ``[*]``
    (``baseline_keys.respelled``; ``merged`` of them into another): how they were
    matched, and what writes them so (``written``: this run's update did)."""
    joined = (
        f" ({merged} merged into an entry that then named the same finding, reasons joined)"
        if merged
        else ""
    )
    return (
        f"graphleak baseline: {count} entries of {path} spell a dict's "
        "key in their holder (written before holders read every key as [*]: a "
        "key can change from run to run, a tmp_path, a run name); they were "
        f"matched with [*] for the key{joined}; {_written_so(written)}"
    )


def renamed(count: int, path: str, written: bool) -> str:
    """``count`` entries naming a nested step with its ``<locals>`` path
    (``baseline_keys.renamed``)."""
    return (
        f"graphleak baseline: {count} entries of {path} name "
        "a nested step with its function's <locals> path (written before "
        "check() named the step alone: check(step)); they were matched by "
        f"the step's name; {_written_so(written)}"
    )


def not_checked(count: int, entries: int, *, scoped: bool) -> str:
    """``count`` of the file's ``entries`` this run did not check (``scoped``: a
    fixture's entry among them)."""
    why = "; a fixture's entry is checked by a run of its whole scope" if scoped else ""
    return (
        f"graphleak baseline: {count} of its "
        f"{entries} entries not checked in this run (their "
        f"tests did not run, or ran without that check{why})"
    )
