"""The objects a step can reach before the check starts: the probes' start set.

A tensor made before the check can carry a graph that grows without any new Python
object (``total += loss`` on a fixture's tensor), so the torch probe must know the
tensors alive at the start. Scanning the whole heap for them costs O(heap) per check
(25 to 120 ms on a pytest + torch process). A step can only grow a graph on a tensor it
can reach, so the tracker walks what the step reaches instead: its fixture values,
``self``, the step function's closure, defaults and globals, and the caller's locals.

The walk stays in the user's world: it enters containers, instances, closures and the
globals of the user's own modules, but not the standard library's or the installed
packages' module globals, their classes, code objects, frames, or pytest's and the
plugin's own objects (``request`` reaches every test of the session). Past ``limit``
objects it gives up, and it gives up before listing a list, tuple, dict, set or deque
whose items alone would pass the limit, so a fixture or global holding a huge dataset
costs at most a walk of ``limit`` objects: the caller then finds the start set another
way (the tensors the warmup steps use, or the whole heap; see ``tracker``).
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from pytest_graphleak.heap.containers import c_length
from pytest_graphleak.heap.quiet import silenced
from pytest_graphleak.heap.usercode import is_private_module, is_user_module

#: Objects walked before giving up (then the caller scans the whole heap instead).
DEFAULT_LIMIT = 100_000

#: What the walk does with an object, decided once per type and walk.
_ENTER, _SKIP, _LOOK = 0, 1, 2

#: Never entered: what they refer to is code, interpreter state or the call stack.
_OPAQUE: frozenset[type] = frozenset(
    (
        types.CodeType,
        types.FrameType,
        types.TracebackType,
        types.BuiltinFunctionType,
        types.GetSetDescriptorType,
        types.MemberDescriptorType,
        types.WrapperDescriptorType,
        types.MethodWrapperType,
        types.MethodDescriptorType,
        types.ClassMethodDescriptorType,
    )
)


#: Modules whose own classes' instances are never entered: the standard library's
#: logging objects (loggers, handlers, their locks, and the manager that lists every
#: logger of the process: ~1,500 objects reached from a transformers Trainer, 60% of its
#: start walk) hold configuration, not a step's tensors. A user's subclass is entered.
_OPAQUE_MODULES = frozenset({"logging"})


class Reach:
    """One walk's rules, with "is this module the user's" cached across walks by module
    name (never by type or module object: the cache must not keep the user's classes alive)."""

    def __init__(self) -> None:
        # module name -> is it the user's (not stdlib, not an installed package)
        self._user_module: dict[str, bool] = {}

    def user_module(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        known = self._user_module.get(name)
        if known is None:
            found = is_user_module(name)
            if found is None:
                return False  # not cached: it may be imported later
            known = self._user_module[name] = found
        return known

    def _rule(self, kind: type) -> int:
        """What to do with objects of this type: _ENTER, _SKIP or _LOOK (per object)."""
        if kind is dict or issubclass(kind, (types.ModuleType, type)):
            return _LOOK
        if kind in _OPAQUE:
            return _SKIP
        module = getattr(kind, "__module__", None)
        return _SKIP if module in _OPAQUE_MODULES or is_private_module(module) else _ENTER

    def _look(self, obj: Any) -> bool:
        """Enter this dict, module or class?"""
        if type(obj) is dict:
            # A module's globals dict (reached through a function's __globals__ or a
            # module): entered only for the user's own modules.
            if "__spec__" in obj and "__name__" in obj:
                name = obj["__name__"]
                module = sys.modules.get(name) if isinstance(name, str) else None
                if module is not None and getattr(module, "__dict__", None) is obj:
                    return self.user_module(name)
            return True
        if isinstance(obj, types.ModuleType):
            return self.user_module(obj.__name__)
        # A class: the user's hold class attributes; library classes lead to the
        # library's globals through their methods.
        return self.user_module(getattr(obj, "__module__", None))

    @silenced
    def walk(self, roots: Iterable[object], *, limit: int = DEFAULT_LIMIT) -> list[object] | None:
        """Every gc-tracked object reachable from ``roots`` under the rules above (roots
        included), or None when more than ``limit`` were reached or a container to enter
        holds more items than the limit leaves. The caller owns the returned list and
        should clear it when done."""
        seen: dict[int, object] = {}  # holds what it saw, so ids stay unique meanwhile
        rules: dict[type, int] = {}  # per walk only: never keeps a class alive after it
        sizers: dict[type, Callable[[Any], int] | None] = {}
        frontier: list[object] = [root for root in roots if gc.is_tracked(root)]
        try:
            while frontier:
                if len(frontier) > limit:  # one huge container: no need to look further
                    return None
                enter: list[object] = []
                listing = 0  # items of the containers entered at this level
                for obj in frontier:
                    key = id(obj)
                    if key in seen:
                        continue
                    seen[key] = obj
                    kind = type(obj)
                    rule = rules.get(kind)
                    if rule is None:
                        rule = rules[kind] = self._rule(kind)
                    if rule == _ENTER or (rule == _LOOK and self._look(obj)):
                        if kind not in sizers:
                            sizers[kind] = c_length(kind)
                        size = sizers[kind]
                        if size is not None:
                            listing += size(obj)
                        enter.append(obj)
                if len(seen) + listing > limit:  # give up before listing a huge container
                    return None
                frontier.clear()
                # One C call for the whole level; untracked objects (numbers, strings,
                # containers of them) hold nothing a step could grow.
                frontier = list(filter(gc.is_tracked, gc.get_referents(*enter)))
                enter.clear()
            return list(seen.values())
        finally:
            seen.clear()
            rules.clear()
            sizers.clear()
            frontier.clear()


_REACH = Reach()


def reachable(roots: Iterable[object], *, limit: int = DEFAULT_LIMIT) -> list[object] | None:
    """``Reach.walk`` with the process-wide caches."""
    return _REACH.walk(roots, limit=limit)
