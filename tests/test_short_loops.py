"""A loop shorter than warmup + the fewest measured steps gets no leak verdict.

``track()`` and the framework callbacks judge a loop whose length its data decides (an
epoch of 5 batches). With one or two measured steps a single tensor made once (a cache
keyed by batch size meeting the short last batch) read as ``+1/step``: such a loop is
``unmeasured`` under pytest and a warning in a real run, never a leak, and a callback
never stops training for it (round4/track_short_loop_one_off_false_alarm).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from suite_helpers import folded

from pytest_graphleak import GraphLeakWarning, UnmeasuredError, track
from pytest_graphleak.loop import LoopCheck
from pytest_graphleak.settings import Settings
from pytest_graphleak.verdict import FEWEST_STEPS, fewest_steps, loop_fewest_steps

torch = pytest.importorskip("torch")

pytest_plugins = ["pytester"]


def one_off_loop(steps: int, *, warmup: int = 3) -> object:
    """A clean loop whose last step makes one tensor, once: the repro's script."""
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cache: dict[str, object] = {}
    with track(warmup=warmup) as t:
        for i in range(steps):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == steps - 1:
                cache["stats"] = torch.zeros(100)  # made once, never again
            t.step()
    return t.result


def test_the_fewest_measured_steps_of_a_loop_is_one_constant_above_a_marker_tests() -> None:
    assert FEWEST_STEPS == 3
    assert [loop_fewest_steps(w) for w in (0, 1, 3)] == [3, 3, 3]
    # a window= asking for fewer judges each window on its own (steps= never does:
    # steps=1 or 2 is unmeasured, tests/test_few_steps.py)
    assert [loop_fewest_steps(3, window) for window in (2, 16)] == [2, 3]
    assert loop_fewest_steps(0, 1) == fewest_steps(0) == 2


@pytest.mark.parametrize("steps", [4, 5])
def test_a_one_off_in_a_short_loop_is_no_leak_but_a_warning_saying_the_numbers(
    steps: int,
) -> None:
    with pytest.warns(GraphLeakWarning) as caught:
        result = one_off_loop(steps)
    assert result is not None and not result.leaked  # type: ignore[attr-defined]
    assert result.status == "unmeasured" and result.steps == steps - 3  # type: ignore[attr-defined]
    (message,) = [str(w.message) for w in caught]
    assert message == (
        "graphleak: track(): not measured, so no verdict: the loop is too short: track() "
        f"saw {steps} t.step() calls; a verdict needs at least 6 (warmup=3 + 3 measured "
        "steps: with fewer, one tensor made once in a measured step would read as a leak), "
        "and warmup + 7 catch a leak of one object every third step\n"
        "  fix: run at least 6 t.step() calls in the checked loop, or fewer warmup steps "
        "(warmup=1 needs 4 t.step() calls)"
    )
    assert caught[0].filename == __file__  # the user's `with track()` line
    assert gc.isenabled() and gc.get_freeze_count() == 0


@pytest.mark.parametrize("steps", [6, 10])
def test_from_three_measured_steps_the_same_one_off_is_judged_clean(steps: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = one_off_loop(steps)
    assert result is not None and result.status == "clean"  # type: ignore[attr-defined]


def test_a_callback_run_shorter_than_its_steps_or_with_steps_2_gets_no_verdict() -> None:
    # steps=16 (a callback's keyword) on an epoch of 5 batches: 2 measured, no verdict
    check = LoopCheck(Settings(warmup=3), name="cb", steps=16, on_leak="warn")
    check.start(length=5)
    with pytest.warns(
        GraphLeakWarning,
        match=r"cb: not measured, .* it ran 5 steps; a "
        r"verdict needs at least 6 \(warmup=3 \+ 3 measured steps",
    ):
        for _ in range(5):
            check.after_step()
        check.finish()
    assert [r.status for r in check.results] == ["unmeasured"]
    # steps=2 asked for two measured steps: too few for any verdict, as on a marker test
    check = LoopCheck(Settings(warmup=3), name="cb", steps=2, on_leak="warn")
    check.start(length=5)
    with pytest.warns(
        GraphLeakWarning,
        match=r"(?s)cb: not measured, so no verdict: steps=2 is "
        r"too few for a verdict.*fix: steps=3 or more",
    ):
        for _ in range(5):
            check.after_step()
        check.finish()
    assert [(r.status, r.steps) for r in check.results] == [("unmeasured", 2)]


def test_one_step_is_a_step() -> None:
    """Lightning's fast_dev_run: one batch (round4/minor_text #5, "1 steps")."""
    check = LoopCheck(Settings(warmup=3), name="cb")
    check.start(length=1)
    check.after_step()
    with pytest.raises(UnmeasuredError, match=r"it ran 1 step; a verdict needs at least 6"):
        check.finish()
    assert gc.isenabled() and not check.active


REPRO_TEST = """
import torch
from torch.utils.data import DataLoader, TensorDataset

MASKS = {}
def mask_for(n):                      # a cache keyed by batch size: bounded
    if n not in MASKS:
        MASKS[n] = torch.ones(n, 1)
    return MASKS[n]

def test_one_epoch(graphleak):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(18, 4)), batch_size=4)   # 4,4,4,4,2
    with graphleak.track() as t:
        for (x,) in data:
            loss = (model(x) * mask_for(len(x))).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            t.step()
"""


def test_under_pytest_a_short_track_loop_is_unmeasured_not_leaked(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_short_loop=REPRO_TEST)
    result = pytester.runpytest_subprocess("-q", "-p", "no:randomly", "-p", "no:cacheprovider")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "leaks" not in out and "list-accumulation" not in out
    folded_out = folded(out)  # the terminal wraps at 80 columns
    assert (
        "graphleak: test_short_loop.py::test_one_epoch::track(1): not measured, so no "
        "verdict: the loop is too short: track() saw 5 t.step() calls; a verdict needs at "
        "least 6 (warmup=3 + 3 measured steps:"
    ) in folded_out, out
    assert (
        "UNMEASURED test_short_loop.py::test_one_epoch not measured: the loop is too short"
    ) in folded_out, out
    assert "graphleak: 1 checked: 1 unmeasured" in folded_out, out
    # warn-only: the test passes with the same sentence as a warning
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--graphleak-warn-only"
    )
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*track() saw 5 t.step() calls; a verdict needs at least 6*"])
    assert "leaks" not in result.stdout.str()


REAL_RUN = """
import warnings
import torch
from ignite.engine import Engine
from pytest_graphleak.integrations.ignite import GraphLeakHandler
import pytest_graphleak as gl

warnings.simplefilter("always")
m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)
cache = {}
def step(engine, batch):
    loss = m(batch).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if len(batch) not in cache: cache[len(batch)] = torch.ones(len(batch))
    return loss.item()
e = Engine(step)
h = GraphLeakHandler(); h.attach(e)   # on_leak="raise", the default
e.run([torch.randn(4, 4)] * 4 + [torch.randn(2, 4)], max_epochs=1)
print("ignite", e.state.iteration, h.result.status)
with gl.track(raise_on_leak=True) as t:
    for i in range(4):
        t.step()
print("track", t.calls, t.result.status)
"""


def test_a_real_run_warns_and_training_goes_on(tmp_path: Path) -> None:
    pytest.importorskip("ignite")
    script = tmp_path / "ign_short.py"
    script.write_text(textwrap.dedent(REAL_RUN))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ignite 5 unmeasured", "track 4 unmeasured"]
    assert (
        f"{script}:18: GraphLeakWarning: graphleak: ignite(step): not measured, so no verdict: "
        "the loop is too short: it ran 5 steps; a verdict needs at least 6" in done.stderr
    )
    assert (
        f"{script}:20: GraphLeakWarning: graphleak: track(): not measured, so no verdict: "
        "the loop is too short: track() saw 4 t.step() calls;" in done.stderr
    )
    assert "leaks" not in done.stderr
