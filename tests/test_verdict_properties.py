"""Property tests of the verdict (issue 7): what any rule worth trusting must say.

- a series that rises by at least one unit every ``k`` measured steps, for any ``k`` up to
  ``steps / 3``, is a leak;
- a series that is flat after a bounded prefix (anything during warmup and the first half
  of the measured steps) is clean;
- a periodic series (period up to ``max(3, steps / 3)``: gradient accumulation, a
  bounded queue), cut at any phase, is clean;
- noisy bytes (RSS) leak when their growth beats the tolerance per step despite the
  noise, and are clean when growth plus noise stays below it.

Whatever happens during warmup is arbitrary in every case. ``judge`` is pure, so these
run on hand-made series without a heap.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_graphleak.probes import METRICS
from pytest_graphleak.result import Verdict
from pytest_graphleak.verdict import Limits, judge

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OBJECT_METRICS = ("minigrad.tensors", "minigrad.nodes", "torch.tensors", "torch.nodes")
UNITS = METRICS  # what the probes declare, by name

counts = st.integers(min_value=0, max_value=10**6)
metrics = st.sampled_from(OBJECT_METRICS)
MIB = 1024 * 1024
RSS = "process.rss_bytes"
RSS_LIMITS = Limits(noise=MIB)


@st.composite
def warmup_prefix(draw: st.DrawFn) -> list[int]:
    """Any warmup samples at all: lazy state, caches filling, first backward."""
    return draw(st.lists(counts, min_size=0, max_size=12))


@st.composite
def staircase(
    draw: st.DrawFn, max_k: int | None = None, min_steps: int = 6
) -> tuple[list[int], int, int]:
    """(series, warmup, k): measured samples that rise >= 1 unit every k steps.

    Built from rise positions with gaps of at most ``k``; each rise is large enough that a
    bounded periodic wobble added on top keeps ``m[i + k] >= m[i] + 1`` for every ``i``.
    """
    steps = draw(st.integers(min_value=min_steps, max_value=64))
    k = draw(st.integers(min_value=1, max_value=min(steps // 3, max_k or steps)))
    wobble_period = draw(st.integers(min_value=1, max_value=4))
    wobble = draw(st.lists(st.integers(0, 3), min_size=wobble_period, max_size=wobble_period))
    spread = max(wobble) - min(wobble)
    rises = set()
    position = draw(st.integers(min_value=1, max_value=k))
    while position < steps:
        rises.add(position)
        position += draw(st.integers(min_value=1, max_value=k))
    level = draw(counts)
    measured = []
    for i in range(steps):
        if i in rises:
            level += spread + draw(st.integers(min_value=1, max_value=5))
        measured.append(level + wobble[i % wobble_period])
    # the property's premise, stated once more so a generator bug cannot hide
    assert all(measured[i + k] >= measured[i] + 1 for i in range(steps - k))
    prefix = draw(warmup_prefix())
    return prefix + measured, len(prefix), k


@st.composite
def flat_after_prefix(draw: st.DrawFn) -> tuple[list[int], int]:
    """Arbitrary warmup and first half of the measured steps, then one constant value."""
    steps = draw(st.integers(min_value=4, max_value=64))
    settle = draw(st.integers(min_value=0, max_value=steps // 2))
    head = draw(st.lists(counts, min_size=settle, max_size=settle))
    value = draw(counts)
    prefix = draw(warmup_prefix())
    return prefix + head + [value] * (steps - settle), len(prefix)


@st.composite
def periodic(draw: st.DrawFn) -> tuple[list[int], int]:
    """Arbitrary warmup, then one pattern repeated (period <= max(3, steps / 3)), any phase.

    From 5 samples on: with warmup=0 the first is the baseline, leaving 4 measured steps,
    the fewest in which a period of 3 is told from a leak of one object per step.
    """
    steps = draw(st.integers(min_value=5, max_value=64))
    period = draw(st.integers(min_value=1, max_value=max(3, steps // 3)))
    base = draw(counts)
    pattern = [
        base + d for d in draw(st.lists(st.integers(0, 50), min_size=period, max_size=period))
    ]
    phase = draw(st.integers(min_value=0, max_value=period - 1))
    prefix = draw(warmup_prefix())
    measured = [pattern[(i + phase) % period] for i in range(steps)]
    return prefix + measured, len(prefix)


def verdict_of(metric: str, series: list[int], warmup: int) -> Verdict:
    return judge({metric: series}, UNITS, warmup=warmup)


# ------------------------------------------------------------------ leaks


@SETTINGS
@given(staircase(max_k=3, min_steps=12), metrics)
@example(([0] * 3 + list(range(10)), 3, 1), "minigrad.tensors")  # one per step
@example(([0] + [i // 3 for i in range(30)], 1, 3), "torch.nodes")  # every third step
def test_rising_every_three_steps_or_faster_is_a_leak(
    case: tuple[list[int], int, int], metric: str
) -> None:
    """The issue-3 promise (every step, every 2nd or 3rd) also names the pattern."""
    series, warmup, k = case
    verdict = verdict_of(metric, series, warmup)
    assert verdict.leaked, (k, series, verdict.reason)
    assert [g.metric for g in verdict.growths] == [metric]
    assert verdict.pattern in ("list-accumulation", "retained-grad-fn")


@SETTINGS
@given(staircase(), metrics)
@example(([0] * 3 + [i // 10 for i in range(30)], 3, 10), "minigrad.tensors")
@example(([0] * 3 + [i // 5 for i in range(16)], 3, 5), "torch.tensors")  # default steps
@example(([9] + [i // 2 for i in range(6)], 1, 2), "torch.nodes")  # fewest steps for k=2
def test_rising_every_k_steps_up_to_a_third_of_the_steps_is_a_leak(
    case: tuple[list[int], int, int], metric: str
) -> None:
    series, warmup, k = case
    verdict = verdict_of(metric, series, warmup)
    assert verdict.leaked, (k, series, verdict.reason)


# ------------------------------------------------------------------ clean


@SETTINGS
@given(flat_after_prefix(), metrics)
@example(([5, 9, 2] + [100] * 20, 3), "torch.tensors")
@example(([0] + list(range(10)) + [10] * 10, 1), "minigrad.nodes")  # settles at mid-run
def test_flat_after_a_bounded_prefix_is_clean(case: tuple[list[int], int], metric: str) -> None:
    series, warmup = case
    verdict = verdict_of(metric, series, warmup)
    assert not verdict.leaked, (series, warmup, verdict.reason)
    assert verdict.growths == []


@SETTINGS
@given(periodic(), metrics)
@example(([0, 0] + [0, 1, 2, 3] * 5, 2), "minigrad.tensors")  # gradient accumulation, 4 steps
@example(([0, 0, 0] + [0, 1, 2, 3, 4] * 3 + [0], 3), "torch.nodes")  # period steps // 3
@example(([0, 0, 0] + [3, 4, 0, 1, 2] * 3 + [3], 3), "torch.nodes")  # ends mid-period
def test_periodic_is_clean(case: tuple[list[int], int], metric: str) -> None:
    series, warmup = case
    verdict = verdict_of(metric, series, warmup)
    assert not verdict.leaked, (series, warmup, verdict.reason)


@SETTINGS
@given(
    steps=st.integers(min_value=3, max_value=64),
    warmup=st.integers(min_value=0, max_value=5),
    growth=st.integers(min_value=0, max_value=8 * MIB),
    noise=st.lists(st.integers(0, 2 * MIB), min_size=1, max_size=7),
)
def test_noisy_bytes_leak_only_when_growth_beats_the_tolerance(
    steps: int, warmup: int, growth: int, noise: list[int]
) -> None:
    """RSS = steady growth + allocator noise (any bounded pattern, any warmup)."""
    spread = max(noise) - min(noise)
    series = [float(500 * MIB + growth * i + noise[i % len(noise)]) for i in range(warmup + steps)]
    verdict = judge({RSS: series}, UNITS, warmup=warmup, limits=RSS_LIMITS)
    if growth - spread >= MIB:  # every step rises by at least the tolerance, noise or not
        assert verdict.leaked, (growth, noise, steps)
    elif growth + spread < MIB:  # no stretch of steps rises by the tolerance per step
        assert not verdict.leaked, (growth, noise, steps)


@SETTINGS
@given(staircase(max_k=3, min_steps=12), st.lists(counts, min_size=3, max_size=3))
def test_one_leaking_metric_among_clean_ones_is_named_alone(
    leak: tuple[list[int], int, int], levels: list[int]
) -> None:
    """Judging several metrics together changes nothing: only the rising one is named."""
    series_leak, warmup, _ = leak
    n = len(series_leak)
    series = {
        "torch.nodes": series_leak,
        "torch.tensors": [levels[0]] * n,
        "minigrad.tensors": [levels[1]] * n,
        "process.rss_bytes": [levels[2] << 20] * n,
    }
    verdict = judge(series, UNITS, warmup=warmup)
    assert verdict.leaked
    assert [g.metric for g in verdict.growths] == ["torch.nodes"]
    assert verdict.pattern == "retained-grad-fn"


@SETTINGS
@given(flat_after_prefix(), metrics)
def test_the_verdict_is_pure(case: tuple[list[int], int], metric: str) -> None:
    """Same input, same verdict, and the input is left untouched."""
    series, warmup = case
    before = list(series)
    first = verdict_of(metric, series, warmup)
    assert verdict_of(metric, series, warmup) == first
    assert series == before


# ------------------------------------------- noisy bytes: one dip of older memory freed
# A buffer made before the judged steps and freed during them (an earlier test's, or pages
# the allocator hands back) lowers every later sample of a memory metric by ``dip``.

MALLOC = "process.malloc_bytes"
BYTE_METRICS = st.sampled_from((RSS, MALLOC))


def lowered(series: list[float], at: int, dip: float) -> list[float]:
    return [v - dip if i >= at else v for i, v in enumerate(series)]


@SETTINGS
@given(
    steps=st.integers(min_value=5, max_value=64),
    warmup=st.integers(min_value=0, max_value=5),
    growth=st.integers(min_value=MIB, max_value=8 * MIB),
    dip=st.integers(min_value=0, max_value=2**34),
    where=st.floats(min_value=0.0, max_value=1.0),
    metric=BYTE_METRICS,
)
@example(steps=6, warmup=2, growth=MIB, dip=64 * MIB, where=0.3, metric=MALLOC)
def test_a_memory_leak_is_caught_whatever_older_memory_is_freed_during_it(
    steps: int, warmup: int, growth: int, dip: int, where: float, metric: str
) -> None:
    """Growth of the tolerance a step (malloc's count: a KiB less, as its count may show),
    with one free of any size of memory older than the judged steps, anywhere in them."""
    short = 1024 if metric == MALLOC else 0
    series = [float(500 * MIB + (growth - short) * i) for i in range(warmup + steps)]
    at = warmup + min(steps - 1, int(where * steps))
    verdict = judge(
        {metric: lowered(series, at, dip)}, UNITS, warmup=warmup, limits=Limits(noise=growth)
    )
    # Freed: none, or more than the series grew over its measured steps and a step's
    # tolerance. Less only shortens the dip's step (not promised).
    if dip == 0 or dip > (steps + 1) * growth:
        assert verdict.leaked, (steps, warmup, at, dip, verdict.reason)
    if verdict.leaked:
        (found,) = verdict.growths
        assert found.per_step > 0.8 * growth  # the dip's step is left out of the rate


@SETTINGS
@given(
    case=flat_after_prefix(),
    dip=st.integers(min_value=0, max_value=2**34),
    where=st.floats(min_value=0.0, max_value=1.0),
    metric=BYTE_METRICS,
)
@example(case=([0, 0] + [30, 60, 90] + [100] * 5, 2), dip=10**6, where=0.8, metric=MALLOC)
@example(case=(list(range(0, 80, 10)) + [80] * 8, 0), dip=100 * MIB, where=0.5, metric=MALLOC)
def test_settling_then_freeing_older_memory_is_clean(
    case: tuple[list[int], int], dip: int, where: float, metric: str
) -> None:
    """Flat after the first half, with older memory freed in the flat part (any size)."""
    series, warmup = case
    values = [float(v * MIB) for v in series]
    steps = len(values) - warmup
    settled = warmup + (steps + 1) // 2
    at = settled + int(where * (len(values) - 1 - settled))
    verdict = judge({metric: lowered(values, at, dip)}, UNITS, warmup=warmup, limits=RSS_LIMITS)
    assert not verdict.leaked, (values, warmup, at, dip, verdict.reason)


@SETTINGS
@given(
    case=periodic(),
    dip=st.integers(min_value=0, max_value=2**34),
    where=st.floats(min_value=0.0, max_value=1.0),
    noise=st.lists(st.integers(0, MIB // 4), min_size=1, max_size=5),
    metric=BYTE_METRICS,
)
@example(
    case=([0, 0, 0] + [3, 4, 0, 1, 2] * 3 + [3], 3), dip=2**30, where=0.5, noise=[0], metric=MALLOC
)
def test_a_sawtooth_freeing_older_memory_is_clean(
    case: tuple[list[int], int], dip: int, where: float, noise: list[int], metric: str
) -> None:
    """A bounded buffer filled and emptied (period <= max(3, steps / 3), MiB a step, any
    phase, noise under a quarter of the tolerance) while older memory is freed once."""
    series, warmup = case
    values = [float(v * MIB + noise[i % len(noise)]) for i, v in enumerate(series)]
    at = warmup + int(where * (len(values) - 1 - warmup))
    verdict = judge({metric: lowered(values, at, dip)}, UNITS, warmup=warmup, limits=RSS_LIMITS)
    assert not verdict.leaked, (values, warmup, at, dip, verdict.reason)
