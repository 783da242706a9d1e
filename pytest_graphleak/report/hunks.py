"""The hunks of a verified fix's unified diff (``result.Fix.diff``): what ``graphleak fix
--apply`` writes and what the SARIF report's ``fixes`` replace."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    """One hunk of a unified diff: the old lines it starts at (1-based) and its lines,
    each with its mark (`` ``, ``-``, ``+``) and without its line ending."""

    start: int
    lines: tuple[str, ...]

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "+")]


def hunks(diff: str) -> list[Hunk]:
    """The hunks of a one-file unified diff (``fix_source.unified_diff``'s)."""
    found: list[Hunk] = []
    start: int | None = None
    body: list[str] = []
    for line in diff.splitlines():
        head = _HUNK.match(line)
        if head is not None:
            if start is not None:
                found.append(Hunk(start, tuple(body)))
            start, body = int(head.group(1)), []
        elif start is not None and line[:1] in (" ", "-", "+"):
            body.append(line)
        elif start is not None and line.startswith("\\"):  # "\ No newline at end of file"
            continue
    if start is not None:
        found.append(Hunk(start, tuple(body)))
    return found
