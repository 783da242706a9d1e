"""Window mode sampled every k-th step: the same detection, rates per step, the user's gc
between samples, and the stride chosen from what the steps cost."""

from __future__ import annotations

import gc
import warnings

import pytest

from pytest_graphleak import GraphLeakWarning
from pytest_graphleak.engine.stride import MIN_SAMPLES, choose_stride, max_stride
from pytest_graphleak.loop import LoopCheck
from pytest_graphleak.probes import METRICS
from pytest_graphleak.settings import Settings
from pytest_graphleak.verdict import judge, max_leak_period

torch = pytest.importorskip("torch")


class Module:
    def __init__(self) -> None:
        self.net = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.kept: list[object] = []
        self.gc_seen: list[bool] = []

    def step(self, keep: bool = False, cycle: bool = False) -> None:
        self.gc_seen.append(gc.isenabled())
        loss = self.net(torch.randn(2, 4)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if keep:
            self.kept.append(loss.detach())
        if cycle:  # a tensor kept only by a reference cycle: freed by the cyclic gc alone
            holder: dict[str, object] = {"t": torch.ones(3)}
            holder["self"] = holder


def run_windows(
    module: Module, steps: int, *, window: int, every: int | None, warmup: int = 2, **step: object
) -> LoopCheck:
    check = LoopCheck(
        Settings(warmup=warmup), name="run", window=window, sample_every=every, on_leak="warn"
    )
    check.start(length=steps, roots=lambda: {"module": module})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphLeakWarning)
        for i in range(steps):
            module.step(**{key: rule(i) for key, rule in step.items()})  # type: ignore[operator]
            check.after_step()
        check.finish()
    return check


def test_a_leak_every_third_step_is_caught_when_sampled_every_fourth() -> None:
    module = Module()
    check = run_windows(module, 62, window=30, every=4, keep=lambda i: i % 3 == 0)
    assert [r.name for r in check.results] == ["run steps 1-32", "run steps 33-62"]
    assert [r.leaked for r in check.results] == [True, True]
    assert check.results[0].pattern == "list-accumulation"
    first = check.results[0]
    # the first leaky window recorded its sites (a count rose before its judged step); the
    # recorded steps made one kept tensor, so the line says how often, not "1 per step"
    assert first.diagnosis is not None and first.diagnosis.sites
    assert "self.kept.append" in first.diagnosis.sites[0].line
    assert (first.diagnosis.sites[0].count, first.diagnosis.sites[0].every) == (1, 3)
    assert first.sample_every == 4 and first.steps == 30
    # the end of warmup (the baseline), then samples at steps 4, 8, ..., 32 (aligned on the
    # judged step): a warmup step before the last is not sampled
    assert first.sample_steps == [2, *range(4, 33, 4)]
    assert len(first.series["torch.tensors"]) == 1 + 8
    assert (first.warmup, first.warmup_steps) == (1, 2)
    second = check.results[1]  # its baseline is the first window's last sample (step 32)
    assert second.steps == 30 and (second.warmup, second.warmup_steps) == (0, None)
    assert first.verdict.slowest_leak_steps == max_leak_period(8) * 4
    growth = next(g for g in first.verdict.growths if g.metric == "torch.tensors")
    assert growth.per_step == pytest.approx(1 / 3, rel=0.25)  # per step, not per sample


def test_a_leak_of_one_tensor_per_step_reads_one_per_step_with_a_stride() -> None:
    module = Module()
    check = run_windows(module, 42, window=40, every=5, keep=lambda i: True)
    (result,) = check.results
    assert result.leaked and result.sample_every == 5
    growth = next(g for g in result.verdict.growths if g.metric == "torch.tensors")
    assert growth.per_step == pytest.approx(1.0)


def test_a_clean_strided_window_states_its_stride_and_slowest_leak() -> None:
    check = run_windows(Module(), 42, window=40, every=5)
    (result,) = check.results
    assert not result.leaked
    assert "8 samples, one every 5 steps" in result.verdict.reason
    assert result.verdict.slowest_leak_steps == 15  # 3 samples of 5 steps
    assert "catches 1 object every 15 steps" in _clean_line(result)


def test_a_cycle_every_step_is_caught_with_the_users_gc_between_samples() -> None:
    module = Module()
    gc_was = gc.isenabled()
    gc.enable()
    try:
        check = run_windows(module, 42, window=40, every=4, cycle=lambda i: True)
    finally:
        (gc.enable if gc_was else gc.disable)()
    (result,) = check.results
    assert result.leaked and "gc.cyclic_garbage" in [g.metric for g in result.verdict.growths]
    # Samples at steps 6, 10, ..., 42 (aligned on the judged step 42): each such step runs
    # with gc off, steps 3 to 37 between them with the user's gc (on); 38-42 are recorded
    # for the diagnosis, with gc off as well.
    assert module.gc_seen[2:37] == [(step - 6) % 4 != 0 for step in range(3, 38)]
    assert not any(module.gc_seen[37:]) and gc.isenabled()


def test_a_clean_last_window_records_no_creation_sites_a_leaky_one_does() -> None:
    # Recording (gc held, a slower step) starts in the run's last window only once an
    # exact metric rose above the window's baseline: a clean run pays nothing for it.
    module = Module()
    gc_was = gc.isenabled()
    gc.enable()
    try:
        run_windows(module, 42, window=40, every=4)
        leaky = run_windows(Module(), 42, window=40, every=4, keep=lambda i: i % 2 == 0)
    finally:
        (gc.enable if gc_was else gc.disable)()
    # gc off only on the steps that end in a sample (6, 10, ..., 42), up to the last one
    assert module.gc_seen[2:] == [(step - 6) % 4 != 0 for step in range(3, 43)]
    (result,) = leaky.results
    assert result.leaked and result.diagnosis is not None
    assert result.diagnosis.sites, "the leaky last window recorded its creation sites"


def test_gc_stays_off_between_samples_when_the_user_had_it_off() -> None:
    module = Module()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        run_windows(module, 22, window=20, every=2)
        assert not any(module.gc_seen) and not gc.isenabled()
    finally:
        (gc.enable if gc_was else gc.disable)()


def test_a_fast_step_gets_the_largest_stride_a_window_allows() -> None:
    check = run_windows(Module(), 102, window=100, every=None)
    assert check.results[0].sample_every == max_stride(100) == 100 // MIN_SAMPLES


def test_choose_stride_keeps_the_check_within_its_share() -> None:
    # 20 ms steps, 0.25 ms samples, windows of 100: 0.15% of 2 s is 3 ms = 12 samples
    assert (
        choose_stride(window=100, step_cpu=0.020, sample_cpu=0.00025, share=0.0015, hook_cpu=0.0)
        == 9
    )
    assert choose_stride(window=100, step_cpu=1.0, sample_cpu=0.00025) == 1  # slow steps
    assert choose_stride(window=100, step_cpu=0.0001, sample_cpu=0.00025) == 20  # capped
    assert choose_stride(window=100, step_cpu=0.0, sample_cpu=0.00025) == 1  # not measured
    # once-a-window work takes its part of the budget first
    assert (
        choose_stride(window=100, step_cpu=0.020, sample_cpu=0.00025, window_cpu=0.002)
        == max_stride(100)
        == 20
    )
    # and so do the calls on the steps between samples: 40 ms steps, 0.4 ms samples,
    # 0.5 ms judgements, a 0.1% share: 4 ms - 0.5 ms = 8.75 samples (k = 12); less 100 x
    # 8 us: 6.75 (15)
    assert (
        choose_stride(
            window=100,
            step_cpu=0.040,
            sample_cpu=0.0004,
            window_cpu=0.0005,
            hook_cpu=0.0,
            share=0.001,
        )
        == 12
    )
    assert (
        choose_stride(window=100, step_cpu=0.040, sample_cpu=0.0004, window_cpu=0.0005, share=0.001)
        == 15
    )
    # the default share (0.05%): a 40 ms step is at the cap, a 200 ms one buys samples
    assert choose_stride(window=100, step_cpu=0.040, sample_cpu=0.0004, window_cpu=0.0005) == 20
    assert choose_stride(window=100, step_cpu=0.200, sample_cpu=0.0004, window_cpu=0.0005) == 5


def test_every_stride_up_to_the_cap_catches_a_leak_every_k_steps_and_states_it() -> None:
    # The cap keeps MIN_SAMPLES samples: the slowest leak a window catches for sure is
    # at most window / 2 steps whatever the stride (40 at the cap for window=100), and a
    # leak that appears only every k-th step (aligned or not) is caught.
    metrics = {"torch.tensors": METRICS["torch.tensors"]}
    window = 100
    for every in range(1, max_stride(window) + 1):
        samples = -(-window // every)
        assert max_leak_period(samples) * every <= window // 2
        for phase in range(every):  # one tensor every `every` steps, at any offset
            steps = [10.0 + (step + phase) // every for step in range(window + 1)]
            series = {"torch.tensors": [steps[0], *steps[window % every or every :: every]]}
            assert len(series["torch.tensors"]) == samples + 1
            verdict = judge(series, metrics, warmup=1, every=every)
            assert verdict.leaked, (every, phase)
    assert max_leak_period(MIN_SAMPLES) * max_stride(window) == 40


def test_sample_every_is_checked_where_the_check_is_made() -> None:
    with pytest.raises(ValueError, match="sample_every= applies to window mode only"):
        LoopCheck(Settings(), name="cb", sample_every=3)
    with pytest.raises(ValueError, match="sample_every=6 leaves fewer than 2 samples"):
        LoopCheck(Settings(), name="cb", window=10, sample_every=6)
    with pytest.raises(ValueError, match="sample_every must be an integer >= 1"):
        LoopCheck(Settings(), name="cb", window=10, sample_every=0)


def test_the_verdict_scales_rates_and_periods_by_the_stride() -> None:
    metrics = {"torch.tensors": METRICS["torch.tensors"]}
    rising = {"torch.tensors": [10.0, 10.0] + [10.0 + 4 * i for i in range(1, 11)]}
    verdict = judge(rising, metrics, warmup=2, every=4)
    assert verdict.leaked and verdict.growths[0].per_step == pytest.approx(1.0)
    assert verdict.slowest_leak_steps == max_leak_period(10) * 4
    with pytest.raises(ValueError, match="every must be an integer >= 1"):
        judge(rising, metrics, warmup=2, every=0)


def _clean_line(result: object) -> str:
    from pytest_graphleak.report.text import verdict_line

    return verdict_line(result)  # type: ignore[arg-type]


def test_window_mode_samples_only_the_last_warmup_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_graphleak.engine import coverage, tracker
    from pytest_graphleak.report.text import render_text

    sampled: list[int] = []
    looked: list[int] = []
    original_sample, original_look = tracker.Sampler._sample, coverage.Coverage.after_step

    def sample(self: tracker.Sampler, collect: object) -> dict[str, float]:
        sampled.append(check.calls)
        return original_sample(self, collect)  # type: ignore[arg-type]

    def look(self: coverage.Coverage, call: int) -> list[str]:
        looked.append(call)
        return original_look(self, call)

    monkeypatch.setattr(tracker.Sampler, "_sample", sample)
    monkeypatch.setattr(coverage.Coverage, "after_step", look)
    module = Module()
    check = LoopCheck(Settings(warmup=4), name="run", window=20, sample_every=5, on_leak="warn")
    check.start(length=24, roots=lambda: {"module": module})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphLeakWarning)
        for i in range(24):
            module.step(keep=i >= 4)
            check.after_step()
        check.finish()
    (result,) = check.results
    # One sample ends the warmup (the verdict compares with it alone); a library imported
    # by an unsampled warmup step is still looked for after that step.
    assert sampled == [4, 9, 14, 19, 24] == result.sample_steps
    assert looked[:4] == [1, 2, 3, 4]
    assert result.leaked and (result.steps, result.warmup, result.warmup_steps) == (20, 1, 4)
    text = render_text(result)
    assert "20 measured steps after 4 warmup steps, sampled every 5 steps" in text
    assert "series (baseline | measured):" in text


def test_a_short_last_window_is_sampled_often_enough_to_judge() -> None:
    # After a leak a window starts afresh (no baseline); the run's last 7 steps at a stride
    # of 10 would leave one sample, which can show no growth: the stride shrinks instead.
    module = Module()
    check = run_windows(module, 160, window=50, every=10, warmup=3, keep=lambda i: i >= 60)
    last = check.results[-1]
    assert last.name == "run steps 154-160" and last.steps == 7
    assert last.sample_every == 3 and len(last.series["torch.tensors"]) == 3
    assert last.leaked and last.pattern == "list-accumulation"
