"""The audit's first question asked upwards: which roots hold what the test left alive?

``Gate.may_reach`` walks down from the roots: its cost is what they reach (a dataset in
a module global, a pytest-xdist worker's hundred test modules). ``climb`` goes up from
the graph objects the census listed to their holders, at the cost of what the test left
alive and what holds it:

- the objects made since the test began are indexed once: who among them refers to
  whom, and each one's references from outside them;
- one held from outside them, or an old one, is looked up with ``gc.get_referrers`` (a
  pass over the heap in C for up to ``MAX_PER_PASS`` at a time) and its references are
  counted: one that no holder the collector sees explains (a numpy object array's item,
  a tensor held from C++, a running frame's local) makes the answer None, "not known";
- a holder is taken in only where the gate's walk would follow the reference
  (``Gate.reads``): not modules, frames, code, library classes, pytest's and the
  plugin's objects, a function's ``__globals__``, autograd graph edges, attributes a
  forward pre-hook remakes, what is kept on purpose. A ContextVar's value: None.

It climbs everything the walk could have come down, so an empty answer is final as the
gate's False is, and it names the roots it reached (``Reach``): the holder search
(``outlive/explain``) starts from those alone. Past ``MAX_TAKEN`` objects or
``MAX_PASSES`` passes it answers None. It keeps, collects, freezes and changes nothing.
"""

from __future__ import annotations

import contextvars
import gc
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pytest_graphleak.heap.quiet import silenced
from pytest_graphleak.outlive.gate import CLASS, CONTEXT, ENTER, FUNCTION, SKIP, VAR, Gate
from pytest_graphleak.probes.autograd import Backend

#: Objects one climb takes in, heap passes it makes, objects one pass looks for (each
#: adds a comparison per reference on the heap), young objects it indexes.
MAX_TAKEN = 50_000
MAX_PASSES = 12
MAX_PER_PASS = 48
MAX_YOUNG = 200_000


@dataclass
class Roots:
    """Where the roots are, without listing their values: the root modules' globals (by
    the id of their ``__dict__``), the other roots' values (a test class's attributes;
    ``fixtures``: live wider-scope fixtures' values and the class attributes they set)
    and what is kept on purpose (no root, climbed by none). Nothing above a root's value
    is climbed but above a fixture's: a global of the user's that holds a fixture's value
    makes the graph the test's, not the fixture's."""

    modules: dict[int, object] = field(default_factory=dict)
    values: dict[int, object] = field(default_factory=dict)
    fixtures: dict[int, object] = field(default_factory=dict)
    kept: dict[int, object] = field(default_factory=dict)

    def clear(self) -> None:
        self.modules.clear()
        self.values.clear()
        self.fixtures.clear()
        self.kept.clear()


@dataclass
class Reach:
    """The roots that reach a graph the test left alive: (module, global name) pairs and
    the ids of the other root values. Empty: none does."""

    globals: set[tuple[str, str]] = field(default_factory=set)
    values: set[int] = field(default_factory=set)
    #: Objects taken in (the measure of a climb's work: ``tests/test_outlive_climb``).
    taken: int = 0

    def __bool__(self) -> bool:
        return bool(self.globals or self.values)


class _Probe:
    """A fresh object counted as the others: the references the counting itself makes."""


def _hamt_types() -> frozenset[type]:
    """The types a context's values are kept in (their holders lead to a ContextVar)."""
    context = contextvars.copy_context()
    context.run(contextvars.ContextVar[object]("graphleak_climb").set, _Probe())
    found, frontier = {type(context)}, gc.get_referents(context)
    for _ in range(4):
        frontier = [obj for obj in frontier if type(obj).__name__.startswith("hamt")]
        found.update(map(type, frontier))
        frontier = gc.get_referents(*frontier)
    return frozenset(found)


_CONTEXT_TYPES = _hamt_types()
#: Not looked into around the targets: a class or function leads to a whole package.
_NOT_AROUND = (SKIP, CLASS, FUNCTION)


@silenced
def climb(
    gate: Gate,
    targets: Sequence[object],
    roots: Roots,
    backends: list[Backend],
    young: list[object] | None,
    own: Collection[int] = (),
) -> Reach | None:
    """The roots from which the gate's walk would reach one of ``targets`` (see the
    module docstring); None when not known. ``young``: the objects made since the test
    began (``Census.since``; this call empties the list); None when a collection moved
    them on: the young generations and what the targets refer to are indexed then.
    ``own``: ids of the caller's containers of the targets (not holders)."""
    if young is None:
        young = gc.get_objects(0)
        young.extend(gc.get_objects(1))
        _add_around(gate, targets, young, backends)
    index = _Young(young)
    climbing = _Climb(gate, roots, backends, index, own)
    try:
        return climbing.run(targets)
    finally:
        climbing.release()
        index.release()


class _Young:
    """The objects made since the test began, indexed: each one's holders among them,
    and its references from outside them (``external``)."""

    def __init__(self, objects: list[object]) -> None:
        holder = [_Probe()]  # held by that list alone: what the counting itself adds
        self.objects = objects
        objects.extend((holder, holder[0]))
        self.external: list[int] = []
        self.parents: dict[int, list[int]] = {}
        self.where: dict[int, int] = {}
        if len(self.objects) > MAX_YOUNG:
            return
        counts = [sys.getrefcount(obj) for obj in self.objects]
        self.where = {id(obj): i for i, obj in enumerate(self.objects)}
        inside = self._index()
        at = self.where.get(id(holder[0]))
        if at is None:  # a collection moved it on meanwhile: nothing is known
            self.where.clear()
            return
        base = counts[at] - inside[at]  # the list of objects, the counting's own
        self.external = [n - i - base for n, i in zip(counts, inside, strict=True)]
        holder.clear()

    def _index(self) -> list[int]:
        inside = [0] * len(self.objects)
        where, parents = self.where, self.parents
        for i, obj in enumerate(self.objects):
            for child in gc.get_referents(obj):
                j = where.get(id(child))
                if j is not None:
                    inside[j] += 1
                    parents.setdefault(j, []).append(i)
        return inside

    def release(self) -> None:
        self.objects.clear()
        self.parents.clear()
        self.where.clear()


class _Climb:
    def __init__(
        self,
        gate: Gate,
        roots: Roots,
        backends: list[Backend],
        young: _Young,
        own: Collection[int],
    ) -> None:
        self.gate, self.roots, self.backends, self.young = gate, roots, backends, young
        #: id -> each object taken in (they reach a target by the walk's references).
        self.taken: dict[int, object] = {}
        #: Taken, with holders outside the young generations not looked for yet.
        self.outside: list[object] = []
        #: Taken young objects whose young holders are not looked at yet.
        self.rising: list[int] = []
        self.reach = Reach()
        self.unknown = False
        self.own = {
            *own,
            id(self.taken),
            id(self.outside),
            id(young.objects),
            id(roots),
            id(roots.modules),
            id(roots.values),
            id(roots.fixtures),
            id(roots.kept),
        }

    def run(self, targets: Sequence[object]) -> Reach | None:
        if not self.young.where:
            return None
        self._take_all(targets)  # in a call of its own: no local is left holding one
        passes = 0
        while (self.rising or self.outside) and not self.unknown:
            self._rise()
            if self.outside and not self.unknown:
                passes += 1
                if passes > MAX_PASSES:
                    return None
                self._heap_pass()
            if len(self.taken) > MAX_TAKEN:
                return None
        if self.unknown:
            return None
        self.reach.taken = len(self.taken)
        return self.reach

    def _take_all(self, targets: Sequence[object]) -> None:
        for target in targets:
            self._take(target)

    def _take(self, obj: object) -> None:
        self.taken[id(obj)] = obj
        if id(obj) in self.roots.values:  # the shortest chain starts here: no need to go on
            self.reach.values.add(id(obj))
            return
        if id(obj) in self.roots.fixtures:
            self.reach.values.add(id(obj))
        at = self.young.where.get(id(obj))
        if at is None:
            self.outside.append(obj)
            return
        self.rising.append(at)
        if self.young.external[at]:
            self.outside.append(obj)

    def _rise(self) -> None:
        """Take in the young holders of what was taken, up to the oldest young ones."""
        objects, parents = self.young.objects, self.young.parents
        while self.rising and not self.unknown:
            at = self.rising.pop()
            for holder in parents.get(at, ()):
                self._consider(objects[holder])

    def _heap_pass(self) -> None:
        batch = self.outside[:MAX_PER_PASS]
        del self.outside[:MAX_PER_PASS]
        holders, hidden = _holders(batch)
        self.own.add(id(batch))
        try:
            if any(hidden):  # held where the collector does not look
                self.unknown = True
                return
            for holder in holders:
                if id(holder) not in self.own:
                    self._consider(holder)
        finally:
            self.own.discard(id(batch))
            batch.clear()
            holders.clear()

    def _consider(self, holder: object) -> None:
        """Take ``holder`` in if the gate's walk goes from it to something taken."""
        if id(holder) in self.roots.modules and not self._globals(holder):
            return  # a root module's globals: those that lead to a target are the roots
        if id(holder) in self.taken or id(holder) in self.own or id(holder) in self.roots.kept:
            return
        if type(holder) in _CONTEXT_TYPES:
            self.unknown = True  # a context variable's value: which variable is not told
            return
        rule = self.gate.rule(holder, self.backends)
        if rule == SKIP:
            return
        if rule in (VAR, CONTEXT):
            self.unknown = True
            return
        if rule != ENTER:
            read = self.gate.reads(holder, rule, self.backends)
            if read is not None and not any(id(child) in self.taken for child in read):
                return
        self._take(holder)

    def _globals(self, names: object) -> bool:
        """Note the globals of a root module that lead to a target; True when the module's
        dict is climbed on as any dict (it holds one under a name that is no root)."""
        module = self.roots.modules[id(names)]
        if not isinstance(names, dict) or vars(module) is not names:
            return True
        other = False
        for name, value in list(names.items()):
            if id(value) in self.taken or id(name) in self.taken:
                if isinstance(name, str) and not name.startswith("__"):
                    self.reach.globals.add((getattr(module, "__name__", ""), name))
                else:
                    other = True
        return other

    def release(self) -> None:
        self.taken.clear()
        self.outside.clear()
        self.rising.clear()


def _add_around(
    gate: Gate, targets: Sequence[object], objects: list[object], backends: list[Backend]
) -> None:
    """Add to ``objects`` what ``targets`` refer to, and so on, through plain objects
    (no class, function or module): a graph's own parts, which hold one another."""
    seen = {id(obj) for obj in objects}
    frontier = [obj for obj in targets if id(obj) not in seen]
    seen.update(map(id, frontier))
    while frontier and len(objects) < MAX_YOUNG:
        objects.extend(frontier)
        entered = [obj for obj in frontier if gate.rule(obj, backends) not in _NOT_AROUND]
        frontier = []
        for child in gc.get_referents(*entered):
            if gc.is_tracked(child) and id(child) not in seen:
                seen.add(id(child))
                frontier.append(child)
        entered.clear()


def _holders(batch: list[object]) -> tuple[list[object], list[int]]:
    """The holders of ``batch``'s objects anywhere in the heap (one pass in C), and for
    each object the references to it that no holder shows."""
    batch.append(_Probe())  # held by ``batch`` alone: what the counting itself adds
    holders = gc.get_referrers(*batch)
    shown = _shown(holders, batch)
    hidden = [sys.getrefcount(obj) - n for obj, n in zip(batch, shown, strict=True)]
    base = hidden.pop()
    batch.pop()
    holders = [h for h in holders if h is not batch]
    return holders, [n - base for n in hidden]


def _shown(holders: list[object], batch: list[object]) -> list[int]:
    """References to each of ``batch``'s objects from ``holders`` (and the list itself)."""
    at = {id(obj): k for k, obj in enumerate(batch)}
    shown = [0] * len(batch)
    for holder in holders:
        k = at.get(id(holder))
        if k is not None:  # ``holders`` holds it too
            shown[k] += 1
        for child in gc.get_referents(holder):
            k = at.get(id(child))
            if k is not None:
                shown[k] += 1
    return shown
