"""The CI gate native on GitHub Actions: a workflow command on the line to change, per
leak and per unmeasured check, and a table of the checked tests in the step summary.

With ``--graphleak-github=auto`` (the default) it is on when ``GITHUB_ACTIONS=true``:

* ``::error file=tests/test_x.py,line=12,title=graphleak: list-accumulation::<summary>``
  on stdout, one per leaked or unmeasured check (``::notice`` for a known finding,
  listed in the baseline file; ``::warning`` where the leak failed
  nothing: warn-only mode, the outlive audit's warn mode, a caught GraphLeakError, a test
  that passed, was skipped or failed for another reason; none for an expected failure).
  The line is where the leaked object is stored (``losses.append(loss)``), else where the
  user's code created it, else the test's own line; the path is relative to
  ``$GITHUB_WORKSPACE`` (else the current directory). GitHub shows it on that line of
  the pull request's diff.
* a markdown table of every check appended to ``$GITHUB_STEP_SUMMARY``, under the session's
  counts (``summary.sentence``).

The writer takes generic ``Row``s: the document's checks give theirs (``document_rows``),
and other parts of a run may add their own (``writers.Run.rows``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_graphleak.metrics import format_rate
from pytest_graphleak.report.span import error_line, span_text
from pytest_graphleak.report.summary import no_rows, sentence
from pytest_graphleak.report.view import fix_of
from pytest_graphleak.result import relative_to
from pytest_graphleak.status import display_key, status_in_test


@dataclass(frozen=True)
class Row:
    """One line of the gate: a checked test's check, or a finding of another kind."""

    test: str  # pytest node id, or the checked step's name
    status: str  # leaked, warned, xfailed, error, unmeasured, clean (status.STATUSES)
    title: str  # after "graphleak: ": the pattern, or "unmeasured"
    file: str  # absolute (or relative to the current directory); "" when unknown
    line: int  # 1-based; 0 when unknown
    summary: str  # one line, without the test's name
    #: "error" / "warning": the workflow command this row gets; "" for none (a clean check)
    level: str = ""


def wanted(mode: Any, environ: Mapping[str, str]) -> bool:
    """``on``; or ``auto`` (the default) inside a GitHub Actions job."""
    if mode == "on":
        return True
    return mode in (None, "auto") and environ.get("GITHUB_ACTIONS") == "true"


def publish(document: Mapping[str, Any], run: Any) -> list[str]:
    """Print the workflow commands (``run.print_line``) and append the table to the step
    summary; returns what went wrong (the summary file could not be written)."""
    rows = [*document_rows(document, run.locations), *run.rows]
    workspace = run.environ.get("GITHUB_WORKSPACE") or os.getcwd()
    for line in commands(rows, workspace):
        run.print_line(line)
    problems = []
    summary_path = run.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as handle:
                handle.write(step_summary(rows, workspace, document.get("summary") or {},
                                          others=len(run.rows)))  # fmt: skip
                handle.write(fixed_section(document.get("baseline")))
        except OSError as exc:
            problems.append(
                f"could not append the graphleak table to $GITHUB_STEP_SUMMARY "
                f"({summary_path!r}: {exc.strerror or exc})"
            )
    return problems


def document_rows(
    document: Mapping[str, Any], locations: Mapping[str, tuple[str, int]]
) -> list[Row]:
    """One row per check of every test in a report document."""
    rows = []
    for test in document.get("tests", []):
        nodeid = str(test["nodeid"])
        checks = test.get("checks", [])
        for check in checks:
            name = str(check.get("name") or nodeid)
            label = nodeid if len(checks) == 1 or name == nodeid else f"{nodeid} [{name}]"
            status = _status(test, check)
            place = locations.get(nodeid) or locations.get(name) or ("", 0)
            rows.append(_check_row(label, status, str(test["outcome"]), check, place))
    return rows


def _status(test: Mapping[str, Any], check: Mapping[str, Any]) -> str:
    """This check's status, by the one rule for a test (``status.status_in_test``)."""
    return status_in_test(check, str(test["outcome"]))


#: The annotation of a leak, by its status: an error where it failed the test, a warning
#: where it failed nothing, a notice for a known finding (the baseline file's), none for
#: an expected failure.
_LEAK_LEVEL = {"leaked": "error", "warned": "warning", "known": "notice", "xfailed": ""}


def _level(status: str, outcome: str) -> str:
    """The annotation's level for every outcome pytest gives (passed, failed, skipped,
    xfailed): a leak's by its status; an unmeasured check's by what it did to the test
    (it fails the test, or warns in warn-only mode)."""
    if status in _LEAK_LEVEL:
        return _LEAK_LEVEL[status]
    return {"failed": "error", "xfailed": ""}.get(outcome, "warning")


def _check_row(
    label: str, status: str, outcome: str, check: Mapping[str, Any], test_place: tuple[str, int]
) -> Row:
    level = _level(status, outcome)
    if check.get("leaked"):
        pattern = str(check.get("pattern") or "leak")
        file, line = _line_to_change(check.get("diagnosis") or {}, test_place)
        return Row(label, status, pattern, file, line, _leak_summary(check, pattern), level)
    if check.get("unmeasured"):
        return Row(label, status, "unmeasured", *test_place,
                   f"not measured: {check['unmeasured']}", level)  # fmt: skip
    if check.get("error"):
        return Row(label, status, "error", *test_place, f"step raised: {error_line(check)}")
    return Row(label, status, "clean", *test_place, span_text(check, short=True))


def _line_to_change(diagnosis: Mapping[str, Any], test_place: tuple[str, int]) -> tuple[str, int]:
    """Where the leaked object is stored, else where the user's code created it."""
    for key in ("stored_at", "sites"):
        for site in diagnosis.get(key) or []:
            if site.get("filename") and not str(site["filename"]).startswith("<"):
                return str(site["filename"]), int(site.get("lineno") or 0)
    return test_place


def _leak_summary(check: Mapping[str, Any], pattern: str) -> str:
    metrics: Mapping[str, Mapping[str, Any]] = check.get("metrics") or {}
    grown = [
        f"{metric} {format_rate(info.get('per_step'), str(info.get('unit', 'objects')))}"
        for metric, info in metrics.items()
        if info.get("grew")
    ]
    diagnosis = check.get("diagnosis") or {}
    if check.get("kind") == "outlive":  # the audit after teardown: kept, not seen to grow
        parts = [f"outlived the test: {(check.get('verdict') or {}).get('reason', '')}"]
    else:
        parts = [f"grows {', '.join(grown)}" if grown else "leaks"]
    chain: Sequence[str] = diagnosis.get("chain") or []
    cycle: Sequence[str] = diagnosis.get("cycle") or []
    if chain:
        parts.append(f"held: {chain[-1]}" + (f" (from {chain[0]})" if len(chain) > 1 else ""))
    elif cycle:
        parts.append(f"cycle through {cycle[0]}")
    stored: Sequence[Mapping[str, Any]] = diagnosis.get("stored_at") or []
    if stored and stored[0].get("line"):
        parts.append(f"stored by `{stored[0]['line']}`")
    fix = fix_of(pattern, diagnosis)
    if fix:
        parts.append(f"fix: {fix}")
    return "; ".join(parts)


# -- workflow commands ---------------------------------------------------------------
def commands(rows: Iterable[Row], workspace: str) -> list[str]:
    """``::error file=...,line=...,title=...::message``, one per row with a level."""
    lines = []
    for row in rows:
        if not row.level:
            continue
        properties = []
        path = relative_path(row.file, workspace)
        if path:
            properties.append(f"file={_property(path)}")
            if row.line > 0:
                properties.append(f"line={row.line}")
        properties.append(f"title={_property(f'graphleak: {row.title}')}")
        message = _data(f"{row.test}: {row.summary}")
        lines.append(f"::{row.level} {','.join(properties)}::{message}")
    return lines


def relative_path(file: str, workspace: str) -> str:
    """``file`` relative to the workspace, with ``/``; "" for a file outside it (GitHub
    can place an annotation only on a file of the repository)."""
    relative = relative_to(file, workspace)
    return relative.replace(os.sep, "/") if relative is not None else ""


def _data(text: str) -> str:
    """A command's message, escaped as GitHub's toolkit does (``escapeData``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A command's property value (``escapeProperty``): ``:`` and ``,`` too."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


# -- the step summary ----------------------------------------------------------------
def step_summary(
    rows: Sequence[Row], workspace: str, summary: Mapping[str, Any], *, others: int = 0
) -> str:
    """A markdown section: the document's ``summary`` in the session's words
    (``summary.sentence``: tests, not checks), then one table row per check. ``others``:
    how many of ``rows`` are findings of other kinds (``writers.Run.rows``)."""
    head = f"### graphleak: {sentence(summary)}"
    if others:
        head += f"; {others} other {'finding' if others == 1 else 'findings'}"
    if not rows:
        return f"{head}\n\n{no_rows(summary)}\n\n"
    lines = [head, "", "| Status | Test | Pattern | Line | Details |", "|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (display_key(r.status), r.test)):
        path = relative_path(row.file, workspace)
        where = f"{path}:{row.line}" if path and row.line > 0 else path
        cells = [row.status, f"`{row.test}`", row.title, f"`{where}`" if where else "",
                 row.summary]  # fmt: skip
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n\n"


def fixed_section(baseline: Mapping[str, Any] | None) -> str:
    """The baseline file's entries that the run no longer found, with the command that
    updates the file (the JSON document's ``baseline``); "" when there are none."""
    fixed = (baseline or {}).get("fixed") or []
    if not baseline or not fixed:
        return ""
    lines = [f"#### Fixed since the baseline ({len(fixed)})", ""]
    for entry in fixed:
        held = f", held by `{entry['holder']}`" if entry.get("holder") else ""
        lines.append(f"- `{entry['test']}` [{entry['check']}] {entry['pattern']}{held}")
    lines += ["", f"Update the baseline file: `{baseline['update_command']}`"]
    return "\n".join(lines) + "\n\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
