"""Graphs growing in place on tensors made before the check (``total += loss``).

No new Python object marks such a leak, so the check must know the tensor from the
start. With ``start_scan="roots"`` (the default) it walks what the test reaches; these
tests put the long-lived tensor in each place a training loop keeps one.
"""

from __future__ import annotations

import textwrap

import pytest

import pytest_graphleak
from pytest_graphleak import tracker

torch = pytest.importorskip("torch")


def _loss(weight):
    # SumBackward0 saves no tensor: the graph grows on `total` with no new Python object,
    # so only a check that knows `total` from the start can see it.
    return weight.sum()


@pytest.fixture
def weight():
    return torch.ones(4, requires_grad=True)


def test_closure_tensor_growing_in_place_is_caught(weight) -> None:
    total = torch.zeros(())

    def step() -> None:
        nonlocal total
        total += _loss(weight)

    result = pytest_graphleak.check(step)
    assert result.leaked and result.pattern == "retained-grad-fn", result.pattern


def test_tensor_in_another_user_module_is_caught(weight, fake_module) -> None:
    stats = fake_module("graphleak_user_stats", installed=False)
    stats.total = torch.zeros(())

    def step() -> None:
        stats.total += _loss(weight)  # same tensor object, a longer graph each step

    result = pytest_graphleak.check(step)
    assert result.leaked and result.pattern == "retained-grad-fn", result.pattern


def test_tensor_held_only_by_an_installed_library_needs_the_heap_scan(weight, fake_module) -> None:
    """The trade-off, measured: the walk does not enter installed packages' globals, so
    this leak needs start_scan="heap" (--graphleak-start-scan=heap)."""
    library = fake_module("graphleak_installed_metrics", installed=True)

    def make_step(accumulator):
        def step() -> None:
            accumulator.total += _loss(weight)

        return step

    library.total = torch.zeros(())
    missed = pytest_graphleak.check(make_step(library))
    assert not missed.leaked, "the walk entered an installed package's globals"
    library.total = torch.zeros(())
    caught = pytest_graphleak.check(make_step(library), start_scan="heap")
    assert caught.leaked and caught.pattern == "retained-grad-fn", caught.pattern


def test_track_walks_the_callers_locals(weight) -> None:
    holder = {"total": torch.zeros(())}
    with pytest_graphleak.track(warmup=2) as t:
        for _ in range(18):
            holder["total"].add_(_loss(weight))  # in place: no new tensor object
            t.step()
    assert t.result is not None and t.result.leaked, t.result


def test_past_the_walk_limit_the_heap_is_scanned(weight, fake_module) -> None:
    library = fake_module("graphleak_installed_big", installed=True)
    library.total = torch.zeros(())
    dataset = [[i] for i in range(150_000)]  # more than the walk's limit

    def step() -> None:
        assert dataset
        library.total += _loss(weight)

    series = tracker.run(step, steps=16, warmup=3, roots=[dataset])
    assert series.start_scan == "heap"
    assert series.series["torch.nodes"][-1] > series.series["torch.nodes"][3] + 10


def test_a_clean_step_reaches_few_objects(weight) -> None:
    total = torch.zeros(())

    def step() -> None:
        nonlocal total
        total = total + _loss(weight).detach()

    series = tracker.run(step, steps=4, warmup=2)
    assert series.start_scan == "roots"
    assert 0 < series.start_objects < 5_000  # the test module, not the heap
    assert not pytest_graphleak.check(step).leaked


MARKED = """
import pytest
import torch

TOTAL = torch.zeros(())


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


def test_marker_finds_tensors_in_fixtures_globals_and_self(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inplace=textwrap.dedent(MARKED))
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=3)
    failed = {
        line.split()[1].rsplit("::", 1)[1]
        for line in result.stdout.lines
        if line.startswith(("FAILED ", "LEAKED "))
    }
    assert failed == {"test_fixture_dict_leaky", "test_module_global_leaky",
                      "test_attribute_leaky"}  # fmt: skip
    assert result.stdout.str().count("retained-grad-fn") >= 3


def test_a_walk_that_fails_falls_back_to_the_heap(weight, fake_module, monkeypatch) -> None:
    library = fake_module("graphleak_installed_walk_fails", installed=True)
    library.total = torch.zeros(())

    def broken(roots, **_):
        raise RuntimeError("an object the walk cannot read")

    monkeypatch.setattr(tracker, "reachable", broken)

    def step() -> None:
        library.total += _loss(weight)

    series = tracker.run(step, steps=16, warmup=3)
    assert series.start_scan == "heap"
    assert series.series["torch.nodes"][-1] > series.series["torch.nodes"][3] + 10
