"""Changes for a reference cycle through a closure (issue 44): the captured variable held
weakly, built from the source alone (``diagnose.fix_cycles``); the catalogue's hook and
lambda closures show the re-run verifying them (``tests/test_catalogue.py``)."""

from __future__ import annotations

from pathlib import Path

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
    cycle = ["Tensor(...).pre_hooks", "HookDict[1]", "function train.<locals>.save_cam "
             "closure 'held'", "Tensor(...) (the same object: the cycle closes)"]
    assert cycle_closures(cycle) == ["held"]
    [held] = weak_captures(source, 4, weakref_name=None, on_cycle=cycle_closures(cycle))
    assert (held.first, held.last, held.kind) == (4, 5, "weak")
    assert changed_lines(source, held)[3:7] == [
        "    import weakref", "    held_ref = weakref.ref(held)", "    def save_cam(grad):",
        "        state.cams = [(grad * held_ref()).sum()]  # reads held"]
    # The lambda inside an else block: only its own statement changes; the file's name
    # for weakref is used when it imports the module.
    [edit] = weak_captures(source, 15, weakref_name="wr")
    assert (edit.first, edit.last) == (15, 15)
    assert edit.new == ("        out_ref = wr.ref(out)",
                        "        out._backward = lambda: out_ref().grad")
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
    bound = ["Tensor(...).grad_fn", "MeanBackward0.post_hooks", "OrderedDict[1]",
             "bound method Stats._on_grad.__self__", "Stats.mean",
             "Tensor(...) (the same object: the cycle closes)"]  # fmt: skip
    direct, assigned = hook_edits(source, bound, weakref_name="weakref")
    weak = ("(lambda *args, **kwargs: on_grad_ref()(*args, **kwargs) if on_grad_ref() is "
            "not None else None)")
    assert direct.new == ("        on_grad_ref = weakref.WeakMethod(self._on_grad)",
                          f"        self.mean.grad_fn.register_hook({weak})")
    # through a local name: only the read of the method changes, the other branch stays
    assert (assigned.first, assigned.last) == (8, 8)
    assert assigned.new[1] == f"        hook = other if weak else {weak}"
    packed = ["Tensor(...).grad_fn", f"ReluBackward0._saved_result (packed by saved-tensor "
              f"pack hook _identity ({path}:15))", "Tensor(...) (the same object: ...)"]
    assert pack_hooks(packed) == [("_identity", str(path), 15)]
    [detached] = hook_edits(source, packed, weakref_name=None)
    assert (detached.first, detached.kind) == (16, "detach")
    assert detached.new == ("    return x.detach()",)
    # a pack hook that does not return its argument as it is, or no hook link: nothing
    assert hook_edits(source, [packed[1].replace("_identity", "_scaled").replace(":15", ":19")],
                      weakref_name=None) == []  # fmt: skip
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
    cycle = ["Tensor(...)", "CheckpointFunctionBackward (ctx).run_function",
             "function step.<locals>.run_block closure 'features'", "dict['hidden']",
             "Tensor(...) (the same object: the cycle closes)"]  # fmt: skip
    # the calls that pass run_block and are not already non-reentrant; not other's
    given, added = hook_edits(source, cycle, weakref_name=None)
    assert given.shown == "a = checkpoint(run_block, x, use_reentrant=False)"
    assert (added.first, added.last) == (12, 13)
    assert added.new == ("    b = checkpoint(run_block,",
                         "                   x, use_reentrant=False)")
