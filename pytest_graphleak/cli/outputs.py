"""Saved reports for the ``graphleak`` command: the same JSON document and HTML file as
``pytest --graphleak-report`` / ``--graphleak-html`` (built by ``report.json_doc`` and
``report.html``), and reading such a document back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_graphleak.cli.exits import UsageError
from pytest_graphleak.output_paths import Output, OutputPathError, check_outputs
from pytest_graphleak.result import CheckResult

GENERATED_BY = "graphleak check"


def checked_outputs(*outputs: tuple[str, str | None, str]) -> list[Path | None]:
    """The paths of ``(flag, path or None, kind)`` outputs, after refusing (UsageError,
    before any step runs) one that cannot be written, would replace a file graphleak did
    not write, or is given twice (``output_paths``)."""
    given = [Output(flag, Path(path), kind) for flag, path, kind in outputs if path]
    try:
        check_outputs(given)
    except OutputPathError as exc:
        raise UsageError(str(exc)) from None
    return [Path(path) if path else None for _, path, _ in outputs]


def document_for(results: list[CheckResult], notes: list[str] | None = None) -> dict[str, Any]:
    """A report document with one test per checked step, as the plugin's session report
    writes them (a leak or a raising step is a failed test)."""
    from pytest_graphleak.report.json_doc import CheckedTest, build_document

    tests = [
        CheckedTest(
            nodeid=result.name,
            outcome="failed" if (result.leaked or result.error) else "passed",
            checks=[result.to_dict()],
        )
        for result in results
    ]
    return build_document(tests, generated_by=GENERATED_BY, notes=notes or [])


def write_json(document: dict[str, Any], path: Path) -> None:
    from pytest_graphleak.report.json_doc import dumps

    _write(path, dumps(document), "--json")


def write_html(
    document: dict[str, Any], path: Path, environment: dict[str, str] | None = None
) -> None:
    from pytest_graphleak.report.html import render_html

    _write(path, render_html(document, environment=environment), "--html")


def _write(path: Path, text: str, option: str) -> None:
    from pytest_graphleak.report.json_doc import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


def load_document(path: str) -> dict[str, Any]:
    """Read a saved report; every way it can be unusable is a UsageError naming the file."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"no such file: {path}")
    if file.is_dir():
        raise UsageError(f"{path} is a directory: name a JSON report file")
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a JSON report (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    _check_shape(document, path)
    return document


def _check_shape(document: object, path: str) -> None:
    from pytest_graphleak.report.json_doc import DOCUMENT_SCHEMA_VERSION

    if not isinstance(document, dict) or "tests" not in document or "schema" not in document:
        raise UsageError(
            f"{path} is JSON but not a graphleak report (expected an object with "
            "'schema' and 'tests', as written by --graphleak-report or graphleak check --json)"
        )
    if document["schema"] != DOCUMENT_SCHEMA_VERSION:
        raise UsageError(
            f"{path} has report schema {document['schema']!r}; this graphleak reads "
            f"schema {DOCUMENT_SCHEMA_VERSION}"
        )
    from pytest_graphleak.report.json_doc import load_schema
    from pytest_graphleak.report.validate import SchemaError, validate

    try:  # the schema the writers follow names the first wrong field
        validate(document, load_schema())
    except SchemaError as exc:
        raise UsageError(f"{path} is not a valid graphleak report: {exc}") from None
    for index, test in enumerate(document["tests"]):
        for number, check in enumerate(test["checks"]):
            try:  # what the schema cannot say (a site with an unknown field, say)
                CheckResult.from_dict(check)
            except (KeyError, TypeError, ValueError) as exc:
                raise UsageError(
                    f"{path}: tests[{index}].checks[{number}] is not a check result "
                    f"({type(exc).__name__}: {exc})"
                ) from None


def results_of(document: dict[str, Any]) -> list[tuple[dict[str, Any], CheckResult]]:
    """(test entry, one of its checks) pairs, in document order."""
    return [
        (test, CheckResult.from_dict(check))
        for test in document["tests"]
        for check in test["checks"]
    ]
