"""Warnings torch raises inside an operation, placed at the user's line.

A warning raised in torch's C++ code (``torch.tensor(t)``'s copy-construct warning) is
placed at the innermost Python frame: a mode's ``__torch_function__`` (the warmup
recording's, the diagnosis's creation-site recorder's), not the user's line, and that is
where pytest's warnings summary would show it. So what an operation warns is caught (the
warning filters still decide first, as for any warning: "error" raises inside the
operation, "ignore" drops it) and warned again at the frame that called torch, where the
user's filters and once-per-line registry apply. The filters are left alone: changing
them resets every module's once-per-line registry, so each step would repeat the warning.
Not thread-safe, as ``warnings.catch_warnings`` is not: a mode is per thread, but the
hooks swapped for the operation are the process's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Any

_WARNINGS: Any = warnings  # its private hooks, set as catch_warnings(record=True) sets them
_OVERRIDES = os.path.join("torch", "overrides.py")


def catch_op_warnings() -> tuple[Any, Any, list[Any]]:
    """The hooks ``warnings.catch_warnings(record=True)`` swaps, at a fraction of its cost
    (this runs for every torch operation while a mode records)."""
    module = _WARNINGS
    caught: list[Any] = []
    saved = (module.showwarning, module._showwarnmsg_impl, caught)
    module.showwarning = module._showwarning_orig
    module._showwarnmsg_impl = caught.append
    return saved


def release_op_warnings(saved: tuple[Any, Any, list[Any]], *, raising: bool) -> None:
    """Restore the hooks; warn each caught warning again where it belongs. Called from
    the ``__torch_function__`` that called the operation."""
    __tracebackhide__ = True
    mode_file = sys._getframe(1).f_code.co_filename
    module = _WARNINGS
    module.showwarning, module._showwarnmsg_impl, caught = saved
    for message in caught:
        # An operation that raised keeps its own exception (an "error" filter's exception
        # would replace it).
        with contextlib.suppress(Warning) if raising else contextlib.nullcontext():
            if message.filename != mode_file:  # placed deeper, by torch's Python code: kept
                warnings.warn_explicit(
                    message.message,
                    message.category,
                    message.filename,
                    message.lineno,
                    source=message.source,
                )
                continue
            caller = _torch_caller(sys._getframe(2))  # 2: above __torch_function__
            where = caller.f_globals
            warnings.warn_explicit(
                message.message,
                message.category,
                caller.f_code.co_filename,
                caller.f_lineno,
                module=where.get("__name__"),
                registry=where.setdefault("__warningregistry__", {}),
                module_globals=where,
            )


def _torch_caller(frame: Any) -> Any:
    """The frame that called torch, seen from the one above ``__torch_function__``: that
    frame itself for an operation in C++; for a torch function written in Python
    (``F.softmax``) dispatched through ``torch.overrides.handle_torch_function``, the
    caller of that function, where the warning lands without the recording."""
    if frame.f_code.co_filename.endswith(_OVERRIDES) and frame.f_back is not None:
        frame = frame.f_back.f_back or frame.f_back
    return frame
