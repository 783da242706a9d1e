"""Text the output's encoding cannot show degrades to ASCII instead of crashing.

A report holds sparklines (``▁▂▃▄▅▆▇█``), dashes and whatever the user's names and
messages hold; on a stdout that is not UTF-8 (``PYTHONIOENCODING=ascii``, ``LANG=C``, a
Windows cp1252 console) ``print`` would raise ``UnicodeEncodeError`` halfway through a
report, after the verdict was known and before ``--json`` was written. The commands'
streams use the ``graphleak-ascii`` error handler instead: a character the encoding
cannot show becomes its ASCII look-alike (a bar becomes a level from ``_`` to ``#``),
else its letter without accents, else ``?``.
"""

from __future__ import annotations

import codecs
import sys
import unicodedata
from typing import TextIO

#: The error handler's name, for ``TextIOWrapper.reconfigure(errors=...)``.
HANDLER = "graphleak-ascii"

_LOOK_ALIKES = {
    **dict(zip("▁▂▃▄▅▆▇█", "_.-=+*%#", strict=True)),  # sparkline levels, low to high
    "—": "--", "–": "-", "…": "...", "→": "->", "←": "<-", "↑": "^", "↓": "v",
    "×": "x", "≤": "<=", "≥": ">=", "≈": "~", "µ": "u", "·": ".", "•": "*",
    "‘": "'", "’": "'", "“": '"', "”": '"', "\u00a0": " ",
    "─": "-", "━": "-", "│": "|", "┃": "|", "┌": "+", "┐": "+", "└": "+", "┘": "+",
    "├": "+", "┤": "+", "┬": "+", "┴": "+", "┼": "+", "✓": "ok", "✗": "x",
}  # fmt: skip


def ascii_look_alike(char: str) -> str:
    """An ASCII stand-in for one character (itself when it is ASCII)."""
    if char.isascii():
        return char
    known = _LOOK_ALIKES.get(char)
    if known is not None:
        return known
    stripped = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
    return stripped or "?"


def _handler(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(ascii_look_alike(char) for char in text), error.end


codecs.register_error(HANDLER, _handler)


_DEFAULTS = ("strict", "backslashreplace")


def degrade_to_ascii(*streams: TextIO) -> None:
    """Make each stream (default: stdout and stderr) write what its encoding cannot show
    as ASCII look-alikes; a stream that already chose its own error handling (or cannot
    be reconfigured, such as a test's capture buffer) is left as it is."""
    for stream in streams or (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        # strict: stdout's default; backslashreplace: stderr's (a bar as "\u2581").
        if reconfigure is not None and getattr(stream, "errors", None) in _DEFAULTS:
            reconfigure(errors=HANDLER)
