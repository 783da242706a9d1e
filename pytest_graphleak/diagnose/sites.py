"""Where leaked objects were made: the first stack frame in user code.

- torch: ``TorchSiteRecorder`` is a ``TorchFunctionMode`` that, during the diagnostic
  steps only, notes the first user frame for every output tensor (by weak reference)
  and for its ``grad_fn`` (by autograd sequence number: torch nodes cannot be weakly
  referenced and their Python wrappers come and go). It also notes a saved-tensor pack
  hook active at that moment, which the cycle diagnosis names.
- minigrad: its own creation-site recording (``mg.record_creation_sites``), read back
  with ``mg.creation_site(obj)``.
- memory: ``tracemalloc`` over two steps, grouped by the first user frame.

"User code" is decided by ``heap.usercode.is_user_file``: any frame outside the standard
library, installed packages, pytest, this plugin and minigrad.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import linecache
import math
import os
import sys
import tracemalloc
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_graphleak.heap.graphwalk import NEW_PER_WALK
from pytest_graphleak.heap.op_warnings import catch_op_warnings, release_op_warnings
from pytest_graphleak.heap.usercode import INSTALLED_MARKERS, is_user_file, library_label
from pytest_graphleak.probes.autograd import BUNDLES
from pytest_graphleak.result import CreationSite

Site = tuple[str, int, str]  # filename, line number, function name

#: This package's own directory (diagnose/ is one level below it).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Installed packages that are the tensor engine (the bundles' ``packages``) or its array
#: library: a tensor is always made inside them, so naming them as the "via" line would
#: say nothing.
_ENGINE_PACKAGES = frozenset(
    {"numpy", "pytest_graphleak", *(name for bundle in BUNDLES for name in bundle.packages)}
)
#: (file suffix, function) of library functions that run the user's own code for the
#: user's call (the bundles' ``forwards``: a custom autograd Function's ``apply``).
_FORWARDS = frozenset(forward for bundle in BUNDLES for forward in bundle.forwards)
#: Sites shown for one diagnosis, at most.
MAX_SITES = 5
#: ``memory_sites`` shows a line whose allocations grew by at least 1/this of the largest.
_MEMORY_SHARE = 8


def site_and_via(frame: types.FrameType | None) -> tuple[Site | None, str]:
    """The innermost user frame from ``frame`` outwards, and the innermost frame of an
    installed library (not the tensor engine) on the way: ``"transformers/models/bert/
    modeling_bert.py:1234"`` when a library made the tensor for the user's line."""
    via = ""
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if is_user_file(filename) and not _custom_forward(frame):
            return (filename, frame.f_lineno, code.co_name), via
        if not via and names_a_library(filename):
            via = f"{library_label(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None, ""


def _custom_forward(frame: types.FrameType) -> bool:
    """User code a library runs for the user's call (the ``forward`` of a custom autograd
    Function, called by its ``apply``): what it makes is made by the user's
    ``MyFn.apply(...)`` line, further out."""
    caller = frame.f_back
    if caller is None:
        return False
    name, filename = caller.f_code.co_name, caller.f_code.co_filename.replace("\\", "/")
    return any(name == function and filename.endswith(suffix) for suffix, function in _FORWARDS)


def names_a_library(filename: str) -> bool:
    """Is this frame's file worth naming as the library line that made a tensor?"""
    if not any(marker in filename for marker in INSTALLED_MARKERS):
        return False
    return library_label(filename).split("/", 1)[0] not in _ENGINE_PACKAGES


def function_at(filename: str, lineno: int) -> str:
    """The innermost function (or class) whose source spans ``lineno`` in ``filename``,
    for sites recorded as file and line only (minigrad's, tracemalloc's); "" for module
    level code or a file that cannot be read and parsed."""
    best = ""
    for first, last, name in _scopes(filename):
        if first <= lineno <= last:
            best = name  # scopes are in source order: a later match is nested deeper
    return best


@functools.lru_cache(maxsize=256)
def _scopes(filename: str) -> tuple[tuple[int, int, str], ...]:
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    found = [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
    ]
    return tuple(sorted(found, key=lambda scope: (scope[0], -scope[1])))


def _tensors_in(out: Any, tensor_type: type) -> Iterator[Any]:
    if isinstance(out, tensor_type):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, tensor_type):
                yield item


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


def make_torch_recorder(torch: Any) -> Any:
    """A TorchFunctionMode instance that records creation sites (see module docstring)."""
    from torch.overrides import TorchFunctionMode

    is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", lambda: False)
    top_hooks: Callable[..., Any] | None = getattr(
        torch._C._autograd, "_top_saved_tensors_default_hooks", None
    )

    class TorchSiteRecorder(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
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
            if getattr(func, "__name__", "") == "__get__":  # attribute reads make nothing
                return out
            site: Site | None = None
            for t in _tensors_in(out, torch.Tensor):
                if site is None:
                    site, via = site_and_via(sys._getframe(1))
                    if site is None:
                        return out
                    if via:
                        self.via.setdefault(site, via)
                known = self.tensor_sites.get(id(t))
                if known is None or known[0]() is not t:
                    with contextlib.suppress(TypeError):
                        self.tensor_sites[id(t)] = (weakref.ref(t), site)
                if self.nodes_left <= 0:
                    continue
                self.nodes_left -= 1
                grad_fn = t.grad_fn
                if grad_fn is not None:
                    seq = int(grad_fn._sequence_nr())
                    self.node_sites.setdefault(seq, site)
                    if top_hooks is not None and seq not in self.pack_hooks:
                        hooks = top_hooks(False)
                        if hooks is not None:
                            self.pack_hooks[seq] = PackHook.of(hooks[0])
            return out

        def alive_tensor_sites(self) -> dict[int, Site]:
            """id -> site of every recorded tensor alive now."""
            known = self.tensor_sites.items()
            return {key: site for key, (ref, site) in known if ref() is not None}

        def site_of_tensor(self, t: Any) -> Site | None:
            known = self.tensor_sites.get(id(t))
            if known is not None and known[0]() is t:
                return known[1]
            return None

        @property
        def nodes_truncated(self) -> bool:
            return self.nodes_left <= 0

        def forget(self) -> None:
            self.tensor_sites.clear()
            self.node_sites.clear()
            self.pack_hooks.clear()
            self.via.clear()

    return TorchSiteRecorder()


def memory_sites(step: Callable[[], object], *, runs: int = 2) -> list[CreationSite]:
    """Lines of user code whose allocations grew over ``runs`` steps (tracemalloc)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(25)
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(runs):
            step()
        after = tracemalloc.take_snapshot()
    finally:
        if started:
            tracemalloc.stop()
    grown: Counter[Site] = Counter()
    counts: Counter[Site] = Counter()
    plugin = _plugin_dir()
    for stat in after.compare_to(before, "traceback"):
        if stat.size_diff <= 0:
            continue
        # Frames run from the oldest to the most recent. Only what runs below this
        # function's call of the step counts (not the snapshots it takes itself); of
        # that, the most recent user frame made the allocation.
        key = user_frame_of(stat.traceback, plugin)
        if key is None:
            continue
        grown[key] += stat.size_diff
        counts[key] += max(stat.count_diff, 0)
    ranked = most_common(grown)
    # A line far below the largest is one every step runs (``loss.backward()``,
    # ``optimizer.step()``, ``zero_grad()`` allocate a little each time), not what grows.
    largest = ranked[0][1] if ranked else 0
    return [creation_site(key, counts[key]) for key, size in ranked
            if size * _MEMORY_SHARE >= largest]  # fmt: skip


def _plugin_dir() -> str:
    return os.path.join(_PACKAGE_DIR, "")


def user_frame_of(traceback: tracemalloc.Traceback, plugin: str = "") -> Site | None:
    """The most recent user frame of an allocation's traceback that runs below this
    plugin's last frame (the step it called, not the plugin's own work)."""
    plugin = plugin or _plugin_dir()
    # Frames run from the oldest to the most recent.
    called = list(traceback)
    ours = [i for i, f in enumerate(called) if os.path.abspath(f.filename).startswith(plugin)]
    if ours:
        called = called[ours[-1] + 1 :]
    user = next((f for f in reversed(called) if is_user_file(f.filename)), None)
    if user is None:
        return None
    return user.filename, user.lineno, function_at(user.filename, user.lineno)


def creation_site(site: Site, count: int, via: str = "", every: int = 1) -> CreationSite:
    filename, lineno, function = site
    line = linecache.getline(filename, lineno).strip()
    return CreationSite(filename, lineno, line, count, function, via, every)


def per_step(counts: Counter[Site], steps: int, via: Mapping[Site, str] | None = None
             ) -> list[CreationSite]:  # fmt: skip
    """The most common sites, each with how often it occurs in one of ``steps`` steps, or
    (fewer times than the steps) in all of them: 1 in 3 steps."""
    steps = max(1, steps)
    return [
        creation_site(site, math.ceil(total / steps), (via or {}).get(site, ""))
        if total >= steps
        else creation_site(site, max(1, total), (via or {}).get(site, ""), every=steps)
        for site, total in most_common(counts)
    ]


def most_common(counts: Counter[Site]) -> list[tuple[Site, int]]:
    """The ``MAX_SITES`` largest counts, ties in source order: the order in which the heap
    was walked depends on reused addresses, and the report must not."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1]))
    return ranked[:MAX_SITES]
