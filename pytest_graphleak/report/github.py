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

An unmeasured check's annotation opens with its ``unmeasured_fix`` as well.

The writer takes generic ``Row``s (``report/github_rows``): the report's checks give
theirs (``report_rows``), and other parts of a run may add their own (``writers.Run.rows``).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_graphleak.report.github_rows import Row, relative_path, report_rows
from pytest_graphleak.report.model import BaselineSection, Report
from pytest_graphleak.report.summary import no_rows, sentence
from pytest_graphleak.status import (
    BY_WORD,
    CLEAN,
    KNOWN,
    STATUSES,
    display_key,
)


def wanted(mode: Any, environ: Mapping[str, str]) -> bool:
    """``on``; or ``auto`` (the default) inside a GitHub Actions job."""
    if mode == "on":
        return True
    return mode in (None, "auto") and environ.get("GITHUB_ACTIONS") == "true"


def publish(report: Report, run: Any) -> list[str]:
    """Print the workflow commands (``run.print_line``) and append the table to the step
    summary; returns what went wrong (the summary file could not be written)."""
    rows = [*report_rows(report, run.locations), *run.rows]
    workspace = run.environ.get("GITHUB_WORKSPACE") or os.getcwd()
    for line in commands(rows, workspace):
        run.print_line(line)
    problems = []
    summary_path = run.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as handle:
                handle.write(
                    step_summary(
                        rows, workspace, report.summary, others=len(run.rows), environ=run.environ
                    )
                )
                handle.write(fixed_section(report.baseline))
        except OSError as exc:
            problems.append(
                f"could not append the graphleak table to $GITHUB_STEP_SUMMARY "
                f"({summary_path!r}: {exc.strerror or exc})"
            )
    return problems


# -- workflow commands ---------------------------------------------------------------
def commands(rows: Iterable[Row], workspace: str) -> list[str]:
    """``::error file=...,line=...,title=...::message``, one per row with a level. The
    title names the line to change; the message is a few lines (``%0A``), the fix first
    (GitHub's annotation box shows the first lines only), then what was found, then the
    test."""
    lines = []
    for row in rows:
        if not row.level:
            continue
        properties = []
        path = relative_path(row.file, workspace)
        title = (
            f"graphleak (known, in {row.known_in}): {row.title}"
            if row.known_in
            else f"graphleak: {row.title}"
        )
        if path:
            properties.append(f"file={_property(path)}")
            if row.line > 0:
                properties.append(f"line={row.line}")
            title += f" at {path}:{row.line}" if row.line > 0 else f" in {path}"
        properties.append(f"title={_property(title)}")
        told = [row.known] if row.known else []  # a known one: why it fails nothing
        told += [row.fix_line or f"fix: {row.fix}"] if row.fix else []
        told += [*row.summary.split("\n"), f"test: {row.test}"]
        lines.append(f"::{row.level} {','.join(properties)}::{_data(chr(10).join(told))}")
    return lines


def _data(text: str) -> str:
    """A command's message, escaped as GitHub's toolkit does (``escapeData``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A command's property value (``escapeProperty``): ``:`` and ``,`` too."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


# -- the step summary ----------------------------------------------------------------
def step_summary(
    rows: Sequence[Row],
    workspace: str,
    summary: Mapping[str, int],
    *,
    others: int = 0,
    environ: Mapping[str, str] | None = None,
) -> str:
    """A markdown section: a short heading (the statuses other than clean), the session's
    sentence (``summary.sentence``: tests, not checks), then each new finding (a leak, an
    error, an unmeasured check) as a short block, worst first: its badge, status and test,
    the pattern and the line to change, the fix, and the rest folded in ``<details>``
    (what holds it, what grew, the verified fix as a diff). The known findings (with the
    baseline file's reason) and the clean checks are folded into a count each, a list
    that opens on a click. ``others``: how many of ``rows`` are findings of other kinds
    (``writers.Run.rows``). With ``GITHUB_SERVER_URL``, ``GITHUB_REPOSITORY`` and
    ``GITHUB_SHA`` in ``environ``, each line links to the file at the run's commit."""
    told = sentence(summary)
    head = f"### graphleak: {_heading(summary)}"
    if others:
        head += f"; {others} other {'finding' if others == 1 else 'findings'}"
    if not rows:
        return f"{head}\n\n{no_rows(summary)}\n\n"
    found = sorted(
        (row for row in rows if row.status not in (CLEAN, KNOWN)),
        key=lambda r: (display_key(r.status), r.test),
    )
    lines = [head, "", f"{told[:1].upper()}{told[1:]}.", ""]
    for row in found:
        lines += _finding_block(row, workspace, environ or {})
    known = sorted((row for row in rows if row.status == KNOWN), key=lambda r: r.test)
    if known:
        where = known[0].known_in
        lines += [
            f"<details><summary>{_badge(KNOWN)} {_count(len(known), 'known finding')} "
            f"(listed in {_text(where)}: {'it fails' if len(known) == 1 else 'they fail'} "
            "nothing)</summary>",
            "",
        ]
        lines += [_known_item(row, workspace, environ or {}) for row in known]
        lines += ["", "</details>", ""]
    clean = [row for row in rows if row.status == CLEAN]
    if clean:
        lines += [
            f"<details><summary>{_badge(CLEAN)} {_count(len(clean), 'clean check')} "
            "(nothing grew)</summary>",
            "",
        ]
        lines += [f"- `{_code(row.test)}`: {_text(row.summary)}" for row in clean]
        lines += ["", "</details>", ""]
    return "\n".join(lines).rstrip("\n") + "\n\n"


def _finding_block(row: Row, workspace: str, environ: Mapping[str, str]) -> list[str]:
    """One new finding: badge, status and test; what it is and where; the fix; then the
    details folded (the lines of its annotation after the fix, and a verified fix's
    diff)."""
    facts = BY_WORD.get(row.status)
    label = facts.label if facts is not None else row.status.upper()
    what = _text(row.title)
    where = _where(row, workspace, environ)
    lines = [
        f"{_badge(row.status)} **{label}** `{_code(row.test)}`".strip() + "<br>",
        f"{what} at {where}" if where else what,
    ]
    if row.fix:
        fix = row.fix_line or f"fix: {row.fix}"
        label, _, text = fix.partition(": ") if not row.fix_line else _fix_parts(fix)
        lines[-1] += "<br>"
        lines.append(f"**{_text(label)}:** {_text(text)}")
    told = [line for line in row.summary.splitlines() if line.strip()]
    if not row.fix and told:  # no fix to name (a step that raised): what happened instead
        lines[-1] += "<br>"
        lines.append(_text(told.pop(0)))
    details = [f"- {_text(line)}" for line in told]
    diff = _diff_block(row, workspace)
    if details or diff:
        lines += ["", "<details><summary>details</summary>", "", *details, *diff, "", "</details>"]
    return [*lines, ""]


def _fix_parts(fix_line: str) -> tuple[str, str, str]:
    """``fix (verified: 8 more steps ...): train.py:12: ...`` as its label and its text."""
    depth = 0
    for at, char in enumerate(fix_line):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ":" and depth == 0:
            return fix_line[:at], ":", fix_line[at + 1 :].lstrip()
    return "fix", ":", fix_line


def _known_item(row: Row, workspace: str, environ: Mapping[str, str]) -> str:
    """A known finding in one list item: the test, what and where, the baseline file's
    reason, the fix."""
    where = _where(row, workspace, environ)
    at = f" at {where}" if where else ""
    fix = f"; fix: {_text(row.fix)}" if row.fix else ""
    return f"- `{_code(row.test)}`: {_text(row.title)}{at}; {_text(row.known)}{fix}"


def _badge(status: str) -> str:
    """The status's badge (``StatusFacts.badge``); "" for an unknown word."""
    facts = BY_WORD.get(status)
    return facts.badge if facts is not None else ""


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _diff_block(row: Row, workspace: str) -> list[str]:
    """A verified fix as a ``diff`` block, its file named relative to the workspace
    (``graphleak fix`` prints the same change); none when the fix is not verified."""
    if not row.diff:
        return []
    name = relative_path(row.diff_file, workspace) or row.diff_file
    diff = row.diff.splitlines()
    if len(diff) >= 2 and diff[0].startswith("--- ") and diff[1].startswith("+++ "):
        diff[:2] = [f"--- a/{name}", f"+++ b/{name}"]
    fence = "````" if any(line.lstrip(" +-").startswith("```") for line in diff) else "```"
    return [
        "",
        "The verified fix (the step re-run with it grew nothing; `graphleak fix "
        "REPORT.json --apply` writes it):",
        "",
        f"{fence}diff",
        *diff,
        fence,
    ]


def fixed_section(baseline: BaselineSection | None) -> str:
    """The baseline file's entries that the run no longer found, and those whose test a
    run of the whole suite did not collect (stale), each with the command that updates
    the file (the JSON document's ``baseline``); "" when there are none."""
    if baseline is None:
        return ""
    blocks = (
        (baseline.fixed, "Fixed since the baseline", "Update the baseline file"),
        (
            baseline.stale,
            "Entries of tests no longer collected (deleted or renamed)",
            "Remove them",
        ),
    )
    lines: list[str] = []
    for keys, title, then in blocks:
        if not keys:
            continue
        lines += [f"#### {title} ({len(keys)})", ""]
        for entry in keys:
            held = f", held by `{entry.holder}`" if entry.holder else ""
            lines.append(f"- `{entry.test}` [{entry.check}] {entry.pattern}{held}")
        lines += ["", f"{then}: `{baseline.update_command}`", ""]
    return "\n".join(lines) + "\n" if lines else ""


def _heading(summary: Mapping[str, int]) -> str:
    """``1 leaked, 2 unmeasured``: the statuses of the tests other than clean; ``3 clean``
    when every test is; the session's sentence when no test has a result."""
    parts = [
        f"{summary[word]} {word}"
        for word in STATUSES  # the count line's order
        if word != CLEAN and summary.get(word)
    ]
    if parts:
        return ", ".join(parts)
    clean = summary.get(CLEAN)
    return f"{clean} clean" if clean else sentence(summary)


def _where(row: Row, workspace: str, environ: Mapping[str, str]) -> str:
    """``path:line``, linked to the file at the run's commit when GitHub says which."""
    path = relative_path(row.file, workspace)
    if not path:
        return ""
    shown = f"{path}:{row.line}" if row.line > 0 else path
    server, repo, sha = (
        environ.get(key, "") for key in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA")
    )
    if not (server and repo and sha):
        return f"`{_code(shown)}`"
    anchor = f"#L{row.line}" if row.line > 0 else ""
    url = f"{server.rstrip('/')}/{repo}/blob/{sha}/{urllib.parse.quote(path)}{anchor}"
    return f"[`{_code(shown)}`]({url})"


def _code(text: str) -> str:
    """Text inside a code span of a table cell: one line, no backtick, no bar."""
    return " ".join(text.split()).replace("`", "'").replace("|", "\\|")


def _text(text: str) -> str:
    """Plain text in a table cell: markdown and HTML characters escaped."""
    text = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)
