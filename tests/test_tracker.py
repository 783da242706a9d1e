"""The tracker: calls, samples, gc state restored, step errors, O(new objects) sampling."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from suite_helpers import GcState, gc_state

from pytest_graphleak import check
from pytest_graphleak.engine import tracker

mg = pytest.importorskip("minigrad")


def test_run_calls_warmup_plus_steps_and_samples_each_call(restore_gc: GcState) -> None:
    kept: list[object] = []
    calls = []

    def step() -> None:
        calls.append(gc.isenabled())
        kept.append(mg.Tensor(np.ones(2), requires_grad=True) * 2)

    series = tracker.run(step, steps=5, warmup=2, probes=["minigrad", "gc"])
    assert len(calls) == 7 and not any(calls)  # automatic gc is off while measuring
    values = series.series["minigrad.tensors"]
    assert len(values) == 7
    assert np.all(np.diff(values) >= 1)
    assert series.units["minigrad.tensors"] == "objects"
    assert series.series["gc.cyclic_garbage"] == [0.0] * 7
    assert gc_state() == restore_gc


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt])
def test_gc_state_restored_when_a_step_raises(restore_gc: GcState, exc_type: type) -> None:
    gc.set_threshold(1234, 11, 12)
    gc.set_debug(gc.DEBUG_STATS)
    gc.disable()
    expected = gc_state()
    calls = [0]

    def step() -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise exc_type("boom")

    with pytest.raises(exc_type) as info:
        tracker.run(step, steps=5, warmup=2)
    assert gc_state() == expected
    if exc_type is ValueError:
        assert getattr(info.value, "graphleak_step", None) == 4
        notes = getattr(info.value, "__notes__", [])
        assert notes == ["graphleak: raised at step 4 of 7 (measured step; warmup=2)"]


def test_objects_frozen_before_the_check_stay_frozen(restore_gc: GcState) -> None:
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    tracker.run(lambda: None, steps=2, warmup=1, probes=["process"])
    assert gc.get_freeze_count() == frozen  # the tracker froze nothing on top of theirs
    gc.unfreeze()


def test_user_frozen_heap_still_catches_leaks_and_passes_clean_steps(restore_gc: GcState) -> None:
    """With objects frozen by the user the tracker samples the whole unfrozen heap: counts
    must be exact (no frozen baseline counted twice, nothing missed)."""
    from pytest_graphleak import pipeline
    from pytest_graphleak.settings import Settings

    torch = pytest.importorskip("torch")
    weights = torch.ones(3, requires_grad=True)
    gc.collect()
    gc.freeze()  # e.g. a forking server after start-up; `weights` is frozen now
    alive_before = (torch.zeros(2), mg.Tensor(np.ones(2)))  # alive, unfrozen, constant
    frozen = gc.get_freeze_count()
    kept: list[object] = []

    def clean() -> None:
        (weights * 2.0).sum().backward()
        (mg.Tensor(np.ones(2), requires_grad=True) * 2).sum().backward()

    def leaky() -> None:
        kept.append((weights * 2.0).sum())  # one tensor + its graph per step

    settings = Settings(steps=8, warmup=2, diagnose=False)
    ok = pipeline.measure(clean, settings=settings, name="clean")
    assert not ok.leaked, ok.verdict.reason
    for metric in ("torch.tensors", "torch.nodes", "minigrad.tensors", "minigrad.nodes"):
        assert len(set(ok.series[metric][2:])) == 1, (metric, ok.series[metric])
    gc.collect()
    unfrozen = sum(isinstance(obj, torch.Tensor) for obj in gc.get_objects())
    assert ok.series["torch.tensors"][-1] == unfrozen  # each counted once, frozen ones not
    assert gc.get_freeze_count() == frozen

    bad = pipeline.measure(leaky, settings=settings, name="leaky")
    assert bad.leaked and bad.verdict.pattern == "list-accumulation", bad.verdict.reason
    tensors = bad.series["torch.tensors"]
    assert np.diff(tensors).tolist() == [1.0] * 9, tensors  # exactly one more per step
    assert gc.get_freeze_count() == frozen
    kept.clear()
    assert alive_before[0].shape == (2,)


def test_sampling_sees_only_objects_created_since_the_freeze(restore_gc: GcState) -> None:
    ballast = [[i] for i in range(200_000)]  # a big heap the samples must not scan
    seen: list[int] = []

    def step() -> None:
        seen.append(len(gc.get_objects()))

    tracker.run(step, steps=3, warmup=2, probes=["process"])
    assert max(seen) < 20_000, seen  # the 200k ballast lists are frozen, not scanned
    assert len(ballast) == 200_000


def test_bad_steps_and_warmup_are_refused_once_before_the_tracker() -> None:
    """The options table checks them (issue 46: once); the tracker trusts ``Settings``."""
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 0"):
        check(lambda: None, steps=0, warmup=1)
    with pytest.raises(ValueError, match="warmup must be an integer >= 0, got -1"):
        check(lambda: None, steps=3, warmup=-1)
    with pytest.raises(ValueError, match="got True"):
        check(lambda: None, steps=True, warmup=1)
