"""Watch the holder that the chain search found while more steps run.

Two questions, answered by the same steps:

- does a container on the chain grow? (``list-accumulation`` needs it);
- which line puts the leaked tensor into its holder? That is the ``stored at:`` line,
  the one the user has to edit: ``losses.append(loss)``, ``self.total = self.total +
  loss``, ``avg.add_(loss)``.

The steps run under a line tracer (``sys.settrace``) that traces user frames only.
After each user line it takes a fingerprint of the holder: the length of every container
on the chain, the object reached by following each named edge of the chain again from
its root (an attribute that was assigned a new tensor), and the ``grad_fn`` of the first
tensor on the chain (an in-place ``+=`` or ``add_`` gives it a new one). The user line
after which the fingerprint changed stored the tensor. Changes made inside a library
are charged to the user line that called into it.

The fingerprint holds the objects it compares (``is``, not ``id``: a freed object's id
can be reused); everything is dropped when the watch returns. The caller's trace
function (a debugger, coverage) is restored afterwards.

A loop that cannot be re-run (``track()``, the framework callbacks) is watched live
(``LiveWatch``): the loop's checker starts the watch after the judged step and stops it
after the next one. Its frames already running (the loop's body) are traced too, and the
chain's root is read again after every line (``root_reader``), so rebinding a loop
local (``total = total + loss``) or a module global counts as storing.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import types
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.search import Path
from pytest_graphleak.diagnose.sites import names_a_library, site_and_via
from pytest_graphleak.heap.containers import attributes, length
from pytest_graphleak.heap.edge import Edge, paused_frame
from pytest_graphleak.heap.graphwalk import grad_fn_of
from pytest_graphleak.heap.usercode import is_user_file, library_label
from pytest_graphleak.probes.autograd.bundle import Site
from pytest_graphleak.words import notes as said

MISSING = object()


@dataclass
class Watched:
    #: the containers on the chain that grew, as notes ("list on the chain grows by ...")
    grown: list[str] = field(default_factory=list)
    #: the same as facts: position on the chain's objects -> entries (or attributes) gained
    growth: dict[int, int] = field(default_factory=dict)
    #: user lines after which the holder changed, with how often (over ``steps``)
    stored: Counter[Site] = field(default_factory=Counter)
    #: user line -> the library line that changed the holder for it ("via")
    via: dict[Site, str] = field(default_factory=dict)
    steps: int = 0
    error: str | None = None
    #: the watch's own failure ("" when none): it stopped watching, the step ran on
    failure: str = ""

    def notes(self) -> list[str]:
        raised = [f"the step raised during diagnosis: {self.error}"] if self.error else []
        failed = [watch_failed(self.failure)] if self.failure else []
        return [*self.grown, *raised, *failed]


def watch_failed(failure: str) -> str:
    """The note on a line watch that failed (``LineWatch.failure``)."""
    return said.watch_failed(failure)


def follow_edge(obj: Any, edge: Edge, walker: ObjectEdges) -> Any:
    """The object ``edge`` leads to from ``obj`` now (``MISSING`` when it cannot say);
    ``walker``'s backends know which objects keep members in tables of their own."""
    with contextlib.suppress(Exception):
        if edge.kind == "attr":
            attrs = getattr(obj, "__dict__", None)
            # A class's attributes are a mappingproxy (``type(self).history``).
            if isinstance(attrs, (dict, types.MappingProxyType)) and edge.key in attrs:
                return attrs[edge.key]
            # An nn.Module keeps a registered buffer (``self.running_mean = ...`` through
            # its ``__setattr__``), a parameter or a submodule in a table of its own.
            for table in walker.member_tables(obj):
                entries = attrs.get(table) if isinstance(attrs, dict) else None
                if isinstance(entries, dict) and edge.key in entries:
                    return entries[edge.key]
        elif edge.kind == "key" and isinstance(obj, dict):
            return obj.get(edge.key, MISSING)
        elif edge.kind == "local":  # a generator's local, rebound while it is paused
            frame = paused_frame(obj)
            if frame is not None:
                return frame.f_locals.get(edge.key, MISSING)
        elif edge.kind == "closure" and isinstance(obj, types.FunctionType):
            names = obj.__code__.co_freevars
            return obj.__closure__[names.index(edge.key)].cell_contents  # type: ignore[index]
    return MISSING


def _fingerprint(
    path: Path, walker: ObjectEdges, root: Callable[[], object] | None = None
) -> list[Any]:
    """What the chain's holder looks like now (see module docstring); ``root`` reads the
    chain's root again (a rebound name holds a new object)."""
    parts: list[Any] = []
    current: Any = path.objects[0]
    if root is not None:
        current = root()
        if current is MISSING:
            current = path.objects[0]
        parts.append(current)
    for index in range(len(path.objects)):
        found = walker.backend_of(current)
        if found is not None:
            if found[1] == TENSOR:
                parts.append(grad_fn_of(current))
            break
        size = length(current)  # containers.length: a deque or a user's history too
        if size is not None:
            parts.append(size)
        if index >= len(path.edges):
            break
        following = follow_edge(current, path.edges[index], walker)
        if following is MISSING:
            following = path.objects[index + 1]
        parts.append(following)
        current = following
    return parts


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x == y if isinstance(x, int) else x is y for x, y in zip(a, b, strict=True)
    )


class LineWatch:
    """The trace functions: fingerprint after every user line, charge changes to it."""

    def __init__(
        self, path: Path, walker: ObjectEdges, root: Callable[[], object] | None = None
    ) -> None:
        self.path = path
        self.walker = walker
        self.root = root
        self.last: Site | None = None
        self.seen = _fingerprint(path, walker, root)
        self.changes: Counter[Site] = Counter()
        self.via: dict[Site, str] = {}
        self.library_line = ""  # the library line run last since the last user line
        #: Its own first failure ("" when none). It runs as the user's trace function, so
        #: it never raises into the step: it stops watching and says so.
        self.failure = ""

    def check(self) -> None:
        if self.failure:
            return
        try:
            self._check()
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"

    def _check(self) -> None:
        now = _fingerprint(self.path, self.walker, self.root)
        if not _same(now, self.seen):
            if self.last is not None:
                self.changes[self.last] += 1
                if self.library_line:
                    self.via.setdefault(self.last, self.library_line)
            self.seen = now

    def on_call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event != "call" or self.failure:
            return None
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            return self.on_line
        # A library's own store (a metric's update, a trainer's list): its line is the
        # "via" of the user line that called it. The tensor engine's are not named.
        return self.on_library_line if names_a_library(filename) else None

    def on_library_line(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if self.failure:
            return None
        if event in ("line", "return"):
            self.check()
            self.library_line = f"{library_label(frame.f_code.co_filename)}:{frame.f_lineno}"
        return self.on_library_line

    def on_line(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if self.failure:
            return None
        if event == "line":
            self.check()
            self.library_line = ""
            self.last = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        elif event == "return":
            self.check()
            # The user line the function goes back to, through library frames: a change
            # made there belongs to the user line that called the library.
            self.last = site_and_via(frame.f_back)[0]
            self.library_line = ""
        return self.on_line


def watch_holder(
    path: Path,
    step: Callable[[], object],
    walker: ObjectEdges,
    *,
    steps: int,
    root: Callable[[], object] | None = None,
) -> Watched:
    """Run up to ``steps`` steps; stop after the first in which the holder changed.
    ``root`` reads the chain's root again (``root_reader``)."""
    watched = Watched()
    sized = [
        (at, obj, size)
        for at, obj in enumerate(path.objects)
        if walker.backend_of(obj) is None and (size := _size(obj)) is not None
    ]
    watch = LineWatch(path, walker, root)
    previous = sys.gettrace()
    try:
        for done in range(1, steps + 1):
            watch.last = None  # a change before the first user line is nobody's
            sys.settrace(watch.on_call)
            try:
                step()
            except Exception as exc:
                watched.error = f"{type(exc).__name__}: {exc}"
                break
            finally:
                sys.settrace(previous)
            watch.check()
            watched.steps = done
            every = "per step" if done == 1 else f"over {done} steps"
            # The container now at each place of the chain: ``h = h + [loss]`` puts a
            # new, longer one there each step and leaves the old one as it was.
            now_at = _followed(path, walker, root)
            for at, o, before in sized:
                now = _same_kind(o, now_at, at)
                if (_size(now) or 0) > before:
                    watched.growth[at] = (_size(now) or 0) - before
                    watched.grown.append(
                        _grown(o, before, before + watched.growth[at], every, rebuilt=now is not o)
                    )
            now_at.clear()
            if watched.grown or watch.changes:
                break
        watched.stored = watch.changes
        watched.via = watch.via
        watched.failure = watch.failure
        return watched
    finally:
        sys.settrace(previous)
        watch.seen = []
        sized.clear()


def _size(obj: object) -> int | None:
    """A container's length (``containers.length``), or how many attributes an object of
    the user's own class has: one that gains an attribute a step grows too."""
    size = length(obj)
    return size if size is not None else attributes(obj)


def _followed(path: Path, walker: ObjectEdges, root: Callable[[], object] | None) -> list[Any]:
    """The chain's objects as its named edges lead from its root now (``root`` reads it
    again: a global rebound; else its first object), shorter where an edge cannot be
    followed again (an index, a tensor)."""
    first = root() if root is not None else MISSING
    found: list[Any] = [path.objects[0] if first is MISSING else first]
    for edge in path.edges:
        current = found[-1]
        if walker.backend_of(current) is not None:
            break
        following = follow_edge(current, edge, walker)
        if following is MISSING:
            break
        found.append(following)
    return found


def _same_kind(obj: object, now_at: list[Any], at: int) -> object:
    """The object now at place ``at`` of the chain when it is of ``obj``'s type (a list
    rebuilt longer), else ``obj`` itself."""
    now = now_at[at] if at < len(now_at) else obj
    return now if type(now) is type(obj) else obj


def _grown(obj: object, before: int, now: int, every: str, *, rebuilt: bool = False) -> str:
    return said.grown(
        type(obj).__name__, before, now, every, sized=length(obj) is not None, rebuilt=rebuilt
    )


def root_reader(
    path: Path, given: Callable[[], Mapping[str, object]]
) -> Callable[[], object] | None:
    """How to read the chain's root again: from the loop's own roots (``local 'x'``, a
    trainer), the module dict of a ``global 'x'`` or the cell of a ``closure 'x'``; None
    when the root cannot be re-read (the first object then stands for it)."""
    label, first = path.root_label, path.objects[0]
    with contextlib.suppress(Exception):
        if label in given():
            return lambda: given().get(label, MISSING)
    kind, _, rest = label.partition(" ")
    name = rest.strip("'")
    if kind == "global":
        namespace = _module_dict_holding(name, first)
        if namespace is not None:
            return lambda: namespace.get(name, MISSING)
    elif kind == "closure":
        for holder in gc.get_referrers(first):
            if isinstance(holder, types.CellType):
                return lambda: _cell_contents(holder)
    return None


def _module_dict_holding(name: str, value: object) -> dict[str, Any] | None:
    """The namespace whose ``name`` is ``value``: the one module in ``sys.modules`` that
    binds it (the roots' globals come from there; a lookup a module, no heap scan), else,
    when none or several do, the first namespace ``gc.get_referrers`` finds (one scan of
    the heap: a namespace outside ``sys.modules``, or a value bound in several)."""
    found: list[dict[str, Any]] = []
    for module in list(sys.modules.values()):
        try:  # anything may sit in sys.modules, a lazy module's attribute may raise
            namespace = vars(module)
        except Exception:
            continue
        if not isinstance(namespace, dict) or namespace.get(name, MISSING) is not value:
            continue
        if all(seen is not namespace for seen in found):  # os.path and posixpath: once
            found.append(namespace)
            if len(found) > 1:
                break
    if len(found) == 1:
        return found[0]
    for holder in gc.get_referrers(value):
        if isinstance(holder, dict) and "__name__" in holder and holder.get(name) is value:
            return holder
    return None


def _cell_contents(cell: types.CellType) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # emptied
        return MISSING


class LiveWatch:
    """Watch the holder while a running loop's next step runs: ``start()`` after the
    judged step, ``stop()`` after the next one. Traces the user's frames already running
    (the loop's body) and those the step calls; the caller's trace function is restored
    and the chain let go by ``stop()``."""

    def __init__(
        self,
        path: Path | None,
        walker: ObjectEdges,
        root: Callable[[], object] | None,
        *,
        lines: LineWatch | None = None,
    ) -> None:
        """``lines``: the line watch to run instead of one of ``path`` (None then)."""
        self._path = path
        self._watch: LineWatch | None = lines
        if lines is None:
            assert path is not None
            self._watch = LineWatch(path, walker, root)
        self._previous: Any = None
        self._frames: list[types.FrameType] = []
        self.watching = False
        #: The line watch's failure, kept after ``stop()`` (``LineWatch.failure``).
        self.failure = ""

    def start(self) -> None:
        watch = self._watch
        assert watch is not None
        self._previous = sys.gettrace()
        frame = sys._getframe(1)
        while frame is not None:
            if is_user_file(frame.f_code.co_filename) and frame.f_trace is None:
                frame.f_trace = watch.on_line
                self._frames.append(frame)
            frame = frame.f_back  # type: ignore[assignment]
        sys.settrace(watch.on_call)
        self.watching = True

    def stop(self) -> tuple[Counter[Site], dict[Site, str]]:
        """The user lines after which the holder changed (empty: none, or not started),
        and the library line that changed it for each, where one did."""
        watch, self._watch = self._watch, None
        if self.watching:
            sys.settrace(self._previous)
        self.watching = False
        for frame in self._frames:
            frame.f_trace = None
        self._frames.clear()
        self._previous = None
        if watch is None:
            return Counter(), {}
        try:
            watch.check()
            self.failure = watch.failure
            return watch.changes, watch.via
        finally:
            watch.seen = []
            if self._path is not None:
                self._path.clear()
