"""What the audit's search is given and gives back, without the search: the roots
(``Holder``), what to look for (``Targets``, ``Listed``), what it found (``Explained``)
and what it hands to a wider-scope fixture (``Deferred``).

Apart from ``outlive/explain`` (which imports the diagnosis) so that an audit that never
names a holder, the common case, never imports the diagnosis either: a test that left
nothing of the user's alive costs no import of it (``outlive/audit`` imports ``explain``
when the gate says a root reaches a graph).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pytest_graphleak.result import CheckResult

if TYPE_CHECKING:
    from pytest_graphleak.diagnose.edges import ObjectEdges
    from pytest_graphleak.diagnose.search import Path

#: Holders reported per test, objects walked to count what one holder keeps, and the
#: objects one search may visit (the user's module globals can reach big datasets).
MAX_HOLDERS = 3
MAX_COUNTED = 50_000
MAX_VISITED = 100_000


@dataclass
class Holder:
    """A root the plugin offers: its label in the chain, its dotted name (matched by the
    ``graphleak_outlive_keep`` list) and its value."""

    label: str
    qualified: str
    value: object
    #: A wider-scope fixture that is still alive: what only it keeps is judged later.
    fixture: bool = False
    #: Reads the root again (a module global rebound by the test); None: ``value`` stands.
    read: Callable[[], object] | None = None
    #: Kept on purpose (``graphleak_outlive_keep``): not a root, and no search passes
    #: through its value, whatever name or path reaches it.
    kept: bool = False
    #: The wider-scope fixture whose teardown judges what this root keeps (its value, or a
    #: ``request.cls`` attribute it set); the plugin's object, opaque here.
    owner: Any = None
    #: A live fixture's own object (a ``request.cls`` attribute it set): no other root's
    #: chain passes through it (the class is also a module global) while it lives.
    exclusive: bool = False


@dataclass
class Deferred:
    """Graph tensors the test made that only a live wider-scope fixture keeps."""

    nodeid: str
    fixture: str  # the holder's label
    tensors: list[weakref.ref[Any]] = field(default_factory=list)
    #: The holder's ``owner``: the fixture whose teardown judges these graphs.
    owner: Any = None

    def alive(self) -> list[Any]:
        return [obj for ref in self.tensors if (obj := ref()) is not None]


class Targets(Protocol):
    """What the search looks for: the census (``outlive/census.Census``) or ``Listed``."""

    def made_during(self, obj: object) -> bool: ...

    def grown_in_place(self, obj: object) -> bool: ...


class Listed:
    """Targets given as objects: what the census found in the young generations, or the
    graphs a wider-scope fixture kept, judged again. ``grown``: which of them are old
    tensors whose graph the test extended in place."""

    def __init__(
        self, objects: list[Any], grown: Callable[[object], bool] = lambda obj: False
    ) -> None:
        self._ids = {id(obj) for obj in objects}
        self._objects = objects  # keeps the ids unique while the search runs
        self._grown = grown

    def made_during(self, obj: object) -> bool:
        return id(obj) in self._ids

    def grown_in_place(self, obj: object) -> bool:
        return id(obj) in self._ids and self._grown(obj)


@dataclass
class Explained:
    results: list[CheckResult] = field(default_factory=list)
    deferred: list[Deferred] = field(default_factory=list)
    #: With ``keep_paths``: each result's chain (same order), for a re-run to watch; the
    #: caller must ``release()``.
    paths: list[Path] = field(default_factory=list)
    walker: ObjectEdges | None = None

    def release(self) -> None:
        for path in self.paths:
            path.clear()
        self.paths.clear()
        self.walker = None
