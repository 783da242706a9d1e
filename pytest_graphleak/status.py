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
first) and its display order (the report's rows, the HTML chips, ``graphleak report``),
its GitHub annotation level, its SARIF level and whether the terminal writes it in bold.
Renderers ask a status's row (``BY_WORD``) what to do, never compare a status with its
string (the names below: ``LEAKED``, ...), and never read a check's raw fields
(``leaked``, ``error``, ``unmeasured``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Status = Literal["leaked", "warned", "xfailed", "error", "unmeasured", "known", "clean"]
#: The words by name: a renderer asks a status's row (``BY_WORD``) what to do, and names
#: a status through these where it must, never by its string (``tests/test_status_rule``
#: fails on a comparison with a status word), so a typo is a name error, not a silent miss.
LEAKED: Status = "leaked"
WARNED: Status = "warned"
XFAILED: Status = "xfailed"
ERROR: Status = "error"
UNMEASURED: Status = "unmeasured"
KNOWN: Status = "known"
CLEAN: Status = "clean"

Group = Literal["leak", "no verdict", "known", "clean"]
#: The groups of ``StatusFacts.group``.
LEAK: Group = "leak"
NO_VERDICT: Group = "no verdict"
GROUP_KNOWN: Group = "known"
GROUP_CLEAN: Group = "clean"


@dataclass(frozen=True)
class StatusFacts:
    """What is known about one status word."""

    word: Status  # JSON status and summary key, JUnit graphleak.status, HTML class, counts
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
    group: Group
    #: Where its rows and counts come on every surface: the lowest first.
    order: int
    #: The level of its GitHub workflow command (``error``, ``warning``, ``notice``; ""
    #: for none); None: by what the check did to the test (an error where it failed it,
    #: none on an expected failure, else a warning).
    annotation: str | None = ""
    #: The level of its SARIF result ("" for a status that has no result: no leak found).
    sarif_level: str = ""
    #: The terminal writes its word in bold: it fails the test, or is a leak that warns.
    bold: bool = False
    #: Its badge where a surface has no colour of its own (the GitHub step summary): an
    #: emoji of its own, so that no two statuses read alike.
    badge: str = ""

    @property
    def found(self) -> bool:
        """A leak was found, accepted (known) or not: the row names the line and the fix."""
        return self.group in (LEAK, GROUP_KNOWN)

    @property
    def no_verdict(self) -> bool:
        """Nothing was judged (a step raised, nothing measured): what ran and what to change."""
        return self.group == NO_VERDICT

    @property
    def opened(self) -> bool:
        """The HTML page opens its card (a leak's, a no-verdict's); a known or clean one
        is folded."""
        return self.group not in (GROUP_KNOWN, GROUP_CLEAN)


TABLE: tuple[StatusFacts, ...] = (
    StatusFacts(
        LEAKED,
        "LEAKED",
        "a check leaked and that failed the test",
        1,
        True,
        colour="red",
        group=LEAK,
        order=10,
        annotation="error",
        sarif_level="error",
        bold=True,
        badge="\U0001f534",
    ),
    StatusFacts(
        WARNED,
        "WARNING",
        "a check leaked and that failed nothing (warn-only mode, the outlive audit's warn "
        "mode, a caught error; the test passed, was skipped or failed for another reason)",
        1,
        False,
        colour="yellow",
        group=LEAK,
        order=20,
        annotation="warning",
        sarif_level="warning",
        bold=True,
        badge="\U0001f7e1",
    ),
    StatusFacts(
        XFAILED,
        "XFAIL",
        "a check leaked and the test was expected to fail",
        1,
        False,
        colour="yellow",
        group=LEAK,
        order=30,
        annotation="",
        sarif_level="note",
        badge="\U0001f7e0",
    ),
    StatusFacts(
        ERROR,
        "ERROR",
        "a step raised, so there is no verdict",
        3,
        True,
        colour="purple",
        group=NO_VERDICT,
        order=40,
        annotation=None,
        bold=True,
        badge="\U0001f7e3",
    ),
    StatusFacts(
        UNMEASURED,
        "UNMEASURED",
        "the check's probes measured nothing the step uses, or its loop was too short to "
        "judge, so there is no verdict",
        4,
        True,
        colour="blue",
        group=NO_VERDICT,
        order=50,
        annotation=None,
        bold=True,
        badge="\U0001f535",
    ),
    StatusFacts(
        KNOWN,
        "KNOWN",
        "a check leaked and the finding is listed in the baseline file, so it failed "
        "nothing (--graphleak-baseline)",
        0,
        False,
        colour="cyan",
        group=GROUP_KNOWN,
        order=35,
        annotation="notice",
        sarif_level="note",
        badge="\u26aa",
    ),
    StatusFacts(
        CLEAN,
        "CLEAN",
        "nothing grew",
        0,
        False,
        colour="green",
        group=GROUP_CLEAN,
        order=60,
        badge="\U0001f7e2",
    ),
)

BY_WORD: dict[str, StatusFacts] = {row.word: row for row in TABLE}
#: Every status of a test in the reports, worst first (the JSON summary's order).
STATUSES: tuple[Status, ...] = tuple(row.word for row in TABLE)
#: The statuses that are a leak (``leaked`` as pytest's outcome makes it read).
LEAK_STATUSES: tuple[Status, ...] = tuple(row.word for row in TABLE if row.group == LEAK)
#: Every status in the order the reports show them (rows, chips, counts).
DISPLAY_ORDER: tuple[Status, ...] = tuple(row.word for row in sorted(TABLE, key=lambda r: r.order))


def display_key(status: str) -> int:
    """Where a row of this status comes (unknown words last): ``sorted(key=...)``."""
    facts = BY_WORD.get(status)
    return facts.order if facts is not None else 1_000


def check_status(*, leaked: bool, error: object, unmeasured: object) -> Status:
    """The status of one check, by the precedence."""
    if leaked:
        return LEAKED
    if error:
        return ERROR
    return UNMEASURED if unmeasured else CLEAN


def worst(statuses: Iterable[str]) -> Status:
    """The first of ``statuses`` in the precedence (``clean`` for none)."""
    given = set(statuses)
    return next((word for word in STATUSES if word in given), CLEAN)


def read_in_test(status: Status, *, warned: bool, known: bool = False, outcome: str) -> Status:
    """One check's status as its test reads it (``model.TestRow.status_of``; a test's is
    its worst check's): a leak listed in the baseline file is ``known``; a leak that failed
    nothing (the check's ``warned``) is ``warned``; else a leak reads by pytest's outcome
    (``failed``: leaked, ``xfailed``: xfailed, anything else: warned)."""
    if status == LEAKED and known:
        return KNOWN  # listed in the baseline file: it failed nothing, whatever pytest says
    if status != LEAKED or (outcome == "failed" and not warned):
        return status
    return XFAILED if outcome == "xfailed" and not warned else WARNED


def outcome_of(status: str) -> str:
    """The outcome a command records for a check with this status (as pytest would)."""
    return "failed" if BY_WORD[status].fails else "passed"


def exit_code(statuses: Iterable[str]) -> int:
    """The exit code of the worst status (0 for none)."""
    return BY_WORD[worst(statuses)].exit_code
