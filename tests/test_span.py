"""What a check measured, in one set of words (``report.span``), and charts whose x axis
is in steps when a long run was sampled every k-th step."""

from __future__ import annotations

import re

import pytest

from pytest_graphleak.report.span import head_label, span_text, step_numbers
from pytest_graphleak.report.svg import series_chart
from pytest_graphleak.result import CheckResult, Verdict


def _check(steps: int = 0, warmup: int = 0, **fields: object) -> CheckResult:
    """A check's result with these counts (what ``report.span`` words)."""
    verdict = Verdict(leaked=False)
    return CheckResult("t", steps, warmup, {}, {}, verdict, **fields)  # type: ignore[arg-type]


def test_a_check_sampled_after_every_step() -> None:
    check = _check(steps=16, warmup=3)
    assert span_text(check) == "16 measured steps after 3 warmup steps"
    assert span_text(check, short=True) == "16 steps after 3 warmup"
    assert head_label(check) == "warmup" and step_numbers(check, 4) == [1, 2, 3, 4]
    assert span_text(_check(steps=16, warmup=0)) == "16 measured steps"


def test_window_mode_names_its_baseline_and_stride() -> None:
    first = _check(steps=100, warmup=1, warmup_steps=3, sample_every=20)
    assert span_text(first) == "100 measured steps after 3 warmup steps, sampled every 20 steps"
    later = _check(steps=100, warmup=1, warmup_steps=0, sample_every=20)
    assert span_text(later, short=True) == (
        "100 steps after the window before, sampled every 20 steps"
    )
    assert head_label(first) == head_label(later) == "baseline"
    # a series shorter than the steps listed (a probe started late) lines up with their end
    assert step_numbers(_check(sample_steps=[103, 123, 143]), 2) == [123, 143]


def test_a_strided_series_is_drawn_and_labelled_in_steps() -> None:
    svg = series_chart(
        [5.0, 7.0, 9.0, 11.0],
        warmup=1,
        title="m",
        unit="objects",
        steps=[3, 23, 43, 63],
        head="baseline",
    )
    assert re.findall(r"<title>step (\d+) \((\w+)\)", svg) == [
        ("3", "warmup"),
        ("23", "measured"),
        ("43", "measured"),
        ("63", "measured"),
    ]
    assert "baseline: the sample after step 3" in svg
    labels = re.findall(r'y="([\d.]+)" text-anchor="\w+">((?:step )?\d+)<', svg)
    bottom = max(float(y) for y, _ in labels)
    ticks = [text for y, text in labels if float(y) == bottom]  # the x axis
    assert ticks == ["step 3", "20", "40", "63"]  # round step numbers between the ends
    xs = [float(x) for x in re.findall(r'<circle class="series" cx="([\d.]+)"', svg)]
    # equal gaps in steps, equal gaps on the axis (to the drawing's 0.1 px rounding)
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.2)
    unstrided = series_chart([1.0, 2.0, 3.0], warmup=1, title="m", unit="objects")
    assert "warmup: step 1 is not judged" in unstrided and "step 1 (warmup)" in unstrided
    three = series_chart([1.0, 2.0, 3.0, 4.0], warmup=3, title="m", unit="objects")
    assert "warmup: steps 1-3 are not judged" in three


def test_one_step_is_a_step() -> None:
    """Counts of one read in the singular (round4/minor_text #5, "1 steps")."""
    assert span_text(_check(steps=1, warmup=1)) == "1 measured step after 1 warmup step"
    assert span_text(_check(steps=1, warmup=1), short=True) == "1 step after 1 warmup"
