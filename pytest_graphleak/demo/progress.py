"""Output for the demo: a live status line on a terminal, plain lines when piped.

On a TTY the log scrolls and one status line stays at the bottom (redrawn in place with
a carriage return and an erase-line escape); when stdout is a pipe or a file there is no
status line and no escape code, so logs and CI output read as plain text.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

_ERASE_LINE = "\r\x1b[K"
_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


class Display:
    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if live is None:
            live = _is_terminal(self.stream)
        self.live = live
        self._status = ""

    def line(self, text: str = "") -> None:
        """Print one line of the log (above the status line on a terminal)."""
        if self.live and self._status:
            self.stream.write(_ERASE_LINE)
        self.stream.write(text + "\n")
        if self.live and self._status:
            self.stream.write(self._status)
        self.stream.flush()

    def status(self, text: str) -> None:
        """Replace the live status line; nothing at all when not on a terminal."""
        if not self.live:
            return
        columns = shutil.get_terminal_size((100, 24)).columns
        self._status = text[: max(columns - 1, 10)]
        self.stream.write(_ERASE_LINE + self._status)
        self.stream.flush()

    def clear_status(self) -> None:
        if self.live and self._status:
            self.stream.write(_ERASE_LINE)
            self.stream.flush()
        self._status = ""

    def paint(self, text: str, colour: str) -> str:
        """``text`` in a colour on a terminal (unless NO_COLOR is set), plain otherwise."""
        if not self.live or os.environ.get("NO_COLOR") or colour not in _COLOURS:
            return text
        return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"


def _is_terminal(stream: TextIO) -> bool:
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def bar(done: int, total: int, width: int = 20) -> str:
    filled = 0 if total <= 0 else min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + "]"
