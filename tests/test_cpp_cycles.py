"""Cycles through autograd's C++ objects: a custom Function's ctx attribute, and hooks on a
graph node (``grad_fn.register_hook`` / ``register_prehook``) whose bound method holds the
object that holds the tensor. Each is ``cycle``, drawn with the link named, created at the
user's line, with the fix for that link; the node hook reader leaves torch as it was.

The catalogue pairs (``examples/torch_function_ctx_attribute.py``,
``examples/torch_grad_fn_hook_cache.py``) cover ``check()`` and the marker.
"""

from __future__ import annotations

import importlib
import itertools
from typing import TYPE_CHECKING, Any

import pytest

import pytest_graphleak
from pytest_graphleak.diagnose import diagnose
from pytest_graphleak.diagnose.classify import Facts, pattern_of
from pytest_graphleak.probes import METRICS
from pytest_graphleak.probes.autograd.torch_hooks import reading
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import Growth, Verdict

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")


class MeanCache:
    """Keeps a tensor's mean and logs its gradient from a hook on the mean's grad_fn."""

    def __init__(self, y: Any, how: str) -> None:
        self.seen = 0
        self.mean = y.mean()
        getattr(self.mean.grad_fn, how)(self._on_grad)

    def _on_grad(self, *grads: Any) -> None:
        self.seen += 1


def _hook_step(how: str) -> Any:
    lin = torch.nn.Linear(4, 4)

    def step() -> None:
        y = lin(torch.randn(8, 4))
        cache = MeanCache(y, how)
        (y.pow(2).sum() + cache.mean).backward()

    return step


@pytest.mark.parametrize(
    ("how", "table"), [("register_hook", "post_hooks"), ("register_prehook", "pre_hooks")]
)
def test_grad_fn_hook_with_a_bound_method_is_a_cycle(how: str, table: str) -> None:
    result = pytest_graphleak.check(_hook_step(how), steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "cycle", text
    cycle = " -> ".join(d.cycle)
    assert f"MeanBackward0.{table}" in cycle and "bound method MeanCache._on_grad" in cycle, text
    assert "MeanCache.mean" in cycle and "the cycle closes" in cycle, text
    assert any(f"grad_fn.{how}()" in n and "not even gc.collect()" in n for n in d.notes), text
    assert "weakref" in d.fix and "handle" in d.fix, text
    assert any("self.mean = y.mean()" in s.line and s.filename == __file__ for s in d.sites), text


class Doubling(torch.autograd.Function):
    if TYPE_CHECKING:  # torch's Function.apply is untyped; this one takes and gives a tensor

        @classmethod
        def apply(cls, x: torch.Tensor) -> torch.Tensor: ...

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        out = x * 2
        ctx.out = out
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * 2


def _ctx_step() -> Any:
    lin = torch.nn.Linear(3, 3)

    def step() -> None:
        y = Doubling.apply(lin(torch.randn(2, 3)))  # the line the creation site names
        y.sum().backward()

    return step


def test_ctx_attribute_is_a_cycle_with_the_save_for_backward_fix() -> None:
    result = pytest_graphleak.check(_ctx_step(), steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "cycle", text
    assert d.cycle[0].startswith("Tensor(shape=(2, 3), grad_fn=DoublingBackward)"), text
    assert d.cycle[1] == "DoublingBackward (ctx).out", text
    assert "ctx.save_for_backward(out)" in d.fix and "pytorch/pytorch#25340" in d.fix, text
    assert any("Doubling.apply(" in s.line and s.filename == __file__ for s in d.sites), text


def test_a_loop_of_unknown_length_draws_the_cycle_inside_the_loop() -> None:
    step = _ctx_step()
    with pytest_graphleak.track() as t:
        for _ in range(40):
            step()
            t.step()
    assert t.result is not None and t.result.leaked
    d = t.result.diagnosis
    assert d is not None and d.pattern == "cycle", render_text(t.result)
    assert not d.chain  # a container of older tensors is not what grew
    assert d.cycle[1] == "DoublingBackward (ctx).out", render_text(t.result)


@pytest.mark.parametrize("shape", ["ctx", "hook"])
def test_a_loop_of_known_length_draws_the_cycle_its_collections_freed(shape: str) -> None:
    step = _ctx_step() if shape == "ctx" else _hook_step("register_hook")
    with pytest_graphleak.track(steps=10) as t:
        for _ in range(16):
            step()
            t.step()
    assert t.result is not None and t.result.leaked
    text = render_text(t.result)
    d = t.result.diagnosis
    assert d is not None and d.pattern == "cycle", text
    if shape == "ctx":  # freed by the check's own collection after each step
        assert d.cycle[1] == "DoublingBackward (ctx).out", text
        assert any("freed only by the check's gc.collect()" in n for n in d.notes), text
        assert any("Doubling.apply(" in s.line and s.filename == __file__ for s in d.sites), text
    else:  # never freed: alive at the judged step
        assert any("MeanBackward0.post_hooks" in link for link in d.cycle), text
        assert any("self.mean = y.mean()" in s.line for s in d.sites), text
    series = t.result.series["gc.cyclic_garbage"] if shape == "ctx" else []
    assert all(b > a for a, b in itertools.pairwise(series)), series  # every step counted


def test_the_heap_as_it_is_calls_only_cyclic_growth_a_cycle() -> None:
    """No step, no recorded steps: a list of older tensors the roots reach is not what
    grew (it read list-accumulation of an optimizer's parameter list before)."""
    model = torch.nn.Linear(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    verdict = Verdict(leaked=True, growths=[Growth("gc.cyclic_garbage", 1, 20, 1)])
    d = diagnose(verdict, metrics=METRICS, step=None, roots={"local 'opt'": opt})
    assert d.pattern == "cycle" and not d.chain, d
    assert any("graphleak.check(step)" in note for note in d.notes), d.notes


def test_only_cyclic_growth_decides_cycle() -> None:
    verdict = Verdict(leaked=True, growths=[Growth("gc.cyclic_garbage", 1, 20, 1)])
    assert pattern_of(verdict, Facts(graph_grew=False, only_cycles=True)) == "cycle"
    assert pattern_of(verdict, Facts(graph_grew=False)) == "memory-growth"


def test_reading_node_hooks_changes_nothing() -> None:
    mixin = torch.autograd.function._HookMixin
    original = vars(mixin)["_register_hook"]
    x = torch.ones(3, requires_grad=True)
    hooked, bare = x.exp(), x.sin()
    assert hooked.grad_fn is not None and bare.grad_fn is not None
    calls: list[int] = []
    hooked.grad_fn.register_prehook(lambda *g: calls.append(1))
    with reading(torch) as hooks:
        assert hooks is not None
        found = hooks.of(hooked.grad_fn)
        assert [name for name, _ in found] == ["pre_hooks"] and len(found[0][1]) == 1
        assert hooks.of(bare.grad_fn) == [] and hooks.of(bare.grad_fn) == []
        # the user's own registrations pass through while the reader is installed
        bare.grad_fn.register_hook(lambda *g: calls.append(2))
    assert vars(mixin)["_register_hook"] is original
    (hooked.sum() + bare.sum()).backward()
    assert sorted(calls) == [1, 2]  # the placeholder was never registered anywhere


def test_diagnose_restores_the_hook_registration_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_graphleak.diagnose.cycles as cycles

    original = vars(torch.autograd.function._HookMixin)["_register_hook"]

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("search failed")

    monkeypatch.setattr(cycles, "_search", boom)
    verdict = Verdict(leaked=True, growths=[Growth("torch.tensors", 1, 20, 1)])
    with pytest.raises(RuntimeError, match="search failed"):
        diagnose(verdict, metrics=METRICS, step=_hook_step("register_hook"), roots={})
    assert vars(torch.autograd.function._HookMixin)["_register_hook"] is original


def test_minigrad_function_keeping_its_output_through_ctx_is_a_cycle() -> None:
    """minigrad's forward works on arrays, so ``ctx.out = out`` keeps an array; the cycle
    needs an object on ctx that holds the output, and lives while no backward releases the
    node (a forward-only evaluation)."""
    import numpy as np

    import minigrad as mg

    class Record:
        out: Any = None

    class Scale(mg.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, record: Any) -> Any:
            ctx.record = record
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad * 2, None

    w = mg.Tensor(np.ones(3, dtype=np.float32), requires_grad=True)

    def step() -> None:
        record = Record()
        record.out = Scale.apply(w * 1.0, record)

    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "cycle", text
    assert any(".ctx.record" in link for link in d.cycle) and "Record.out" in " ".join(d.cycle)
    assert "Scale.forward" in d.fix and "ctx.record" in d.fix, text
    assert any("record.out = Scale.apply(w * 1.0, record)" in s.line for s in d.sites), text


_SOLVER = """
import torch


def _euler(func, y0, t):
    ys = [y0]
    for i in range(len(t) - 1):
        ys.append(ys[-1] + (t[i + 1] - t[i]) * func(t[i], ys[-1]))
    return torch.stack(ys)


class Adjoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, func, y0, t, *params):
        ctx.func = func  # the adjoint's backward calls the dynamics again
        with torch.no_grad():
            ys = _euler(func, y0, t)
        ctx.save_for_backward(t, ys)
        return ys

    @staticmethod
    def backward(ctx, grad_ys):
        params = tuple(ctx.func.parameters())
        return (None, grad_ys.sum(0), None, *[torch.zeros_like(p) for p in params])


def odeint_adjoint(func, y0, t):
    return Adjoint.apply(func, y0, t, *func.parameters())
"""

_USER = """
import torch
from {library} import odeint_adjoint


class Flow(torch.nn.Module):
    def __init__(self, net, cond):
        super().__init__()
        self.net = net
        self.cond = cond

    def forward(self, t, x):
        return self.net(x + self.cond)

    def trajectory(self, x0, t):
        xt = odeint_adjoint(self, x0, t)
        self.xt = {kept}
        return xt


NET = torch.nn.Linear(4, 4)
T = torch.linspace(0, 1, 4)


def step():
    cond = torch.randn(8, 4)
    xt = Flow(NET, cond).trajectory(torch.randn(8, 4), T)
    xt[-1].pow(2).mean().backward()
"""


_MODULES = itertools.count()


def _ode_step(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, kept: str) -> tuple[Any, str]:
    """A neural-ODE adjoint in a "library" (a package under a ``site-packages`` folder, so
    not the user's code) whose ctx keeps the user's dynamics, which keeps the output."""
    tag = next(_MODULES)
    library = tmp_path / "site-packages" / f"odelib_{tag}"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(_SOLVER, encoding="utf-8")
    user = tmp_path / f"flow_{tag}.py"
    user.write_text(_USER.format(library=library.name, kept=kept), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(user.stem).step, str(user)


def test_a_library_functions_ctx_cycle_is_fixed_at_the_users_own_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 6: ``created at:`` is the user's call into the library, and the fix
    is the user's one line; the library's ``forward`` is in the note, not the fix."""
    step, user = _ode_step(tmp_path, monkeypatch, "xt")
    result = pytest_graphleak.check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "cycle", text
    assert d.cycle[1] == "AdjointBackward (ctx).func" and d.cycle[2] == "Flow.xt", text
    assert d.sites[0].filename == user, text
    assert d.sites[0].line == "xt = odeint_adjoint(self, x0, t)", text
    assert d.fix.startswith("store Flow.xt without its graph: self.xt = xt.detach() ("), text
    assert "Adjoint.forward" not in d.fix and "ctx.save_for_backward" not in d.fix, text
    assert any(
        "Function Adjoint of odelib_" in note and "your Flow.xt" in note for note in d.notes
    ), text
    fixed, _ = _ode_step(tmp_path, monkeypatch, "xt.detach()")
    assert not pytest_graphleak.check(fixed, steps=8).leaked
