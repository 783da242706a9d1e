"""pytest_graphleak.check / track outside pytest, with torch and minigrad."""

from __future__ import annotations

import gc
import importlib.metadata
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytest

import pytest_graphleak
from pytest_graphleak import CheckResult, GraphLeakError, check, pipeline, track
from pytest_graphleak.engine import tracker
from pytest_graphleak.metrics import Metric, Recheck
from pytest_graphleak.probes.base import ProbeBase
from pytest_graphleak.report import render_text, sparkline
from pytest_graphleak.settings import Settings

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")
mg = pytest.importorskip("minigrad")


def torch_steps() -> tuple[Callable[[], None], Callable[[], None]]:
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(2, 4)
    kept: list[object] = []

    def leaky() -> None:
        loss = (x @ w).tanh().sum()
        loss.backward()
        w.grad = None
        kept.append(loss)

    def fixed() -> None:
        loss = (x @ w).tanh().sum()
        loss.backward()
        w.grad = None
        kept.append(loss.item())

    return leaky, fixed


def test_check_returns_the_result_and_raises_only_when_asked() -> None:
    leaky, fixed = torch_steps()
    result = check(leaky, steps=12, warmup=2)
    assert result.leaked and result.pattern == "list-accumulation"
    assert result.name.endswith("leaky")
    assert len(result.series["torch.tensors"]) == 14
    text = render_text(result)
    assert "list-accumulation" in text and "torch.tensors" in text and "/step" in text
    assert not check(fixed, steps=12, warmup=2).leaked
    with pytest.raises(GraphLeakError, match="list-accumulation") as info:
        check(leaky, steps=12, warmup=2, raise_on_leak=True, diagnose=False)
    assert isinstance(info.value, AssertionError)
    assert info.value.result is not None and info.value.result.leaked


def test_check_reports_a_raising_step_as_an_error_not_a_leak() -> None:
    calls = [0]

    def step() -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("bad batch")

    result = check(step, steps=4, warmup=1)
    assert result.error == "RuntimeError: bad batch" and result.error_step == 3
    assert result.error_site is not None
    assert result.error_site.line == 'raise RuntimeError("bad batch")'
    assert not result.leaked
    calls[0] = 0
    with pytest.raises(RuntimeError, match="bad batch"):
        check(step, steps=4, warmup=1, raise_on_leak=True)


def test_track_measures_a_hand_written_minigrad_loop() -> None:
    w = mg.Tensor(np.ones((3, 3)), requires_grad=True)
    x = mg.Tensor(np.ones((2, 3)))
    with track(warmup=2) as t:
        total = 0
        for _ in range(14):
            loss = (x @ w).tanh().sum()
            total = total + loss  # running total keeps every graph
            t.step()
    assert t.result is not None and t.result.leaked
    assert t.result.pattern == "retained-grad-fn"
    assert t.result.steps == 12
    with track(warmup=2, raise_on_leak=True) as t2:
        for _ in range(14):
            loss = (x @ w).tanh().sum()
            loss.backward()
            w.grad = None
            t2.step()
    assert t2.result is not None and not t2.result.leaked


def test_track_needs_enough_steps_and_propagates_errors() -> None:
    with (
        pytest.warns(pytest_graphleak.GraphLeakWarning, match=r"saw 2 t\.step"),
        track(warmup=3) as t,
    ):
        t.step()
        t.step()
    assert t.result is not None and t.result.status == "unmeasured"
    assert gc.isenabled()
    # Under pytest, raise_on_leak fails the check as any unmeasured one.
    with (
        pytest.raises(pytest_graphleak.UnmeasuredError, match=r"saw 1 t\.step\(\) call;"),
        track(warmup=3, raise_on_leak=True) as t,
    ):
        t.step()
    assert gc.isenabled()
    with pytest.raises(KeyError), track(warmup=1) as t:
        t.step()
        raise KeyError("oops")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"check\(.*\): steps must be an integer >= 1, got 0"):
        check(lambda: None, steps=0)
    with pytest.raises(ValueError, match="warmup must be an integer >= 0, got '3'"):
        check(lambda: None, warmup="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rss_tolerance must be a size"):
        check(lambda: None, rss_tolerance="lots")
    with pytest.raises(TypeError, match="step must be callable"):
        check(42)  # type: ignore[arg-type]


def test_results_hold_no_measured_object() -> None:
    kept: list[object] = []

    def step() -> None:
        kept.append(mg.Tensor(np.ones(2), requires_grad=True) * 2)

    result = check(step, steps=6, warmup=1)
    assert result.leaked
    probe = weakref.ref(kept[0])
    kept.clear()
    gc.collect()
    assert probe() is None  # nothing in the result (or the plugin) kept it alive
    assert result.to_dict()["series"]


def test_public_api_and_sparkline() -> None:
    # the version users see is the one the package was installed as
    assert pytest_graphleak.__version__ == importlib.metadata.version("pytest-graphleak")
    assert sparkline([1, 2, 3, 4]) == "▁▃▆█"
    assert sparkline([5, 5]) == "▁▁"
    assert sparkline([]) == ""


def recheck_run(recheck: Recheck | Exception) -> CheckResult:
    """The result of a leak judged on a metric that declares a recheck, whose probe's
    recheck returns ``recheck`` (or raises it)."""
    cached = Metric("fake.cached_bytes", "bytes", "memory", recheck=("fake.cached_bytes",))

    class CacheProbe(ProbeBase):
        metrics = (cached,)
        calls = 0

        def available(self) -> bool:
            return True

        def sample(self, fresh: Sequence[object]) -> dict[str, float]:
            return {}

        def recheck(self) -> Recheck | None:
            self.calls += 1
            if isinstance(recheck, Exception):
                raise recheck
            return recheck

    probe = CacheProbe()
    series = tracker.Series(
        series={cached.name: [float(i * 2**20) for i in range(19)]},
        metrics={cached.name: cached},
        rechecking=[probe],
        calls=19,
    )
    result = pipeline.conclude(
        series,
        settings=Settings(diagnose=False),
        name="n",
        diagnose_step=None,
        roots=None,
        exclude=(),
    )
    assert (result.steps, result.warmup) == (16, 3)
    assert probe.calls == 1
    assert series.rechecking == []  # dropped after use: it held the probe
    return result


def test_a_probe_recheck_can_withdraw_or_confirm_a_byte_growth() -> None:
    gone = Recheck({"fake.cached_bytes": 5.0}, {"fake.cached_bytes": 5.0}, "stays", "was a cache")
    result = recheck_run(gone)
    assert not result.leaked
    assert result.verdict.reason == "clean: fake.cached_bytes was a cache"
    stays = Recheck({"fake.cached_bytes": 5.0}, {"fake.cached_bytes": 9.0}, "stays", "was a cache")
    result = recheck_run(stays)
    assert result.leaked and result.verdict.reason.endswith("; stays")
    result = recheck_run(RuntimeError("driver gone"))
    assert result.leaked
    assert "re-check failed: RuntimeError: driver gone" in result.verdict.reason


async def _async_step() -> None:
    pass


def _generator_step():  # type: ignore[no-untyped-def]
    yield


class _AsyncCallable:
    async def __call__(self) -> None:
        pass


@pytest.mark.parametrize(
    ("step", "kind"),
    [
        (_async_step, "an async function"),
        (_generator_step, "a generator function"),
        (_AsyncCallable(), "an async function"),
    ],
)
def test_check_refuses_a_step_whose_call_would_not_run_its_body(step: object, kind: str) -> None:
    with pytest.raises(TypeError, match=f"check\\(step\\): step is {kind}, so calling it would"):
        check(step)  # type: ignore[arg-type]


def test_a_step_returning_a_coroutine_is_an_error_not_clean() -> None:
    result = check(lambda: _async_step(), steps=2, warmup=0)
    assert not result.leaked
    assert result.error is not None
    assert "returned a coroutine, so its body did not run" in result.error


def test_nested_track_blocks_each_measure_the_loop() -> None:
    w = mg.Tensor(np.ones(3), requires_grad=True)
    kept: list[object] = []
    with track(warmup=2, name="outer") as outer, track(warmup=2, name="inner") as inner:
        for _ in range(12):
            kept.append((w * 2).sum())
            inner.step()
            outer.step()  # raised "called outside its with block": the inner start ended it
    assert outer.result is not None and outer.result.leaked
    assert inner.result is not None and inner.result.leaked
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_an_outer_track_block_without_steps_gets_no_verdict() -> None:
    with (
        pytest.warns(
            pytest_graphleak.GraphLeakWarning,
            match=r"outer: not measured, .* track.* saw 0 t.step.. calls",
        ),
        track(name="outer"),
        track(warmup=1) as inner,
    ):
        for _ in range(4):
            inner.step()
    assert gc.isenabled() and gc.get_freeze_count() == 0
