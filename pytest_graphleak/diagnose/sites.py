"""Where leaked objects were made: the first stack frame in user code.

- a library whose bundle has a ``site_recorder`` (torch: a ``TorchFunctionMode``,
  ``probes/autograd/torch_sites.py``): ``site_recorder(backends)`` makes one, entered
  during the diagnostic steps only; it asks ``site_and_via`` for the user's frame.
- a library that records its own (minigrad: ``mg.record_creation_sites``, read back with
  ``Backend.creation_site``).
- memory: ``tracemalloc`` over two steps, grouped by the first user frame.

"User code" is decided by ``heap.usercode.is_user_file``: any frame outside the standard
library, installed packages, pytest, this plugin and minigrad.
"""

from __future__ import annotations

import ast
import functools
import linecache
import math
import os
import tracemalloc
import types
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from pytest_graphleak.heap.usercode import INSTALLED_MARKERS, is_user_file, library_label
from pytest_graphleak.probes.autograd import BUNDLES, Backend, loaded
from pytest_graphleak.probes.autograd.bundle import Site, SiteRecorder
from pytest_graphleak.result import CreationSite
from pytest_graphleak.words import notes as said

#: This package's own directory (diagnose/ is one level below it).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Installed packages that are the tensor engine (the bundles' ``packages``) or its array
#: library: a tensor is always made inside them, so naming them as the "via" line would
#: say nothing.
ENGINE_PACKAGES = frozenset(
    {"numpy", "pytest_graphleak", *(name for bundle in BUNDLES for name in bundle.packages)}
)
#: (file suffix, function) of library functions that run the user's own code for the
#: user's call (the bundles' ``forwards``: a custom autograd Function's ``apply``).
FORWARDS = frozenset(forward for bundle in BUNDLES for forward in bundle.forwards)
#: The libraries whose sites a ``site_recorder`` records.
_RECORDING = frozenset(bundle.name for bundle in BUNDLES if bundle.site_recorder is not None)
#: Sites shown for one diagnosis, at most.
MAX_SITES = 5
#: ``memory_sites`` shows a line whose allocations grew by at least 1/this of the largest.
_MEMORY_SHARE = 8


def site_and_via(
    frame: types.FrameType | None,
    engine: Collection[str] = ENGINE_PACKAGES,
    forwards: Collection[tuple[str, str]] = FORWARDS,
) -> tuple[Site | None, str]:
    """The innermost user frame from ``frame`` outwards, and the innermost frame of an
    installed library (not the tensor ``engine``'s packages) on the way:
    ``"transformers/models/bert/modeling_bert.py:1234"`` when a library made the tensor
    for the user's line. A user frame that a library's ``forwards`` function called is
    not the user's line (see ``_custom_forward``). The defaults: every bundle's."""
    via = ""
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if is_user_file(filename) and not _custom_forward(frame, forwards):
            return (filename, frame.f_lineno, code.co_name), via
        if not via and names_a_library(filename, engine):
            via = f"{library_label(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None, ""


def _custom_forward(frame: types.FrameType, forwards: Collection[tuple[str, str]]) -> bool:
    """User code a library runs for the user's call (the ``forward`` of a custom autograd
    Function, called by its ``apply``): what it makes is made by the user's
    ``MyFn.apply(...)`` line, further out."""
    caller = frame.f_back
    if caller is None:
        return False
    name, filename = caller.f_code.co_name, caller.f_code.co_filename.replace("\\", "/")
    return any(name == function and filename.endswith(suffix) for suffix, function in forwards)


def names_a_library(filename: str, engine: Collection[str] = ENGINE_PACKAGES) -> bool:
    """Is this frame's file worth naming as the library line that made a tensor (an
    installed package, not one of the tensor ``engine``'s)?"""
    if not any(marker in filename for marker in INSTALLED_MARKERS):
        return False
    return library_label(filename).split("/", 1)[0] not in engine


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


def site_recorder(backends: Iterable[Backend]) -> SiteRecorder | None:
    """A fresh recorder of creation sites (not entered) from the bundle of the first of
    ``backends`` whose library records through one (torch's ``TorchFunctionMode``); None
    when none does (minigrad records its own sites)."""
    names = {backend.name for backend in backends}
    for bundle, module in loaded():
        if bundle.site_recorder is not None and bundle.name in names:
            return bundle.site_recorder(module, site_and_via)
    return None


def recorder_trouble(recorder: SiteRecorder | None) -> str:
    """A note on the operations whose outputs ``recorder`` could not read ("" when it
    read them all): it never raises into the step, and a site it could not record is
    said to be unknown, not left out silently."""
    if recorder is None or not recorder.failures:
        return ""
    return said.unread_outputs(recorder.failures, recorder.failure)


def recorded_by_mode(backend: Backend) -> bool:
    """Are ``backend``'s objects the ones a ``site_recorder`` records (by its library's
    node numbers and its tensors' identity)?"""
    return backend.name in _RECORDING


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
    return [
        creation_site(key, counts[key]) for key, size in ranked if size * _MEMORY_SHARE >= largest
    ]


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


def per_step(
    counts: Counter[Site], steps: int, via: Mapping[Site, str] | None = None
) -> list[CreationSite]:
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
