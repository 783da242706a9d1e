"""What the diagnosis needs to know about torch and minigrad objects.

Each backend answers, per object: is it a tensor or a graph node, how to describe it in
one line, and which labelled references lead out of it (``grad_fn``, ``next_functions``,
hooks, user attributes). A backend is active only when its library is already imported:
the diagnosis never imports torch just to look.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from pytest_graphleak.diagnose.edges import PROXY_TYPES, Edge
from pytest_graphleak.diagnose.torch_hooks import NodeHooks
from pytest_graphleak.probes.torch_probe import fake_tensor_type

#: Kinds of objects a backend recognises.
TENSOR = "tensor"
NODE = "node"


class Backend:
    """Base class: recognises nothing."""

    name = "none"

    def __init__(self) -> None:
        self._kinds: dict[type, str | None] = {}

    def kind(self, obj: object) -> str | None:
        """``TENSOR``, ``NODE`` or None; cached per type (isinstance on ABCs is slow)."""
        tp = type(obj)
        try:
            return self._kinds[tp]
        except KeyError:
            # A weakref.proxy passes isinstance checks on to its referent (and raises
            # ReferenceError once it is dead): it is a weak reference, never a tensor.
            kind = None if tp in PROXY_TYPES else self._kind_of_type(tp, obj)
            self._kinds[tp] = kind
            return kind

    def _kind_of_type(self, tp: type, obj: object) -> str | None:
        return None

    def describe(self, obj: Any) -> str:
        if self.kind(obj) == NODE:
            return self.node_name(obj)
        name = self._tensor_name(obj)
        try:
            shape = str(tuple(int(n) for n in obj.shape))
        except Exception:
            shape = "?"
        grad_fn = obj.grad_fn
        if grad_fn is not None:
            return f"{name}(shape={shape}, grad_fn={self.node_name(grad_fn)})"
        if obj.requires_grad:
            return f"{name}(shape={shape}, requires_grad=True)"
        return f"{name}(shape={shape})"

    def _tensor_name(self, tensor: Any) -> str:
        return "Tensor"

    def edges(self, obj: Any) -> Iterator[tuple[Edge, object]]:
        """Backend-specific references first, then user attributes (a custom Function's
        ctx on a torch node); a node's inputs come first of all."""
        kind = self.kind(obj)
        if kind == TENSOR:
            yield from self._tensor_edges(obj)
        elif kind == NODE:
            try:
                pairs = obj.next_functions
            except Exception:  # a released, foreign or exotic node
                pairs = ()
            for i, (child, _) in enumerate(pairs):
                if child is not None:
                    yield Edge("next", i), child
            yield from self._node_edges(obj)
        if kind is not None and isinstance(attrs := getattr(obj, "__dict__", None), dict):
            for key, value in list(attrs.items()):  # a copy: the dict may change meanwhile
                yield Edge("attr", str(key)), value

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        raise NotImplementedError

    def _node_edges(self, node: Any) -> Iterator[tuple[Edge, object]]:
        raise NotImplementedError

    def node_name(self, node: Any) -> str:
        return type(node).__name__


class TorchBackend(Backend):
    name = "torch"

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

    def _tensor_name(self, tensor: Any) -> str:
        return "Parameter" if type(tensor).__name__ == "Parameter" else "Tensor"

    def sequence_nr(self, node: Any) -> int | None:
        try:
            return int(node._sequence_nr())
        except Exception:
            return None

    def current_sequence_nr(self) -> int:
        """The sequence number the next autograd node of this thread will get."""
        torch = self.torch
        # inference_mode(False): also under a test's own inference_mode, the probe gets a node
        with torch.inference_mode(False), torch.enable_grad():
            probe = torch.zeros((), requires_grad=True).mul(1)
        return int(probe.grad_fn._sequence_nr()) + 1

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        grad_fn = t.grad_fn
        if grad_fn is not None:
            yield Edge("grad_fn"), grad_fn
        hooks = getattr(t, "_backward_hooks", None)
        if hooks:
            yield Edge("attr", "_backward_hooks"), hooks
        grad = t.grad if t.is_leaf else None  # .grad of a non-leaf warns and is None
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


class MinigradBackend(Backend):
    name = "minigrad"

    def __init__(self, mg: Any) -> None:
        super().__init__()
        self.mg = mg

    def _kind_of_type(self, tp: type, obj: object) -> str | None:
        if issubclass(tp, self.mg.Tensor):
            return TENSOR
        if issubclass(tp, self.mg.Node):
            return NODE
        return None

    def creation_site(self, obj: Any) -> tuple[str, int] | None:
        try:
            return self.mg.creation_site(obj)
        except Exception:
            return None

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        # The handle's internals (TensorImpl, AutogradMeta) are shown as the public
        # attributes they stand for: grad_fn, grad, hooks.
        meta = t._meta
        if meta is not None:
            if meta.grad_fn is not None:
                yield Edge("grad_fn"), meta.grad_fn
            if meta.grad is not None:
                yield Edge("attr", "grad"), meta.grad
            if meta.hooks:
                yield Edge("attr", "hooks"), meta.hooks

    def _node_edges(self, node: Any) -> Iterator[tuple[Edge, object]]:
        if node.pre_hooks:
            yield Edge("attr", "pre_hooks"), node.pre_hooks
        saved = node.saved
        if isinstance(saved, self.mg.FunctionCtx):  # a custom Function's ctx: user attributes
            for key, value in list(vars(saved).items()):
                if key != "saved_tensors":
                    yield Edge("attr", f"ctx.{key}"), value


def _torch(torch: Any) -> Backend | None:
    return TorchBackend(torch) if hasattr(torch, "autograd") else None


def _minigrad(mg: Any) -> Backend | None:
    return MinigradBackend(mg) if hasattr(mg, "Tensor") and hasattr(mg, "Node") else None


#: The diagnosis engine of each autograd library a probe measures (``probes.BACKENDS``;
#: ``tests/test_probes.py`` holds the two to each other): the imported module -> its
#: backend, or None for a module that is not the library (a stub of the same name).
ENGINES: dict[str, Callable[[Any], Backend | None]] = {"torch": _torch, "minigrad": _minigrad}


def active_backends() -> list[Backend]:
    """Backends whose library is already imported (never imports one to look)."""
    found: list[Backend] = []
    for library, engine in ENGINES.items():
        module = sys.modules.get(library)
        if module is not None and (backend := engine(module)) is not None:
            found.append(backend)
    return found
