"""The session's counts and the one sentence that tells them: the terminal summary, the
HTML page, the GitHub step summary and ``graphleak report`` all say it.

The numbers are the report document's ``summary`` (``counts``): ``checked`` counts the
tests in the report, each a row with at least one result (it ran a graphleak check, or
the outlive audit named a graph that outlived it); each status word (``status.STATUSES``)
counts the tests that ended in it, so they add up to ``checked``; ``audited`` counts the
tests the outlive audit looked at after their teardown; ``fixed``, with a baseline file
(``--graphleak-baseline``), counts its entries this run checked and no longer found (no
test row: they are gone). An audited test with nothing to
report has no row, so with the audit on the rows are not all the tests looked at, and
the sentence gives both numbers::

    3 checked: 1 leaked, 2 clean                                    (no audit ran)
    4 tests with results: 1 leaked, 3 warned; 5 audited for graphs that outlive them
    7 tests with results: 2 leaked, 5 known, 1 fixed since the baseline; 20 audited for ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_graphleak.status import STATUSES

#: The sentence for a session in which no test ran a check and the audit looked at none.
NOTHING_CHECKED = "no test ran a graphleak check"


def counts(
    statuses: Iterable[str], *, audited: int = 0, fixed: int | None = None, fixtures: int = 0
) -> dict[str, int]:
    """The document's ``summary``: the tests with results (one status each), how many
    ended in each status, how many the outlive audit looked at and, with a baseline file,
    how many of its findings are fixed. ``fixtures``: how many of the rows are a
    fixture's, not a test's (``model.TestRow.is_fixture``); only counted when some are."""
    by_status: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for status in statuses:
        by_status[status] += 1
    found = {"checked": sum(by_status.values()), **by_status, "audited": audited}
    if fixtures:
        found["fixtures"] = fixtures
    return found if fixed is None else {**found, "fixed": fixed}


def sentence(summary: Mapping[str, object]) -> str:
    """The counts of a document's ``summary`` in words (statuses that are 0 left out)."""
    tests, audited = _count(summary, "checked"), _count(summary, "audited")
    words = [f"{_count(summary, word)} {word}" for word in STATUSES if _count(summary, word)]
    if _count(summary, "fixed"):
        words.append(f"{_count(summary, 'fixed')} fixed since the baseline")
    parts = ", ".join(words)
    if not audited:
        return f"{tests} checked: {parts}" if tests or parts else NOTHING_CHECKED
    fixtures = _count(summary, "fixtures")  # rows of fixtures' findings, not of tests
    tests -= fixtures
    named = [f"{tests} {'test' if tests == 1 else 'tests'}"] if tests or not fixtures else []
    if fixtures:
        named.append(f"{fixtures} {'fixture' if fixtures == 1 else 'fixtures'}")
    whose = " and ".join(named)
    rows = f"{whose} with results" + (f": {parts}" if parts else "")
    return f"{rows}; {audited} audited for graphs that outlive them"


def no_rows(summary: Mapping[str, object]) -> str:
    """What a report with no rows says where its table would be (one sentence)."""
    if _count(summary, "audited"):
        return "No test ran a graphleak check, and the outlive audit named no graph."
    return "No test ran a graphleak check."


def _count(summary: Mapping[str, object], key: str) -> int:
    value = summary.get(key)
    return value if isinstance(value, int) else 0
