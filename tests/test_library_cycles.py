"""Issue 42 item 3: a library's own per-call reference cycles are not the user's leak.

An SDE solver shaped like torchsde's (in a "library": a package under a ``site-packages``
folder, so not the user's code, as ``heap/usercode.py`` decides) makes on every call a
Brownian interval tree whose intervals refer to their parent and children, and a module
that keeps its own bound methods as attributes. The tree holds noise tensors made without
a graph (``torch.randn``), so only ``gc.cyclic_garbage`` grows. Such a step passes, with a
note; the same step with a real list leak fails as ``list-accumulation`` with its
``stored at:`` line; a cycle of the user's (a hook closure holding its tensor, an object
of the user's holding itself) still fails as ``cycle``, drawn through the user's objects.
The minigrad twins check the same through the bundled engine.
"""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path
from typing import Any

import pytest
from suite_helpers import FAST, folded

import pytest_graphleak
from pytest_graphleak.metrics import Metric
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import Growth, Verdict
from pytest_graphleak.verdict import withdraw

_SOLVER = '''
"""A tiny SDE solver shaped like torchsde's: per-call reference cycles holding noise."""
import {engine} as _engine


class _Interval:
    def __init__(self, parent, start, end):
        self._parent = parent
        self._children = []
        self._start, self._end = start, end
        self._w = {noise}
        if parent is not None:
            parent._children.append(self)


class BrownianInterval:
    def __init__(self, t0, t1, depth=3):
        self._top = _Interval(None, t0, t1)
        level = [self._top]
        for _ in range(depth):
            nxt = []
            for iv in level:
                mid = (iv._start + iv._end) / 2
                nxt += [_Interval(iv, iv._start, mid), _Interval(iv, mid, iv._end)]
            level = nxt
        self._leaves = level
        self._top._tree = self

    def __call__(self, i):
        return self._leaves[i % len(self._leaves)]._w


class ForwardSDE:
    def __init__(self, sde):
        self._base_sde = sde
        self._is_full_backward_hook = None
        self.f = self._f  # a bound method kept on its own object: a cycle

    def _f(self, y):
        return self._base_sde.f(y)


def sdeint(sde, y0, steps=5, dt=0.2):
    fwd = ForwardSDE(sde)
    bm = BrownianInterval(0.0, 1.0)
    y, ys = y0, []
    for i in range(steps):
        y = y + fwd.f(y) * dt + bm(i) * 0.1
        ys.append(y)
    fwd.last = {kept}  # what a graph-keeping library would hold in its own cycle
    return ys
'''

_TORCH_NOISE = "_engine.randn(4, 3) * abs(end - start) ** 0.5"
_MG_NOISE = "_engine.Tensor(__import__('numpy').random.randn(4, 3) * abs(end - start) ** 0.5)"

_USER_TORCH = """
import torch
import {library} as sdelib

lin = torch.nn.Linear(3, 3)


class SDE:
    def f(self, y):
        return lin(y)


sde = SDE()
history = []


def step():
    ys = sdelib.sdeint(sde, torch.zeros(4, 3))
    loss = ys[-1].pow(2).mean()
    loss.backward()
    lin.weight.grad = None
    {extra}
"""

_USER_MG = """
import numpy as np
import minigrad as mg
import {library} as sdelib

w = mg.Tensor(np.eye(3) * 0.5, requires_grad=True)


class SDE:
    def f(self, y):
        return y @ w


sde = SDE()
history = []


def step():
    ys = sdelib.sdeint(sde, mg.Tensor(np.zeros((4, 3))))
    loss = (ys[-1] * ys[-1]).mean()
    loss.backward()
    w.grad = None
    {extra}
"""


_USER_CYCLE = """

class Noise:
    def __init__(self):
        self.eps = {noise}
        self.me = self
"""

_MODULES = itertools.count()


def _sde_step(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    engine: str = "torch",
    extra: str = "",
    kept: str = "None",
    user_extra: str = "",
) -> tuple[Any, Path]:
    """The user's step and file; the solver is a library (under ``site-packages``)."""
    tag = next(_MODULES)
    library = tmp_path / "site-packages" / f"sdelib_{tag}"
    library.mkdir(parents=True)
    noise = _TORCH_NOISE if engine == "torch" else _MG_NOISE
    mod = "torch" if engine == "torch" else "minigrad"
    (library / "__init__.py").write_text(
        _SOLVER.format(engine=mod, noise=noise, kept=kept), encoding="utf-8"
    )
    user = tmp_path / f"user_sde_{tag}.py"
    source = (_USER_TORCH if engine == "torch" else _USER_MG).format(
        library=library.name, extra=extra or "pass"
    )
    user.write_text(source + user_extra, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(user.stem).step, user


_CHURN = "makes 15 tensors a step that only the cyclic collector frees"


@pytest.mark.parametrize("engine", ["torch", "minigrad"])
def test_a_librarys_own_cycles_of_noise_pass_with_a_note(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine == "torch":
        pytest.importorskip("torch")
    step, _ = _sde_step(tmp_path, monkeypatch, engine=engine)
    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    assert not result.leaked and result.diagnosis is None, text
    assert result.verdict.reason.startswith("clean: the library sdelib_"), text
    assert _CHURN in result.verdict.reason, text
    assert "none of your objects is on those cycles" in result.verdict.reason, text


@pytest.mark.parametrize("engine", ["torch", "minigrad"])
def test_a_list_leak_beside_a_librarys_cycles_is_list_accumulation(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine == "torch":
        pytest.importorskip("torch")
    step, user = _sde_step(tmp_path, monkeypatch, engine=engine, extra="history.append(loss)")
    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert result.leaked and d is not None and d.pattern == "list-accumulation", text
    assert d.stored_at and d.stored_at[0].line == "history.append(loss)", text
    assert d.stored_at[0].filename == str(user), text
    assert d.fix.startswith("store loss.item()"), text
    assert not d.cycle and _CHURN in d.library_cycles, text
    assert "gc.cyclic_garbage" not in [g.metric for g in result.verdict.growths], text
    assert any(_CHURN in note for note in d.notes), text


def test_a_users_hook_cycle_beside_a_librarys_cycles_is_a_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cycle drawn is the user's hook closure that holds the graph, not the
    library's interval tree."""
    pytest.importorskip("torch")
    hooked = "y = lin(torch.ones(2, 3)) * 2\n    y.register_hook(lambda g: g * y.detach().sign())"
    step, _ = _sde_step(tmp_path, monkeypatch, extra=hooked)
    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert result.leaked and d is not None and d.pattern == "cycle", text
    cycle = " -> ".join(d.cycle)
    assert "_backward_hooks" in cycle and "closure 'y'" in cycle, text
    assert "_Interval" not in cycle, text
    assert d.fix.startswith("capture tensor.detach()"), text
    assert any(_CHURN in note for note in d.notes), text


@pytest.mark.parametrize("engine", ["torch", "minigrad"])
def test_a_users_own_cycle_of_tensors_without_a_graph_is_still_a_cycle(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object of the user's on the cycle: the user can break it, so it fails, and
    the cycle drawn is the user's (``Noise.me``), not the library's."""
    if engine == "torch":
        pytest.importorskip("torch")
    noise = "torch.randn(4, 3)" if engine == "torch" else "mg.Tensor(np.ones((4, 3)))"
    step, _ = _sde_step(
        tmp_path,
        monkeypatch,
        engine=engine,
        extra="Noise()",
        user_extra=_USER_CYCLE.format(noise=noise),
    )
    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert result.leaked and d is not None and d.pattern == "cycle", text
    assert d.cycle[0] == "Noise.me", text
    assert "Noise.eps holds Tensor(shape=(4, 3))" in d.cycle[-1], text
    assert any(_CHURN in note for note in d.notes), text


def test_a_librarys_cycle_that_keeps_a_graph_is_drawn_as_the_librarys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42 item 7: the cycle text writes the library's objects as the library's,
    and names no attribute that holds nothing (``_is_full_backward_hook holds NoneType``)."""
    pytest.importorskip("torch")
    step, _ = _sde_step(tmp_path, monkeypatch, kept="y")
    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert result.leaked and d is not None and d.pattern == "cycle", text
    cycle = " -> ".join(d.cycle)
    assert "NoneType" not in cycle and "_is_full_backward_hook" not in cycle, text
    assert cycle.startswith("sdelib_"), text
    assert "'s ForwardSDE." in cycle, text
    assert "holds Tensor(shape=(4, 3), grad_fn=" in cycle, text


def test_a_loop_passes_a_librarys_own_cycles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``track()`` records its last steps and sorts what its collections free the same way."""
    pytest.importorskip("torch")
    step, _ = _sde_step(tmp_path, monkeypatch)
    with pytest_graphleak.track() as tracked:
        for _ in range(30):
            step()
            tracked.step()
    result = tracked.result
    assert result is not None
    assert not result.leaked, render_text(result)
    assert _CHURN in result.verdict.reason


def test_the_marker_passes_a_librarys_cycles_and_fails_the_users_list(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("torch")
    library = pytester.path / "site-packages" / "sdelib_marker"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(
        _SOLVER.format(engine="torch", noise=_TORCH_NOISE, kept="None"), encoding="utf-8"
    )
    pytester.makeconftest(
        "import sys, pathlib\n"
        "sys.path.insert(0, str(pathlib.Path(__file__).parent / 'site-packages'))\n"
    )
    body = _USER_TORCH.format(library="sdelib_marker", extra="pass")
    pytester.makepyfile(
        test_sde=body
        + """

import pytest


@pytest.mark.no_graph_growth
def test_solver():
    step()


@pytest.mark.no_graph_growth
def test_solver_keeps_losses():
    step()
    history.append(lin(torch.zeros(1, 3)).sum())
"""
    )
    result = pytester.runpytest_subprocess("--graphleak", *FAST)
    result.assert_outcomes(passed=1, failed=1)
    out = folded(result.stdout.str())
    assert "test_solver_keeps_losses leaks: list-accumulation" in out, out
    assert "stored at: test_sde.py:" in out, out
    assert "history.append(lin(torch.zeros(1, 3)).sum())" in out, out
    assert "test_solver leaks" not in out.replace("test_solver_keeps_losses leaks", "")


def test_withdraw_drops_only_the_growth_of_the_metrics_it_names() -> None:
    metrics = {
        "gc.cyclic_garbage": Metric("gc.cyclic_garbage", "objects", "cycles"),
        "t.tensors": Metric("t.tensors", "objects", "tensors"),
    }
    cyclic = Growth("gc.cyclic_garbage", 15, 120, 15.0)
    tensors = Growth("t.tensors", 1, 8, 1.0)
    only = Verdict(leaked=True, growths=[cyclic], pattern="cycle", reason="grew")
    clean = withdraw(only, metrics, "cycles", "the library's")
    assert not clean.leaked and clean.reason == "clean: the library's" and not clean.growths
    both = Verdict(leaked=True, growths=[tensors, cyclic], pattern="cycle", reason="grew")
    left = withdraw(both, metrics, "cycles", "the library's")
    assert left.leaked and left.growths == [tensors] and left.pattern == "list-accumulation"
    assert left.reason == "grew; the library's"
    none = Verdict(leaked=True, growths=[tensors], pattern="list-accumulation", reason="grew")
    assert withdraw(none, metrics, "cycles", "x") is none
