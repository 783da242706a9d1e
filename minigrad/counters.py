"""Exact created/alive counts of TensorImpl, Node and AutogradMeta, and creation sites.

Counting is O(1) per object: each counted class bumps a slot of one flat list in
``__init__`` and another in ``__del__`` (CPython runs ``__del__`` when the reference
count drops to zero, and also when the cyclic GC frees an object), so
``alive = created - freed`` is exact at every instant with no heap scan.

Creation-site recording is off by default. When on, every new TensorImpl and Node
remembers ``(filename, lineno)`` of the first stack frame outside the minigrad package,
i.e. the line of user code that made it. Turn it on with
``record_creation_sites(True)`` or ``with recording_creation_sites(): ...`` and read it
back with ``creation_site(obj)`` for a Tensor, TensorImpl or Node.

The counters are process-wide and updated without a lock: under the GIL a lost update
needs two threads creating tensors in the very same bytecode window, which the counts
tolerate (they are a leak signal, not accounting).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

# Slots of COUNTS: created then freed, for each counted kind.
IMPL_CREATED, IMPL_FREED = 0, 1
NODE_CREATED, NODE_FREED = 2, 3
META_CREATED, META_FREED = 4, 5
COUNTS: list[int] = [0, 0, 0, 0, 0, 0]

# RECORDING[0] is read on every object creation: a list item is the cheapest mutable flag.
RECORDING: list[bool] = [False]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

Site = tuple[str, int]


def stats() -> dict[str, dict[str, int]]:
    """Exact ``{"TensorImpl"|"Node"|"AutogradMeta": {"alive": int, "created": int}}``."""
    c = COUNTS
    return {
        "TensorImpl": {"alive": c[IMPL_CREATED] - c[IMPL_FREED], "created": c[IMPL_CREATED]},
        "Node": {"alive": c[NODE_CREATED] - c[NODE_FREED], "created": c[NODE_CREATED]},
        "AutogradMeta": {"alive": c[META_CREATED] - c[META_FREED], "created": c[META_CREATED]},
    }


def record_creation_sites(enabled: bool) -> bool:
    """Turn creation-site recording on or off; returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"record_creation_sites(enabled): expected a bool, got {enabled!r}")
    previous = RECORDING[0]
    RECORDING[0] = enabled
    return previous


def is_recording_creation_sites() -> bool:
    return RECORDING[0]


@contextmanager
def recording_creation_sites(enabled: bool = True) -> Iterator[None]:
    """Record creation sites inside the block; restores the previous setting on exit."""
    previous = record_creation_sites(enabled)
    try:
        yield
    finally:
        RECORDING[0] = previous


def user_site() -> Site | None:
    """``(filename, lineno)`` of the innermost frame outside the minigrad package."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


def creation_site(obj: Any) -> Site | None:
    """Where user code made ``obj`` (a Tensor, TensorImpl or Node), if it was recorded.

    ``None`` when recording was off at the time, or when ``obj`` is not a minigrad object.
    For a Tensor this is the site of its TensorImpl (the handle made by ``detach()`` shares
    the TensorImpl, and so its site).
    """
    impl = getattr(obj, "_impl", None)
    if impl is not None:
        obj = impl
    try:
        site = obj._site
    except AttributeError:  # never recorded (unset slot), or not a minigrad object
        return None
    return site if isinstance(site, tuple) else None
