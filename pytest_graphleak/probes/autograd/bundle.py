"""What the plugin knows of one autograd library: its bundle.

An ``AutogradBundle`` holds everything library-specific that the rest of the plugin asks:

- ``probe``: the probe class that counts its tensors and graph nodes (``probes.PROBES``);
- ``backend``: its diagnosis backend (``Backend`` below), made from the imported module;
- the usage evidence for ``engine/coverage`` (``made``, ``watcher``, ``counts_step_only``);
- the census hook for the outlive audit (``node_counter``, ``record_sites``, and the
  backend's ``sequence_nr`` / ``grown_in_place``);
- for the creation sites (``diagnose/sites``): ``packages`` and ``forwards`` (frames
  that never name the user's line), and ``site_recorder``, a recorder of where the
  library makes its tensors and nodes (torch's ``TorchFunctionMode``,
  ``torch_sites.py``), for a library that records none of its own (``record_sites``).

Every hook takes the library's module as it is already imported: nothing here imports
the library, and a bundle whose module is not in ``sys.modules`` is simply not active.
A new library is one bundle module (its ``BUNDLE``) and one line in
``probes/autograd.BUNDLES``.
"""

from __future__ import annotations

import contextlib
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_graphleak.heap.edge import PROXY_TYPES, Edge
from pytest_graphleak.heap.graphwalk import grad_fn_of
from pytest_graphleak.probes.base import ProbeBase

#: Where an object was made: filename, line number, function name.
Site = tuple[str, int, str]
#: The creation-site rule (``diagnose/sites.site_and_via``): from an operation's calling
#: frame outwards, the user's frame, and the library line that made a tensor for it.
FindSite = Callable[[types.FrameType | None], tuple[Site | None, str]]

#: Kinds of objects a backend recognises.
TENSOR = "tensor"
NODE = "node"


class Backend:
    """What the diagnosis asks of a library's objects; this base recognises nothing.

    Per object: is it a tensor or a graph node, how to describe it in one line, which
    labelled references lead out of it (``grad_fn``, ``next_functions``, hooks, user
    attributes), and for the census its place in creation order."""

    name = "none"
    #: A graph can grow on a tensor made before the test, in place (``total += loss``):
    #: the outlive census looks near the test's roots for such tensors (``grown_in_place``).
    grows_in_place = False

    def __init__(self) -> None:
        self._kinds: dict[type, str | None] = {}

    def kind(self, obj: object) -> str | None:
        """``TENSOR``, ``NODE`` or None; cached per type (isinstance on ABCs is slow)."""
        tp = type(obj)
        try:
            return self._kinds[tp]
        except KeyError:
            # A weakref.proxy passes isinstance checks on to its referent (and raises
            # ReferenceError once it is dead): it is a weak reference, never a tensor.
            kind = None if tp in PROXY_TYPES else self._kind_of_type(tp, obj)
            self._kinds[tp] = kind
            return kind

    def _kind_of_type(self, tp: type, obj: object) -> str | None:
        return None

    def describe(self, obj: Any) -> str:
        if self.kind(obj) == NODE:
            return self.node_name(obj)
        name = self._tensor_name(obj)
        try:
            shape = str(tuple(int(n) for n in obj.shape))
        except Exception:
            shape = "?"
        grad_fn = grad_fn_of(obj)
        if grad_fn is not None:
            return f"{name}(shape={shape}, grad_fn={self.node_name(grad_fn)})"
        if obj.requires_grad:
            return f"{name}(shape={shape}, requires_grad=True)"
        return f"{name}(shape={shape})"

    def _tensor_name(self, tensor: Any) -> str:
        return "Tensor"

    def edges(self, obj: Any) -> Iterator[tuple[Edge, object]]:
        """Backend-specific references first, then user attributes (a custom Function's
        ctx on a torch node); a node's inputs come first of all."""
        kind = self.kind(obj)
        if kind == TENSOR:
            yield from self._tensor_edges(obj)
        elif kind == NODE:
            try:
                pairs = obj.next_functions
            except Exception:  # a released, foreign or exotic node
                pairs = ()
            for i, (child, _) in enumerate(pairs):
                if child is not None:
                    yield Edge("next", i), child
            yield from self._node_edges(obj)
        if kind is not None and isinstance(attrs := getattr(obj, "__dict__", None), dict):
            for key, value in list(attrs.items()):  # a copy: the dict may change meanwhile
                yield Edge("attr", str(key)), value

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        raise NotImplementedError

    def _node_edges(self, node: Any) -> Iterator[tuple[Edge, object]]:
        raise NotImplementedError

    def node_name(self, node: Any) -> str:
        return type(node).__name__

    def sequence_nr(self, node: Any) -> int | None:
        """The node's place in creation order, on the scale of the bundle's
        ``node_counter`` (None: unknown)."""
        return None

    def grown_in_place(self, tensor: Any, before: int) -> bool:
        """A tensor alive before the test whose graph the test extended in place, the
        test's nodes being numbered from ``before`` on (only when ``grows_in_place``)."""
        return False

    #: Its objects can have member tables (``member_tables``): torch's nn.Module.
    has_members = False

    def member_tables(self, obj: Any) -> tuple[str, ...]:
        """Attribute tables of ``obj`` whose entries are its members, named on a chain as
        plain attributes (an nn.Module's ``_parameters``, ``_buffers``, ``_modules``)."""
        return ()

    def recomputed_members(self, obj: Any) -> set[str]:
        """Attributes of ``obj`` that the library sets anew before each use (a forward
        pre-hook's weight): bounded, replaced each step, never a leak's path."""
        return set()

    def data_bytes(self, tensor: Any) -> int:
        """Bytes of the data behind one of its tensors (the memory-growth survey weighs
        arrays with it); this base reads it as a numpy array. Raises when it cannot tell."""
        return int(tensor.numpy().nbytes)

    def creation_site(self, obj: Any) -> tuple[str, int] | None:
        """(file, line) the library itself recorded for ``obj`` (``record_sites``)."""
        return None

    # -- what the diagnosis asks of a library whose graph lives outside Python (torch's
    # C++ nodes); the defaults fit one whose nodes are plain Python objects (minigrad).

    def node_number_now(self) -> int | None:
        """The number (``sequence_nr``) the next graph node will get, where its nodes
        cannot be held weakly or found among Python's objects: what a few steps made is
        then told by its numbers. None: its nodes are Python objects, found as such."""
        return None

    def reading_hooks(self) -> contextlib.AbstractContextManager[object]:
        """A block during which ``edges`` also yields the hooks the library keeps on its
        nodes outside Python (a cycle search runs in it)."""
        return contextlib.nullcontext()

    #: Its hooks (and the cycles through them) are held outside Python's collector: not
    #: even ``gc.collect()`` frees such a cycle.
    hooks_outside_python = False
    #: A node's attribute tables of hooks registered on the node itself
    #: (``grad_fn.register_hook``), each with the call that fills it.
    node_hook_tables: dict[str, str] = {}  # noqa: RUF012 - read only, by every instance
    #: ``(kind, attribute)`` of the tables of hooks registered on a tensor.
    tensor_hook_tables: frozenset[tuple[str, str]] = frozenset()
    #: A custom Function's ctx is its output's grad_fn itself (torch's), so a tensor
    #: stored on it closes a cycle; ``ctx_issue`` is where that is explained.
    ctx_is_grad_fn = False
    ctx_issue = ""

    def ctx_attribute(self, node: Any, key: str) -> str | None:
        """The ctx attribute that the edge ``key`` out of ``node`` reads (``out`` for
        ``ctx.out``), or None: not a custom Function's ctx."""
        return None

    def saves_own_output(self, node: Any) -> bool:
        """The node keeps its own output for backward (where a saved-tensor pack hook
        that returns the tensor itself closes a cycle no Python link shows)."""
        return False


@dataclass
class PackHook:
    """A saved-tensor pack hook seen active while an op ran (plain strings only)."""

    name: str
    filename: str
    lineno: int

    @classmethod
    def of(cls, fn: Any) -> PackHook:
        code = getattr(fn, "__code__", None)
        name = getattr(fn, "__qualname__", type(fn).__name__)
        return cls(name, getattr(code, "co_filename", "?"), getattr(code, "co_firstlineno", 0))


class SiteRecorder(Protocol):
    """Records where a library's tensors and nodes are made while entered (a bundle's
    ``site_recorder``); keeps them by weak reference or number, never alive."""

    #: id(tensor) -> (weak reference, site)
    tensor_sites: dict[int, tuple[weakref.ref[Any], Site]]
    #: a node's number in creation order (``Backend.sequence_nr``) -> site
    node_sites: dict[int, Site]
    #: a node's number -> the saved-tensor pack hook active when it was made
    pack_hooks: dict[int, PackHook]
    #: user site -> the library line that made a tensor for it
    via: dict[Site, str]
    #: operations whose outputs it could not read (it never raises into the step), and
    #: the first one's error ("" when none)
    failures: int
    failure: str

    def __enter__(self) -> Any: ...
    def __exit__(self, kind: Any, exc: Any, tb: Any, /) -> Any: ...
    def alive_tensor_sites(self) -> dict[int, Site]: ...
    def site_of_tensor(self, t: Any) -> Site | None: ...
    def site_of_node(self, node: Any) -> Site | None: ...
    def made_in(self) -> set[str]: ...
    @property
    def nodes_truncated(self) -> bool: ...
    def forget(self) -> None: ...


@dataclass(frozen=True)
class AutogradBundle:
    """One autograd library (see the module docstring). ``name`` is its top-level module
    and its probe's name."""

    name: str
    probe: type[ProbeBase]
    #: The imported module -> its diagnosis backend (None: a module of that name that is
    #: not the library, such as a stub).
    backend: Callable[[Any], Backend | None]
    #: Census: the number the next graph node of the library will get (with ``end``: the
    #: last number given, so that a reading which makes a node does not count it). Raises,
    #: or returns None, when the module cannot tell.
    node_counter: Callable[[Any, bool], int | None]
    #: Packages whose frames make the library's tensors: never named as the library line
    #: ("via") that made a tensor for the user.
    packages: tuple[str, ...] = ()
    #: (file suffix, function) of the library's functions that run the user's own code on
    #: behalf of the user's call (a custom Function's ``apply``): what that code makes is
    #: made by the caller's line.
    forwards: tuple[tuple[str, str], ...] = ()
    #: Usage evidence, exact: how many tensors the library has made so far (None: it
    #: cannot tell). Without it, the step's module importing the library is evidence.
    made: Callable[[Any], int | None] | None = None
    #: Usage evidence without a ``made`` counter: a metric-less probe, run when the
    #: library is loaded but not probed, whose ``seen`` says how the step uses it.
    watcher: Callable[[], ProbeBase] | None = None
    #: Its probe counts only what the step reaches or makes: any count is the step's use.
    counts_step_only: bool = False
    #: Switch the library's own creation-site recording on or off (census), returning
    #: the setting before (None: the module has none).
    record_sites: Callable[[Any, bool], bool | None] | None = None
    #: The module and the creation-site rule -> a fresh recorder of where the library
    #: makes its tensors and nodes, entered around the steps it records (None: the
    #: library records its own sites, ``record_sites`` and ``Backend.creation_site``).
    site_recorder: Callable[[Any, FindSite], SiteRecorder] | None = None
