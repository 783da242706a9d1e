"""The audit's cheap first question: can any root reach a graph the test left alive?

Most graphs a test leaves alive after its teardown are held by nothing of the user's:
torch keeps a tensor a graph saved alive from C++, a library caches one, a reference
cycle waits for the collector. Naming a holder (``explain``: the labelled shortest-path
search, one ``Edge`` per reference, rendered chains) costs tens of milliseconds per
test on a real suite's roots, only to find none. ``Gate.may_reach`` answers first, with
no labels and no paths: a breadth-first walk from the same roots that reads most
references with one ``gc.get_referents`` call per level.

It walks a superset of what the labelled search walks (``diagnose/edges.ObjectEdges``
with ``graphs=False``), so that "no" is final and the audit's verdict is what the
labelled search would have said:

- it enters everything the labelled search enters (containers, instances, the user's
  classes, closures, defaults, generators' locals, numpy object arrays and views,
  context variables' values, tensors' and graph nodes' references from their backend),
  and skips only what it never enters: modules, frames, code, builtins, descriptors,
  weak proxies, library classes, and pytest's and the plugin's own objects;
- it ignores the labelled search's narrower rules (the keep list, per-root shares):
  they only shorten a search; but like that search it does not follow a module's
  attribute that a forward pre-hook remakes before each forward (``weight_norm``'s
  ``weight``: a small graph of the layer's own parameters, made by every test that runs
  the layer), so that such a layer in a module global does not send each test to the
  search, which would pass over it. Only that edge is left out: the same tensor reached
  another way (a GRU's ``_flat_weights``) is still reached;
- a function is read as the labelled search reads it (closure cells, defaults,
  ``__dict__``), never through its ``__globals__``: a library function would lead to its
  whole package.

Past ``limit`` objects it answers None (not known): the audit then runs the labelled
search, as it did before the gate. Nothing it reads is kept after it returns; the rules
it learns per type are kept by weak reference to the type.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from pytest_graphleak.heap.edge import PROXY_TYPES, SUSPENDED, paused_frame
from pytest_graphleak.heap.quiet import silenced
from pytest_graphleak.heap.usercode import is_private_module, is_user_module
from pytest_graphleak.probes.autograd import Backend

#: Objects one gate walk reads before it answers "not known" (the labelled search's own
#: budget: a walk past it would not name a holder either).
LIMIT = 100_000

#: What the walk does with an object, decided once per type.
ENTER, SKIP, CLASS, FUNCTION, _METHOD, _GRAPH, _PAUSED, VAR, CONTEXT, _ARRAY, _MODULE = range(11)

#: Never entered by the labelled search (``edges._NO_WALK_TYPES``, but classes: the
#: user's are entered) nor by this walk.
_OPAQUE = (
    types.ModuleType,
    types.FrameType,
    types.CodeType,
    types.BuiltinFunctionType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    *PROXY_TYPES,
)
#: Values the collector does not track and that are never an array, a context variable
#: or a graph object (exact types: a subclass may be any of them): most of what a walk
#: reads (numbers, strings, a tuple or dict of them), left without asking ``_rule``.
_PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None), tuple, dict})
#: Edges into autograd graphs: the audit's search does not follow them (``graphs=False``).
_GRAPH_EDGES = frozenset({"grad_fn", "next"})


class Gate:
    """``may_reach``, with its per-type rules kept across tests (by weak reference)."""

    def __init__(self) -> None:
        #: id(type) -> (a weak reference to it, its rule), for the backends named in
        #: ``_for``; a type that cannot be weakly referenced is looked at each time.
        self._rules: dict[int, tuple[weakref.ref[type], int]] = {}
        self._for: tuple[str, ...] = ()
        #: id(class) -> (a weak reference to it, is it the user's).
        self._classes: dict[int, tuple[weakref.ref[Any], bool]] = {}

    @silenced
    def may_reach(
        self,
        roots: Iterable[object],
        wanted: Callable[[object], bool],
        backends: list[Backend],
        *,
        limit: int = LIMIT,
        kept: Iterable[object] = (),
    ) -> bool | None:
        """True when a root reaches a graph object for which ``wanted`` holds, False when
        none does, None when the walk passed ``limit`` objects first. ``kept``: objects
        kept on purpose (``graphleak_outlive_keep``), which no walk passes through."""
        key = tuple(backend.name for backend in backends)
        if key != self._for:  # a library imported since: its types are graph types now
            self._rules.clear()
            self._for = key
        # holds what it saw, so ids stay unique meanwhile
        seen: dict[int, object] = {id(obj): obj for obj in kept}
        frontier: list[Any] = self._leading_on(roots, seen, backends)
        entered: list[Any] = []
        read: list[Any] = []
        try:
            while frontier:
                for obj in frontier:
                    if id(obj) in seen:
                        continue
                    seen[id(obj)] = obj
                    if len(seen) > limit:
                        return None
                    rule = self._rule(obj, backends)
                    if rule == ENTER:
                        entered.append(obj)
                    elif rule != SKIP and self._read(obj, rule, wanted, backends, entered, read):
                        return True
                frontier.clear()
                # One C call for the level; an untracked object holds nothing, but numpy
                # arrays and context variables (read by ``_read``) and graph objects.
                children = gc.get_referents(*entered)
                if len(seen) + len(children) > limit + limit:  # a level past the limit
                    return None  # (a million-item list): not even looked through
                children.extend(read)
                entered.clear()
                read.clear()
                frontier = self._leading_on(children, seen, backends)
                children.clear()
            return False
        finally:
            seen.clear()
            frontier.clear()
            entered.clear()
            read.clear()

    def _read(
        self,
        obj: Any,
        rule: int,
        wanted: Callable[[object], bool],
        backends: list[Backend],
        entered: list[Any],
        read: list[Any],
    ) -> bool:
        """Queue what ``obj`` refers to (``entered``: by gc, ``read``: read here); True
        when ``obj`` is a graph object ``wanted``."""
        if rule == _GRAPH:
            if wanted(obj):
                return True
            backend = next(b for b in backends if b.kind(obj) is not None)
            # an object whose attributes raise: the labelled search skips it too
            with contextlib.suppress(Exception):
                read.extend(
                    child for edge, child in backend.edges(obj) if edge.kind not in _GRAPH_EDGES
                )
        elif rule == CLASS:
            if self._user_class(obj):
                entered.append(obj)
        elif rule == FUNCTION:
            if not is_private_module(getattr(obj, "__module__", None)):
                _function_references(obj, read)
        elif rule == _METHOD:
            if not is_private_module(getattr(obj, "__module__", None)):
                entered.append(obj)
        elif rule == _PAUSED:
            frame = paused_frame(obj)
            if frame is not None:
                read.extend(frame.f_locals.values())
            entered.append(obj)
        elif rule == VAR:
            value = obj.get(_NO_VALUE)
            if value is not _NO_VALUE:
                read.append(value)
        elif rule == CONTEXT:
            read.extend(obj.values())
        elif rule == _MODULE:
            recomputed = _recomputed(obj, backends)
            if not recomputed:
                entered.append(obj)
            else:  # its attributes but those a forward pre-hook remakes, and its class
                read.extend(
                    value for name, value in list(obj.__dict__.items()) if name not in recomputed
                )
                read.append(type(obj))
        elif rule == _ARRAY:
            if obj.dtype == object:
                read.extend(obj.ravel(order="K"))
            if obj.base is not None:
                read.append(obj.base)
        return False

    def reads(self, obj: object, rule: int, backends: list[Backend]) -> list[object] | None:
        """What the walk reads of ``obj`` (its ``rule`` not ``ENTER``): None when that is
        all the collector shows of it, else the objects read (none: the walk stops)."""
        entered: list[object] = []
        read: list[object] = []
        self._read(obj, rule, _never, backends, entered, read)
        return None if entered else read

    def rule(self, obj: object, backends: list[Backend]) -> int:
        return self._rule(obj, backends)

    def _rule(self, obj: object, backends: list[Backend]) -> int:
        tp = type(obj)
        known = self._rules.get(id(tp))
        if known is not None and known[0]() is tp:
            return known[1]
        rule = _rule_of(tp, obj, backends)
        with contextlib.suppress(TypeError):  # a type without weak references: not cached
            self._rules[id(tp)] = (weakref.ref(tp), rule)
        return rule

    def _leading_on(
        self, objects: Iterable[Any], seen: dict[int, object], backends: list[Backend]
    ) -> list[Any]:
        """The objects not seen yet that can lead to another (the labelled search's
        ``holds_references``): those the collector tracks, and numpy arrays, context
        variables and graph objects, which it may not."""
        leading = (_ARRAY, VAR, _GRAPH)
        return [
            obj
            for obj in objects
            if id(obj) not in seen
            and (
                gc.is_tracked(obj)
                or (type(obj) not in _PLAIN and self._rule(obj, backends) in leading)
            )
        ]

    def _user_class(self, cls: Any) -> bool:
        """Is ``cls`` a class of the user's (entered), or a library's (left)? Cached by
        weak reference to it."""
        known = self._classes.get(id(cls))
        if known is not None and known[0]() is cls:
            return known[1]
        user = is_user_module(getattr(cls, "__module__", None)) is not False
        with contextlib.suppress(TypeError):
            self._classes[id(cls)] = (weakref.ref(cls), user)
        return user


def _rule_of(tp: type, obj: object, backends: list[Backend]) -> int:
    if issubclass(tp, _OPAQUE):
        return SKIP
    if any(backend.kind(obj) is not None for backend in backends):
        return _GRAPH
    if tp is types.FunctionType:
        return FUNCTION
    if tp is types.MethodType:
        return _METHOD
    if is_private_module(getattr(tp, "__module__", None)):
        return SKIP  # pytest's and the plugin's objects (``edges.is_private``)
    if issubclass(tp, type):
        return CLASS
    if issubclass(tp, SUSPENDED):
        return _PAUSED
    if tp is contextvars.ContextVar:
        return VAR
    if tp is contextvars.Context:
        return CONTEXT
    numpy = sys.modules.get("numpy")
    if numpy is not None and issubclass(tp, numpy.ndarray):
        return _ARRAY
    if any(backend.has_members and backend.member_tables(obj) for backend in backends):
        return _MODULE
    return ENTER


def _recomputed(module: Any, backends: list[Backend]) -> set[str]:
    """The attributes of a library's module that its forward pre-hooks set anew before
    each forward (``Backend.recomputed_members``: a weight-normed layer's ``weight``)."""
    for backend in backends:
        if backend.has_members and backend.member_tables(module):
            with contextlib.suppress(Exception):  # an exotic hook: nothing skipped
                return backend.recomputed_members(module)
    return set()


def _function_references(fn: types.FunctionType, into: list[Any]) -> None:
    """What the labelled search reads of a function (``edges._function_edges``)."""
    for cell in fn.__closure__ or ():
        with contextlib.suppress(ValueError):  # a cell not filled yet
            into.append(cell.cell_contents)
    into.extend(fn.__defaults__ or ())
    into.extend((fn.__kwdefaults__ or {}).values())
    into.extend(fn.__dict__.values())


def _never(obj: object) -> bool:
    return False


#: A ContextVar without a value in the current context.
_NO_VALUE = object()
