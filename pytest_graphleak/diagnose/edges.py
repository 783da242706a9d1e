"""Labelled references out of any Python object.

``Edge`` (``heap/edge``) says how one object refers to the next (a dict key, a list
index, an attribute, a closure cell, ``grad_fn``, ``next_functions[i]``), so a path of
references can be printed the way a user would write it. ``ObjectEdges`` lists the
edges of an object, asking the active backends first for tensors and graph nodes, and
refusing to walk into what no user chain should pass through: modules, classes of
libraries, frames, code, and the plugin's or pytest's own objects.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gc
import sys
import types
from collections import deque
from collections.abc import Collection, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from pytest_graphleak.heap.edge import PROXY_TYPES, SUSPENDED, Edge, paused_frame
from pytest_graphleak.heap.usercode import is_private_module, is_user_module

if TYPE_CHECKING:
    from pytest_graphleak.probes.autograd.bundle import Backend

#: Packages whose classes are walked only through their instances, never as classes.
_NO_WALK_TYPES = (
    types.ModuleType,
    types.FrameType,
    types.CodeType,
    types.BuiltinFunctionType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    type,
)

#: Objects that keep a paused frame: their references are that frame's local variables.
MAX_ITEMS = 20_000  # one container's items looked at, at most (its newest)


def is_private(obj: object) -> bool:
    """Objects of the plugin, pytest or pluggy: never shown, never walked."""
    if is_private_module(getattr(type(obj), "__module__", None)):
        return True
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return is_private_module(getattr(obj, "__module__", None))
    return False


def _user_class(obj: object) -> bool:
    """A class of the user's code (one whose module is unknown counts as the user's)."""
    return isinstance(obj, type) and is_user_module(getattr(obj, "__module__", None)) is not False


class ObjectEdges:
    """Lists the labelled edges out of an object, and decides what may be walked."""

    def __init__(
        self, backends: list[Backend], exclude: Collection[int] = (), *, graphs: bool = True
    ) -> None:
        self.backends = backends
        self.exclude = set(exclude)
        #: Tensors a module's forward pre-hook recomputes (``Backend.recomputed_members``), met
        #: while walking: no chain passes through them, also not through another list of
        #: the module's that holds them (an RNN's ``_flat_weights``).
        self.recomputed: set[int] = set()
        #: Follow ``grad_fn`` and ``next_functions`` into autograd graphs.
        self.graphs = graphs
        #: The backends whose objects have member tables (torch's nn.Module).
        self._with_members = [b for b in backends if b.has_members]

    def member_tables(self, obj: object) -> tuple[str, ...]:
        """The attribute tables whose entries are ``obj``'s members (an nn.Module's
        parameters, buffers and submodules), from the backend that knows it."""
        for backend in self._with_members:
            tables = backend.member_tables(obj)
            if tables:
                return tables
        return ()

    def backend_of(self, obj: object) -> tuple[Backend, str] | None:
        for backend in self.backends:
            kind = backend.kind(obj)
            if kind is not None:
                return backend, kind
        return None

    def walkable(self, obj: object) -> bool:
        """May a chain pass through ``obj``?"""
        if id(obj) in self.exclude or type(obj) in PROXY_TYPES:  # a proxy holds nothing
            return False
        if id(obj) in self.recomputed:
            return False
        if isinstance(obj, _NO_WALK_TYPES) and not _user_class(obj):
            return False
        return not is_private(obj)

    def edges(self, obj: Any) -> Iterator[tuple[Edge, object]]:
        """Labelled references out of ``obj`` (only to objects that can hold others)."""
        found = self.backend_of(obj)
        if found is not None:
            for edge, child in found[0].edges(obj):
                if self.graphs or edge.kind not in ("grad_fn", "next"):
                    yield edge, child
            return
        tp = type(obj)
        # Containers are read newest entry first: what a leaking step appended last is
        # at the end, and a huge container is only read up to MAX_ITEMS entries.
        if isinstance(obj, dict):
            for key, value in list(islice(reversed(obj.items()), MAX_ITEMS)):
                yield Edge("key", key), value
                if gc.is_tracked(key):  # a tensor used as a key also holds its graph
                    yield Edge("member"), key
        elif isinstance(obj, (list, tuple, deque)):
            size = len(obj)
            for i, item in enumerate(list(islice(reversed(obj), MAX_ITEMS))):
                yield Edge("index", size - 1 - i), item
        elif isinstance(obj, (set, frozenset)):
            for item in list(islice(obj, MAX_ITEMS)):
                yield Edge("member"), item
        elif tp is types.FunctionType:
            yield from _function_edges(obj)
        elif tp is types.MethodType:
            yield Edge("attr", "__self__"), obj.__self__
            yield Edge("attr", "__func__"), obj.__func__
        elif tp is functools.partial:
            yield Edge("attr", "func"), obj.func
            for i, arg in enumerate(obj.args):
                yield Edge("index", i), arg
            for key, value in obj.keywords.items():
                yield Edge("key", key), value
        elif tp is types.CellType:
            with contextlib.suppress(ValueError):  # an empty cell
                yield Edge("attr", "cell_contents"), obj.cell_contents
        elif isinstance(obj, SUSPENDED):
            yield from _frame_local_edges(obj)
        elif tp is contextvars.ContextVar:
            # Its value in the current context (the one the test ran in); the value lives
            # in the context, which gc.get_referents(var) does not list.
            value = obj.get(_NO_VALUE)
            if value is not _NO_VALUE:
                yield Edge("value"), value
        elif tp is contextvars.Context:
            for var, value in list(obj.items()):
                yield Edge("key", var.name), value
        elif (items := _object_array_items(obj)) is not None:
            yield from items
        elif _array_base(obj) is not None:
            yield Edge("attr", "base"), _array_base(obj)
        elif isinstance(obj, type):
            for key, value in list(vars(obj).items()):
                if not (key.startswith("__") and key.endswith("__")):
                    yield Edge("attr", key), value
        else:
            yield from self._instance_edges(obj)

    def _instance_edges(self, obj: Any) -> Iterator[tuple[Edge, object]]:
        seen: set[int] = set()
        recomputed: set[str] = set()
        for backend in self._with_members:
            tables = backend.member_tables(obj)
            if not tables:
                continue
            # nn.Module: name parameters, buffers and submodules as plain attributes.
            for table in tables:
                entries = obj.__dict__.get(table) or {}
                seen.add(id(entries))
                for key, value in entries.items():
                    if value is not None:
                        yield Edge("attr", key), value
            recomputed = backend.recomputed_members(obj)
            # the module is listed before its other containers are expanded: mark them now
            self.recomputed.update(id(obj.__dict__[name]) for name in recomputed)
            break
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            seen.add(id(attrs))
            for key, value in list(attrs.items()):
                if id(value) not in seen and key not in recomputed:
                    yield Edge("attr", str(key)), value
        for cls in type(obj).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            if isinstance(slots, str):
                slots = (slots,)
            for name in slots:
                if name in ("__dict__", "__weakref__"):
                    continue
                try:
                    value = getattr(obj, name)
                except Exception:
                    continue
                seen.add(id(value))
                yield Edge("attr", name), value
        # References held at the C level (e.g. a deque subclass, an iterator).
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, type):
                yield Edge("ref"), ref


def _frame_local_edges(obj: object) -> Iterator[tuple[Edge, object]]:
    """A generator's references by the name of its local (``local 'losses'``), then what
    else it holds (``gc.get_referents`` names nothing: the chain read ``generator ->``)."""
    seen: set[int] = set()
    frame = paused_frame(obj)
    if frame is not None:
        local_vars = frame.f_locals
        seen.add(id(local_vars))
        for name, value in list(local_vars.items()):
            seen.add(id(value))
            yield Edge("local", name), value
    for ref in gc.get_referents(obj):
        if id(ref) not in seen and not isinstance(ref, type):
            yield Edge("ref"), ref


#: A ContextVar without a value in the current context.
_NO_VALUE = object()


def _object_array_items(obj: object) -> Iterator[tuple[Edge, object]] | None:
    """The items of a numpy array of ``dtype=object`` (None for any other object): such an
    array holds references, but is not tracked by the cyclic GC, so
    ``gc.get_referents`` lists none of them. Newest-first is not known: read in order."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, numpy.ndarray) or obj.dtype != object:
        return None
    return _indexed(obj, numpy)


def _indexed(array: Any, numpy: Any) -> Iterator[tuple[Edge, object]]:
    shape = array.shape
    flat = array.ravel(order="C") if array.flags.c_contiguous else array.flatten()
    for i, item in enumerate(list(islice(flat, MAX_ITEMS))):
        if item is None or type(item) in (int, float, str, bool):
            continue
        key = i if len(shape) == 1 else ", ".join(str(n) for n in numpy.unravel_index(i, shape))
        yield Edge("index", key), item


def _array_base(obj: object) -> object | None:
    """The object a numpy array views (``t.numpy()`` -> the tensor ``t``), if any.

    Arrays are not tracked by the cyclic GC, so this link is invisible to
    ``gc.get_referents``; an array kept in a list keeps its tensor alive through it."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, numpy.ndarray):
        return None
    base: object = obj.base
    return base


def partly_read(obj: object) -> bool:
    """Does ``ObjectEdges.edges`` list only some of ``obj``'s references (a container of
    more than ``MAX_ITEMS`` entries: its newest ones)? A search that met one has not
    seen all that its root reaches."""
    if isinstance(obj, (dict, list, tuple, deque, set, frozenset)):
        return len(obj) > MAX_ITEMS
    numpy = sys.modules.get("numpy")
    return (
        numpy is not None
        and isinstance(obj, numpy.ndarray)
        and obj.dtype == object
        and (obj.size > MAX_ITEMS)
    )


def items_of(container: Any) -> Any:
    """What a container holds: a dict's values, any other container's items."""
    return container.values() if isinstance(container, dict) else container


def holds_references(obj: object, walker: ObjectEdges) -> bool:
    """Can ``obj`` lead to another object? (gc-tracked objects, tensors and graph
    nodes, and numpy arrays that view another object)."""
    return (
        gc.is_tracked(obj)
        or walker.backend_of(obj) is not None
        or (
            _array_base(obj) is not None
            or type(obj) is contextvars.ContextVar
            or _object_array_items(obj) is not None
        )
    )


def _function_edges(fn: types.FunctionType) -> Iterator[tuple[Edge, object]]:
    closure = fn.__closure__ or ()
    for name, cell in zip(fn.__code__.co_freevars, closure, strict=False):
        with contextlib.suppress(ValueError):  # a cell not filled yet
            yield Edge("closure", name), cell.cell_contents
    for i, default in enumerate(fn.__defaults__ or ()):
        yield Edge("attr", f"__defaults__[{i}]"), default
    for key, default in (fn.__kwdefaults__ or {}).items():
        yield Edge("attr", f"__kwdefaults__[{key!r}]"), default
    attrs = fn.__dict__
    if attrs:  # e.g. functools.lru_cache wrappers keep state on the function
        for key, value in list(attrs.items()):
            yield Edge("attr", str(key)), value
