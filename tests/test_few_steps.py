"""steps=1 or 2 is too few for a verdict: unmeasured, with the fix "steps=3 or more".

With one or two measured steps a tensor made once (a lazy init in a measured step)
rises between every pair of samples and read as ``+1/step`` on a marker test, ``check()``,
``graphleak check --steps`` and ``--graphleak-steps``, while ``track()`` refused such short
loops (round5/marker_few_steps_one_off_false_alarm). Every front end now shares one
minimum, ``verdict.FEWEST_STEPS``: fewer is an unmeasured check, never a leak.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from suite_helpers import FAST, folded

import minigrad as mg
from pytest_graphleak import UnmeasuredError, check
from pytest_graphleak.cli import main
from pytest_graphleak.cli.exits import EXIT_UNMEASURED
from pytest_graphleak.loop import LoopCheck
from pytest_graphleak.settings import Settings
from pytest_graphleak.verdict import FEWEST_STEPS, too_few_steps

pytest_plugins = ["pytester"]

#: The repro's step: clean, but it makes one tensor once, in its fifth call.
ONE_OFF = """
import pytest
import torch

model = torch.nn.Linear(2, 1)
CACHE = {}
calls = [0]


def step():
    calls[0] += 1
    if calls[0] == 5:                      # made once, in step 5 (a lazy init)
        CACHE["mask"] = torch.ones(3, 1)
    model(torch.randn(3, 2)).sum().backward()


@pytest.mark.no_graph_growth(steps=STEPS)
def test_oneoff():
    step()
"""


def one_off_minigrad() -> Callable[[], None]:
    weights = mg.Tensor([[1.0, 2.0]], requires_grad=True)
    cache: dict[str, object] = {}
    calls = [0]

    def step() -> None:
        calls[0] += 1
        if calls[0] == 5:
            cache["mask"] = mg.Tensor([1.0, 1.0])
        (weights * 2.0).sum().backward()
        weights.grad = None

    return step


def test_one_constant_and_its_words() -> None:
    assert FEWEST_STEPS == 3
    why, fix = too_few_steps(2, source="command line option --graphleak-steps")
    assert why == (
        "steps=2 is too few for a verdict: with fewer than 3 measured steps, one "
        "tensor made once in a measured step would read as a leak"
    )
    assert fix == "steps=3 or more (steps=2 came from command line option --graphleak-steps)"
    assert too_few_steps(1)[1] == "steps=3 or more"


@pytest.mark.parametrize("steps", [1, 2])
def test_check_with_too_few_steps_is_unmeasured_and_still_runs_the_step(steps: int) -> None:
    step = one_off_minigrad()
    result = check(step, steps=steps, warmup=3)
    assert result.status == "unmeasured" and not result.leaked
    assert f"steps={steps} is too few for a verdict" in str(result.unmeasured)
    assert result.unmeasured_fix.startswith("steps=3 or more")
    with pytest.raises(UnmeasuredError, match="fix: steps=3 or more"):
        check(one_off_minigrad(), steps=steps, warmup=3, raise_on_leak=True)
    # three measured steps judge it: the one-off lies between fewer than all the pairs
    assert check(one_off_minigrad(), steps=3, warmup=3).status == "clean"


def test_track_and_callbacks_with_steps_2_are_unmeasured_at_the_judged_step() -> None:
    check_ = LoopCheck(Settings(warmup=1), name="cb", steps=2, on_leak="return")
    check_.start(length=None)
    with pytest.warns(match="steps=2 is too few for a verdict"):
        for _ in range(6):
            check_.after_step()
        check_.finish()
    assert [r.status for r in check_.results] == ["unmeasured"] and not check_.active


def test_graphleak_check_steps_2_exits_unmeasured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "few_steps_mod.py").write_text(
        "import minigrad as mg\nW = mg.Tensor([1.0], requires_grad=True)\n"
        "def step():\n    (W * 2.0).sum().backward()\n    W.grad = None\n"
    )
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["check", "few_steps_mod.py::step", "--steps", "2", "--warmup", "1"])
    monkeypatch.delitem(sys.modules, "few_steps_mod", raising=False)
    assert code == EXIT_UNMEASURED, out.getvalue()
    text = folded(out.getvalue())
    assert "steps=2 is too few for a verdict" in text
    assert "fix: steps=3 or more (steps=2 came from command line option --steps)" in text, text


@pytest.mark.parametrize("steps", [1, 2])
def test_a_marker_with_too_few_steps_is_unmeasured_not_a_leak(
    pytester: pytest.Pytester, steps: int
) -> None:
    pytester.makepyfile(test_oneoff=ONE_OFF.replace("STEPS", str(steps)))
    result = pytester.runpytest_subprocess("--graphleak", *FAST)
    out = folded(result.stdout.str())
    assert result.ret == 1, out
    assert "leaks:" not in out and "+1/step" not in out
    # the short summary line: cut to the terminal's width, or whole where CI is set
    assert re.search(
        r"UNMEASURED test_oneoff\.py::test_oneoff - not measured(, so no "
        rf"verdict)?: steps={steps}\b",
        out,
    ), out
    assert (
        f"fix: steps=3 or more (steps={steps} came from "
        f"@pytest.mark.no_graph_growth(steps={steps}) on test_oneoff.py::test_oneoff)"
    ) in out


def test_graphleak_steps_2_is_unmeasured_and_steps_3_judges_the_one_off_clean(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_oneoff=ONE_OFF.replace("(steps=STEPS)", ""))
    result = pytester.runpytest_subprocess("--graphleak", "--graphleak-steps=2", *FAST)
    out = folded(result.stdout.str())
    assert result.ret == 1 and "leaks:" not in out, out
    assert "fix: steps=3 or more (steps=2 came from command line option --graphleak-steps)" in out
    # the one-off in the last measured step of three: no leak
    pytester.makepyfile(test_oneoff=ONE_OFF.replace("STEPS", "3").replace("== 5", "== 6"))
    result = pytester.runpytest_subprocess("--graphleak", *FAST)
    result.assert_outcomes(passed=1)
