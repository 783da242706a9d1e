"""Graphs growing in place on tensors made before the check (``total += loss``).

No new Python object marks such a leak, so the check must know the tensor from the
start. With ``start_scan="roots"`` (the default) and warmup >= 1 it walks a little of what
the test reaches and records the tensors the warmup steps use in torch operations; with
warmup = 0 it walks further, then scans the heap. These tests put the long-lived tensor
in each place a training loop keeps one, with the walk completing and with the walk
giving up (a big dataset reachable: the recording alone must find the tensor).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import pytest
from suite_helpers import FakeModule, MakeModule

import pytest_graphleak
from pytest_graphleak.engine import tracker

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")


def _loss(weight: torch.Tensor) -> torch.Tensor:
    # SumBackward0 saves no tensor: the graph grows on `total` with no new Python object,
    # so only a check that knows `total` from the start can see it.
    return weight.sum()


@pytest.fixture
def weight() -> torch.Tensor:
    return torch.ones(4, requires_grad=True)


#: More objects than the short walk takes (tracker.RECORDING_WALK_LIMIT): a test that
#: reaches it makes the start set come from the warmup recording alone.
BIG = 2 * tracker.RECORDING_WALK_LIMIT


def _dataset(big: bool) -> list[list[int]]:
    return [[i] for i in range(BIG)] if big else []


@pytest.fixture(params=[False, True], ids=["walk", "walk-gives-up"])
def big(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _caught(result: pytest_graphleak.CheckResult) -> None:
    assert result.leaked and result.pattern == "retained-grad-fn", result.pattern


def test_closure_tensor_growing_in_place_is_caught(weight: torch.Tensor, big: bool) -> None:
    total = torch.zeros(())
    dataset = _dataset(big)

    def step() -> None:
        nonlocal total
        assert dataset is not None
        total += _loss(weight)

    _caught(pytest_graphleak.check(step))


def test_tensor_in_another_user_module_is_caught(
    weight: torch.Tensor, fake_module: MakeModule, big: bool
) -> None:
    stats = fake_module("graphleak_user_stats", installed=False)
    stats.total = torch.zeros(())
    stats.dataset = _dataset(big)

    def step() -> None:
        stats.total += _loss(weight)  # same tensor object, a longer graph each step

    _caught(pytest_graphleak.check(step))


def test_tensor_held_only_by_an_installed_library_is_caught_by_the_recording(
    weight: torch.Tensor, fake_module: MakeModule
) -> None:
    """The walk does not enter installed packages' globals; the warmup recording sees
    the tensor because the step uses it. Without warmup, only the heap scan finds it
    (start_scan="heap", --graphleak-start-scan=heap)."""
    library = fake_module("graphleak_installed_metrics", installed=True)

    def make_step(accumulator: FakeModule) -> Callable[[], None]:
        def step() -> None:
            accumulator.total += _loss(weight)

        return step

    library.total = torch.zeros(())
    _caught(pytest_graphleak.check(make_step(library)))
    library.total = torch.zeros(())
    missed = pytest_graphleak.check(make_step(library), warmup=0)
    assert not missed.leaked, "the walk entered an installed package's globals"
    library.total = torch.zeros(())
    _caught(pytest_graphleak.check(make_step(library), warmup=0, start_scan="heap"))


def test_track_walks_the_callers_locals(weight: torch.Tensor, big: bool) -> None:
    holder = {"total": torch.zeros(())}
    dataset = _dataset(big)
    with pytest_graphleak.track(warmup=2) as t:
        for _ in range(18):
            holder["total"].add_(_loss(weight))  # in place: no new tensor object
            t.step()
    assert dataset is not None
    assert t.result is not None and t.result.leaked, t.result
    assert t.result.pattern == "retained-grad-fn", t.result.pattern


def test_past_the_walk_limit_without_warmup_the_heap_is_scanned(
    weight: torch.Tensor, fake_module: MakeModule
) -> None:
    library = fake_module("graphleak_installed_big", installed=True)
    library.total = torch.zeros(())
    dataset = [[i] for i in range(150_000)]  # more than the walk's limit

    def step() -> None:
        assert dataset
        library.total += _loss(weight)

    series = tracker.run(step, steps=16, warmup=0, roots=[dataset])
    assert series.start_scan == "heap"
    assert series.series["torch.nodes"][-1] > series.series["torch.nodes"][0] + 10


def test_past_the_short_walk_the_warmup_recording_is_the_start_set(
    weight: torch.Tensor, fake_module: MakeModule
) -> None:
    library = fake_module("graphleak_installed_big_recorded", installed=True)
    library.total = torch.zeros(())
    dataset = _dataset(True)

    def step() -> None:
        assert dataset
        library.total += _loss(weight)

    series = tracker.run(step, steps=16, warmup=3, roots=[dataset])
    assert series.start_scan == "warmup" and series.start_objects == 0
    # library.total, which only the recording found, is seen growing its graph in place.
    assert series.series["torch.nodes"][-1] > series.series["torch.nodes"][3] + 10
    assert len(series.notes) == 1 and "gave up past 10,000 objects" in series.notes[0]


def test_the_recording_alone_says_what_it_cannot_see(weight: torch.Tensor) -> None:
    """A tensor the step touches only after warmup is outside the recording: the clean
    verdict says so, and the heap scan finds the leak."""
    dataset = _dataset(True)
    total = torch.zeros(())
    calls = 0

    def step() -> None:
        nonlocal calls
        calls += 1
        assert dataset
        if calls > 3:  # only in the measured steps
            total.add_(_loss(weight))

    missed = pytest_graphleak.check(step, warmup=3)
    assert not missed.leaked
    assert "touch would not be seen" in missed.verdict.reason, missed.verdict.reason
    assert "start_scan='heap'" in missed.verdict.reason
    calls = 0
    _caught(pytest_graphleak.check(step, warmup=3, start_scan="heap"))


def test_a_complete_walk_adds_no_note(weight: torch.Tensor) -> None:
    total = torch.zeros(())

    def step() -> None:
        nonlocal total
        total += _loss(weight)

    series = tracker.run(step, steps=4, warmup=2)
    assert series.start_scan == "roots+warmup" and not series.notes


def test_minigrad_growth_needs_no_start_set(big: bool) -> None:
    """minigrad's probe counts every alive tensor and node (mg.stats()): a graph growing
    on an older minigrad tensor is caught however the torch start set was found."""
    mg = pytest.importorskip("minigrad")
    w = mg.Tensor([1.0, 2.0], requires_grad=True)
    state = {"total": mg.Tensor(0.0)}
    dataset = _dataset(big)

    def step() -> None:
        assert dataset is not None
        state["total"] = state["total"] + (w * w).sum()

    result = pytest_graphleak.check(step)
    assert result.leaked and result.pattern == "retained-grad-fn", result.pattern


def test_a_clean_step_reaches_few_objects(weight: torch.Tensor) -> None:
    total = torch.zeros(())

    def step() -> None:
        nonlocal total
        total = total + _loss(weight).detach()

    series = tracker.run(step, steps=4, warmup=2)
    assert series.start_scan == "roots+warmup"
    assert 0 < series.start_objects < 5_000  # the test module, not the heap
    assert not pytest_graphleak.check(step).leaked


MARKED = """
import pytest
import torch

TOTAL = torch.zeros(())
DATASET = [[i] for i in range({size})]


def loss_of(weight):
    return weight.sum()


@pytest.fixture
def weight():
    return torch.ones(4, requires_grad=True)


@pytest.fixture
def running():
    return {"total": torch.zeros(())}


@pytest.mark.no_graph_growth
def test_fixture_dict_leaky(running, weight):
    running["total"] += loss_of(weight)


@pytest.mark.no_graph_growth
def test_fixture_dict_fixed(running, weight):
    running["total"] += loss_of(weight).item()


@pytest.mark.no_graph_growth
def test_module_global_leaky(weight):
    global TOTAL
    TOTAL += loss_of(weight)


class TestOnSelf:
    def setup_method(self):
        self.total = torch.zeros(())

    @pytest.mark.no_graph_growth
    def test_attribute_leaky(self, weight):
        self.total += loss_of(weight)

    @pytest.mark.no_graph_growth
    def test_attribute_fixed(self, weight):
        self.total += loss_of(weight).detach()
"""


def test_marker_finds_tensors_in_fixtures_globals_and_self(
    pytester: pytest.Pytester, big: bool
) -> None:
    pytester.makepyfile(test_inplace=textwrap.dedent(MARKED).replace("{size}", str(BIG * big)))
    # Past the walk limit the start scan falls back to the whole heap: in a subprocess, so
    # that it scans a fresh process's heap, not this one's. The walk alone runs in-process.
    run = pytester.runpytest_subprocess if big else pytester.runpytest
    result = run("--graphleak", "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=3)
    failed = {
        line.split()[1].rsplit("::", 1)[1]
        for line in result.stdout.lines
        if line.startswith(("FAILED ", "LEAKED "))
    }
    assert failed == {"test_fixture_dict_leaky", "test_module_global_leaky", "test_attribute_leaky"}
    assert result.stdout.str().count("retained-grad-fn") >= 3


def test_a_walk_that_fails_falls_back_to_the_heap_or_the_recording(
    weight: torch.Tensor, fake_module: MakeModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = fake_module("graphleak_installed_walk_fails", installed=True)
    library.total = torch.zeros(())

    def broken(roots: object, **_: object) -> NoReturn:
        raise RuntimeError("an object the walk cannot read")

    monkeypatch.setattr(tracker, "reachable", broken)

    def step() -> None:
        library.total += _loss(weight)

    series = tracker.run(step, steps=16, warmup=0)
    assert series.start_scan == "heap"
    assert series.series["torch.nodes"][-1] > series.series["torch.nodes"][0] + 10
    library.total = torch.zeros(())
    series = tracker.run(step, steps=16, warmup=3)  # the recording alone finds it
    assert series.start_scan == "warmup"
    assert series.series["torch.nodes"][-1] > series.series["torch.nodes"][3] + 10
