"""Colour for the ``graphleak`` commands' terminal text, as pytest colours its own:
``--color=yes|no|auto``; ``auto`` colours a terminal (a TTY whose ``TERM`` is not
``dumb``) unless ``NO_COLOR`` is set (https://no-color.org). A status word takes its
colour from the status table (``status.TABLE``), a failure-text line from its label
(``report.text.line_markup``), so the commands colour what pytest colours."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import TextIO

from pytest_graphleak.report.text import line_markup, wrapped
from pytest_graphleak.status import TABLE

#: ANSI SGR codes of the markup names pytest's terminal writer takes.
_CODES = {
    "bold": "1",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "purple": "35",
    "cyan": "36",
}
#: A line that starts with a status word (``LEAKED name: ...``): the word's colour.
_WORDS = {f"{row.label} ": {row.colour: True, "bold": row.fails} for row in TABLE}


def wants_colour(choice: str, stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """``--color``'s answer for ``stream``."""
    if choice in ("yes", "no"):
        return choice == "yes"
    if environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and environ.get("TERM") != "dumb"


def paint(text: str, markup: Mapping[str, bool]) -> str:
    """``text`` in the colours of ``markup`` (pytest's names: ``red``, ``bold``, ...)."""
    codes = ";".join(_CODES[name] for name, on in markup.items() if on and name in _CODES)
    return f"\x1b[{codes}m{text}\x1b[0m" if codes and text else text


def terminal_text(text: str, *, colour: bool, wrap: bool = True) -> str:
    """A rendered report as the commands print it: with ``wrap``, its lines broken at
    spaces to the terminal's width (``COLUMNS``, else the terminal's, 80 in a pipe: as
    pytest's); each part coloured as the line it came from when ``colour``. ``-q``'s one
    line per target is not wrapped: it is the line a script reads."""
    width = shutil.get_terminal_size().columns if wrap else 1 << 30
    parts = wrapped(text, width)
    return "\n".join(_coloured(part, line) if colour else part for part, line in parts)


def _coloured(part: str, line: str) -> str:
    word = next((w for w in _WORDS if part.startswith(w)), None)
    if word is not None:
        return paint(word.rstrip(), _WORDS[word]) + part[len(word) - 1 :]
    return paint(part, line_markup(line))
