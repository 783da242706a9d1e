"""A traceback of the user's code, without graphleak's frames in front of it.

``graphleak check`` calls the step through the check, the tracker and, during warmup,
the recording's ``__torch_function__``; an exception raised in the step would show those
frames first and last, so the user's line is hard to find. pytest hides such frames
with ``__tracebackhide__``; the command drops them the same way: every frame of this
package and of Python's import machinery. When nothing else is left (graphleak itself
failed), the traceback is printed whole.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import TextIO

_PACKAGE = str(Path(__file__).resolve().parents[1])
_IMPORT_MACHINERY = ("<frozen importlib._bootstrap", str(Path("importlib", "__init__.py")))


def _ours(tb: TracebackType) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith(_PACKAGE) or any(part in filename for part in _IMPORT_MACHINERY)


def _trimmed(tb: TracebackType | None) -> TracebackType | None:
    """The same traceback minus graphleak's frames (relinked; the frames are shared)."""
    kept: list[TracebackType] = []
    while tb is not None:
        if not _ours(tb):
            kept.append(tb)
        tb = tb.tb_next
    if not kept:
        return None
    for current, following in zip(kept, [*kept[1:], None], strict=True):
        current.tb_next = following
    return kept[0]


def print_user_traceback(exc: BaseException, file: TextIO | None = None) -> None:
    """``traceback.print_exception`` of ``exc`` and its causes with graphleak's frames
    dropped (all of them kept when the user's code has no frame in it)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        trimmed = _trimmed(current.__traceback__)
        if trimmed is not None:
            current.__traceback__ = trimmed
        pending += [current.__cause__, current.__context__]
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=file or sys.stderr)
