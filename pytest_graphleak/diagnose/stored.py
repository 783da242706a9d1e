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
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.edges import Edge, ObjectEdges
from pytest_graphleak.diagnose.search import Path
from pytest_graphleak.diagnose.sites import Site, site_and_via
from pytest_graphleak.heap.usercode import is_user_file

_SIZED = (list, dict, set, frozenset, tuple)
_MISSING = object()


@dataclass
class Watched:
    #: the containers on the chain that grew, as notes ("list on the chain grows by ...")
    grown: list[str] = field(default_factory=list)
    #: user lines after which the holder changed, with how often (over ``steps``)
    stored: Counter[Site] = field(default_factory=Counter)
    steps: int = 0
    error: str | None = None

    def notes(self) -> list[str]:
        raised = [f"the step raised during diagnosis: {self.error}"] if self.error else []
        return [*self.grown, *raised]


def _follow(obj: Any, edge: Edge) -> Any:
    """The object ``edge`` leads to from ``obj`` now (``_MISSING`` when it cannot say)."""
    with contextlib.suppress(Exception):
        if edge.kind == "attr":
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict) and edge.key in attrs:
                return attrs[edge.key]
        elif edge.kind == "key" and isinstance(obj, dict):
            return obj.get(edge.key, _MISSING)
        elif edge.kind == "closure" and isinstance(obj, types.FunctionType):
            names = obj.__code__.co_freevars
            return obj.__closure__[names.index(edge.key)].cell_contents  # type: ignore[index]
    return _MISSING


def _fingerprint(path: Path, walker: ObjectEdges) -> list[Any]:
    """What the chain's holder looks like now (see module docstring)."""
    parts: list[Any] = []
    current: Any = path.objects[0]
    for index in range(len(path.objects)):
        if isinstance(current, _SIZED):
            parts.append(len(current))
        found = walker.backend_of(current)
        if found is not None:
            if found[1] == TENSOR:
                parts.append(getattr(current, "grad_fn", None))
            break
        if index >= len(path.edges):
            break
        following = _follow(current, path.edges[index])
        if following is _MISSING:
            following = path.objects[index + 1]
        parts.append(following)
        current = following
    return parts


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x == y if isinstance(x, int) else x is y for x, y in zip(a, b, strict=True)
    )


class _LineWatch:
    """The trace functions: fingerprint after every user line, charge changes to it."""

    def __init__(self, path: Path, walker: ObjectEdges) -> None:
        self.path = path
        self.walker = walker
        self.last: Site | None = None
        self.seen = _fingerprint(path, walker)
        self.changes: Counter[Site] = Counter()

    def check(self) -> None:
        now = _fingerprint(self.path, self.walker)
        if not _same(now, self.seen):
            if self.last is not None:
                self.changes[self.last] += 1
            self.seen = now

    def on_call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "call" and is_user_file(frame.f_code.co_filename):
            return self.on_line
        return None

    def on_line(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.check()
            self.last = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        elif event == "return":
            self.check()
            # The user line the function goes back to, through library frames: a change
            # made there belongs to the user line that called the library.
            self.last = site_and_via(frame.f_back)[0]
        return self.on_line


def watch_holder(
    path: Path, step: Callable[[], object], walker: ObjectEdges, *, steps: int
) -> Watched:
    """Run up to ``steps`` steps; stop after the first in which the holder changed."""
    watched = Watched()
    sized = [(obj, len(obj)) for obj in path.objects if isinstance(obj, _SIZED)]
    watch = _LineWatch(path, walker)
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
            watched.grown = [
                f"{type(o).__name__} on the chain grows by {len(o) - before} {every} "
                f"(len {before} -> {len(o)})"
                for o, before in sized
                if len(o) > before
            ]
            if watched.grown or watch.changes:
                break
        watched.stored = watch.changes
        return watched
    finally:
        sys.settrace(previous)
        watch.seen = []
        sized.clear()
