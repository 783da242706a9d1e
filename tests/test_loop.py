"""A loop checked from inside: track(steps=N) and the LoopCheck the callbacks share."""

from __future__ import annotations

import gc
import sys
import warnings

import pytest

from pytest_graphleak import GraphLeakError, GraphLeakWarning, UnmeasuredError, track
from pytest_graphleak.loop import LoopCheck, close_open_checks
from pytest_graphleak.report import render_text
from pytest_graphleak.settings import Settings

torch = pytest.importorskip("torch")


class Module:
    def __init__(self) -> None:
        self.net = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.step_losses: list[object] = []

    def step(self, keep: bool = True) -> None:
        loss = self.net(torch.randn(2, 4)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if keep:
            self.step_losses.append(loss)


def test_track_with_steps_is_judged_inside_the_loop_before_teardown() -> None:
    module = Module()
    t = track(steps=12, warmup=3, raise_on_leak=True)
    with pytest.raises(GraphLeakError) as info, t:
        for _ in range(40):
            module.step()
            t.step()
        module.step_losses.clear()  # teardown: never reached, the error came first
    text = str(info.value)
    assert t.calls == 15  # judged at warmup + steps
    assert "list-accumulation" in text
    assert "held by: local 'module' -> Module.step_losses -> list(len=15) -> Tensor(" in text
    assert "created at: " in text and "test_loop.py" in text
    assert "loss = self.net(torch.randn(2, 4)).pow(2).mean()" in text
    assert "recorded steps of the loop" in text


def test_track_with_steps_ignores_later_steps_and_returns_the_result() -> None:
    module = Module()
    with track(steps=8, warmup=2) as t:
        for _ in range(30):
            module.step(keep=False)
            t.step()
    assert t.calls == 10
    assert t.result is not None and not t.result.leaked
    assert len(t.result.series["torch.tensors"]) == 10


def test_track_without_length_says_teardown_may_have_freed_the_holder() -> None:
    module = Module()
    with track(warmup=2) as t:
        for _ in range(12):
            module.step()
            t.step()
        module.step_losses.clear()
    assert t.result is not None and t.result.leaked
    assert "teardown" in render_text(t.result)
    assert "held by" not in render_text(t.result)


def test_track_without_steps_is_judged_inside_the_loop_before_teardown() -> None:
    # Judged at warmup + steps (a marker test's numbers), while the list is alive.
    module = Module()
    with track(warmup=3) as t:
        for _ in range(60):
            module.step()
            t.step()
        module.step_losses.clear()
    assert t.calls == 19 and t.result is not None and t.result.leaked
    text = render_text(t.result)
    assert "held by: local 'module' -> Module.step_losses -> list(len=19) -> Tensor(" in text
    assert "loss = self.net(torch.randn(2, 4)).pow(2).mean()" in text and "teardown" not in text
    # Watched during the step after the judged one: the line that stores it.
    assert "stored at: " in text and "self.step_losses.append(loss)  (once per step)" in text
    assert t.result.name == "track()" and gc.isenabled() and sys.gettrace() is None


def test_a_loop_local_rebound_each_step_is_stored_by_the_loops_own_line() -> None:
    net = torch.nn.Linear(4, 1)
    total = torch.zeros(())
    with track(warmup=2, steps=8) as t:
        for _ in range(12):
            total = total + net(torch.randn(2, 4)).sum()
            t.step()
    assert t.result is not None
    text = render_text(t.result)
    assert "held by: local 'total' -> Tensor(shape=(), grad_fn=AddBackward0)" in text
    assert "stored at: " in text and "total = total + net(torch.randn(2, 4)).sum()" in text


def test_a_loop_that_ends_at_the_judged_step_says_why_no_line_stores_it() -> None:
    module = Module()
    with track(warmup=2, steps=8) as t:
        for _ in range(10):
            module.step()
            t.step()
    assert t.result is not None and t.result.leaked
    text = render_text(t.result)
    assert "stored at" in text and "the loop ended at the judged step" in text
    assert "stored at: " not in text and sys.gettrace() is None


def test_a_rolling_check_judges_window_after_window_and_keeps_the_leak() -> None:
    module = Module()
    check = LoopCheck(Settings(warmup=2, steps=8), name="run", on_leak="warn")
    check.start(length=None, roots=lambda: {"module": module})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(40):
            module.step(keep=i >= 18)  # clean for two windows, then leaks
            check.after_step()
        check.finish()
    names = [(result.name, result.leaked) for result in check.results]
    # The leaky window had no recorded steps: judged again 5 steps later, after
    # recording 3 of them, so the report names the lines too.
    assert names == [
        ("run steps 1-10", False),
        ("run steps 11-18", False),
        ("run steps 19-31", True),
    ]
    leaks = [w for w in caught if issubclass(w.category, GraphLeakWarning)]
    assert len(leaks) == 1
    text = str(leaks[0].message)
    assert "created at: " in text and "loss = self.net(torch.randn(2, 4)).pow(2).mean()" in text
    assert "stored at: " in text and "self.step_losses.append(loss)" in text
    assert check.result is check.results[-1] and not check.active and gc.isenabled()


def test_a_rolling_checks_tail_shorter_than_a_window_gets_no_verdict_of_its_own() -> None:
    # A tail lies inside the loop's last epoch when the epoch is longer: a list of that
    # epoch's losses only grows there (round5/loop_per_epoch_list_false_alarm).
    module = Module()
    check = LoopCheck(Settings(warmup=2, steps=8), name="run")
    check.start(length=None, roots=lambda: {"module": module})
    for _ in range(25):  # 10 + 8, then a tail of 7: shorter than a window, not judged
        module.step(keep=False)
        check.after_step()
    check.finish()
    assert [(r.steps, r.leaked) for r in check.results] == [(8, False), (8, False)]
    assert not check.active


def test_track_that_ends_early_is_judged_at_the_end_with_a_note() -> None:
    module = Module()
    with track(steps=50, warmup=2) as t:
        for _ in range(12):
            module.step()
            t.step()
    assert t.result is not None and t.result.leaked
    assert "the loop ended after 12 of 52 planned steps" in render_text(t.result)


def test_window_mode_judges_each_window_and_warns() -> None:
    module = Module()
    check = LoopCheck(Settings(warmup=2), name="run", window=8, on_leak="warn")
    check.start(length=None, roots=lambda: {"module": module})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(34):
            module.step(keep=i >= 18)  # clean for two windows, then leaks
            check.after_step()
        check.finish()
    names = [result.name for result in check.results]
    assert names == ["run steps 1-10", "run steps 11-18", "run steps 19-26", "run steps 27-34"]
    assert [result.leaked for result in check.results] == [False, False, True, True]
    leaks = [w for w in caught if issubclass(w.category, GraphLeakWarning)]
    assert len(leaks) == 2
    assert "module -> Module.step_losses -> list(len=" in str(leaks[0].message)
    # The window after the first leak recorded creation sites.
    assert "created at: " in str(leaks[1].message)
    assert gc.isenabled() and not check.active


def test_window_mode_folds_a_short_tail_into_the_last_window() -> None:
    module = Module()
    check = LoopCheck(Settings(warmup=2), name="run", window=8)
    check.start(length=19, roots=lambda: {"module": module})
    for _ in range(19):
        module.step(keep=False)
        check.after_step()
    assert [r.name for r in check.results] == ["run steps 1-10", "run steps 11-19"]
    assert not any(r.leaked for r in check.results) and not check.active


def test_bad_arguments_and_a_run_too_short_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="window must be an integer >= 2"):
        LoopCheck(Settings(), name="cb", window=1)
    with pytest.raises(ValueError, match="not both"):
        LoopCheck(Settings(), name="cb", window=10, steps=3)
    with pytest.raises(ValueError, match="on_leak must be"):
        LoopCheck(Settings(), name="cb", on_leak="explode")
    # A run announced too short is not refused (a callback never stops training for it):
    # it runs measured, and its end says how many steps ran and how many a verdict needs.
    check = LoopCheck(Settings(warmup=3), name="cb")
    check.start(length=3)
    for _ in range(3):
        check.after_step()
    with pytest.raises(
        UnmeasuredError,
        match=r"cb: not measured, so no verdict: the loop is "
        r"too short: it ran 3 steps; a verdict needs at least 6 \(warmup=3 \+ "
        r"3 measured steps: .*\), and warmup \+ 7 catch",
    ):
        check.finish()
    assert gc.isenabled() and not check.active
    result = check.result
    assert result is not None and result.status == "unmeasured" and result.steps == 0


def test_one_minimum_for_a_loop_its_end_and_track() -> None:
    """warmup + 3 steps is the shortest loop judged, whether its length is announced
    (a callback), found at its end, or a track() block's; warmup + 2 gets no verdict."""
    check = LoopCheck(Settings(warmup=2, steps=1), name="short loop")
    check.start(length=5)
    for _ in range(5):
        check.after_step()
    assert [r.steps for r in check.results] == [3] and not check.active
    assert check.result is not None and check.result.status == "clean"
    with track(warmup=2) as t:
        for _ in range(5):
            t.step()
    assert t.result is not None and t.result.steps == 3 and t.result.status == "clean"
    warned = pytest.warns(
        GraphLeakWarning,
        match=r"track\(\) saw 4 t.step\(\) calls; a "
        r"verdict needs at least 5 \(warmup=2 \+ 3 measured steps",
    )
    with warned, track(warmup=2) as t:
        for _ in range(4):
            t.step()
    assert t.result is not None and t.result.status == "unmeasured" and t.result.steps == 2
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_leak_watched_in_a_loop_that_then_raises_is_closed_with_its_tracer() -> None:
    # A framework without an exception hook: the step after the judged one raises, and
    # only close_open_checks() (the plugin calls it after every test) ends the watch.
    module = Module()
    check = LoopCheck(Settings(warmup=2, steps=8), name="run", steps=8, on_leak="warn")
    check.start(length=None, roots=lambda: {"module": module})
    for _ in range(10):
        module.step()
        check.after_step()
    assert sys.gettrace() is not None and check.result is None  # watching the next step
    assert close_open_checks() == 1
    assert sys.gettrace() is None and check.result is not None and check.result.leaked
    assert "the loop raised during the step after the judged one" in render_text(check.result)


def test_a_check_left_open_is_closed_and_gc_restored() -> None:
    check = LoopCheck(Settings(warmup=1), name="left open")
    check.start(length=100)
    assert not gc.isenabled()
    assert close_open_checks() == 1
    assert gc.isenabled()
    assert check.result is None and not check.active


def test_a_loop_result_says_what_the_probes_could_not_count_exactly() -> None:
    # A graph held for the whole loop, larger than one walk may expand: the node count is a
    # lower bound, and a loop's result must say so as check()'s does.
    leaf = torch.zeros(1, requires_grad=True)
    held = leaf
    for _ in range(12_000):
        held = held + 1
    module = Module()
    with track(steps=3, warmup=1) as t:
        for _ in range(4):
            module.step(keep=False)
            t.step()
    assert t.result is not None and not t.result.leaked
    assert any("is a lower bound" in note for note in t.result.notes), t.result.notes
    assert held.grad_fn is not None  # the graph stayed alive through the loop
