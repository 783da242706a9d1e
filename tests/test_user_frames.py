"""Warnings and exceptions from the user's step are placed at the user's line, not at
graphleak's frames that call the step (the warmup recording's ``__torch_function__``,
the tracker, the check); what pytest and ``graphleak check`` show starts from the user's
code."""

from __future__ import annotations

import io
import warnings

import pytest

from pytest_graphleak import check
from pytest_graphleak.cli.user_traceback import print_user_traceback
from pytest_graphleak.probes.warmup_tensors import WarmupTensors

torch = pytest.importorskip("torch")


def _recording() -> WarmupTensors:
    recorder = WarmupTensors()
    recorder.start()
    return recorder


def test_a_warning_torch_raises_in_cxx_is_placed_at_the_callers_line() -> None:
    source = torch.ones(2, requires_grad=True)
    recorder = _recording()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.tensor(source)  # the copy-construct UserWarning, raised in C++
            torch.nn.functional.softmax(source)  # a Python torch function's own warning
    finally:
        recorder.stop().clear()
    assert [(w.filename, w.category) for w in caught] == [(__file__, UserWarning)] * 2
    assert "copy construct" in str(caught[0].message) and "softmax" in str(caught[1].message)


def test_warning_filters_still_apply_inside_the_operation() -> None:
    source = torch.ones(2)
    recorder = _recording()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match="copy construct"):
                torch.tensor(source)
            warnings.simplefilter("ignore")
            torch.tensor(source)  # dropped, not raised again by the recording
    finally:
        recorder.stop().clear()


def test_the_commands_traceback_starts_at_the_users_frame() -> None:
    def step() -> None:
        torch.ones(3) @ torch.ones(4)  # raises during warmup, inside the recording

    with pytest.raises(RuntimeError) as raised:
        check(step, steps=2, warmup=2, raise_on_leak=True)
    shown = io.StringIO()
    print_user_traceback(raised.value, file=shown)
    text = shown.getvalue()
    assert "pytest_graphleak" not in text, text
    assert "torch.ones(3) @ torch.ones(4)" in text and "RuntimeError" in text


def test_pytest_shows_the_users_line_for_warnings_and_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_frames="""
        import pytest, torch
        w = torch.ones(3, requires_grad=True)

        @pytest.mark.no_graph_growth(steps=3, warmup=2)
        def test_copy():
            torch.tensor(w)

        def test_raise(graphleak):
            graphleak.check(lambda: torch.ones(3) @ torch.ones(4), steps=2, warmup=2)

        kept = []

        def test_recorded_loop(graphleak):  # creation sites recorded in the loop's steps
            with graphleak.track(warmup=2, steps=8) as t:
                for _ in range(10):
                    kept.append(torch.tensor(w) * w)
                    t.step()
    """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    for ours in ("warmup_tensors.py", "tracker.py", "sites.py", "op_warnings.py"):
        assert ours not in out, out
    result.stdout.fnmatch_lines(
        [
            "*test_frames.py:6: UserWarning: To copy construct*",
            "*test_frames.py:16: UserWarning: To copy construct*",
        ]
    )
