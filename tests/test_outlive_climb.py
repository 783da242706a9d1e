"""The audit's climb (``outlive/climb``): from the graphs a test left alive up to the roots
that hold them. Its "no root" is as final as the gate's walk down from the roots, it
says "not known" where the collector cannot show a holder, and its work is what the test
left alive: a big heap the roots reach is not read after each test."""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, cast

import pytest
from test_outlive_gate import SHAPES, Box, _verdicts, graph_tensor

import minigrad  # noqa: F401  # imported once here: in-process runs drop what they import
from pytest_graphleak.outlive import audit_roots as audit_module
from pytest_graphleak.outlive import climb as climb_module
from pytest_graphleak.outlive.audit import Audit
from pytest_graphleak.outlive.audit_roots import FIRST_WALK
from pytest_graphleak.outlive.climb import Reach, Roots, climb
from pytest_graphleak.outlive.found import Holder
from pytest_graphleak.outlive.gate import LIMIT, Gate
from pytest_graphleak.outlive.roots import globals_of
from pytest_graphleak.outlive.subjects import AuditedTest
from pytest_graphleak.probes.autograd import Backend, active_backends

#: Shapes whose holder the collector does not show: the climb cannot tell (the gate's
#: walk down from the roots runs then).
UNSHOWN = {"context variable", "numpy object array"}


def _climbed(root: Callable[[object], object], other: bool) -> Reach | None:
    """The climb's answer for a graph tensor and a module global ``x`` = ``root``
    holding it (``other``: holding another graph, not the one looked for)."""
    box = [graph_tensor()]
    module = types.ModuleType("graphleak_climb_roots")
    vars(module)["x"] = root(graph_tensor() if other else box[0])
    roots = Roots(modules={id(vars(module)): module})
    young = gc.get_objects(0)
    young.extend(gc.get_objects(1))
    return climb(Gate(), box, roots, active_backends(), young, own=(id(box),))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_climb_finds_every_root_the_labelled_search_names(shape: str) -> None:
    reach = _climbed(SHAPES[shape], other=False)
    if shape in UNSHOWN:
        assert reach is None
        return
    assert reach is not None
    assert reach.globals == {("graphleak_climb_roots", "x")}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_root_that_holds_another_graph_is_climbed_to_by_none(shape: str) -> None:
    reach = _climbed(SHAPES[shape], other=True)
    assert reach is not None and not reach
    target = graph_tensor()
    assert _verdicts(SHAPES[shape](graph_tensor()), target) == (False, False)


def test_the_climb_keeps_nothing_alive() -> None:
    box = [graph_tensor()]
    module = types.ModuleType("graphleak_climb_roots")
    vars(module)["x"] = Box(box[0])
    young = gc.get_objects(0)
    young.extend(gc.get_objects(1))
    roots = Roots(modules={id(vars(module)): module})
    assert climb(Gate(), box, roots, active_backends(), young, own=(id(box),))
    assert not young  # emptied
    held = weakref.ref(module.x)
    del module.x
    assert held() is None


STATIC = "graphleak_climb_static"


@pytest.fixture
def user_module() -> Iterator[types.ModuleType]:
    """A module of the user's in sys.modules (a root of every test), with a list."""
    module = types.ModuleType(STATIC)
    module.__file__ = "/tmp/graphleak_climb_static.py"
    vars(module)["KEPT"] = []
    sys.modules[STATIC] = module
    yield module
    del sys.modules[STATIC]


@dataclass
class Seen:
    """What one audit did: the objects each climb took in (None: it could not tell),
    the gate's walks down from the roots, the roots handed to the holder search (module,
    names), and the chains of its findings."""

    taken: list[int | None] = field(default_factory=list)
    walks: list[int] = field(default_factory=list)  # each walk's limit
    roots: list[tuple[str, Collection[str] | None]] = field(default_factory=list)
    chains: list[str] = field(default_factory=list)


def _count_walks(seen: Seen, monkeypatch: pytest.MonkeyPatch) -> None:
    """Note each of the gate's walks down from the roots (its limit) in ``seen``."""
    real_walk = Gate.may_reach

    def counted_walk(
        self: Gate,
        roots: Iterable[object],
        wanted: Callable[[object], bool],
        backends: list[Backend],
        *,
        limit: int = LIMIT,
        kept: Iterable[object] = (),
    ) -> bool | None:
        seen.walks.append(limit)
        return real_walk(self, roots, wanted, backends, limit=limit, kept=kept)

    monkeypatch.setattr(Gate, "may_reach", counted_walk)


def _audit(module: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> Seen:
    """One audited test that keeps a graph in ``module.KEPT``."""
    monkeypatch.undo()  # an earlier call's counters
    seen = Seen()
    real_climb, real_globals = climb, globals_of
    _count_walks(seen, monkeypatch)

    def counted_climb(
        gate: Gate,
        targets: Sequence[object],
        roots: Roots,
        backends: list[Backend],
        young: list[object] | None,
        own: Collection[int] = (),
    ) -> Reach | None:
        reach = real_climb(gate, targets, roots, backends, young, own)
        seen.taken.append(None if reach is None else reach.taken)
        return reach

    def counted_globals(
        module: types.ModuleType, only: Collection[str] | None = None
    ) -> Iterable[Holder]:
        seen.roots.append((module.__name__, only))
        return real_globals(module, only)

    monkeypatch.setattr(audit_module, "climb", counted_climb)
    monkeypatch.setattr(audit_module, "globals_of", counted_globals)
    audit = Audit()
    test = AuditedTest(f"{STATIC}.py::test_keeps", module=module)
    census = audit.census()
    vars(module)["KEPT"].append(graph_tensor())
    seen.chains = [r.diagnosis.chain[0] for r in audit.audit(test, census) if r.diagnosis]
    return seen


def test_the_audits_work_does_not_grow_with_what_the_roots_reach(
    user_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module-level dataset (here 100,000 lists) reachable from a root: the audit
    after a test that kept a graph walks down from the roots no further than its first
    short walk, climbs from the graph instead, taking in a few objects, and the holder
    search starts from the one root that holds the graph."""
    small = _audit(user_module, monkeypatch)
    vars(user_module)["DATA"] = [[i, {"a": i}] for i in range(100_000)]
    vars(user_module)["KEPT"].clear()
    big = _audit(user_module, monkeypatch)
    assert small.chains == big.chains == [f"global '{STATIC}.KEPT'"]
    assert big.walks == [FIRST_WALK]  # the first, short walk only: past it, the climb
    assert len(big.taken) == 1 and big.taken[0] is not None and big.taken[0] < 100
    assert big.roots == [(STATIC, {"KEPT"})]
    assert all(limit == FIRST_WALK for limit in small.walks)


def test_past_its_budget_the_climb_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    def deep(value: object) -> object:
        return [[[[[value]]]]]

    assert _climbed(deep, other=False)
    monkeypatch.setattr(climb_module, "MAX_TAKEN", 2)
    assert _climbed(deep, other=False) is None


def test_a_graph_in_an_object_array_in_a_root_is_still_named(
    monkeypatch: pytest.MonkeyPatch, user_module: types.ModuleType
) -> None:
    """The climb cannot see an array's items: the walk down from the roots runs."""
    import numpy as np

    array = np.empty(1, dtype=object)

    class Appending:
        def append(self, value: object) -> None:
            array[0] = value

    vars(user_module).update(KEPT=Appending(), ARRAY=array)
    vars(user_module)["DATA"] = [[i] for i in range(FIRST_WALK)]  # past the first walk
    seen = _audit(user_module, monkeypatch)
    assert seen.taken == [None] and seen.walks == [FIRST_WALK, LIMIT]
    assert seen.chains == [f"global '{STATIC}.ARRAY'"]


@dataclass
class _Fixture:
    """An outlive.FixtureDef, of pytest's (whose objects the climb never enters)."""

    argname: str
    scope: str
    cached_result: tuple[object, object, object] | None


_Fixture.__module__ = "_pytest.fixtures"


class Suite:
    held: ClassVar[list[object]] = []


def test_a_live_fixture_and_a_class_attribute_are_climbed_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The roots that are values (a live wider-scope fixture's, a test class's attribute)
    are reached by the climb itself: the walk down from the roots does not run."""
    module = types.ModuleType("graphleak_climb_fixture")
    fixture = _Fixture("state", "session", ({"losses": []}, None, None))
    seen = Seen()
    _count_walks(seen, monkeypatch)

    audit = Audit()
    test = AuditedTest("t.py::Suite::test_x", module=module, cls=Suite, fixtures={"state": fixture})
    census = audit.census()
    assert fixture.cached_result is not None
    cast("dict[str, list[object]]", fixture.cached_result[0])["losses"].append(graph_tensor())
    Suite.held.append(graph_tensor())
    try:
        chains = [r.diagnosis.chain[0] for r in audit.audit(test, census) if r.diagnosis]
    finally:
        Suite.held.clear()
    assert chains == ["class attribute 'Suite.held'"]  # the fixture's: judged at its teardown
    assert all(limit == FIRST_WALK for limit in seen.walks)
