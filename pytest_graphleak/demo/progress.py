"""Output for the demo: the per-step log, and a live status line on a terminal.

The log line, after the seed engine's: ``Step 12 | Loss 3.1416 | RSS MiB pre 85.1 fwd 86.0
bwd 86.4 opt 86.4 | alive TensorImpl=69 Node=46 AutogradMeta=30 | created TensorImpl=2345
Node=1890`` -- RSS is read at four points of the step, each labelled: before the forward
pass (pre), after it (fwd), after backward (bwd) and after the optimizer step (opt), so a
leak shows in which phase memory is taken and never given back. MiB, as everywhere else
in the tool.

On a TTY the log scrolls and one status line stays at the bottom (redrawn in place with
a carriage return and an erase-line escape); when stdout is a pipe or a file there is no
status line and no escape code, so logs and CI output read as plain text.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import TextIO

import psutil

PHASES = ("pre", "fwd", "bwd", "opt")

_PROCESS = psutil.Process()


def rss_mb() -> float:
    """Resident set size of this process, in MiB."""
    return float(_PROCESS.memory_info().rss) / 2**20


@dataclass
class StepRecord:
    step: int  # 1-based, counting warmup steps too
    warmup: bool  # a warmup step: shown, not judged
    loss: float
    rss: dict[str, float] = field(default_factory=dict)  # phase -> MiB
    alive: dict[str, int] = field(default_factory=dict)  # e.g. TensorImpl -> 69
    created: dict[str, int] = field(default_factory=dict)  # cumulative, where counted


def format_line(record: StepRecord, width: int = 3) -> str:
    rss = " ".join(f"{phase} {record.rss.get(phase, float('nan')):.1f}" for phase in PHASES)
    parts = [
        f"Step {record.step:>{width}}",
        f"Loss {record.loss:.4f}",
        f"RSS MiB {rss}",
        "alive " + " ".join(f"{k}={v}" for k, v in record.alive.items()),
    ]
    if record.created:
        parts.append("created " + " ".join(f"{k}={v}" for k, v in record.created.items()))
    line = " | ".join(parts)
    return line + ("  (warmup)" if record.warmup else "")


_ERASE_LINE = "\r\x1b[K"
_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


class Display:
    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.live = _is_terminal(self.stream) if live is None else live
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
