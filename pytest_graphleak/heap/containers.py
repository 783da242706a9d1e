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
  code, also for a subclass that overrides ``__len__``), of an object of the user's
  own class that defines ``__len__`` (a history class that wraps a list can grow too),
  or the number of entries of a TensorDict-like object (``tensordict_like``: the
  library is optional, it is told by its shape); None for anything else (a library's
  other objects, a tensor: its length is a shape);
- ``attributes``: how many attributes an object of the user's own class has (a user
  object that gains one per step grows too);
- ``growable``: what a step can grow in place by any of these.
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


def tensordict_like(obj: object) -> bool:
    """A TensorDict or a class shaped like one: ``detach``, ``batch_size`` and ``keys``
    on its type (a tensor has no ``batch_size``). Told by duck typing: the library is
    optional, and its class is never imported here."""
    kind = type(obj)
    return all(hasattr(kind, name) for name in ("detach", "batch_size", "keys"))


def growable(obj: object) -> bool:
    """Can a step grow ``obj`` in place: a ``GROWABLE`` container, a TensorDict-like
    object (new keys) or an object of the user's own class (``length`` or attributes)?"""
    if isinstance(obj, GROWABLE) or tensordict_like(obj):
        return True
    return is_user_module(getattr(type(obj), "__module__", None)) is True and (
        hasattr(obj, "__dict__") or hasattr(type(obj), "__len__")
    )


def attributes(obj: object) -> int | None:
    """How many attributes an object of the user's own class has in its ``__dict__``
    (None: not the user's, or it has none)."""
    if not is_user_module(getattr(type(obj), "__module__", None)) or isinstance(obj, type):
        return None
    found = getattr(obj, "__dict__", None)
    return len(found) if isinstance(found, dict) else None


def length(obj: object) -> int | None:
    """The length of a container (see the module docstring); None when it has none
    that can be read without running a library's code, or reading it raised."""
    kind = type(obj)
    sizer = c_length(kind)
    if sizer is not None:
        return sizer(obj)
    if tensordict_like(obj):  # its entries: len() is its batch size, not what it holds
        try:
            return len(list(obj.keys()))  # type: ignore[attr-defined]
        except Exception:
            return None
    own = getattr(kind, "__len__", None)
    if own is None or not is_user_module(getattr(kind, "__module__", None)):
        return None
    try:
        found = own(obj)
    except Exception:  # the user's __len__ may fail on a half-built object
        return None
    return found if type(found) is int else None
