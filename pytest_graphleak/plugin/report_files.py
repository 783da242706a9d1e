"""The report files of a session (JSON, HTML...): where each goes, refused before the
suite runs when its path is unsafe, and written atomically with a fallback in the temp
directory when the wanted path cannot be written (nothing is lost)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_graphleak.exceptions import OutputPathError
from pytest_graphleak.report.json_doc import write_text_atomic
from pytest_graphleak.report.output_paths import Output, check_outputs
from pytest_graphleak.report.writers import Writer
from pytest_graphleak.settings import Settings


@dataclass
class ReportFile:
    writer: Writer  # a file writer (``writers.WRITERS``)
    path: Path
    source: str  # where the path was given, for a usage error
    written_to: Path | None = None  # where it ended up (the fallback after a failed write)
    error: str = ""


def configured_path(config: pytest.Config, settings: Settings, key: str) -> Path | None:
    """The report path from the CLI (relative to the invocation directory) or else the
    ini file (relative to its directory)."""
    value = getattr(settings, key)
    if not value:
        return None
    if settings.source(key).startswith("command line"):
        path = config.invocation_params.dir / Path(str(value)).expanduser()
    else:
        base = config.inipath.parent if config.inipath else config.rootpath
        path = base / Path(value).expanduser()
    return Path(os.path.abspath(path))


def refuse_unsafe_outputs(config: pytest.Config, reports: Sequence[ReportFile]) -> None:
    """A report path that cannot be written, would replace a file graphleak did not
    write, or is shared with another output of this run (JUnit XML, pytest-reportlog)
    is a usage error now, before the suite runs, not a lost file at the end."""
    outputs = [Output(report.source, report.path, report.writer.kind) for report in reports]
    for dest, label in (("xmlpath", "--junitxml"), ("report_log", "--report-log")):
        value = config.getoption(dest, default=None)
        if value:
            path = config.invocation_params.dir / Path(str(value)).expanduser()
            outputs.append(Output(label, Path(os.path.abspath(path)), "other"))
    try:
        check_outputs(outputs)
    except OutputPathError as exc:
        raise pytest.UsageError(f"graphleak: {exc}") from None


def write_report(output: ReportFile, text: str) -> bool:
    """Write atomically; on failure, save to a fallback file in the temp directory and
    record an error naming both paths. Returns True when the wanted path was written."""
    try:
        write_text_atomic(output.path, text)
        output.written_to = output.path
        return True
    except OSError as exc:
        output.error = (
            f"could not write the graphleak {output.writer.label} report to {str(output.path)!r} "
            f"({type(exc).__name__}: {exc.strerror or exc})"
        )
    try:
        fd, fallback = tempfile.mkstemp(prefix="graphleak-", suffix="-" + output.path.name)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        output.error += ", nor to a temporary file"
        return False
    output.written_to = Path(fallback)
    output.error += f"; saved it to {fallback!r} instead"
    return False
