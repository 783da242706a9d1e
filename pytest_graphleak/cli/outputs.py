"""Files the ``graphleak`` command writes (reports, the demo's plot): each path checked
before anything runs, each file written whole."""

from __future__ import annotations

from pathlib import Path

from pytest_graphleak.exceptions import OutputPathError, UsageError
from pytest_graphleak.options import OPTIONS_BY_KEY
from pytest_graphleak.report.json_doc import write_text_atomic
from pytest_graphleak.report.output_paths import Output, check_outputs
from pytest_graphleak.report.writers import WRITERS, Writer


def output_flags() -> list[tuple[Writer, str]]:
    """Each file writer (``writers.WRITERS``) with its ``graphleak`` flag (``--json``,
    ``--html``: its option's ``command_flag``): ``check`` and ``report`` take the same."""
    return [
        (w, OPTIONS_BY_KEY[w.option].command_flag or f"--{w.kind}") for w in WRITERS if w.to_file
    ]


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


def write_output(path: Path, text: str, option: str) -> None:
    """Write one output whole (atomically); an OSError is a UsageError naming the option."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
