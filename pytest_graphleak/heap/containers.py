"""The one container rule: which objects can grow with the steps, and how long one is.

A container on a holder chain that grows with the steps makes ``list-accumulation``,
whatever it keeps. Every part of the plugin that asks "is this a container, and how
long is it?" asks here, so a ``collections.deque`` gets the words a list gets:

- ``GROWABLE``: list, deque, dict, set, and their subclasses (``OrderedDict``,
  ``defaultdict``, ``Counter``, a user's ``class Rows(list)``): a step can grow one in
  place;
- ``SIZED``: those plus tuple and frozenset, whose length is known but which a step
  cannot grow (a rebound tuple is a new object, seen as a new one);
- ``length``: the length of a ``SIZED`` container by its C ``__len__`` (never user
  code, also for a subclass that overrides ``__len__``), or of an object of the user's
  own class that defines ``__len__`` (a history class that wraps a list can grow too);
  None for anything else (a library's object, a tensor: its length is a shape).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from pytest_graphleak.heap.usercode import is_user_module

GROWABLE = (list, deque, dict, set)
SIZED = (list, deque, dict, set, tuple, frozenset)


def c_length(kind: type) -> Callable[[Any], int] | None:
    """The C ``__len__`` of the ``SIZED`` base of ``kind`` (None: not one)."""
    return next((base.__len__ for base in SIZED if issubclass(kind, base)), None)


def grows(obj: object) -> bool:
    """Can a step grow this container in place?"""
    return isinstance(obj, GROWABLE)


def length(obj: object) -> int | None:
    """The length of a container (see the module docstring); None when it has none
    that can be read without running a library's code, or reading it raised."""
    kind = type(obj)
    sizer = c_length(kind)
    if sizer is not None:
        return sizer(obj)
    own = getattr(kind, "__len__", None)
    if own is None or not is_user_module(getattr(kind, "__module__", None)):
        return None
    try:
        found = own(obj)
    except Exception:  # the user's __len__ may fail on a half-built object
        return None
    return found if type(found) is int else None
