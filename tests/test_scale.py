"""Honest pictures: jitter below a unit's minimum span draws flat, long series fit in
40 cells, ticks are round numbers."""

from __future__ import annotations

import math

from pytest_graphleak.report.scale import SPARK_WIDTH, min_span, sparkline, ticks, value_range

MIB = 1024.0 * 1024.0


def test_rss_jitter_draws_flat() -> None:
    # graphleak demo's fixed run: RSS moves by 12 KiB on 50 MiB.
    values = [50 * MIB + (12 * 1024 if i > 8 else 0) for i in range(19)]
    assert sparkline(values, "bytes") == "▁" * 19


def test_byte_growth_of_the_tolerance_per_step_draws_a_ramp() -> None:
    values = [50 * MIB + i * MIB for i in range(19)]
    line = sparkline(values, "bytes")
    assert line[0] == "▁" and line[-1] == "█"


def test_four_bytes_per_step_is_not_drawn_like_a_graph_leak() -> None:
    storage = sparkline([88.0 + 4 * i for i in range(19)], "bytes")
    nodes = sparkline([18.0 + 7 * i for i in range(19)], "objects")
    assert set(storage) == {"▁"}
    assert nodes[-1] == "█"


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
    assert value_range([0.0, 100.0], "bytes") == (0.0, MIB)
    assert value_range([math.nan], "objects") is None
    assert min_span("bytes", 19) == 18 * MIB


def test_ticks_are_round() -> None:
    assert ticks(0, 100, "objects") == [0, 20, 40, 60, 80, 100]
    assert ticks(6, 78, "objects") == [20, 40, 60]
    assert ticks(0, 18 * MIB, "bytes") == [0, 8 * MIB, 16 * MIB]
    assert ticks(5, 5, "objects") == [5]
