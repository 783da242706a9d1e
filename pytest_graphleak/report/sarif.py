"""SARIF 2.1.0 output (``--graphleak-sarif=FILE``), for GitHub code scanning.

One SARIF result per finding (a leak, known or not, and a graph the outlive audit saw
outlive its test), read from the typed report (``model.Report``):

- ``ruleId``: the pattern word; ``tool.driver.rules`` has one rule per word
  (``patterns.TABLE``: what it means and its usual fix);
- the location: the line that stores the leaked object, else the line to change of a
  cycle, else the line of the user's code that created it (``view.line_to_change``),
  else the test's line; a file under the workspace (``$GITHUB_WORKSPACE``, else the
  current directory) as a relative URI with ``uriBaseId`` ``%SRCROOT%``, which code
  scanning reads relative to the repository's root;
- the message: the story as the failure text tells it (what grew or outlived the test,
  then pattern, held by, cycle, created at, stored at, notes and fix);
- ``fixes``: the verified fix (``result.Fix``), its unified diff as ``artifactChanges``
  of whole-line ``replacements``; a fix that is not verified is advice, only in the text;
- ``baselineState`` with ``--graphleak-baseline``: ``unchanged`` for a finding listed in
  the baseline file, ``new`` for any other. The entries fixed since the baseline are no
  results (code scanning makes an alert of every result, whatever its ``kind`` or
  ``baselineState``): they are listed in the run's ``properties``.
- ``partialFingerprints``: a hash of the finding's baseline key (test, check, pattern,
  holder), the same from run to run while the line moves.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_graphleak.baseline_keys import Key, key_of
from pytest_graphleak.paths import relative_to
from pytest_graphleak.patterns import BY_WORD, PATTERNS
from pytest_graphleak.report.hunks import hunks
from pytest_graphleak.report.model import BaselineSection, Report, TestRow, check_label
from pytest_graphleak.report.view import (
    diagnosis_view,
    fix_qualifier,
    known_text,
    line_to_change,
)
from pytest_graphleak.result import CheckResult, Fix
from pytest_graphleak.status import BY_WORD as STATUSES
from pytest_graphleak.status import KNOWN

SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
TOOL = "pytest-graphleak"
SRCROOT = "%SRCROOT%"
_HOME = "https://github.com/pytest-graphleak/pytest-graphleak"


def render_sarif(report: Report, run: Any) -> str:
    """The writer's ``render`` (``writers.WRITERS``): the log of a report, paths
    relative to ``$GITHUB_WORKSPACE`` (else the current directory)."""
    base = run.environ.get("GITHUB_WORKSPACE") or os.getcwd()
    log = sarif_log(report, base=base, locations=run.locations, rootdir=report.rootdir or "")
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def sarif_log(
    report: Report,
    *,
    base: str,
    locations: Mapping[str, tuple[str, int]] | None = None,
    rootdir: str = "",
) -> dict[str, Any]:
    """The SARIF log of a typed report. ``locations``: node id -> (file, line) of each
    test (where a finding with no line of its own is placed); ``rootdir``: the run's, to
    place one on its test's file when no location is known."""
    rules = [_rule(word) for word in PATTERNS]
    results = []
    for test in report.tests:
        for index, check in enumerate(test.checks):
            status = test.status_of(check)
            if not STATUSES[status].found:
                continue
            place = _place(test, check, locations or {}, rootdir)
            pattern = check.pattern or "leak"
            if pattern not in PATTERNS and all(rule["id"] != pattern for rule in rules):
                rules.append({"id": pattern, "shortDescription": {"text": "a graph leak"}})
            results.append(_result(report, test, index, status, place, base))
    run: dict[str, Any] = {
        "tool": {"driver": {"name": TOOL, **_version(), "informationUri": _HOME, "rules": rules}},
        "originalUriBaseIds": {SRCROOT: {"uri": Path(os.path.abspath(base)).as_uri() + "/"}},
        "results": results,
        "columnKind": "unicodeCodePoints",
    }
    if report.baseline is not None:
        run["properties"] = {"baseline": _baseline(report.baseline)}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _version() -> dict[str, str]:
    """The driver's ``version``: the installed distribution's (none when not installed)."""
    try:
        return {"version": metadata.version(TOOL)}
    except metadata.PackageNotFoundError:
        return {}


def _rule(word: str) -> dict[str, Any]:
    facts = BY_WORD[word]
    return {
        "id": word,
        "name": "".join(part.capitalize() for part in word.split("-")),
        "shortDescription": {"text": facts.meaning},
        "help": {"text": f"Usual fix: {facts.fix}."},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["autograd", "memory"]},
    }


def _result(
    report: Report, test: TestRow, index: int, status: str, place: tuple[str, int], base: str
) -> dict[str, Any]:
    check = test.checks[index]
    pattern = check.pattern or "leak"
    label = check_label(test, index)
    outlive = check.kind == "outlive"
    # The audit's finding (a test's, or a fixture's judged at its teardown): kept, not grown.
    head = (
        f"{label}: autograd graphs outlived the teardown ({pattern})."
        if outlive
        else f"{label} leaks: {pattern}."
    )
    known = ""
    if status == KNOWN:  # the reason the baseline entry gives, as every surface says it
        known = known_text(check.known_reason, report.baseline.file if report.baseline else "")
        head += f" {known[0].upper()}{known[1:]} (it fails nothing)."
    lines = [head, check.verdict.reason]
    path = _shown(base)
    lines += [
        line.plain()
        for line in diagnosis_view(pattern, check.diagnosis, path=path, outlive=outlive)
    ]
    lines.append(f"test: {test.nodeid}")
    file, line = place
    location: dict[str, Any] = {"artifactLocation": _artifact(file, base)}
    if line > 0:
        location["region"] = {"startLine": line}
    result: dict[str, Any] = {
        "ruleId": pattern,
        "level": STATUSES[status].sarif_level,
        "message": {"text": "\n".join(line for line in lines if line)},
        "locations": [{"physicalLocation": location}],
        "partialFingerprints": {"graphleakFinding/v1": _fingerprint(test, check)},
        "properties": {"test": test.nodeid, "status": status, "kind": check.kind},
    }
    if known:
        result["properties"]["knownReason"] = check.known_reason
    if pattern in PATTERNS:
        result["ruleIndex"] = PATTERNS.index(pattern)
    tried = check.diagnosis.fix_tried if check.diagnosis is not None else None
    if tried is not None and tried.verified and tried.diff and tried.filename:
        result["fixes"] = [fix_object(tried, base, fix_qualifier(check.diagnosis))]
    if report.baseline is not None:
        result["baselineState"] = "unchanged" if check.known else "new"
    return result


def _place(
    test: TestRow, check: CheckResult, locations: Mapping[str, tuple[str, int]], rootdir: str
) -> tuple[str, int]:
    """The finding's file and line (0: the file only): its line to change, else a fixture
    finding's fixture line, else the test's line, else the test's file."""
    site = line_to_change(check.diagnosis)
    if site is not None:
        return site.filename, site.lineno
    if check.judged_at is not None and check.judged_at.file:
        return check.judged_at.file, check.judged_at.line
    known = locations.get(test.nodeid) or locations.get(check.name)
    if known is not None and known[0]:
        return known
    module = test.nodeid.split("::", 1)[0]
    return (os.path.join(rootdir, module), 0) if rootdir and module else ("", 0)


def _artifact(file: str, base: str) -> dict[str, str]:
    """A file under ``base`` as a relative URI on ``%SRCROOT%``; any other as an absolute
    ``file:`` URI (code scanning cannot place it on the repository)."""
    relative = relative_to(file, base) if file else None
    if relative is not None:
        return {"uri": urllib.parse.quote(relative.replace(os.sep, "/")), "uriBaseId": SRCROOT}
    if file and os.path.isabs(file):
        return {"uri": Path(file).as_uri()}
    return {"uri": urllib.parse.quote(file.replace(os.sep, "/")) or "unknown"}


def _shown(base: str) -> Any:
    """How the message names a file: relative to ``base`` when under it."""
    return lambda filename: relative_to(filename, base) or filename


def fix_object(tried: Fix, base: str, qualifier: str) -> dict[str, Any]:
    """A SARIF ``fix`` of the verified change, described as ``fix (<qualifier>): <its
    changed line>``; its diff as replacements: each run of removed and added lines of
    its diff replaces whole lines, from the start of the first to the start of the line
    after the last (an insertion: an empty region at the start of a line)."""
    replacements = []
    for hunk in hunks(tried.diff or ""):
        line = hunk.start if hunk.old else hunk.start + 1  # the old file's next line
        first, changed, added = line, False, []
        for mark in (*hunk.lines, " "):  # a last context line ends the last run
            if mark[:1] in ("-", "+"):
                first, changed = (first, True) if changed else (line, True)
                if mark[:1] == "-":
                    line += 1
                else:
                    added.append(mark[1:] + "\n")
                continue
            if changed:
                replacements.append(
                    {
                        "deletedRegion": {
                            "startLine": first,
                            "startColumn": 1,
                            "endLine": line,
                            "endColumn": 1,
                        },
                        "insertedContent": {"text": "".join(added)},
                    }
                )
            changed, added = False, []
            line += 1
    return {
        "description": {"text": f"fix ({qualifier}): {tried.text}"},
        "artifactChanges": [
            {"artifactLocation": _artifact(tried.filename, base), "replacements": replacements}
        ],
    }


def _fingerprint(test: TestRow, check: CheckResult) -> str:
    """A hash of the finding's baseline key (``baseline_keys.key_of``): stable from run to run."""
    links = [asdict(link) for link in check.diagnosis.links] if check.diagnosis else []
    judged = asdict(check.judged_at) if check.judged_at is not None else None
    key = key_of(test.nodeid, name=check.name, pattern=check.pattern, links=links, judged_at=judged)
    return hashlib.sha256(key.text().encode("utf-8")).hexdigest()


def _baseline(section: BaselineSection) -> dict[str, Any]:
    """The baseline file's part of the run: its entries fixed since (no results: see the
    module's docstring) and those of tests this run did not collect."""

    def keys(entries: tuple[Key, ...]) -> list[dict[str, str]]:
        return [asdict(entry) for entry in entries]

    return {
        "file": section.file,
        "entries": section.entries,
        "fixedSinceBaseline": keys(section.fixed),
        "stale": keys(section.stale),
        "updateCommand": section.update_command,
    }


def is_sarif_report(path: Path) -> bool:
    """A SARIF log this writer wrote (its tool is graphleak's): the one kind of file
    ``--graphleak-sarif`` replaces."""
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    runs = log.get("runs") if isinstance(log, dict) else None
    if not isinstance(runs, list) or not runs:
        return False
    drivers = [
        (run.get("tool") or {}).get("driver") or {} if isinstance(run, dict) else {} for run in runs
    ]
    return all(isinstance(driver, dict) and driver.get("name") == TOOL for driver in drivers)
