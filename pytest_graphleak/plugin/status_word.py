"""The status word and letter pytest prints for a checked test (``LEAKED``/``L``,
``LEAK-WARNING``/``l``, ``OUTLIVE-WARNING``, ``UNMEASURED``/``U``):
``pytest_report_teststatus``, through the session reporter.

pytest asks for a test's word again at the end, for its short summary, when
``report.graphleak`` is gone (the reporter pops it): ``StatusWords`` remembers what each
call report's checks said (``remember``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from pytest_graphleak.plugin.report_section import no_verdict
from pytest_graphleak.report.model import results_of
from pytest_graphleak.result import CheckResult
from pytest_graphleak.status import BY_WORD as STATUS_FACTS
from pytest_graphleak.status import ERROR, UNMEASURED

#: pytest 8 and later read a ``(word, markup)`` status word wherever they print it;
#: pytest 7 only while a report is logged (progress and verbose lines), and prints
#: the tuple itself in its short test summary ("('LEAKED', {'red': True}) test_x.py::...").
_WORD_MARKUP_EVERYWHERE = hasattr(pytest.TestReport, "_get_verbose_word_with_markup")


def has_leak(results: Sequence[CheckResult], *, failing: bool = False) -> bool:
    """A leaked check among a report's, not a known one (the baseline file's: its test
    reads as pytest says); ``failing``: one whose leak failed the test (not ``warned``)."""
    return any(
        check.leaked and not check.known and not (failing and check.warned) for check in results
    )


class StatusWords:
    """What the status words of a run's checked tests are read from."""

    def __init__(self) -> None:
        #: Node ids whose last call report carried a leak: the status word of pytest's
        #: short summary is asked again at the end, when ``report.graphleak`` is gone.
        self.leaked: set[str] = set()
        #: Of those, the ones whose leak failed the test (``LEAKED``, not pytest's word).
        self.failed_by_leak: set[str] = set()
        #: Failed tests whose status is ``error`` or ``unmeasured`` (their status word).
        self.no_verdict: dict[str, str] = {}
        #: The report being logged now: where pytest 7 understands a (word, markup) word.
        self.logging: pytest.TestReport | None = None

    def forget(self, nodeid: str) -> None:
        """A new attempt of ``nodeid`` (pytest-rerunfailures): the last one decides."""
        self.leaked.discard(nodeid)
        self.failed_by_leak.discard(nodeid)
        self.no_verdict.pop(nodeid, None)

    def remember(self, report: pytest.TestReport, results: Sequence[CheckResult]) -> None:
        """What a call report's checks (``results``) say of its test's word."""
        if has_leak(results):
            self.leaked.add(report.nodeid)
        if has_leak(results, failing=True):
            self.failed_by_leak.add(report.nodeid)
        if report.failed and (status := no_verdict(results)):  # the short summary's word
            self.no_verdict[report.nodeid] = status

    def teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, str | tuple[str, Mapping[str, bool]]] | None:
        """``pytest_report_teststatus``: ``L``/``LEAKED`` for a test failed by a leak;
        ``l``/``LEAK-WARNING`` for a leak reported on a passing test (warn-only). The
        category stays pytest's, so a leaked test counts as failed and the exit code is
        non-zero. Expected failures and reruns keep pytest's (or pytest-rerunfailures')
        own status."""
        data = getattr(report, "graphleak", None)
        found = results_of(data)  # the checks, read once
        if report.when == "teardown" and report.passed and has_leak(found):
            # the outlive audit's or a teardown check's warning, after the call's PASSED
            label = "OUTLIVE" if any(c.kind == "outlive" for c in found if c.leaked) else "LEAK"
            return "", "", self._word(report, f"{label}-WARNING", {"yellow": True})
        if report.when != "call" or hasattr(report, "wasxfail"):
            return None
        if report.failed:  # by a leak, not for its own reason with a leak that only warned
            failing = data is not None and has_leak(found, failing=True)
            if failing or (data is None and report.nodeid in self.failed_by_leak):
                return "failed", "L", self._word(report, "LEAKED", {"red": True})
            # a check with no verdict: its status word, not FAILED. A step that raised fails
            # the test with its exception (the contract): pytest's own FAILED, as its count
            # says ("1 failed"); the graphleak report's row says why there is no verdict.
            status = no_verdict(found) if data is not None else self.no_verdict.get(report.nodeid)
            if status is None or status == ERROR:
                return None
            facts = STATUS_FACTS[status]
            word = self._word(report, facts.label, {facts.colour: True})
            return "failed", "U" if status == UNMEASURED else "F", word
        leaked = has_leak(found) if data is not None else report.nodeid in self.leaked
        if leaked and report.passed:
            return "passed", "l", self._word(report, "LEAK-WARNING", {"yellow": True})
        return None

    def _word(
        self, report: pytest.TestReport, word: str, markup: Mapping[str, bool]
    ) -> str | tuple[str, Mapping[str, bool]]:
        """The status word with its markup where pytest reads a (word, markup) pair;
        the plain word in pytest 7's short summary, which would print the pair."""
        if _WORD_MARKUP_EVERYWHERE or report is self.logging:
            return word, markup
        return word
