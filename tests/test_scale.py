"""Honest pictures: each metric on its own range (a noisy one's jitter below one step's
tolerance stays a ripple), long series fit in 40 cells, ticks are round numbers."""

from __future__ import annotations

import math

from pytest_graphleak.pipeline import declarations
from pytest_graphleak.probes import METRICS
from pytest_graphleak.probes.cuda_probe import byte_metrics
from pytest_graphleak.report.scale import (
    SPARK_WIDTH,
    min_span,
    sparkline,
    step_ticks,
    ticks,
    value_range,
)
from pytest_graphleak.settings import Settings

MIB = 1024.0 * 1024.0


def noise_of(metric: str, tolerance: float = MIB) -> float:
    """The noise a check with this RSS tolerance keeps for ``metric`` (its declaration's
    tolerance, as ``pipeline.declarations`` writes it on the result)."""
    declared = {
        **METRICS,
        **{m.name: m for m in byte_metrics("cuda.allocated_bytes.1", "cuda.reserved_bytes.1")},
    }
    return declarations(declared, Settings(rss_tolerance=tolerance))[metric].tolerance


def test_rss_jitter_draws_flat() -> None:
    # graphleak demo's fixed run: RSS moves by 12 KiB on 50 MiB; RSS is noisy.
    values = [50 * MIB + (12 * 1024 if i > 8 else 0) for i in range(19)]
    assert sparkline(values, "bytes", noise=noise_of("process.rss_bytes")) == "▁" * 19


def test_byte_growth_of_the_tolerance_per_step_draws_a_ramp() -> None:
    values = [50 * MIB + i * MIB for i in range(19)]
    line = sparkline(values, "bytes", noise=MIB)
    assert line[0] == "▁" and line[-1] == "█"


def test_exact_bytes_are_drawn_on_their_own_range() -> None:
    """torch.storage_bytes 88 B -> 148 B is a leak the verdict flags: drawn growing."""
    assert noise_of("torch.storage_bytes") == 0.0
    storage = sparkline([88.0 + 4 * i for i in range(16)], "bytes", noise=0.0)
    assert storage[0] == "▁" and storage[-1] == "█"
    assert value_range([88.0, 148.0], "bytes") == (88.0, 148.0)


def test_which_metrics_are_noisy() -> None:
    assert noise_of("process.rss_bytes", 2.0) == 2.0
    assert noise_of("cuda.reserved_bytes") == MIB
    assert noise_of("cuda.reserved_bytes.1") == MIB  # a per-GPU name reads as its total
    assert noise_of("cuda.allocated_bytes.1") == 0.0
    assert noise_of("minigrad.tensors") == 0.0


def test_counts_one_object_is_a_full_step_and_flat_is_flat() -> None:
    assert sparkline([1, 2, 3, 4]) == "▁▃▆█"
    assert sparkline([5, 5]) == "▁▁"
    assert sparkline([5, 6, 5, 6]) == "▁█▁█"  # one object is real for a count
    assert sparkline([]) == ""


def test_long_series_fit_in_forty_cells_with_the_warmup_mark() -> None:
    values = [float(i) for i in range(203)]
    line = sparkline(values, warmup=3)
    assert len(line) == SPARK_WIDTH + 1
    assert line.index("|") == 1  # 3 of 203 warmup calls fall in the first cell
    assert line[0] == "▁" and line[-1] == "█"


def test_warmup_mark_and_missing_values() -> None:
    assert sparkline([1, 2, 3, 4], warmup=2) == "▁▃|▆█"
    assert sparkline([math.nan, 1.0, 2.0]) == " ▁█"


def test_value_range_widens_to_the_minimum_span() -> None:
    assert value_range([10.0, 10.0], "objects") == (10.0, 11.0)
    assert value_range([0.0, 100.0], "bytes", MIB) == (0.0, MIB)
    assert value_range([0.0, 100.0], "bytes") == (0.0, 100.0)
    assert value_range([math.nan], "objects") is None
    assert min_span(MIB) == MIB and min_span() == 1.0


def test_ticks_are_round() -> None:
    assert ticks(0, 100, "objects") == [0, 20, 40, 60, 80, 100]
    assert ticks(6, 78, "objects") == [20, 40, 60]
    assert ticks(0, 18 * MIB, "bytes") == [0, 8 * MIB, 16 * MIB]
    assert ticks(5, 5, "objects") == [5]


def test_a_few_round_step_ticks() -> None:
    assert step_ticks(19) == [1, 5, 10, 15, 19]
    assert step_ticks(203) == [1, 50, 100, 150, 203]
    assert step_ticks(2) == [1, 2] and step_ticks(1) == [1] and step_ticks(0) == []
