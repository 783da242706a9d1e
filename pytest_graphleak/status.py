"""The status words and the one rule that picks a status (bottom layer, plain data).

A check ends in one of four statuses, by this precedence: ``leaked`` (the verdict found a
leak), ``error`` (a step raised), ``unmeasured`` (its probes measured nothing the step
uses, or its loop was too short to judge: no verdict), ``clean``. A test's status is its
worst check's, where a leak reads ``leaked`` only where it failed the test: a leak that
failed nothing (warn-only mode, the outlive audit's warn mode, a caught error, a test that
failed, was skipped or passed for its own reasons: the check's ``warned`` flag, or a test
pytest did not fail) reads ``warned``, and a leak on an expected failure ``xfailed``. A leak
listed in the baseline file (the check's ``known`` flag) reads ``known`` and fails nothing.

Every surface says the same word: the JSON report's ``status`` and summary, JUnit's
``graphleak.status``, the HTML badge, the terminal summary, ``graphleak check`` /
``graphleak report`` (their lines, counts and exit codes). An unmeasured check is never
``passed``: pytest fails it (or warns, in warn-only mode), and so does the command.

Each row also says how it is shown, so no renderer keeps a table of its own: its colour
token (the terminal's markup name; the HTML page's badge colour of that token), its group
(a leak, no verdict, or clean: what the HTML page opens and folds, what the commands list
first) and its display order (the report's rows, the HTML chips, ``graphleak report``).
Renderers switch on a check's or a test's status, never on its raw fields (``leaked``,
``error``, ``unmeasured``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: The groups of ``StatusFacts.group``.
LEAK, NO_VERDICT, KNOWN, CLEAN = "leak", "no verdict", "known", "clean"


@dataclass(frozen=True)
class StatusFacts:
    """What is known about one status word."""

    word: str  # JSON status and summary key, JUnit graphleak.status, HTML class, counts
    label: str  # the terminal's and the HTML badge's word for it (capitals)
    meaning: str  # one line: the reports page, the schema's description
    #: ``graphleak check`` / ``graphleak report``: the exit code of a run whose worst
    #: status this is.
    exit_code: int
    #: pytest fails a test with this status (unless in warn-only mode); the commands
    #: record such a check with the outcome ``failed``.
    fails: bool
    #: The colour token: a markup name of pytest's terminal writer (red, yellow, purple,
    #: blue, cyan, green); the HTML page has one badge colour per token, in both themes.
    colour: str
    #: ``leak`` (a leak was found), ``no verdict`` (nothing was judged: what ran and what
    #: to change), ``known`` (a leak listed in the baseline file: accepted for now, a
    #: filter of its own, so that new leaks read apart from it), ``clean``: the HTML page
    #: opens a leak's and a no-verdict's card and folds a known or clean one.
    group: str
    #: Where its rows and counts come on every surface: the lowest first.
    order: int


TABLE: tuple[StatusFacts, ...] = (
    StatusFacts(
        "leaked", "LEAKED", "a check leaked and that failed the test", 1, True,
        colour="red", group=LEAK, order=10,
    ),
    StatusFacts(
        "warned", "WARNING",
        "a check leaked and that failed nothing (warn-only mode, the outlive audit's warn "
        "mode, a caught error; the test passed, was skipped or failed for another reason)",
        1, False, colour="yellow", group=LEAK, order=20,
    ),
    StatusFacts(
        "xfailed", "XFAIL", "a check leaked and the test was expected to fail", 1, False,
        colour="yellow", group=LEAK, order=30,
    ),
    StatusFacts(
        "error", "ERROR", "a step raised, so there is no verdict", 3, True,
        colour="purple", group=NO_VERDICT, order=40,
    ),
    StatusFacts(
        "unmeasured", "UNMEASURED",
        "the check's probes measured nothing the step uses, or its loop was too short to "
        "judge, so there is no verdict", 4, True, colour="blue", group=NO_VERDICT, order=50,
    ),
    StatusFacts(
        "known", "KNOWN",
        "a check leaked and the finding is listed in the baseline file, so it failed "
        "nothing (--graphleak-baseline)", 0, False, colour="cyan", group=KNOWN, order=35,
    ),
    StatusFacts("clean", "CLEAN", "nothing grew", 0, False, colour="green", group=CLEAN,
                order=60),
)  # fmt: skip

BY_WORD: dict[str, StatusFacts] = {row.word: row for row in TABLE}
#: Every status of a test in the reports, worst first (the JSON summary's order).
STATUSES: tuple[str, ...] = tuple(row.word for row in TABLE)
#: The statuses that are a leak (``leaked`` as pytest's outcome makes it read).
LEAK_STATUSES: tuple[str, ...] = tuple(row.word for row in TABLE if row.group == LEAK)
#: Every status in the order the reports show them (rows, chips, counts).
DISPLAY_ORDER: tuple[str, ...] = tuple(row.word for row in sorted(TABLE, key=lambda r: r.order))


def display_key(status: str) -> int:
    """Where a row of this status comes (unknown words last): ``sorted(key=...)``."""
    facts = BY_WORD.get(status)
    return facts.order if facts is not None else 1_000


def check_status(*, leaked: bool, error: object, unmeasured: object) -> str:
    """The status of one check, by the precedence."""
    if leaked:
        return "leaked"
    if error:
        return "error"
    return "unmeasured" if unmeasured else "clean"


def worst(statuses: Iterable[str]) -> str:
    """The first of ``statuses`` in the precedence (``clean`` for none)."""
    given = set(statuses)
    return next((word for word in STATUSES if word in given), "clean")


def read_in_test(status: str, *, warned: bool, known: bool = False, outcome: str) -> str:
    """One check's status as its test reads it (``model.TestRow.status_of``; a test's is
    its worst check's): a leak listed in the baseline file is ``known``; a leak that failed
    nothing (the check's ``warned``) is ``warned``; else a leak reads by pytest's outcome
    (``failed``: leaked, ``xfailed``: xfailed, anything else: warned)."""
    if status == "leaked" and known:
        return "known"  # listed in the baseline file: it failed nothing, whatever pytest says
    if status != "leaked" or (outcome == "failed" and not warned):
        return status
    return "xfailed" if outcome == "xfailed" and not warned else "warned"


def outcome_of(status: str) -> str:
    """The outcome a command records for a check with this status (as pytest would)."""
    return "failed" if BY_WORD[status].fails else "passed"


def exit_code(statuses: Iterable[str]) -> int:
    """The exit code of the worst status (0 for none)."""
    return BY_WORD[worst(statuses)].exit_code
