"""The ``graphleak report`` section of pytest's terminal summary: a row per checked test
(its status word, id and what grew, the slowest leak it would catch), the detail lines of
a warned or known finding, and the notes. Pure text from the typed read model
(``report.model.TestRow``); the session reporter (``plugin/session_report``) writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_graphleak.metrics import format_amount, format_rate
from pytest_graphleak.plugin.terminal import detail_lines
from pytest_graphleak.report.model import (
    TestRow,
    check_label,
    metric_rows,
)
from pytest_graphleak.report.scale import sparkline
from pytest_graphleak.report.span import error_line, span_text
from pytest_graphleak.report.text import (
    KEPT_ON_PURPOSE,
    line_markup,
    wrap_line,
)
from pytest_graphleak.report.view import culprit, known_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.status import BY_WORD as STATUS_FACTS
from pytest_graphleak.status import (
    CLEAN,
    ERROR,
    KNOWN,
    LEAK_STATUSES,
    UNMEASURED,
    WARNED,
    XFAILED,
    Status,
    display_key,
)
from pytest_graphleak.status import TABLE as STATUS_TABLE
from pytest_graphleak.verdict import slowest_leak_text
from pytest_graphleak.words.outlive import tests_text


def _warned_why(outcome: str, warn_only: bool) -> str:
    """Why a leak row is a warning, by the test's outcome (every one pytest gives)."""
    if outcome == "passed":
        return "warn-only: not failed" if warn_only else "test passed"
    if outcome == "failed":
        return "the test failed for another reason"
    if outcome == "xfailed":
        return "the test was expected to fail for another reason"
    return f"test {outcome}"  # skipped


def section_lines(
    rows: Sequence[TestRow],
    notes: Iterable[str],
    warn_only: bool,
    *,
    columns: int,
    verbose: bool,
    baseline_file: str = "",
) -> list[tuple[str, dict[str, bool]]]:
    """The ``graphleak report`` section's lines before its count line: each test's rows
    (a clean test's only with ``-v``) in the reports' order (leaks first, then by node id:
    ``status.display_key``, as the HTML page, the step summary and ``graphleak report``),
    then the notes, in ``columns`` (at spaces)."""
    width = max((len(m) for t in rows for c in t.checks for m in c.series), default=0)
    ordered = sorted(rows, key=lambda test: (display_key(test.status), test.nodeid))
    body = [
        (part, markup)
        for test in ordered
        if verbose or test.status != CLEAN
        for line, markup in summary_lines(test, width, warn_only, baseline_file)
        for part in wrap_line(line, columns)
    ]
    return body + [
        (part, {"yellow": True})
        for note in sorted(notes)
        for part in wrap_line(f"note: {note}", columns)
    ]


def no_verdict(results: Sequence[CheckResult]) -> Status | None:
    """``error`` or ``unmeasured``: the status of a failed test's checks (a report's
    ``graphleak`` data, ``model.results_of``) that have no leak verdict
    (``model.TestRow.status``); None for any other: the status word pytest's progress and
    short summary print for it."""
    status = TestRow.of("", "failed", results).status
    return status if STATUS_FACTS[status].no_verdict else None


def summary_lines(
    test: TestRow, width: int, warn_only: bool, baseline_file: str = ""
) -> list[tuple[str, dict[str, bool]]]:
    """The terminal rows of one checked test: a head line with status, node id,
    pattern and culprit, then each grown metric with start -> end, growth per step
    and a sparkline of the whole series."""
    lines: list[tuple[str, dict[str, bool]]] = []
    for index, check in enumerate(test.checks):
        status = test.status_of(check)
        word, markup = _STATUS_STYLE[status]
        head = f"{word} {check_label(test, index)}"
        at = check.judged_at  # a fixture's finding (``JudgedAt``), or None
        facts = STATUS_FACTS[status]
        if facts.found:  # a leak found, accepted or not
            outlive = (
                ""
                if check.kind != "outlive"
                else "outlived the test: "
                if at is None
                else "outlived the fixture's teardown: "
            )
            head += f"  {outlive}{check.pattern or 'leak'}"
            found = culprit(check.diagnosis) if status != WARNED else ""  # its held by:
            if found:
                head += f"  {found}"
            if status == WARNED and at is not None and not at.charged_to:
                head += "  (the session's: no test that requested it was running)"
            elif status == WARNED:
                head += f"  ({_warned_why(test.outcome, warn_only)})"
            elif status == XFAILED:
                head += "  (expected to fail)"
        elif status == ERROR:
            head += f"  step raised: {error_line(check)}"
        elif status == UNMEASURED:
            head += f"  not measured: {check.unmeasured}"
        else:
            head += f"  ({span_text(check, short=True)}{_reach(check)})"
        lines.append((head, markup))
        if at is not None and at.made_during and facts.found:
            told = f"made during: {tests_text(at.made_during)}"
            if at.requested_by:
                told += f"; requested by: {tests_text(at.requested_by)}"
            lines.append((f"    {told}", {}))
        if status == UNMEASURED and check.unmeasured_fix:  # what to change, as a leak's
            fix = f"fix: {check.unmeasured_fix}"
            lines.append((f"    {fix}", line_markup(fix)))
        if status == KNOWN:  # accepted for now: why (the file's reason), and the fix
            told = known_text(check.known_reason, baseline_file)
            lines.append((f"    {told}", {"cyan": True}))
            lines.extend(_fix_lines(check))
            continue
        cells = [
            (
                row.name,
                f"{format_amount(row.start, row.unit)} -> {format_amount(row.end, row.unit)}",
                format_rate(row.per_step, row.unit),
                sparkline(row.series, row.unit, warmup=check.warmup, noise=row.tolerance),
            )
            for row in metric_rows(check)
            if row.grew
        ]
        span = max((len(c[1]) for c in cells), default=0)
        rate = max((len(c[2]) for c in cells), default=0)
        lines.extend(
            (f"    {m:<{width}}  {r:>{span}}  {g:>{rate}}  {spark}", {}) for m, r, g, spark in cells
        )
        # what the numbers cannot say (a count that is a lower bound)
        lines.extend((f"    note: {note}", {"yellow": True}) for note in check.notes)
        if status == WARNED:  # no failure text shows these: the warning is one line
            if check.kind == "outlive":  # what was left, as the fail mode's text says it
                lines.append((f"    {check.verdict.reason}", {}))
            lines.extend((f"    {line}", line_markup(line)) for line in detail_lines(check))
            if check.kind == "outlive":
                lines.append((f"    {KEPT_ON_PURPOSE}", {}))
        elif status in LEAK_STATUSES:  # the failure text above has the rest: what to change
            lines.extend(_fix_lines(check))
    return lines


def _fix_lines(check: CheckResult) -> list[tuple[str, dict[str, bool]]]:
    """The check's fix line (verified or not), as a row's last line."""
    return [
        (f"    {line}", line_markup(line))
        for line in detail_lines(check)
        if line.startswith(("fix: ", "fix ("))
    ]


#: The terminal's word of each status (``status.TABLE``), padded, and its colour token
#: (bold where the status fails the test, or is a leak that warns: ``StatusFacts.bold``).
_STATUS_STYLE: dict[str, tuple[str, dict[str, bool]]] = {
    row.word: (f"{row.label:<7}", {row.colour: True, "bold": row.bold}) for row in STATUS_TABLE
}


def _reach(check: CheckResult) -> str:
    """``; catches 1 object every 5 steps``: the slowest leak a clean check could see."""
    period = check.verdict.slowest_leak_steps
    if not period:
        return ""
    return f"; catches {slowest_leak_text(period)} or faster"
