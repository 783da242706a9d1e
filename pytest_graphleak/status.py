"""The status words and the one rule that picks a status (bottom layer, plain data).

A check ends in one of four statuses, by this precedence: ``leaked`` (the verdict found a
leak), ``error`` (a step raised), ``unmeasured`` (its probes measured nothing the step
uses, or its loop was too short to judge: no verdict), ``clean``. A test's status is its
worst check's, where a leak reads ``leaked`` only where it failed the test: a leak that
failed nothing (warn-only mode, the outlive audit's warn mode, a caught error, a test that
failed, was skipped or passed for its own reasons: the check's ``warned`` flag, or a test
pytest did not fail) reads ``warned``, and a leak on an expected failure ``xfailed``.

Every surface says the same word: the JSON report's ``status`` and summary, JUnit's
``graphleak.status``, the HTML badge, the terminal summary, ``graphleak check`` /
``graphleak report`` (their lines, counts and exit codes). An unmeasured check is never
``passed``: pytest fails it (or warns, in warn-only mode), and so does the command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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


TABLE: tuple[StatusFacts, ...] = (
    StatusFacts("leaked", "LEAKED", "a check leaked and that failed the test", 1, True),
    StatusFacts(
        "warned", "WARNING",
        "a check leaked and that failed nothing (warn-only mode, the outlive audit's warn "
        "mode, a caught error; the test passed, was skipped or failed for another reason)",
        1, False,
    ),
    StatusFacts(
        "xfailed", "XFAIL", "a check leaked and the test was expected to fail", 1, False
    ),
    StatusFacts("error", "ERROR", "a step raised, so there is no verdict", 3, True),
    StatusFacts(
        "unmeasured", "UNMEASURED",
        "the check's probes measured nothing the step uses, or its loop was too short to "
        "judge, so there is no verdict", 4, True,
    ),
    StatusFacts("clean", "CLEAN", "nothing grew", 0, False),
)  # fmt: skip

BY_WORD: dict[str, StatusFacts] = {row.word: row for row in TABLE}
#: Every status of a test in the reports, worst first (the JSON summary's order).
STATUSES: tuple[str, ...] = tuple(row.word for row in TABLE)
#: The statuses of one check, worst first: the precedence.
CHECK_STATUSES: tuple[str, ...] = ("leaked", "error", "unmeasured", "clean")
#: The statuses that are a leak (``leaked`` as pytest's outcome makes it read).
LEAK_STATUSES: tuple[str, ...] = ("leaked", "warned", "xfailed")


def check_status(*, leaked: bool, error: object, unmeasured: object) -> str:
    """The status of one check, by the precedence."""
    if leaked:
        return "leaked"
    if error:
        return "error"
    return "unmeasured" if unmeasured else "clean"


def status_of_dict(check: Mapping[str, Any]) -> str:
    """The status of one check kept as plain data (``CheckResult.to_dict()``)."""
    return check_status(
        leaked=bool(check.get("leaked")), error=check.get("error"),
        unmeasured=check.get("unmeasured"),
    )  # fmt: skip


def worst(statuses: Iterable[str]) -> str:
    """The first of ``statuses`` in the precedence (``clean`` for none)."""
    given = set(statuses)
    return next((word for word in STATUSES if word in given), "clean")


def status_in_test(check: Mapping[str, Any], outcome: str) -> str:
    """One check's status as its test reads it: a leak that failed nothing (the check's
    ``warned``) is ``warned``; else a leak reads by pytest's outcome (``failed``: leaked,
    ``xfailed``: xfailed, anything else: warned)."""
    status = status_of_dict(check)
    if status != "leaked" or (outcome == "failed" and not check.get("warned")):
        return status
    return "xfailed" if outcome == "xfailed" and not check.get("warned") else "warned"


def status_of_test(checks: Iterable[Mapping[str, Any]], outcome: str) -> str:
    """A test's status: its worst check's, each read by ``status_in_test``."""
    return worst(status_in_test(check, outcome) for check in checks)


def outcome_of(status: str) -> str:
    """The outcome a command records for a check with this status (as pytest would)."""
    return "failed" if BY_WORD[status].fails else "passed"


def exit_code(statuses: Iterable[str]) -> int:
    """The exit code of the worst status (0 for none)."""
    return BY_WORD[worst(statuses)].exit_code
