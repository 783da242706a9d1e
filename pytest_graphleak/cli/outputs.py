"""The reports the ``graphleak`` command writes: the same JSON document and HTML file as
``pytest --graphleak-report`` / ``--graphleak-html`` (``report.json_doc``, ``report.html``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pytest_graphleak.cli.exits import UsageError
from pytest_graphleak.output_paths import Output, OutputPathError, check_outputs
from pytest_graphleak.report.json_doc import CheckedTest, build_document, write_text_atomic
from pytest_graphleak.result import CheckResult


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


def document_for(results: list[CheckResult], notes: list[str]) -> dict[str, Any]:
    """A report document with one test per checked step, as the plugin's session report
    writes them (a leak or a raising step is a failed test)."""
    tests = [
        CheckedTest(result.name, "failed" if (result.leaked or result.error) else "passed",
                    [result.to_dict()])
        for result in results
    ]
    return build_document(tests, generated_by="graphleak check", notes=notes)


def write_report(path: Path, text: str, option: str) -> None:
    """Write one report whole (atomically); an OSError is a UsageError naming the option."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
    kind = "JSON" if option == "--json" else "HTML"
    print(f"graphleak: {kind} report written to {path}", file=sys.stderr)
