"""Text the output's encoding cannot show degrades to ASCII instead of crashing.

A report holds sparklines (``▁▂▃▄▅▆▇█``), dashes and whatever the user's names and
messages hold; on a stdout that is not UTF-8 (``PYTHONIOENCODING=ascii``, ``LANG=C``, a
Windows cp1252 console) ``print`` would raise ``UnicodeEncodeError`` halfway through a
report, after the verdict was known and before ``--json`` was written (pytest writes
``\u2581`` instead). The commands' streams, and pytest's terminal while output is
captured, use the ``graphleak-ascii`` error handler instead: a character the encoding
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
    "—": "--",
    "–": "-",
    "…": "...",
    "→": "->",
    "←": "<-",
    "↑": "^",
    "↓": "v",
    "×": "x",
    "≤": "<=",
    "≥": ">=",
    "≈": "~",
    "µ": "u",
    "·": ".",
    "•": "*",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "\u00a0": " ",
    "─": "-",
    "━": "-",
    "│": "|",
    "┃": "|",
    "┌": "+",
    "┐": "+",
    "└": "+",
    "┘": "+",
    "├": "+",
    "┤": "+",
    "┬": "+",
    "┴": "+",
    "┼": "+",
    "✓": "ok",
    "✗": "x",
}


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


def _shows_all(stream: TextIO) -> bool:
    """Whether the stream's encoding is a Unicode one (UTF-8 on almost every terminal):
    then it is left exactly as it is."""
    try:
        "▁—".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeError, LookupError):
        return False
    return True


def degrade_to_ascii(*streams: TextIO) -> list[tuple[TextIO, str]]:
    """Make each stream (default: stdout and stderr) write what its encoding cannot show
    as ASCII look-alikes; a stream that already chose its own error handling (or cannot
    be reconfigured, such as a test's capture buffer) is left as it is. Returns each
    changed stream with its former handler, for ``restore``."""
    changed = []
    for stream in streams or (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        errors = getattr(stream, "errors", None)
        # strict: stdout's default; backslashreplace: stderr's (a bar as "\u2581").
        if reconfigure is not None and errors in _DEFAULTS and not _shows_all(stream):
            reconfigure(errors=HANDLER)
            changed.append((stream, str(errors)))
    return changed


def restore(changed: list[tuple[TextIO, str]]) -> None:
    """Put back the error handlers ``degrade_to_ascii`` replaced."""
    for stream, errors in changed:
        stream.reconfigure(errors=errors)  # type: ignore[attr-defined]
    changed.clear()
