"""torch's bundle: its probe, its diagnosis backend, its usage watcher, census hook and
creation-site recorder (``torch_sites.py``).

torch numbers its graph nodes in creation order (``_sequence_nr()``, one counter per
thread); the census reads the counter by making one node. Its probe counts only what
the step reaches or makes, so anything it counts is the step's use of torch; when torch
is loaded but not probed, ``TorchUse`` looks for torch tensors in the start set and
among what each step leaves alive.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.heap.graphwalk import grad_fn_of
from pytest_graphleak.probes.autograd.bundle import NODE, TENSOR, AutogradBundle, Backend
from pytest_graphleak.probes.autograd.torch_hooks import NodeHooks, reading
from pytest_graphleak.probes.autograd.torch_modules import MODULE_TABLES, recomputed_attributes
from pytest_graphleak.probes.autograd.torch_sites import site_recorder
from pytest_graphleak.probes.base import ProbeBase
from pytest_graphleak.probes.torch_probe import TorchProbe, fake_tensor_type, tensors_among


class TorchBackend(Backend):
    name = "torch"
    grows_in_place = True
    hooks_outside_python = True
    node_hook_tables = {"post_hooks": "register_hook", "pre_hooks": "register_prehook"}  # noqa: RUF012
    tensor_hook_tables = frozenset({(TENSOR, "_backward_hooks"), (TENSOR, "hooks")})
    ctx_is_grad_fn = True
    ctx_issue = "pytorch/pytorch#25340"

    def __init__(self, torch: Any) -> None:
        super().__init__()
        self.torch = torch
        #: Set while a search reads the hooks torch keeps on nodes in C++ (``torch_hooks``).
        self.node_hooks: NodeHooks | None = None
        self._ctx_type: type | None = getattr(torch.autograd.function, "BackwardCFunction", None)

    def is_ctx(self, node: object) -> bool:
        """The node of a custom ``torch.autograd.Function``: the ``ctx`` of its forward."""
        return self._ctx_type is not None and isinstance(node, self._ctx_type)

    def describe(self, obj: Any) -> str:
        text = super().describe(obj)
        return f"{text} (ctx)" if self.kind(obj) == NODE and self.is_ctx(obj) else text

    def _kind_of_type(self, tp: type, obj: object) -> str | None:
        if issubclass(tp, self.torch.Tensor):
            fake = fake_tensor_type()  # torch.compile's stand-ins: not the user's tensors
            return None if fake is not None and issubclass(tp, fake) else TENSOR
        # issubclass, not isinstance: an instance check reads ``obj.__class__``, which
        # some objects answer with a warning (torch.distributed.reduce_op).
        if issubclass(tp, self.torch.autograd.graph.Node):
            return NODE
        return None

    def is_module(self, obj: object) -> bool:
        return isinstance(obj, self.torch.nn.Module)

    has_members = True

    def member_tables(self, obj: Any) -> tuple[str, ...]:
        return MODULE_TABLES if self.is_module(obj) else ()

    def recomputed_members(self, obj: Any) -> set[str]:
        return recomputed_attributes(obj)

    def _tensor_name(self, tensor: Any) -> str:
        return "Parameter" if type(tensor).__name__ == "Parameter" else "Tensor"

    def data_bytes(self, tensor: Any) -> int:
        """The bytes of its storage (a view weighs what it keeps alive)."""
        return int(tensor.untyped_storage().nbytes())

    def sequence_nr(self, node: Any) -> int | None:
        try:
            return int(node._sequence_nr())
        except Exception:
            return None

    def node_number_now(self) -> int | None:
        return self.current_sequence_nr()

    @contextlib.contextmanager
    def reading_hooks(self) -> Iterator[object]:
        with reading(self.torch) as hooks:
            self.node_hooks = hooks
            try:
                yield hooks
            finally:
                self.node_hooks = None

    def ctx_attribute(self, node: Any, key: str) -> str | None:
        return key if self.is_ctx(node) and key != "run_function" else None

    def saves_own_output(self, node: Any) -> bool:
        return hasattr(node, "_saved_result")

    def current_sequence_nr(self) -> int:
        """The sequence number the next autograd node of this thread will get."""
        torch = self.torch
        # The cheapest op that makes a node (an empty leaf's neg, a few microseconds: the
        # census reads this twice per test); under a test's own no_grad or
        # inference_mode, the modes are lifted for it.
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            probe = torch.empty(0, requires_grad=True).neg()
        else:
            with torch.inference_mode(False), torch.enable_grad():
                probe = torch.empty(0, requires_grad=True).neg()
        return int(probe.grad_fn._sequence_nr()) + 1

    def grown_in_place(self, tensor: Any, before: int) -> bool:
        """An in-place op ran on it (its version moved), and the node it extended is none
        (the tensor had no graph) or one numbered before the test."""
        if self.kind(tensor) != TENSOR:
            return False
        try:
            if int(tensor._version) == 0:
                return False
            pairs = tensor.grad_fn.next_functions
        except Exception:
            return False
        first = pairs[0][0] if pairs else None
        if first is None:
            return True
        number = self.sequence_nr(first)
        return number is not None and number < before and type(first).__name__ != "AccumulateGrad"

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        grad_fn = grad_fn_of(t)
        if grad_fn is not None:
            yield Edge("grad_fn"), grad_fn
        hooks = getattr(t, "_backward_hooks", None)
        if hooks:
            yield Edge("attr", "_backward_hooks"), hooks
        try:  # .grad of a non-leaf warns and is None; is_leaf raises as grad_fn does
            grad = t.grad if t.is_leaf else None
        except Exception:
            grad = None
        if grad is not None:
            yield Edge("attr", "grad"), grad
        try:
            base = t._base
        except Exception:
            base = None
        if base is not None:
            yield Edge("attr", "_base"), base

    def _node_edges(self, node: Any) -> Iterator[tuple[Edge, object]]:
        variable = getattr(node, "variable", None)  # AccumulateGrad -> its leaf
        if variable is not None:
            yield Edge("attr", "variable"), variable
        if self.node_hooks is not None:  # grad_fn.register_hook / register_prehook
            for name, table in self.node_hooks.of(node):
                yield Edge("attr", name), table


class TorchUse(ProbeBase):
    """A metric-less probe: does the step reach or keep torch tensors although no torch
    probe runs? It looks at the start set and at the objects each step leaves alive,
    and stops looking once it has seen one."""

    name = "torch-use"
    needs_heap = True  # no metrics: it measures nothing the verdict judges

    def __init__(self) -> None:
        self.seen = ""

    def available(self) -> bool:
        return "torch" in sys.modules

    def _look(self, objects: Sequence[object], template: str) -> None:
        if self.seen or not objects:
            return
        found = tensors_among(objects)
        if found:
            self.seen = template.format(f"{len(found)} torch tensor(s)")
        found.clear()

    def start(self, heap: Sequence[object]) -> None:
        self._look(heap, "the step reaches {}")

    def absorb(self, fresh: Sequence[object]) -> None:
        self._look(fresh, "the step keeps {} alive")

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        self.absorb(fresh)
        return {}


def _backend(torch: Any) -> Backend | None:
    return TorchBackend(torch) if hasattr(torch, "autograd") else None


def _node_counter(torch: Any, end: bool) -> int | None:
    if not hasattr(torch, "autograd"):
        return None
    return TorchBackend(torch).current_sequence_nr() - (1 if end else 0)


BUNDLE = AutogradBundle(
    name="torch",
    probe=TorchProbe,
    backend=_backend,
    node_counter=_node_counter,
    packages=("torch",),
    forwards=(("torch/autograd/function.py", "apply"),),
    watcher=TorchUse,
    counts_step_only=True,
    site_recorder=site_recorder,
)
