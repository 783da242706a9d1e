"""The creation-site recorder, the line watch and the census run inside the user's step
(a ``TorchFunctionMode``, a trace function, a loop's ``.step()``): they never raise into
it. torch raises on reading ``grad_fn`` (or ``is_leaf``) of a view made under ``no_grad``
whose base was changed in place since, which ``nn.init.orthogonal_`` does to the weight it
fills: a marker's diagnostic steps, the audit's re-run and a ``track()`` loop keep their
outcome and tell where the graphs were made. A failure of the recorder's own is a note
that says what happened."""

from __future__ import annotations

import pytest
from suite_helpers import FAST, failure_section, folded, said_in_order

torch = pytest.importorskip("torch")

#: Every kind of no-grad view the plugin may meet in a step: ``orthogonal_``'s own (its
#: ``copy_`` returns one), and views kept alive and read after their base changed.
VIEWS = """
import pytest
import torch
from pytest_graphleak import track

KEPT = []


def make():
    lin = torch.nn.Linear(4, 4)
    torch.nn.init.orthogonal_(lin.weight)  # the default init of common RL policies
    with torch.no_grad():
        flat = lin.weight.view(16)
        turned = lin.weight.t()
        lin.weight.mul_(1.0)  # flat.grad_fn and turned.grad_fn raise from here on
    return lin, flat, turned


@pytest.mark.no_graph_growth(steps=4)
def test_marker():
    lin, flat, turned = make()
    KEPT.append((flat, turned, lin(torch.randn(2, 4)).sum()))


@pytest.mark.no_graph_growth(steps=4)
def test_marker_keeps_the_views_only():
    lin, flat, turned = make()
    KEPT.append(turned)


def test_outlives():
    lin, flat, turned = make()
    KEPT.append((flat, turned, lin(torch.randn(2, 4)).sum()))


def test_loop():
    held = []
    with pytest.raises(Exception) as info:
        with track(warmup=2, raise_on_leak=True) as t:
            for _ in range(30):
                lin, flat, turned = make()
                held.append((flat, turned, lin(torch.randn(2, 4)).sum()))
                t.step()
    print("LOOP RAISED", type(info.value).__name__)
    print(str(info.value))
"""


def test_no_grad_views_crash_no_step_and_sites_are_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_views=VIEWS)
    result = pytester.runpytest_subprocess(
        "--graphleak", "--graphleak-outlive-sites=rerun", "-s", *FAST
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=2, failed=2, warnings=1)
    assert "A view was created in no_grad mode" not in out
    assert "outlive audit failed" not in out
    # the marker's diagnostic steps ran to the end: the holder, the lines
    marker = failure_section(out, "test_marker")
    said_in_order(
        marker,
        [
            "leaks: list-accumulation",
            "held by: global 'KEPT' -> list(len=",
            "created at: test_views.py:* in test_marker: KEPT.append((flat, turned, lin(",
            "stored at: test_views.py:* in test_marker: KEPT.append(",
        ],
    )
    views = failure_section(out, "test_marker_keeps_the_views_only")
    said_in_order(
        views,
        ["held by: global 'KEPT' -> list(len=", "stored at: test_views.py:* KEPT.append(turned)"],
    )
    # the audit's re-run ran to the end too: it names the lines
    said_in_order(
        out,
        [
            "WARNING test_views.py::test_outlives*outlived the test",  # the report section's row
            "held by: global 'test_views.KEPT' -> list(len=",
            "created at: test_views.py:* in test_outlives: KEPT.append(",
            "stored at: test_views.py:* in test_outlives: KEPT.append(",
            "created at and stored at: from one more run of the test",
        ],
    )
    assert "left none in this holder" not in out
    # the loop raised its leak, not torch's error, with the lines of the recorded steps
    said_in_order(
        out,
        [
            "LOOP RAISED GraphLeakError",
            "track() leaks: list-accumulation",
            "held by: local 'held' -> list(len=",
            "created at: *test_views.py:* in make: turned = lin.weight.t()",
            "stored at: *test_views.py:* in test_loop: held.append(",
        ],
    )


#: A conftest that breaks the recorder's own rule for finding the user's line on one
#: operation (``mul``): the recorder's failure, not the step's.
BROKEN_RECORDER = """
import linecache

import pytest_graphleak.diagnose.sites as sites

_real = sites.site_and_via


def _broken(frame, *args, **kwargs):
    if frame is not None and "w * 2" in linecache.getline(frame.f_code.co_filename,
                                                          frame.f_lineno):
        raise LookupError("no site for this one")
    return _real(frame, *args, **kwargs)


sites.site_and_via = _broken
"""

BROKEN_STEPS = """
import pytest
import torch
from pytest_graphleak import track

KEPT = []


@pytest.mark.no_graph_growth(steps=4)
def test_marker():
    w = torch.ones(3, requires_grad=True)
    doubled = w * 2
    KEPT.append(doubled.sum())


def test_outlives():
    w = torch.ones(3, requires_grad=True)
    doubled = w * 2
    KEPT.append(doubled.sum())


def test_loop():
    held = []
    with pytest.raises(Exception) as info:
        with track(warmup=2, raise_on_leak=True) as t:
            for _ in range(30):
                w = torch.ones(3, requires_grad=True)
                doubled = w * 2
                held.append(doubled.sum())
                t.step()
    print("LOOP RAISED", type(info.value).__name__)
    print(str(info.value))
"""


def test_a_failing_recorder_is_a_note_not_a_crash(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BROKEN_RECORDER)
    pytester.makepyfile(test_broken=BROKEN_STEPS)
    result = pytester.runpytest_subprocess(
        "--graphleak", "--graphleak-outlive-sites=rerun", "-s", *FAST
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=2, failed=1, warnings=1)
    note = (
        "the creation-site recorder could not read what * of the step returned (first: "
        "*: LookupError: no site for this one); where those were made is unknown"
    )
    said_in_order(failure_section(out, "test_marker"), ["leaks: list-accumulation", note])
    said_in_order(
        out,
        [
            "WARNING test_broken.py::test_outlives*outlived the test",
            note,
            "created at and stored at: from one more run of the test",
        ],
    )
    said_in_order(out, ["LOOP RAISED GraphLeakError", "track() leaks: list-accumulation", note])
    assert "left none in this holder" not in out


def test_a_rerun_whose_call_raises_says_with_what(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_twice="""
        import torch

        kept = []

        def test_keeps_on_its_first_run_only():
            if kept:
                raise ValueError("the second run refuses")
            kept.append(torch.ones(2, requires_grad=True) * 2)
        """
    )
    result = pytester.runpytest_subprocess("--graphleak", "--graphleak-outlive-sites=rerun", *FAST)
    result.assert_outcomes(passed=1, warnings=1)
    assert (
        "and that run raised ValueError: the second run refuses in its call and left "
        "none in this holder: created at and stored at unknown"
    ) in folded(result.stdout.str())
