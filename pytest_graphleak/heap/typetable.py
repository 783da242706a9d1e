"""A value per type, learnt once and kept across tests without keeping a type alive.

The audit classifies each type it meets once per process (a graph type? a container? a
leaf?). A table keyed by the type itself would keep every type it ever met alive, and
a type can keep a graph alive: each ``MagicMock`` has a class of its own that holds the
mock, and so every call's arguments it recorded. ``TypeTable`` holds a type only when it
lives anyway: a static type (built into the interpreter or an extension) or one its
module holds under its qualified name (a library's class, a module-level class). Those
are most types, and the hot loops read them from ``held`` with one dict lookup; any
other type (made in a function, or one per instance) is kept by weak reference and
looked up by id, and its entry goes with it.
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref
from typing import Any, Generic, TypeVar

_V = TypeVar("_V")

#: Py_TPFLAGS_HEAPTYPE: a type without it is static, never freed.
_HEAPTYPE = 1 << 9


class TypeTable(Generic[_V]):
    """type -> value (see the module docstring)."""

    def __init__(self) -> None:
        #: The types that live anyway: read directly by loops (``held.get(type(obj))``).
        self.held: dict[type, _V] = {}
        #: id(type) -> (a weak reference to it, its value), for the others.
        self._weak: dict[int, tuple[weakref.ref[type], _V]] = {}

    def get(self, tp: type) -> _V | None:
        found = self.held.get(tp)
        if found is not None:
            return found
        known = self._weak.get(id(tp))
        return known[1] if known is not None and known[0]() is tp else None

    def put(self, tp: type, value: _V) -> None:
        if lives_anyway(tp):
            self.held[tp] = value
            return
        number = id(tp)
        weak = self._weak

        def forget(ref: weakref.ref[type]) -> None:  # the type died: its id is free
            if weak.get(number, (None, None))[0] is ref:
                del weak[number]

        with contextlib.suppress(TypeError):  # a type without weak references: not kept
            weak[number] = (weakref.ref(tp, forget), value)

    def clear(self) -> None:
        self.held.clear()
        self._weak.clear()


def lives_anyway(tp: type) -> bool:
    """Is ``tp`` kept alive without the audit: a static type, or one its module holds
    under its qualified name (read from the namespaces: no ``__getattr__`` runs)?"""
    if not tp.__flags__ & _HEAPTYPE:
        return True
    module = getattr(tp, "__module__", None)
    owner: Any = sys.modules.get(module) if isinstance(module, str) else None
    qualname = getattr(tp, "__qualname__", None)
    if owner is None or not isinstance(qualname, str):
        return False
    for part in qualname.split("."):
        namespace = getattr(owner, "__dict__", None)
        if not isinstance(namespace, (dict, types.MappingProxyType)):
            return False
        owner = namespace.get(part)
    return owner is tp
