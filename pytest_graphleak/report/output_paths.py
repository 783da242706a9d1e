"""Where graphleak writes files, checked before anything runs.

A report path is refused (a usage error, before the first test or step) when

* it is a directory, its directory does not exist or cannot be written;
* a file is there that graphleak did not write, of the same kind: ``--graphleak-report
  test_model.py`` (the flag used as a switch eats the next argument) would otherwise
  replace the test file with JSON. An empty file has nothing to lose and is replaced;
* another output of the same run writes to the same file (``--graphleak-report`` and
  ``--graphleak-html``, ``--junitxml``, ``--report-log``, ``graphleak check --json`` and
  ``--html``): one of them would silently lose.

The plugin (``session_report``) and the ``graphleak`` command (check, report, demo) both
call ``check_outputs``; each turns ``OutputPathError`` into its own usage error.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_graphleak.exceptions import OutputPathError
from pytest_graphleak.report.json_doc import file_head
from pytest_graphleak.report.writers import WRITERS

#: Marks the SVG that ``graphleak demo --plot`` writes, so a second run may replace it.
PLOT_MARK = "<!-- graphleak demo plot -->"


@dataclass(frozen=True)
class Output:
    label: str  # how the user gave it: "--json", "command line option --graphleak-report"
    path: Path  # as the tool will write it (absolute, or relative to the current directory)
    #: a file writer's kind (``writers.WRITERS``: "json", "html") or the demo's "svg";
    #: "other" is another tool's file (JUnit XML, a report log): only checked for
    #: collisions, never for its content.
    kind: str


def check_outputs(outputs: Sequence[Output]) -> None:
    """Raise OutputPathError for the first output that must not be written."""
    seen: dict[str, Output] = {}
    for output in outputs:
        key = _identity(output.path)
        if key in seen:
            first = seen[key]
            raise OutputPathError(
                f"{first.label} and {output.label} both write {str(output.path)!r}: one "
                "would replace the other; give each its own file"
            )
        seen[key] = output
    for output in outputs:
        if output.kind != "other":
            _check_path(output)


def _identity(path: Path) -> str:
    return os.path.normcase(os.path.realpath(path))


def _check_path(output: Output) -> None:
    """Writable, and not a file that graphleak did not write."""
    path = output.path
    where = f"{output.label} {str(path)!r}"
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OutputPathError(f"{where}: is a directory, name a file")
    if not parent.is_dir():
        raise OutputPathError(f"{where}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputPathError(f"{where}: directory {str(parent)!r} is not writable")
    if not path.exists() or _is_empty(path):
        return
    recognise, what = _OWN[output.kind]
    if recognise(path):
        return
    hint = ""
    flag = next((word for word in output.label.split() if word.startswith("--")), None)
    if flag and path.suffix in (".py", ".pyi", ".toml", ".cfg", ".ini", ".txt", ".md"):
        hint = f" ({flag} takes a path: was it meant as a switch?)"
    raise OutputPathError(
        f"{where}: the file exists and is not {what}; graphleak "
        f"replaces only its own reports, so it leaves this one alone{hint}. Name a new "
        "file, or remove this one first"
    )


def _is_empty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size == 0
    except OSError:
        return False


def is_demo_plot(path: Path) -> bool:
    return PLOT_MARK in file_head(path, 512)


#: kind -> (does graphleak's own file of that kind lie at the path?, what it is called):
#: the report writers' (``writers.WRITERS``) and the demo's plot.
_OWN: dict[str, tuple[Callable[[Path], bool], str]] = {
    **{w.kind: (w.recognise, w.what) for w in WRITERS if w.recognise is not None},
    "svg": (is_demo_plot, "a graphleak demo plot"),
}
