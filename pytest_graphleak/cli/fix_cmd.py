"""``graphleak fix REPORT.json``: the report's verified fixes as unified diffs of the
user's files; with ``--apply``, written into them (``cli.patches`` says where and when).

stdout is the diff alone (``graphleak fix r.json | git apply`` from the rootdir works);
what is not a diff (a leak without a verified fix, a refusal, what was written) goes to
stderr. Exit code 0: nothing is left unapplied (every verified fix was written, or there
is none); 1: a verified fix is left unapplied (shown but not asked to be written, or
refused); 2: the report cannot be read.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_graphleak.cli.exits import EXIT_CLEAN, EXIT_LEAK
from pytest_graphleak.cli.patches import apply, diff_for, refusal, shown_path
from pytest_graphleak.cli.report_cmd import load_report
from pytest_graphleak.exceptions import Refused
from pytest_graphleak.report.model import Report
from pytest_graphleak.result import Fix

#: Exit code when a verified fix is left unapplied (as a leak's: something to do).
EXIT_UNAPPLIED = EXIT_LEAK


@dataclass(frozen=True)
class Found:
    """A verified fix and the checks it is the fix of (one change can fix several)."""

    fix: Fix
    checks: tuple[str, ...]


def run_fix(args: argparse.Namespace) -> int:
    report = load_report(args.path)
    rootdir = report.rootdir
    found, unverified = verified_fixes(report)
    for name, why in unverified:
        print(f"graphleak fix: no verified fix for {name}: {why}", file=sys.stderr)
    if not found:
        print("graphleak fix: the report has no verified fix", file=sys.stderr)
        return EXIT_CLEAN
    if not args.apply:
        for item in found:
            sys.stdout.write(diff_for(item.fix, rootdir))
        return EXIT_UNAPPLIED
    return _apply_all(found, rootdir)


def verified_fixes(report: Report) -> tuple[list[Found], list[tuple[str, str]]]:
    """Each distinct verified fix of the report's leaks, in the report's order, and the
    leaks whose fix is not verified (their name and why)."""
    by_change: dict[tuple[str, str], list[str]] = {}
    fixes: dict[tuple[str, str], Fix] = {}
    unverified: list[tuple[str, str]] = []
    for name, fix in _fixes(report):
        if fix.verified and fix.diff:
            key = (fix.filename, fix.diff)
            fixes.setdefault(key, fix)
            by_change.setdefault(key, []).append(name)
        else:
            unverified.append((name, fix.why_not or "not tried"))
    return [Found(fixes[key], tuple(names)) for key, names in by_change.items()], unverified


def _fixes(report: Report) -> Iterator[tuple[str, Fix]]:
    for test in report.tests:
        for check in test.checks:
            diagnosis = check.diagnosis
            if check.leaked and diagnosis is not None and diagnosis.fix_tried is not None:
                yield check.name, diagnosis.fix_tried


def _apply_all(found: list[Found], rootdir: str | None) -> int:
    """Write every fix that may be written, file by file; say what was and was not."""
    by_file: dict[str, list[Fix]] = {}
    refused = 0
    for item in found:
        why = refusal(item.fix, rootdir)
        if why is not None:
            print(f"graphleak fix: refused {why}", file=sys.stderr)
            refused += 1
            continue
        by_file.setdefault(item.fix.filename, []).append(item.fix)
    applied = 0
    for filename, fixes in by_file.items():
        try:
            apply(filename, [fix.diff or "" for fix in fixes])
        except (Refused, OSError) as exc:
            print(f"graphleak fix: refused {exc}", file=sys.stderr)
            refused += len(fixes)
            continue
        for fix in fixes:
            print(f"graphleak fix: applied {_where(fix, rootdir)}")
        applied += len(fixes)
    print(f"graphleak fix: {applied} applied, {refused} refused", file=sys.stderr)
    return EXIT_UNAPPLIED if refused else EXIT_CLEAN


def _where(fix: Fix, rootdir: str | None) -> str:
    """``train.py:12: losses.append(loss.item())``: the fix line's text (``path:line:
    change``) with the file named as the diff names it."""
    found = _TEXT.match(fix.text)
    if found is None:
        return fix.text
    return f"{shown_path(fix.filename, rootdir)}:{found.group(2)}: {found.group(3)}"


_TEXT = re.compile(r"^(.+?):(\d+): (.*)$", re.S)
