"""What the GitHub gate (``report/github``) shows of a run: one ``Row`` per check of
every test, with its status, the line to change (where the leaked object is stored, else
the line to change of a cycle, else where the user's code created it, else the test's),
the annotation's level and the fix; and a file's path as GitHub names it. Other parts of
a run may add rows of their own (``writers.Run.rows``)."""

from __future__ import annotations

import io
import os
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pytest_graphleak.metrics import format_rate
from pytest_graphleak.paths import relative_to
from pytest_graphleak.report.model import Report, check_label, metric_rows
from pytest_graphleak.report.span import error_line, span_text
from pytest_graphleak.report.view import (
    baseline_name,
    diagnosis_view,
    fix_of,
    known_text,
    line_to_change,
)
from pytest_graphleak.result import CheckResult, Diagnosis
from pytest_graphleak.status import BY_WORD, ERROR, KNOWN, UNMEASURED


@dataclass(frozen=True)
class Row:
    """One line of the gate: a checked test's check, or a finding of another kind."""

    test: str  # pytest node id, or the checked step's name
    status: str  # leaked, warned, xfailed, error, unmeasured, clean (status.STATUSES)
    title: str  # after "graphleak: ": the pattern, or "unmeasured"
    file: str  # absolute (or relative to the current directory); "" when unknown
    line: int  # 1-based; 0 when unknown
    #: What was found, without the test's name and the fix: a few lines (held by, what
    #: grew), plain text (an annotation shows no markdown).
    summary: str
    #: "error" / "warning": the workflow command this row gets; "" for none (a clean check)
    level: str = ""
    #: What to change, one line; "" when none is known. The annotation's first line.
    fix: str = ""
    #: The verified fix as a unified diff of the user's file (``result.Fix.diff``) and that
    #: file; "" when the fix is not verified. The step summary shows it under the table.
    diff: str = ""
    diff_file: str = ""
    #: The fix as the failure text words it, with whether it was verified (``fix
    #: (verified: ...): ...``, ``fix (not verified): ...  (why)``); "" to say ``fix: ...``.
    fix_line: str = ""
    #: A known finding: the baseline file's name, and the line that says so with the
    #: reason its entry gives (``view.known_text``); "" for any other row.
    known_in: str = ""
    known: str = ""


def report_rows(report: Report, locations: Mapping[str, tuple[str, int]]) -> list[Row]:
    """One row per check of every test, each with its status by the one rule
    (``model.TestRow.status_of``)."""
    rows = []
    for test in report.tests:
        for index, check in enumerate(test.checks):
            name = check.name or test.nodeid
            label = check_label(test, index)
            place = locations.get(test.nodeid) or locations.get(name) or ("", 0)
            at = check.judged_at
            if at is not None and at.file:  # a fixture's finding: its line, not a test's
                place = (at.file, at.line)
            row = _check_row(label, test.status_of(check), test.outcome, check, place)
            if row.status == KNOWN:  # why it fails nothing: the baseline file's reason
                file = report.baseline.file if report.baseline is not None else ""
                row = replace(
                    row, known_in=baseline_name(file), known=known_text(check.known_reason, file)
                )
            rows.append(row)
    return rows


def _level(status: str, outcome: str) -> str:
    """The annotation's level for every outcome pytest gives (passed, failed, skipped,
    xfailed): its status row's (``StatusFacts.annotation``: a leak's, a clean check's);
    a check with no verdict's by what it did to the test (it fails the test, or warns in
    warn-only mode)."""
    level = BY_WORD[status].annotation
    if level is not None:
        return level
    return {"failed": "error", "xfailed": ""}.get(outcome, "warning")


def _check_row(
    label: str, status: str, outcome: str, result: CheckResult, test_place: tuple[str, int]
) -> Row:
    level = _level(status, outcome)
    if BY_WORD[status].found:
        pattern = result.pattern or "leak"
        file, line = _line_to_change(result.diagnosis, test_place)
        title = f"{pattern} (outlived the test)" if result.kind == "outlive" else pattern
        lines = _leak_lines(result, pattern)
        tried = result.diagnosis.fix_tried if result.diagnosis is not None else None
        verified = tried is not None and tried.verified and bool(tried.diff)
        worded = [
            view.plain() for view in diagnosis_view(pattern, result.diagnosis) if view.kind == "fix"
        ]
        return Row(
            label,
            status,
            title,
            file,
            line,
            "\n".join(lines),
            level,
            fix_of(pattern, result.diagnosis),
            tried.diff or "" if verified and tried else "",
            tried.filename if verified and tried else "",
            worded[0] if worded else "",
        )
    if status == UNMEASURED:
        return Row(
            label,
            status,
            "unmeasured",
            *test_place,
            f"not measured, so no verdict: {result.unmeasured}",
            level,
            result.unmeasured_fix,
        )
    if status == ERROR:  # on the user's line that raised, when the traceback had one
        site = result.error_site
        place = (site.filename, site.lineno) if site is not None else test_place
        return Row(label, status, "error", *place, f"step raised: {error_line(result)}", level)
    return Row(label, status, "clean", *test_place, span_text(result, short=True))


def _line_to_change(diagnosis: Diagnosis | None, test_place: tuple[str, int]) -> tuple[str, int]:
    """Where the leaked object is stored, else the line to change of a cycle (its hook or
    closure), else where the user's code created it."""
    site = line_to_change(diagnosis)
    return (site.filename, site.lineno) if site is not None else test_place


def _leak_lines(result: CheckResult, pattern: str) -> list[str]:
    """What a leak's annotation says after its fix: held by (or the cycle), what grew,
    where it is stored (the code without the user's trailing comment)."""
    found = result.diagnosis
    if found is not None:
        stored = [replace(site, line=code_only(site.line)) for site in found.stored_at[:1]]
        found = replace(found, stored_at=stored)
    outlive = result.kind == "outlive"
    view = diagnosis_view(pattern, found, outlive=outlive)
    lines = [line.plain() for line in view if line.kind in ("held-by", "cycle")]
    if outlive:  # the audit after teardown: kept, not seen to grow
        lines.append(f"outlived the test: {result.verdict.reason}")
    else:
        grown = [
            f"{row.name} {format_rate(row.per_step, row.unit)}"
            for row in metric_rows(result)
            if row.grew
        ]
        lines.append(f"grows: {', '.join(grown)}" if grown else "leaks")
    lines.extend(line.plain() for line in view if line.kind == "stored-at")
    return lines


def code_only(line: str) -> str:
    """A line of the user's code without its trailing ``# comment`` (a ``#`` inside a
    string stays); the line as it is when it does not tokenize."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[: token.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket: a statement goes on
        pass
    return line


def relative_path(file: str, workspace: str) -> str:
    """``file`` relative to the workspace, with ``/``; "" for a file outside it (GitHub
    can place an annotation only on a file of the repository)."""
    relative = relative_to(file, workspace)
    return relative.replace(os.sep, "/") if relative is not None else ""
