"""The warmup recording (``pytest_graphleak.probes.warmup_tensors``): what it sees, what it holds,
and torch's function-mode stack left as it was found."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pytest

from pytest_graphleak.engine import tracker
from pytest_graphleak.probes.warmup_tensors import WarmupTensors

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")


def _stack_len() -> int:
    return int(torch._C._len_torch_function_stack())


def _ids(tensors: list[object]) -> set[int]:
    try:
        return {id(t) for t in tensors}
    finally:
        tensors.clear()


def test_records_tensors_passed_to_functions_methods_and_sequences() -> None:
    a, b, c, out = torch.ones(2), torch.ones(2), torch.ones(2), torch.empty(2)
    unused = torch.ones(2)
    recorder = WarmupTensors()
    recorder.start()
    try:
        a.add_(1)  # a method, in place
        torch.cat([b, b])  # tensors inside a list argument
        torch.add(c, 1, out=out)  # a keyword argument
    finally:
        found = _ids(recorder.stop())
    assert {id(a), id(b), id(c), id(out)} <= found
    assert id(unused) not in found


def test_a_warmup_sample_runs_the_probes_unrecorded() -> None:
    # The probes read every tensor's storage in a sample; through the recording mode each
    # read was a Python call (3x the sample's cost on a BERT step). Paused while sampling,
    # recording again for the next step.
    seen: list[object] = []

    class Counting(WarmupTensors):
        def remember(self, tensor: object) -> None:
            seen.append(tensor)
            super().remember(tensor)

    used, probed = torch.ones(2), torch.ones(2)
    recorder = Counting()
    recorder.start()
    try:
        with recorder.paused():
            probed.untyped_storage()
            probed.data_ptr()
        assert seen == []
        used.add_(1)
        assert any(tensor is used for tensor in seen)
        seen.clear()
        sampler = tracker.Sampler(warmup=2, probes=["torch"])
        sampler.begin([used])
        try:
            assert sampler._recorders  # its mode above ours
            sampler.after_step()  # a warmup sample: the probes' torch calls unrecorded
            assert seen == []
        finally:
            sampler.end()
    finally:
        recorder.stop()
        seen.clear()


def test_holds_no_tensor_alive() -> None:
    recorder = WarmupTensors()
    recorder.start()
    try:
        temporary = torch.ones(3) * 2
        ref = weakref.ref(temporary)
        del temporary
        gc.collect()
        assert ref() is None
    finally:
        assert recorder.stop() == []


def test_stop_leaves_the_modes_pushed_above_it() -> None:
    class UserMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(
            self,
            func: Callable[..., object],
            types: object,
            args: Sequence[object] = (),
            kwargs: Mapping[str, object] | None = None,
        ) -> object:
            return func(*args, **(kwargs or {}))

    before = _stack_len()
    recorder = WarmupTensors()
    recorder.start()
    user: torch.overrides.TorchFunctionMode = UserMode()
    user.__enter__()  # a step that pushed a mode and did not pop it
    try:
        recorder.stop().clear()
        assert _stack_len() == before + 1
        assert torch._C._get_function_stack_at(before) is user
    finally:
        user.__exit__(None, None, None)
    assert _stack_len() == before
    recorder.stop()  # a second stop does nothing


def test_the_tracker_removes_the_mode_when_warmup_raises() -> None:
    before = _stack_len()

    def step() -> None:
        torch.ones(2).sum()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        tracker.run(step, steps=3, warmup=2)
    assert _stack_len() == before


def test_recording_only_during_warmup() -> None:
    depth: list[int] = []

    def step() -> None:
        depth.append(_stack_len())
        torch.ones(2).sum()

    before = _stack_len()
    series = tracker.run(step, steps=3, warmup=2)
    assert depth == [before + 1] * 2 + [before] * 3
    assert series.start_scan == "roots+warmup"
    series = tracker.run(step, steps=3, warmup=0)
    assert depth[-3:] == [before] * 3 and series.start_scan == "roots"
    series = tracker.run(step, steps=3, warmup=2, start_scan="heap")
    assert depth[-5:] == [before] * 5 and series.start_scan == "heap"


def test_compiled_code_runs_unchanged_while_recording() -> None:
    """While dynamo traces, the mode does nothing: the function compiles, runs and gives
    the same result as eagerly."""
    pytest.importorskip("torch._dynamo")
    weight = torch.ones(3, requires_grad=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum()

    compiled = torch.compile(f, backend="eager")
    recorder = WarmupTensors()
    recorder.start()
    try:
        value = compiled(weight)
    finally:
        recorder.stop().clear()
    assert value.item() == 6.0
