"""The chain search is deterministic (round five, ``b_key_depends_on_machine_speed``).

The chain it finds is part of a finding's baseline key, so its budget is counted in work
(objects, heap scans), never in seconds: a known leak must not read as new on a loaded
machine. These tests stand in for a slow machine with a clock that jumps ten seconds a
call: a timed search gives up at once, a search counted in work does not notice.
"""

from __future__ import annotations

import gc
import itertools
import sys
import time
from typing import Any

import pytest

import minigrad as mg
from pytest_graphleak.diagnose import search
from pytest_graphleak.diagnose.backends import active_backends
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.holders import not_reached
from pytest_graphleak.diagnose.search import MAX_PER_ROOT, Path, Searched, ancestors, find_chain
from pytest_graphleak.diagnose.stored import root_reader


class Logger:
    def __init__(self) -> None:
        self.store: dict[str, Any] = {"history": {"train": []}}


class Trainer:
    def __init__(self) -> None:
        self.callbacks = [Logger()]


def _deep() -> tuple[list[tuple[str, object]], list[Any]]:
    """The repro's shape: roots that reach big datasets come first, and the leak sits six
    links below the last root."""
    roots: list[tuple[str, object]] = [
        (f"global 'DATA{r}'", [{"a": [i], "b": (i,)} for i in range(30_000)]) for r in range(4)
    ]
    trainer = Trainer()
    roots.append(("global 'TRAINER'", trainer))
    w = mg.Tensor([1.0, 2.0], requires_grad=True)
    leaked = [(w * float(i)).sum() for i in range(3)]
    trainer.callbacks[0].store["history"]["train"].extend(leaked)
    return roots, leaked


@pytest.fixture
def slow_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where every reading of the clock is ten seconds after the last."""
    ticks = itertools.count(0.0, 10.0)
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    monkeypatch.setattr(time, "monotonic", lambda: next(ticks))


@pytest.mark.parametrize("climb", [True, False], ids=["from-the-leak", "from-the-roots"])
def test_the_chain_is_found_however_slow_the_clock(slow_clock: None, climb: bool) -> None:
    roots, leaked = _deep()
    ids = {id(obj) for obj in leaked}
    walker = ObjectEdges(active_backends())
    found = find_chain(roots, lambda o: id(o) in ids, walker, seeds=leaked if climb else ())
    try:
        assert found.path is not None
        assert found.path.root_label == "global 'TRAINER'"
        kinds = [type(obj).__name__ for obj in found.path.objects]
        assert kinds == ["Trainer", "list", "Logger", "dict", "dict", "list", "Tensor"]
    finally:
        if found.path is not None:
            found.path.clear()


def test_the_climb_from_the_leak_walks_only_what_reaches_it() -> None:
    """The datasets the other roots reach are not walked: the search from the roots goes
    through what the climb from the leaked objects met."""
    roots, leaked = _deep()
    ids = {id(obj) for obj in leaked}
    walker = ObjectEdges(active_backends())
    found = find_chain(roots, lambda o: id(o) in ids, walker, seeds=leaked)
    assert found.path is not None
    found.path.clear()
    assert found.visited < 20  # the six links, not 4 x 25,000 dataset rows


def test_a_search_cut_at_its_budget_says_so_and_names_the_roots() -> None:
    big = [[i] for i in range(MAX_PER_ROOT + 10)]
    small = {"x": [1, 2]}
    walker = ObjectEdges(active_backends())
    found = find_chain([("global 'BIG'", big), ("fixture 'small'", small)], lambda o: False, walker)
    assert found.path is None and found.cut == ["global 'BIG'"] and not found.whole
    told = not_reached(found)
    assert told.startswith("no chain found from a fixture, global, closure or self")
    assert "the search stopped at its budget" in told
    assert "before it had seen all that global 'BIG' reaches" in told
    assert "no chain from the 1 other root, searched whole" in told
    assert "reaches the leaked" not in told  # never the untrue "no chain ... reaches"


def test_a_search_of_every_root_whole_proves_there_is_no_chain() -> None:
    walker = ObjectEdges(active_backends())
    found = find_chain([("fixture 'small'", {"x": [1, 2]})], lambda o: False, walker)
    assert found == Searched(path=None, cut=[], roots=1, visited=found.visited, read=found.read)
    assert found.whole
    assert not_reached(found) == (
        "no chain from a fixture, global, closure or self reaches the leaked objects"
    )


def test_a_container_read_in_part_cuts_its_root() -> None:
    walker = ObjectEdges(active_backends())
    found = find_chain([("global 'ROWS'", [[i] for i in range(20_001)])], lambda o: False, walker)
    assert found.cut == ["global 'ROWS'"]


def test_the_holder_no_root_reaches_is_chosen_by_what_it_holds_not_the_heaps_order() -> None:
    """With no chain from a root, the holder is what refers to the leaked objects: of
    several containers, the one that holds the most of them (the heap's order, which
    ``gc.get_referrers`` follows, may differ from run to run)."""
    from types import SimpleNamespace

    from pytest_graphleak.diagnose.backends import TENSOR
    from pytest_graphleak.diagnose.holders import unrooted_holder

    w = mg.Tensor([1.0], requires_grad=True)
    leaked = [(w * float(i)).sum() for i in range(3)]
    few = [leaked[0]]  # made first: first in the heap's order
    many = {"a": leaked[0], "b": leaked[1], "c": leaked[2]}
    obs = SimpleNamespace(alive=[SimpleNamespace(obj=t, kind=TENSOR) for t in leaked])
    walker = ObjectEdges(active_backends(), exclude=[id(leaked)])
    path = unrooted_holder(obs, walker)  # type: ignore[arg-type]
    assert path is not None
    try:
        assert path.objects[-2] is many and few
    finally:
        path.clear()


def test_on_a_heap_too_big_for_its_levels_the_climb_gives_way_to_the_plain_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each level of the climb compares the whole heap with the objects it climbs from:
    when that would pass ``MAX_COMPARED`` comparisons it climbs fewer levels (here none)
    and the search from the roots decides: the same chain, found by walking the
    datasets' shares too."""
    roots, leaked = _deep()
    ids = {id(obj) for obj in leaked}
    walker = ObjectEdges(active_backends())
    assert ancestors(leaked, [obj for _, obj in roots], walker) is not None  # 12 levels
    monkeypatch.setattr(search, "_tracked_objects", lambda: search.MAX_COMPARED)
    assert ancestors(leaked, [obj for _, obj in roots], walker) is None  # no level
    found = find_chain(roots, lambda o: id(o) in ids, walker, seeds=leaked)
    assert found.path is not None
    found.path.clear()
    assert found.path.root_label == "global 'TRAINER'"
    assert found.visited > 20  # the datasets were walked: no climb chose the way


@pytest.mark.parametrize("enabled", [True, False], ids=["gc-on", "gc-off"])
def test_the_search_pauses_automatic_collection_and_gives_it_back(enabled: bool) -> None:
    """A full collection set off by the search's own allocations costs seconds on a big
    heap and frees nothing the search reads: none runs during it, and gc is as it was."""
    roots, leaked = _deep()
    ids = {id(obj) for obj in leaked}
    walker = ObjectEdges(active_backends())
    seen: list[bool] = []

    def target(obj: object) -> bool:
        seen.append(gc.isenabled())
        return id(obj) in ids

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        found = find_chain(roots, target, walker, seeds=leaked)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert found.path is not None
    found.path.clear()
    assert seen and not any(seen)


KEPT_FOR_THE_READER: list[int] = [1, 2, 3]


def test_a_global_roots_module_is_found_without_a_heap_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chain's root ``global 'x'`` is read again from its module's namespace, found
    in ``sys.modules`` (a scan of a 1.5M-object heap took half of a diagnosis); a value
    bound in two modules is left to the heap scan, which finds the namespace it met."""
    kept = KEPT_FOR_THE_READER
    path = Path("global 'KEPT_FOR_THE_READER'", [kept])
    scans: list[object] = []
    real = gc.get_referrers

    def counted(*objs: object) -> list[object]:
        scans.append(objs)
        return real(*objs)

    monkeypatch.setattr(gc, "get_referrers", counted)
    reader = root_reader(path, dict)
    assert reader is not None and reader() is kept and not scans
    monkeypatch.setattr(sys.modules[__name__], "KEPT_FOR_THE_READER", [4])
    assert reader() == [4]  # rebound: read again
    monkeypatch.setattr(sys.modules[__name__], "KEPT_FOR_THE_READER", kept)
    monkeypatch.setattr(mg, "KEPT_FOR_THE_READER", kept, raising=False)  # bound twice
    reader = root_reader(path, dict)
    assert reader is not None and reader() is kept and scans
