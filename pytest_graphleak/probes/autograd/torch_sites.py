"""torch's creation-site recorder (the torch bundle's ``site_recorder`` hook).

A ``TorchFunctionMode`` that, during the diagnostic steps only, notes the first user
frame for every output tensor (by weak reference) and for its ``grad_fn`` (by autograd
sequence number: torch nodes cannot be weakly referenced and their Python wrappers come
and go). It also notes a saved-tensor pack hook active at that moment, which the cycle
diagnosis names. Which frame is the user's (and which library line made a tensor for
it) is the caller's rule, handed in as ``find_site`` (``diagnose/sites.site_and_via``):
it knows every bundle's packages, which this module does not.

``TorchSites`` holds the records and the reading of an operation's outputs; the mode
itself is a small subclass made when a recorder is asked for, since subclassing
``TorchFunctionMode`` at import time would import torch.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from pytest_graphleak.heap.graphwalk import NEW_PER_WALK, grad_fn_of
from pytest_graphleak.heap.op_warnings import catch_op_warnings, release_op_warnings
from pytest_graphleak.probes.autograd.bundle import FindSite, PackHook, Site, SiteRecorder


def _tensors_in(out: Any, tensor_type: type) -> Iterator[Any]:
    if isinstance(out, tensor_type):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, tensor_type):
                yield item


class TorchSites:
    """What the recorder noted (see the module docstring); ``note`` reads one operation's
    outputs. Mixed into the mode class that ``site_recorder`` makes."""

    def __init__(self, torch: Any, find_site: FindSite) -> None:
        self._tensor_type: type = torch.Tensor
        self._find_site = find_site
        self._top_hooks: Callable[..., Any] | None = getattr(
            torch._C._autograd, "_top_saved_tensors_default_hooks", None
        )
        #: id(tensor) -> (weak reference, site); the weakref tells a reused id apart.
        self.tensor_sites: dict[int, tuple[weakref.ref[Any], Site]] = {}
        #: autograd sequence number -> site of the op that made the node.
        self.node_sites: dict[int, Site] = {}
        #: autograd sequence number -> pack hook active when the node was made.
        self.pack_hooks: dict[int, PackHook] = {}
        #: user site -> the library line that made a tensor for it (first seen).
        self.via: dict[Site, str] = {}
        #: grad_fn wrappers it may still make: torch keeps each one alive with its
        #: node, and too many made at once leave a deep graph unfreeable (graphwalk).
        self.nodes_left = NEW_PER_WALK
        #: Operations whose outputs it could not read, and the first one's error: it
        #: never raises into the step, it says so (``diagnose.sites.recorder_trouble``).
        self.failures = 0
        self.failure = ""

    def note(self, out: Any) -> None:
        """Note where the tensors of an operation's output ``out`` were made: called by
        ``__torch_function__``, so the frame two above this one is the op's caller."""
        site: Site | None = None
        for t in _tensors_in(out, self._tensor_type):
            if site is None:
                site, via = self._find_site(sys._getframe(2))
                if site is None:
                    return
                if via:
                    self.via.setdefault(site, via)
            known = self.tensor_sites.get(id(t))
            if known is None or known[0]() is not t:
                with contextlib.suppress(TypeError):
                    self.tensor_sites[id(t)] = (weakref.ref(t), site)
            if self.nodes_left <= 0:
                continue
            self.nodes_left -= 1
            grad_fn = grad_fn_of(t)  # None for a no_grad view changed in place since
            if grad_fn is not None:
                self._note_node(int(grad_fn._sequence_nr()), site)

    def failed(self, func: Any, exc: Exception) -> None:
        """``note`` raised on the outputs of ``func``: counted, the first one kept."""
        self.failures += 1
        if not self.failure:
            name = getattr(func, "__qualname__", None) or getattr(func, "__name__", "?")
            self.failure = f"{name}: {type(exc).__name__}: {exc}"

    def _note_node(self, seq: int, site: Site) -> None:
        self.node_sites.setdefault(seq, site)
        if self._top_hooks is not None and seq not in self.pack_hooks:
            hooks = self._top_hooks(False)
            if hooks is not None:
                self.pack_hooks[seq] = PackHook.of(hooks[0])

    def alive_tensor_sites(self) -> dict[int, Site]:
        """id -> site of every recorded tensor alive now."""
        known = self.tensor_sites.items()
        return {key: site for key, (ref, site) in known if ref() is not None}

    def site_of_tensor(self, t: Any) -> Site | None:
        known = self.tensor_sites.get(id(t))
        if known is not None and known[0]() is t:
            return known[1]
        return None

    def site_of_node(self, node: Any) -> Site | None:
        try:
            seq = int(node._sequence_nr())
        except Exception:
            return None
        return self.node_sites.get(seq)

    def made_in(self) -> set[str]:
        """The files of every recorded site."""
        return {site[0] for _, site in self.tensor_sites.values()}

    @property
    def nodes_truncated(self) -> bool:
        return self.nodes_left <= 0

    def forget(self) -> None:
        self.tensor_sites.clear()
        self.node_sites.clear()
        self.pack_hooks.clear()
        self.via.clear()
        self.failures = 0
        self.failure = ""


def site_recorder(torch: Any, find_site: FindSite) -> SiteRecorder:
    """A fresh recorder: a ``TorchFunctionMode`` over ``TorchSites``, entered around the
    steps it records (``with recorder:`` or ``__enter__``/``__exit__``)."""
    from torch.overrides import TorchFunctionMode

    is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", lambda: False)

    class TorchSiteRecorder(TorchSites, TorchFunctionMode):
        def __init__(self) -> None:
            TorchFunctionMode.__init__(self)
            TorchSites.__init__(self, torch, find_site)

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            __tracebackhide__ = True  # pytest shows the user's line that called torch
            if is_compiling():  # dynamo traces this mode: keep its frames out of the graph
                return func(*args, **(kwargs or {}))
            caught = catch_op_warnings()  # placed at the user's line, not this frame
            try:
                out = func(*args, **(kwargs or {}))
            except BaseException:
                release_op_warnings(caught, raising=True)
                raise
            release_op_warnings(caught, raising=False)
            if getattr(func, "__name__", "") != "__get__":  # attribute reads make nothing
                try:
                    self.note(out)
                except Exception as exc:  # the step's result stands; the story says so
                    self.failed(func, exc)
            return out

    return TorchSiteRecorder()
