"""Labelled references out of any Python object.

``Edge`` says how one object refers to the next (a dict key, a list index, an attribute,
a closure cell, ``grad_fn``, ``next_functions[i]``), so a path of references can be
printed the way a user would write it. ``ObjectEdges`` lists the edges of an object,
asking the active backends first for tensors and graph nodes, and refusing to walk into
what no user chain should pass through: modules, classes of libraries, frames, code, and
the plugin's or pytest's own objects.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import types
import weakref
from collections import deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from pytest_graphleak.heap.usercode import is_private_module, is_user_module

if TYPE_CHECKING:
    from pytest_graphleak.diagnose.backends import Backend

#: weakref.proxy types: they hold nothing, and touching a dead one raises ReferenceError.
PROXY_TYPES = (weakref.ProxyType, weakref.CallableProxyType)

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

_MAX_REPR = 40
#: How each kind of edge reads in a chain, its key put in for {}.
_TEXTS = {"key": "[{}]", "index": "[{}]", "next": ".next_functions[{}]", "attr": ".{}",
          "closure": " closure '{}'", "local": " local '{}'", "grad_fn": ".grad_fn"}  # fmt: skip
#: Objects that keep a paused frame: their references are that frame's local variables.
SUSPENDED = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_MAX_ITEMS = 20_000  # one container's items looked at, at most


@dataclass(frozen=True)
class Edge:
    """How one object refers to the next: kind and key/index/name."""

    kind: str  # key | index | member | attr | closure | local | grad_fn | next | ref
    key: Any = None

    def text(self) -> str:
        key = short_repr(self.key) if self.kind == "key" else self.key
        return _TEXTS.get(self.kind, "").format(key)

    @property
    def named(self) -> bool:
        """True when the edge carries a name worth showing (a key, attribute, cell)."""
        return self.kind in ("key", "attr", "closure", "local")


def short_repr(value: Any) -> str:
    text = f"<{type(value).__name__}>"
    if isinstance(value, (str, int, float, bool, bytes)):
        with contextlib.suppress(Exception):  # e.g. an int too long to print
            text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


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

    def __init__(self, backends: list[Backend], exclude: Collection[int] = ()) -> None:
        self.backends = backends
        self.exclude = set(exclude)
        self._torch = next((b for b in backends if b.name == "torch"), None)

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
        if isinstance(obj, _NO_WALK_TYPES) and not _user_class(obj):
            return False
        return not is_private(obj)

    def edges(self, obj: Any) -> Iterator[tuple[Edge, object]]:
        """Labelled references out of ``obj`` (only to objects that can hold others)."""
        found = self.backend_of(obj)
        if found is not None:
            yield from found[0].edges(obj)
            return
        tp = type(obj)
        # Containers are read newest entry first: what a leaking step appended last is
        # at the end, and a huge container is only read up to _MAX_ITEMS entries.
        if isinstance(obj, dict):
            for key, value in list(islice(reversed(obj.items()), _MAX_ITEMS)):
                yield Edge("key", key), value
                if gc.is_tracked(key):  # a tensor used as a key also holds its graph
                    yield Edge("member"), key
        elif isinstance(obj, (list, tuple, deque)):
            size = len(obj)
            for i, item in enumerate(list(islice(reversed(obj), _MAX_ITEMS))):
                yield Edge("index", size - 1 - i), item
        elif isinstance(obj, (set, frozenset)):
            for item in list(islice(obj, _MAX_ITEMS)):
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
        torch = self._torch
        if torch is not None and torch.is_module(obj):  # type: ignore[attr-defined]
            # nn.Module: name parameters, buffers and submodules as plain attributes.
            for table in ("_parameters", "_buffers", "_modules"):
                entries = obj.__dict__.get(table) or {}
                seen.add(id(entries))
                for key, value in entries.items():
                    if value is not None:
                        yield Edge("attr", key), value
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            seen.add(id(attrs))
            for key, value in list(attrs.items()):
                if id(value) not in seen:
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


def paused_frame(obj: object) -> types.FrameType | None:
    """The frame of a generator, coroutine or async generator (None once it finished)."""
    for name in ("gi_frame", "cr_frame", "ag_frame"):
        frame = getattr(obj, name, None)
        if isinstance(frame, types.FrameType):
            return frame
    return None


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


def _array_base(obj: object) -> object | None:
    """The object a numpy array views (``t.numpy()`` -> the tensor ``t``), if any.

    Arrays are not tracked by the cyclic GC, so this link is invisible to
    ``gc.get_referents``; an array kept in a list keeps its tensor alive through it."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, numpy.ndarray):
        return None
    return obj.base


def items_of(container: Any) -> Any:
    """What a container holds: a dict's values, any other container's items."""
    return container.values() if isinstance(container, dict) else container


def holds_references(obj: object, walker: ObjectEdges) -> bool:
    """Can ``obj`` lead to another object? (gc-tracked objects, tensors and graph
    nodes, and numpy arrays that view another object)."""
    return gc.is_tracked(obj) or walker.backend_of(obj) is not None or (
        _array_base(obj) is not None
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
