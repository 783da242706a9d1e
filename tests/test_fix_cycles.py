"""Changes for a reference cycle through a closure (issue 44): the captured variable held
weakly, built from the source alone (``diagnose.fix_cycles``); the catalogue's hook and
lambda closures show the re-run verifying them (``tests/test_catalogue.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import minigrad  # noqa: F401  (imported once here: checks below run minigrad in process)
import pytest_graphleak
from pytest_graphleak.cli.patches import apply
from pytest_graphleak.diagnose.fix_cycles import cycle_closures, weak_captures
from pytest_graphleak.diagnose.fix_hooks import hook_edits, pack_hooks
from pytest_graphleak.diagnose.fix_source import changed_lines, read_source

HOOK = """\
def train(state):
    held = state.features()

    def save_cam(grad):
        state.cams = [(grad * held).sum()]  # reads held

    held.register_hook(save_cam)


def apply(x, weak=False):
    out = op(x)
    if weak:
        pass
    else:
        out._backward = lambda: out.grad
    return out
"""


def test_a_hook_and_a_lambda_read_their_captured_tensor_through_a_weak_reference(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.py"
    path.write_text(HOOK)
    source = read_source(str(path))
    assert source is not None
    # The hook captures state (a parameter of train) and held: each is an edit, and only
    # held is tried where the cycle runs through held's cell.
    edits = weak_captures(source, 4, weakref_name=None)
    assert [edit.shown for edit in edits] == [
        "state_ref = weakref.ref(state); state_ref().cams = [(grad * held).sum()]",
        "held_ref = weakref.ref(held); state.cams = [(grad * held_ref()).sum()]",
    ]
    cycle = [
        "Tensor(...).pre_hooks",
        "HookDict[1]",
        "function train.<locals>.save_cam closure 'held'",
        "Tensor(...) (the same object: the cycle closes)",
    ]
    assert cycle_closures(cycle) == ["held"]
    [held] = weak_captures(source, 4, weakref_name=None, on_cycle=cycle_closures(cycle))
    assert (held.first, held.last, held.kind) == (4, 5, "weak")
    assert changed_lines(source, held)[3:7] == [
        "    import weakref",
        "    held_ref = weakref.ref(held)",
        "    def save_cam(grad):",
        "        state.cams = [(grad * held_ref()).sum()]  # reads held",
    ]
    # The lambda inside an else block: only its own statement changes; the file's name
    # for weakref is used when it imports the module.
    [edit] = weak_captures(source, 15, weakref_name="wr")
    assert (edit.first, edit.last) == (15, 15)
    assert edit.new == (
        "        out_ref = wr.ref(out)",
        "        out._backward = lambda: out_ref().grad",
    )
    # A line with no closure defined on it: nothing to build.
    assert weak_captures(source, 2, weakref_name=None) == []


HOOKS = """\
import weakref


class Stats:
    def __init__(self, t, weak):
        self.mean = t.mean()
        self.mean.grad_fn.register_hook(self._on_grad)
        hook = other if weak else self._on_grad
        self.mean.register_hook(hook)

    def _on_grad(self, *grads):
        pass


def _identity(x):
    return x


def _scaled(x):
    return x * 2
"""


def test_a_bound_method_hook_is_read_weakly_and_a_pack_hook_returns_detached(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stats.py"
    path.write_text(HOOKS)
    source = read_source(str(path))
    assert source is not None
    bound = [
        "Tensor(...).grad_fn",
        "MeanBackward0.post_hooks",
        "OrderedDict[1]",
        "bound method Stats._on_grad.__self__",
        "Stats.mean",
        "Tensor(...) (the same object: the cycle closes)",
    ]
    direct, assigned = hook_edits(source, bound, weakref_name="weakref")
    weak = (
        "(lambda *args, **kwargs: on_grad_ref()(*args, **kwargs) if on_grad_ref() is "
        "not None else None)"
    )
    assert direct.new == (
        "        on_grad_ref = weakref.WeakMethod(self._on_grad)",
        f"        self.mean.grad_fn.register_hook({weak})",
    )
    # through a local name: only the read of the method changes, the other branch stays
    assert (assigned.first, assigned.last) == (8, 8)
    assert assigned.new[1] == f"        hook = other if weak else {weak}"
    packed = [
        "Tensor(...).grad_fn",
        f"ReluBackward0._saved_result (packed by saved-tensor pack hook _identity ({path}:15))",
        "Tensor(...) (the same object: ...)",
    ]
    assert pack_hooks(packed) == [("_identity", str(path), 15)]
    [detached] = hook_edits(source, packed, weakref_name=None)
    assert (detached.first, detached.kind) == (16, "detach")
    assert detached.new == ("    return x.detach()",)
    # a pack hook that does not return its argument as it is, or no hook link: nothing
    assert (
        hook_edits(
            source,
            [packed[1].replace("_identity", "_scaled").replace(":15", ":19")],
            weakref_name=None,
        )
        == []
    )
    assert hook_edits(source, ["Tensor(...).grad_fn", "SoftClipBackward (ctx).out"], None) == []


CHECKPOINTS = """\
from torch.utils.checkpoint import checkpoint


def step(state, x):
    features = {}

    def run_block(inp):
        features  # noqa: B018
        return state.block(inp)

    a = checkpoint(run_block, x, use_reentrant=state.reentrant)
    b = checkpoint(run_block,
                   x,)
    c = checkpoint(run_block, x, use_reentrant=False)
    d = checkpoint(other, x)
    return a, b, c, d
"""


def test_a_reentrant_checkpoint_keeping_a_closure_becomes_non_reentrant(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.py"
    path.write_text(CHECKPOINTS)
    source = read_source(str(path))
    assert source is not None
    cycle = [
        "Tensor(...)",
        "CheckpointFunctionBackward (ctx).run_function",
        "function step.<locals>.run_block closure 'features'",
        "dict['hidden']",
        "Tensor(...) (the same object: the cycle closes)",
    ]
    # the calls that pass run_block and are not already non-reentrant; not other's
    given, added = hook_edits(source, cycle, weakref_name=None)
    assert given.shown == "a = checkpoint(run_block, x, use_reentrant=False)"
    assert (added.first, added.last) == (12, 13)
    assert added.new == (
        "    b = checkpoint(run_block,",
        "                   x, use_reentrant=False)",
    )


UNHOOKED = """\
def step(state, x):
    out = state.model(x)
    seen = {"out": out}

    def save_cam(grad):
        seen["cam"] = (grad * seen["out"]).sum()

    out.register_hook(save_cam)
    loss = out.sum()
    if state.explain:
        loss.backward()
    state.after = 1


def kept(state, x):
    out = state.model(x)
    handle = out.register_hook(lambda g: g * out)
    out.sum().backward()


def never(state, x):
    out = state.model(x)
    out.register_hook(lambda g: g * out)
    return out


def branches(state, x):
    out = state.model(x)
    if state.explain:
        out.register_hook(lambda g: g * out)
    else:
        out.sum().backward()
"""


def test_a_hook_is_removed_with_its_handle_after_the_backward_that_follows_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "unhook.py"
    path.write_text(UNHOOKED)
    source = read_source(str(path))
    assert source is not None
    cycle = [
        "Tensor(...)._backward_hooks",
        "OrderedDict[1]",
        "function step.<locals>.save_cam closure 'seen'",
        "dict['out']",
        "Tensor(...) (the same object: the cycle closes)",
    ]
    # the closure defined on line 5, registered on line 8; the backward (inside an if)
    # follows in the same block: the handle kept, removed after that statement
    [edit] = hook_edits(source, cycle, weakref_name=None, lineno=5)
    assert (edit.first, edit.last, edit.kind) == (8, 11, "unhook")
    assert edit.new == (
        "    hook_handle = out.register_hook(save_cam)",
        "    loss = out.sum()",
        "    if state.explain:",
        "        loss.backward()",
        "    hook_handle.remove()",
    )
    assert edit.shown == (
        "hook_handle = out.register_hook(save_cam); then hook_handle.remove() "
        "after if state.explain: loss.backward()"
    )
    # a lambda whose handle is kept under a name: that name is removed
    [named] = hook_edits(source, cycle, weakref_name=None, lineno=17)
    assert named.new[-1] == "    handle.remove()" and named.last == 18
    # no backward after the registration in its block: no place to remove it
    assert hook_edits(source, cycle, weakref_name=None, lineno=23) == []
    # a backward in another block (the else of the if that registers it): nothing
    assert hook_edits(source, cycle, weakref_name=None, lineno=30) == []
    # no closure of the cycle on the line: nothing
    assert hook_edits(source, cycle, weakref_name=None, lineno=2) == []


CAM = """\
import numpy as np

import minigrad as mg
from minigrad import nn

net = nn.Linear(4, 3, rng=np.random.default_rng(0))
state = {"steps": 0, "cams": []}


def leaky_step():
    state["steps"] += 1
    out = net(mg.Tensor(np.ones((2, 4), dtype=np.float32)))
    seen = {"out": out}  # a dict: no weak reference can hold it

    def save_cam(grad):
        state["cams"] = [float((grad * seen["out"]).sum().item())]

    out.register_hook(save_cam)
    score = out.sum()
    if state["steps"] % 1000 == 0:  # explained now and then: minigrad drops run hooks
        score.backward()
"""


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"graphleak_unhook_{path.stat().st_mtime_ns}", path
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_hooks_removal_is_verified_where_no_weak_reference_can_hold(tmp_path: Path) -> None:
    """The closure captures a dict: holding it weakly raises in the re-run and is dropped;
    the hook's handle removed after the backward that follows its registration holds,
    and the file with that diff applied is clean."""
    path = tmp_path / "cam.py"
    path.write_text(CAM)
    result = pytest_graphleak.check(_load(path).leaky_step)
    assert result.diagnosis is not None and result.diagnosis.pattern == "cycle"
    fix = result.diagnosis.fix_tried
    assert fix is not None and fix.verified and fix.diff, fix
    assert fix.text == (
        f"{path}:18: hook_handle = out.register_hook(save_cam); then "
        'hook_handle.remove() after if state["steps"] % 1000 == 0: '
        "score.backward()"
    )
    apply(str(path), [fix.diff])
    assert "    hook_handle.remove()\n" in path.read_text()
    assert not pytest_graphleak.check(_load(path).leaky_step).leaked
