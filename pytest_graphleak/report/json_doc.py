"""The session's report, typed, and its JSON document: one versioned document for all
checked tests.

The report (``build_report``: a ``model.Report``) is built only from the plain
``report.graphleak`` dicts that pytest (and pytest-xdist) carry from each test's call
phase, so it is the same whether the tests ran in one process or on many workers; every
writer renders it (``writers.WRITERS``). The JSON writer writes it as the document
(``document_of``), whose JSON Schema is ``schema.json`` beside this module (described in
the README, section "Reports"); ``graphleak report`` reads one back into the same report.

This module and ``validate`` are the schema's boundary: they build, write and check the
document's dicts themselves. Nothing else reads those dicts but the typed read model
(``report.model``, ``result.CheckResult.from_dict``), which every renderer reads.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphleak.report.dot import drawing_dot
from pytest_graphleak.report.model import BaselineSection, Report, TestRow, metric_rows
from pytest_graphleak.report.summary import counts
from pytest_graphleak.result import CheckResult

#: Version of the document layout (``"schema"`` key); bump on incompatible changes.
DOCUMENT_SCHEMA_VERSION = 1


@dataclass
class CheckedTest:
    """One test that ran at least one graphleak check (marker or fixture)."""

    nodeid: str
    #: pytest's call-phase outcome: "passed" | "failed" | "skipped", or "xfailed" for an
    #: expected failure (xfail marker, unittest.expectedFailure: pytest's skipped + wasxfail)
    outcome: str
    checks: list[dict[str, Any]] = field(default_factory=list)  # CheckResult.to_dict() each

    @property
    def status(self) -> str:
        """``leaked``: a check leaked and that failed the test; ``warned``: a check
        leaked and that failed nothing (warn-only mode, the outlive audit's warn mode, a
        caught GraphLeakError; the test passed, was skipped or failed for another reason);
        ``xfailed``: a check leaked and the test was expected to fail;
        ``error``: a step raised; ``unmeasured``: a check's probes measured nothing the
        step uses, or its loop was too short to judge, so it has no verdict; ``clean``
        otherwise (the rule: ``status.py``, read by the typed ``model.TestRow``)."""
        return self.typed().status

    def typed(self) -> TestRow:
        """The same test in the read model every renderer reads (``model.TestRow``)."""
        return TestRow.of(self.nodeid, self.outcome, map(CheckResult.from_dict, self.checks))


def _metrics(check: CheckResult) -> dict[str, dict[str, Any]]:
    """Per metric of one check: the document's ``metrics`` field, ``model.MetricRow.to_dict``
    of each (unit, first and last measured value, growth per step, whether the verdict
    judged it grown)."""
    return {row.name: row.to_dict() for row in metric_rows(check)}


def document_check(result: CheckResult) -> dict[str, Any]:
    """One check as the document holds it: its ``CheckResult.to_dict()`` with its
    ``metrics`` and, beside its diagnosis' drawing, that drawing's Graphviz DOT text
    (``dot``: "" when nothing was drawn)."""
    check = result.to_dict()
    out = {**check, "metrics": _metrics(result)}
    if result.diagnosis is not None:
        drawn = result.diagnosis.drawing
        out["diagnosis"] = {**check["diagnosis"], "dot": drawing_dot(drawn) if drawn else ""}
    return out


def build_report(
    tests: Iterable[CheckedTest],
    *,
    generated_by: str,
    warn_only: bool = False,
    notes: Iterable[str] = (),
    audited: int = 0,
    baseline: Mapping[str, Any] | None = None,
    rootdir: str | None = None,
) -> Report:
    """The typed report every writer renders (``writers.Writer``), tests sorted by node
    id (deterministic under xdist). ``audited``: the tests the outlive audit looked at
    (``summary.counts``); ``baseline``: the baseline file's section
    (``plugin/baseline.BaselineRun.section``), when one is used; ``rootdir``: the run's
    root directory (``graphleak fix --apply`` writes under it only)."""
    rows = tuple(test.typed() for test in sorted(tests, key=lambda t: t.nodeid))
    section = BaselineSection.from_dict(baseline) if baseline is not None else None
    summary = counts(
        (row.status for row in rows),
        audited=audited,
        fixed=len(section.fixed) if section is not None else None,
        fixtures=sum(row.is_fixture for row in rows),
    )
    return Report(
        generated_by=generated_by,
        warn_only=warn_only,
        summary=summary,
        notes=tuple(notes),
        tests=rows,
        baseline=section,
        rootdir=os.path.abspath(rootdir) if rootdir is not None else None,
    )


def document_of(report: Report) -> dict[str, Any]:
    """The report as its JSON document (``schema.json``): what the JSON writer writes."""
    extra: dict[str, Any] = {}
    if report.baseline is not None:
        extra["baseline"] = report.baseline.to_dict()
    if report.rootdir is not None:
        extra["rootdir"] = report.rootdir
    return {
        **extra,
        "schema": DOCUMENT_SCHEMA_VERSION,
        "generated_by": report.generated_by,
        "warn_only": report.warn_only,
        "summary": dict(report.summary),
        "notes": list(report.notes),
        "tests": [_entry(test) for test in report.tests],
    }


def build_document(tests: Iterable[CheckedTest], **options: Any) -> dict[str, Any]:
    """The report document of ``tests`` (``build_report``'s options): the JSON writer's
    text, as a dict."""
    return document_of(build_report(tests, **options))


def _entry(test: TestRow) -> dict[str, Any]:
    """One test of the document, with its status by the one rule."""
    return {
        "nodeid": test.nodeid,
        "outcome": test.outcome,
        "status": test.status,
        "checks": [document_check(check) for check in test.checks],
    }


def dumps(document: Mapping[str, Any]) -> str:
    """Stable JSON text: sorted keys, so equal documents give equal files. The top level
    is indented and each test is one line, which json's C encoder writes (it cannot
    indent): ~10x faster than indenting every number (benchmarks/results/session_rows.md).
    A non-finite number (a probe that failed to read) becomes ``null``: strict JSON."""
    fields = []
    for key in sorted(document):
        if key == "tests" and document[key]:
            text = "[\n" + ",\n".join(f"    {_one_line(test)}" for test in document[key]) + "\n  ]"
        else:  # small: json's indentation, shifted by the top level's
            text = json.dumps(_strict(document[key]), indent=2, sort_keys=True)
            text = text.replace("\n", "\n  ")
        fields.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def load_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every document validates against: package
    data beside this module."""
    schema: dict[str, Any] = json.loads(Path(__file__).with_name("schema.json").read_bytes())
    return schema


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new
    one, never half: a temporary file in the same directory, then ``os.replace``.
    Raises OSError (the temporary file removed) when the directory is missing or
    not writable."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o644)  # mkstemp makes 0600; a report is meant to be shared
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def file_head(path: Path, size: int = 4096) -> str:
    """The first ``size`` bytes of a file as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


def is_json_report(path: Path) -> bool:
    """A JSON document written by ``--graphleak-report`` or ``graphleak check --json``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(document, dict)
        and "tests" in document
        and "schema" in document
        and str(document.get("generated_by", "")).startswith(("pytest-graphleak", "graphleak"))
    )


def _one_line(value: Any) -> str:
    try:  # the common case: every number finite, no second walk over the values
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except ValueError:
        return json.dumps(_strict(value), sort_keys=True, allow_nan=False)


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value
