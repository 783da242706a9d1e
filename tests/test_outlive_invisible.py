"""The outlive audit changes nothing a test can observe (issue 33): no freeze, no
collection, no warning of its own making, and a failure of its own is a note, never the
test's error. gc semantics and torch's lazy import need a fresh interpreter: those runs
are subprocesses."""

from __future__ import annotations

import fnmatch
import gc
import textwrap
import types
from collections.abc import Callable

import pytest
from suite_helpers import folded

import minigrad as mg
from pytest_graphleak.outlive.census import Census

pytest_plugins = ["pytester"]

torch: types.ModuleType | None
try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

#: What users of a leak checker write: "freed after del", "count live objects".
GC_TESTS = """
import gc, weakref
import pytest
import minigrad as mg


class Trainer:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it
        self.w = mg.Tensor([1.0], requires_grad=True)


@pytest.fixture
def trainers():
    return [Trainer()]


def test_trainer_is_released(trainers):
    ref = weakref.ref(trainers[0])
    trainers.clear()
    gc.collect()
    assert ref() is None


def test_fixture_objects_are_listed(trainers):
    assert any(o is trainers[0] for o in gc.get_objects())
    assert gc.get_freeze_count() == 0


def test_user_freeze_and_unfreeze_work():
    gc.freeze()
    assert gc.get_freeze_count() > 0
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
"""


@pytest.mark.parametrize("args", [(), ("--graphleak",)], ids=["plain", "graphleak"])
def test_gc_in_tests_behaves_as_without_the_plugin(
    pytester: pytest.Pytester, args: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_gc=GC_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:randomly", *args)
    result.assert_outcomes(passed=3)


def test_the_census_freezes_and_collects_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct: no gc function that changes state is called between begin() and the end
    of the search, on the young-generation path and on the roots' path."""
    calls: list[str] = []

    def counted(name: str, original: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            calls.append(name)
            return original(*args, **kwargs)

        return call

    for name in ("freeze", "unfreeze", "collect", "disable", "enable", "set_threshold"):
        monkeypatch.setattr(gc, name, counted(name, getattr(gc, name)))
    kept: list[object] = []
    census = Census()
    census.begin()
    kept.append(mg.Tensor([1.0], requires_grad=True) * 2)
    assert census.finish()
    young = census.young()
    assert young is not None and any(obj is kept[0] for obj in young)
    young.clear()
    monkeypatch.undo()
    assert calls == []


def test_the_census_looks_at_the_whole_heap_when_the_young_generations_moved_on() -> None:
    """An older generation collected during the test: ``young(whole=True)`` lists what
    the test made from the whole heap; objects frozen during it: it cannot tell, and the
    graph is still found from a root (the audit's search)."""
    from pytest_graphleak.outlive.explain import explain
    from pytest_graphleak.outlive.found import Holder

    holder: list[object] = []
    census = Census()
    census.begin()
    holder.append(mg.Tensor([1.0], requires_grad=True) * 2)
    gc.collect()  # the user's own full collection moves the test's objects to the oldest
    assert census.finish()
    assert census.young() is None  # not among the young objects: the short walk first
    found = census.young(whole=True)
    assert found is not None and any(obj is holder[0] for obj in found)
    found.clear()
    census = Census()
    census.begin()
    holder.append(mg.Tensor([1.0], requires_grad=True) * 2)
    gc.freeze()
    try:
        assert census.finish()
        assert census.young() is None
        found_from_root = explain(
            census, [Holder("global 'H'", "m.H", holder)], nodeid="t", backends=census.backends
        )
    finally:
        gc.unfreeze()
    chains = [r.diagnosis.chain[0] for r in found_from_root.results if r.diagnosis]
    assert chains == ["global 'H'"]


@needs_torch
def test_lazy_torch_import_under_filterwarnings_error(pytester: pytest.Pytester) -> None:
    """A test that imports torch inside its body: no warning of the audit's making (the
    walk touched torch.distributed.reduce_op, whose check warns), so no teardown error."""
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(
        test_lazy=textwrap.dedent("""
        H = []

        def test_imports_torch_inside():
            import torch
            H.append(torch.ones(2, requires_grad=True).sum())

        def test_next():
            assert True
    """)
    )
    quiet = "ignore::pytest_graphleak.GraphOutliveWarning"
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly", "-W", quiet)
    result.assert_outcomes(passed=2)
    assert "FutureWarning" not in result.stdout.str()
    plain = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly", "-W", "default")
    plain.assert_outcomes(passed=2, warnings=1)  # the audit's own finding, nothing else
    plain.stdout.fnmatch_lines(["*held by: global 'test_lazy.H' -> list(len=1) -> Tensor*"])
    assert "FutureWarning" not in plain.stdout.str()


@needs_torch
def test_a_suite_that_freezes_its_heap_gets_the_full_story(pytester: pytest.Pytester) -> None:
    """conftest freezes the heap (a common startup trick); -W error: the diagnosis still
    names the holder, and the audit names what a test made in spite of the user's freeze."""
    pytester.makeconftest(
        "import gc\n\ndef pytest_configure(config):\n    gc.collect()\n    gc.freeze()\n"
    )
    pytester.makepyfile(
        test_f=textwrap.dedent("""
        import gc
        import pytest, torch
        M = torch.nn.Linear(4, 1)
        H = []

        @pytest.fixture
        def st():
            return {"l": []}

        @pytest.mark.no_graph_growth
        def test_marked(st):
            st["l"].append(M(torch.randn(2, 4)).sum())

        def test_freeze_in_test():
            gc.freeze()
            H.append(M(torch.randn(2, 4)).sum())
            gc.unfreeze()
    """)
    )
    shown = "default::pytest_graphleak.GraphOutliveWarning"
    result = pytester.runpytest_subprocess(
        "--graphleak", "-p", "no:randomly", "-W", "error", "-W", shown
    )
    result.assert_outcomes(failed=1, passed=1, warnings=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*held by: fixture 'st' -> dict?'l'? -> list(len=*) -> Tensor*",
            "*WARNING test_f.py::test_freeze_in_test  outlived the test: list-accumulation*",
            "*held by: global 'test_f.H' -> list(len=1) -> Tensor*",
        ]
    )
    assert "diagnosis failed" not in out and "audit skipped" not in out
    assert "alive before" not in out and "FutureWarning" not in out


def test_a_failure_inside_the_audit_is_a_note(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: the audit's own error never becomes the test's."""
    import importlib

    # the module (its function has the same name); the audit imports it when it runs
    explain = importlib.import_module("pytest_graphleak.outlive.explain")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(explain, "explain", broken)
    pytester.makepyfile(
        test_x=textwrap.dedent("""
        import minigrad as mg
        H = []

        def test_keeps():
            H.append(mg.Tensor([1.0], requires_grad=True) * 2)
    """)
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["graphleak: outlive audit failed in test_x.py::test_keeps: RuntimeError: boom"]
    )


def test_a_graph_built_at_a_lazy_import_is_named_for_no_test(pytester: pytest.Pytester) -> None:
    """A module first imported inside a test builds a graph at import: not the test's
    (which test imports it first depends on the order), so not named; a graph a test
    stores in a module imported before it is."""
    pytester.makepyfile(
        priors_lazy=textwrap.dedent("""
            import minigrad as mg
            BASELINE = mg.Tensor([1.0], requires_grad=True) * 2  # built at import
        """),
        kept_early=textwrap.dedent("""
            KEEP = []
        """),
        test_lazy=textwrap.dedent("""
            import minigrad as mg
            import kept_early

            def test_imports_priors_lazily():
                import priors_lazy
                assert priors_lazy.BASELINE.grad_fn is not None

            def test_stores_in_an_early_module():
                kept_early.KEEP.append(mg.Tensor([1.0], requires_grad=True) * 3)
        """),
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=2, warnings=1)
    out = folded(result.stdout.str())  # the terminal wraps at 80 columns
    assert fnmatch.fnmatch(
        out,
        "*WARNING test_lazy.py::test_stores_in_an_early_module outlived the test*kept_early.KEEP*",
    ), out
    assert "test_imports_priors_lazily outlived" not in out


@needs_torch
def test_the_census_reads_torch_under_inference_mode() -> None:
    """A test run under inference_mode (entered by a fixture): the counter is still read,
    so the census never takes every older graph for the test's."""
    assert torch is not None
    w = torch.ones(2, requires_grad=True)
    older = (w * 2).sum()
    census = Census()
    with torch.inference_mode():
        census.begin()
    made = (w * 3).sum()
    with torch.inference_mode():
        assert census.finish()
    assert census.made_during(made) and not census.made_during(older)


@needs_torch
def test_the_near_walk_reads_every_container_the_rule_names() -> None:
    """A tensor grown in place inside a deque is found as inside a list (one rule)."""
    from collections import deque

    assert torch is not None
    w = torch.ones(2, requires_grad=True)
    near = {"recent": deque([torch.zeros(())]), "plain": [torch.zeros(())]}
    census = Census()
    census.begin()
    near["recent"][0] += (w * 2).sum()
    near["plain"][0] += (w * 3).sum()
    assert census.finish()
    grown = census.grown_near([near])
    assert {id(t) for t in grown} == {id(near["recent"][0]), id(near["plain"][0])}
    grown.clear()


@needs_torch
def test_a_background_threads_graphs_are_blamed_on_no_later_test(
    pytester: pytest.Pytester,
) -> None:
    """A daemon thread keeps a bounded ring of graph-carrying outputs while unrelated
    tests run: torch numbers that thread's nodes on its own counter, so no later test is
    told it made them."""
    pytester.makepyfile(
        test_bg=textwrap.dedent("""
        import threading, time
        import torch

        M = torch.nn.Linear(4, 1)
        STOP = threading.Event()
        RING = []

        def _producer():
            while not STOP.is_set():
                RING.append(M(torch.randn(2, 4)).sum())
                if len(RING) > 5:
                    RING.pop(0)
                time.sleep(0.005)

        def test_starts_producer():
            threading.Thread(target=_producer, daemon=True).start()
            time.sleep(0.05)

        def test_innocent():
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()  # makes graph nodes of its own, keeps none
            time.sleep(0.05)

        def test_stop():
            STOP.set()
            time.sleep(0.05)
    """)
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    assert "test_innocent  outlived" not in result.stdout.str()


def test_the_census_keeps_no_mock_class_alive() -> None:
    """Each ``MagicMock`` has a class of its own that holds the mock (its magic methods'
    proxies), so a type table keyed by the type kept every mock's recorded graphs alive
    for the whole run. The census learns types without keeping such a class: the graph
    a mock recorded during a test is freed when the test drops the mock."""
    import weakref
    from unittest import mock

    from pytest_graphleak.outlive.census import TypeKinds

    kinds = TypeKinds()

    def a_test() -> tuple[Census, weakref.ref[object], weakref.ref[type]]:
        census = Census(kinds)
        census.begin()
        callback = mock.MagicMock()
        loss = (mg.Tensor([1.0], requires_grad=True) * 2).sum()
        callback.on_batch_end(loss)
        len(callback)  # a magic method: its proxy sits on the mock's own class
        assert census.finish()
        young = census.young()
        assert young is not None and any(obj is loss for obj in young)  # the look ran
        young.clear()
        return census, weakref.ref(loss), weakref.ref(type(callback))

    census, loss, its_class = a_test()
    del census
    gc.collect()
    assert its_class() is None
    assert loss() is None
