"""Graph nodes, grad mode, custom Functions and the backward engine.

The graph is a DAG of ``Node`` objects. A node holds the numpy arrays its backward needs
(``saved``) and one edge per input (``next_nodes``: the input's node, or ``None`` where no
gradient flows). It never refers to its output tensor, so the graph has no reference
cycle: it is freed by reference counting alone, as soon as the last tensor whose
``grad_fn`` reaches it goes away. A leaf's gradient arrives through an ``AccumulateGrad``
node; the leaf's AutogradMeta owns that node and the node refers back to the meta only
weakly.

Edges: ``node.next_nodes`` is a tuple aligned with the op's inputs. ``node.next_functions``
mirrors torch (``((node_or_None, 0), ...)``) for tools written against torch.

``backward`` runs iteratively in topological order (dependency counts, no recursion: a
100k-node chain is fine). With ``retain_graph=False`` each node, once run, drops its saved
arrays and its edges, so the graph behind a loss is cut as backward proceeds; running
backward again through such a node raises ``RuntimeError``.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar

import numpy as np

from minigrad.counters import COUNTS, NODE_CREATED, NODE_FREED, RECORDING, user_site

if TYPE_CHECKING:
    from minigrad.tensor import AutogradMeta, Tensor, TensorImpl

P = ParamSpec("P")
R = TypeVar("R")


# --------------------------------------------------------------------------- grad mode
class _GradMode(threading.local):
    """Per-thread switch, as in torch: ``no_grad`` in one thread does not affect another."""

    enabled: bool = True


GRAD_MODE = _GradMode()


def is_grad_enabled() -> bool:
    return GRAD_MODE.enabled


class set_grad_enabled:
    """Context manager (and decorator) that sets grad mode, restoring it on exit."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(GRAD_MODE.enabled)
        GRAD_MODE.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        GRAD_MODE.enabled = self._previous.pop()

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(set_grad_enabled):
    """Ops inside record no graph: ``with mg.no_grad(): ...`` or ``@mg.no_grad()``."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    def __init__(self) -> None:
        super().__init__(True)


# --------------------------------------------------------------------------- nodes
class Node:
    """One recorded op. Subclasses are named ``<Op>Backward`` and implement ``backward``.

    ``backward(grad)`` receives the gradient of the op's output (a numpy array) and returns
    a tuple aligned with ``next_nodes``: the gradient for each input, ``None`` where the
    edge is ``None`` (no gradient wanted there).
    """

    __slots__ = ("__weakref__", "_site", "next_nodes", "pre_hooks", "saved", "sequence_nr")

    def __init__(self, next_nodes: tuple[Node | None, ...]) -> None:
        self.next_nodes: tuple[Node | None, ...] | None = next_nodes
        self.saved: Any = None
        self.pre_hooks: HookDict | None = None
        # The node's place in creation order, process-wide (torch's ``_sequence_nr()``
        # is per thread): what was made between two readings of ``stats()["Node"]
        # ["created"]`` is told apart from older nodes without a heap scan.
        self.sequence_nr: int = COUNTS[NODE_CREATED]
        COUNTS[NODE_CREATED] += 1
        if RECORDING[0]:
            self._site = user_site()

    def __del__(self) -> None:
        COUNTS[NODE_FREED] += 1

    def backward(self, grad: np.ndarray) -> tuple[np.ndarray | None, ...]:
        raise NotImplementedError(f"{type(self).__name__}.backward")

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def released(self) -> bool:
        """True once a backward without ``retain_graph`` has run (or ``unchain_backward``)."""
        return self.next_nodes is None

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        """torch-style edges: ``((node_or_None, 0), ...)``; empty once released."""
        return tuple((n, 0) for n in self.next_nodes or ())

    def release(self) -> None:
        """Drop saved arrays and edges: the graph behind this node is cut."""
        self.saved = None
        self.next_nodes = None
        self.pre_hooks = None

    def __repr__(self) -> str:
        state = " released" if self.next_nodes is None else ""
        return f"<{type(self).__name__}{state}>"


class AccumulateGrad(Node):
    """Sink of a leaf: adds the incoming gradient to the leaf's ``.grad``.

    Owned (strongly) by the leaf's AutogradMeta; refers back to it weakly, so a leaf and its
    accumulator form no cycle. If the leaf is gone, the gradient is dropped.

    The gradient takes the leaf's dtype, as torch's does (a float32 parameter used with a
    float64 tensor gets a float32 ``.grad``, not the promoted float64), before the leaf's
    hooks see it; ``impl_ref`` (weak) reads the leaf's storage's dtype as it is then, after
    a ``.data = ...`` too.
    """

    __slots__ = ("impl_ref", "meta_ref")

    def __init__(self, meta: AutogradMeta, impl: TensorImpl) -> None:
        super().__init__(())
        self.meta_ref = weakref.ref(meta)
        self.impl_ref = weakref.ref(impl)

    def backward(self, grad: np.ndarray) -> tuple[np.ndarray | None, ...]:
        meta = self.meta_ref()
        impl = self.impl_ref()
        if meta is None or impl is None:
            return ()
        dtype = impl.data.dtype
        del impl
        if grad.dtype != dtype:
            grad = grad.astype(dtype)  # a new array: writeable, shared with nothing
        if meta.hooks:
            grad = run_hooks(meta.hooks, grad)
        if not grad.flags.writeable:  # a broadcast view: .grad must be an ordinary array
            grad = grad.copy()
        from minigrad.tensor import make_tensor

        old = meta.grad
        # Never add in place: ``grad`` may be shared with another leaf's gradient.
        total = grad if old is None else old._impl.data + grad
        if total.dtype != dtype:  # a hook's gradient, or a .grad assigned, of another dtype
            total = total.astype(dtype)
        meta.grad = make_tensor(total, None)
        return ()


def run_hooks(hooks: dict[int, Callable[..., Any]], grad: np.ndarray) -> np.ndarray:
    """Call tensor hooks ``hook(grad: Tensor) -> Tensor | None`` in registration order."""
    from minigrad.tensor import Tensor, make_tensor

    for hook in list(hooks.values()):
        result = hook(make_tensor(grad, None))
        if result is not None:
            if not isinstance(result, Tensor):
                raise TypeError(
                    f"hook {hook!r} returned {type(result).__name__}; a tensor hook must "
                    "return a minigrad Tensor or None"
                )
            if result.shape != grad.shape:
                raise ValueError(
                    f"hook {hook!r} returned a gradient of shape {result.shape}, "
                    f"expected {grad.shape}"
                )
            grad = result._impl.data
    return grad


class HookDict(dict[int, Callable[..., Any]]):
    """A hook table (id -> hook) that can be weak-referenced (a plain dict cannot)."""

    __slots__ = ("__weakref__",)


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook (idempotent)."""

    __slots__ = ("key", "table_ref")

    def __init__(self, table: HookDict, key: int) -> None:
        # Weak: a handle kept by the user must not keep a graph's hook table alive.
        self.table_ref = weakref.ref(table)
        self.key = key

    def remove(self) -> None:
        table = self.table_ref()
        if table is not None:
            table.pop(self.key, None)


_hook_ids = iter(range(1 << 62))


def add_hook(table: HookDict, fn: Callable[..., Any]) -> RemovableHandle:
    if not callable(fn):
        raise TypeError(f"register_hook: expected a callable, got {fn!r}")
    key = next(_hook_ids)
    table[key] = fn
    return RemovableHandle(table, key)


# --------------------------------------------------------------------------- engine
def _freed_error(node: Node) -> RuntimeError:
    return RuntimeError(
        f"minigrad: trying to backward through the graph a second time: {type(node).__name__} "
        "already ran a backward() that freed its saved arrays and cut its edges. Pass "
        "retain_graph=True to the first backward() if you need to backward twice, or detach() "
        "(or unchain_backward()) tensors kept across steps, e.g. an RNN hidden state."
    )


def run_backward(root: Node, grad: np.ndarray, retain_graph: bool = False) -> None:
    """Propagate ``grad`` from ``root`` to every leaf it reaches, in topological order."""
    if root.next_nodes is None:
        raise _freed_error(root)
    # Pass 1: how many edges point at each node inside this graph.
    deps: dict[Node, int] = {root: 0}
    stack = [root]
    while stack:
        for child in stack.pop().next_nodes or ():  # (None only once released: not here)
            if child is None:
                continue
            n = deps.get(child)
            if n is None:
                if child.next_nodes is None:
                    raise _freed_error(child)
                deps[child] = 1
                stack.append(child)
            else:
                deps[child] = n + 1
    # Pass 2: run each node once all gradients flowing into it have been summed.
    grads: dict[Node, np.ndarray] = {root: grad}
    ready = [root]
    while ready:
        node = ready.pop()
        g = grads.pop(node, None)
        children = node.next_nodes
        outs: tuple[np.ndarray | None, ...] | None = None
        if g is not None:
            if node.pre_hooks:
                g = run_hooks(node.pre_hooks, g)
            outs = node.backward(g)
        if children and not retain_graph:
            node.release()
        for i, child in enumerate(children or ()):
            if child is None:
                continue
            if outs is not None:
                gi = outs[i]
                if gi is not None:
                    prev = grads.get(child)
                    grads[child] = gi if prev is None else prev + gi
            n = deps[child] - 1
            if n:
                deps[child] = n
            else:
                ready.append(child)


def release_graph(root: Node) -> None:
    """Release every non-leaf node reachable from ``root`` (``unchain_backward``)."""
    stack = [root]
    seen = {id(root)}
    while stack:
        node = stack.pop()
        children = node.next_nodes
        if not children:  # already released, or an AccumulateGrad sink
            continue
        for child in children:
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
        node.release()


def iter_graph(root: Node) -> Iterator[Node]:
    """Every node reachable from ``root`` once (iterative; for tools and tests)."""
    stack = [root]
    seen = {id(root)}
    while stack:
        node = stack.pop()
        yield node
        for child in node.next_nodes or ():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)


# --------------------------------------------------------------------------- Function
class FunctionCtx:
    """The ``ctx`` of a custom Function: save arrays for backward, stash attributes."""

    saved_tensors: tuple[Any, ...]
    needs_input_grad: tuple[bool, ...]
    _input_shapes: tuple[tuple[int, ...], ...]  # checked against backward's gradients

    def __init__(self) -> None:
        self.saved_tensors = ()

    def save_for_backward(self, *arrays: Any) -> None:
        self.saved_tensors = arrays


class FunctionNode(Node):
    """Node of a custom Function; each subclass is named ``<Function>Backward``."""

    __slots__ = ()
    function: ClassVar[type[Function]]

    def backward(self, grad: np.ndarray) -> tuple[np.ndarray | None, ...]:
        ctx: FunctionCtx = self.saved
        fn = type(self).function
        result = fn.backward(ctx, grad)
        grads = result if isinstance(result, tuple) else (result,)
        edges = self.next_nodes or ()
        if len(grads) != len(edges):
            raise RuntimeError(
                f"{fn.__name__}.backward returned {len(grads)} gradient(s) for "
                f"{len(edges)} input(s) of forward()"
            )
        shapes = ctx._input_shapes
        out: list[np.ndarray | None] = []
        for i, (gi, edge) in enumerate(zip(grads, edges, strict=True)):
            if edge is None or gi is None:
                out.append(None)
                continue
            gi = np.asarray(gi)
            if gi.shape != shapes[i]:
                raise RuntimeError(
                    f"{fn.__name__}.backward returned a gradient of shape {gi.shape} for "
                    f"input {i}, whose shape is {shapes[i]}"
                )
            out.append(gi)
        return tuple(out)


class Function:
    """A custom op on numpy arrays.

    ``forward(ctx, *arrays) -> ndarray`` and ``backward(ctx, grad) -> ndarray | tuple``
    (one gradient, or ``None``, per input of forward) are static methods;
    ``ctx.save_for_backward(*arrays)`` keeps arrays for backward (``ctx.saved_tensors``);
    ``MyOp.apply(*tensors)`` runs it and returns a Tensor. Non-tensor arguments are passed
    through to forward unchanged and get ``None`` as gradient.
    """

    _node_class: ClassVar[type[FunctionNode]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._node_class = type(  # the node is named after the Function, as in torch
            f"{cls.__name__}Backward", (FunctionNode,), {"__slots__": (), "function": cls}
        )

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any) -> np.ndarray:
        raise NotImplementedError("Function subclasses must define forward(ctx, *arrays)")

    @staticmethod
    def backward(ctx: FunctionCtx, grad: np.ndarray) -> Any:
        raise NotImplementedError("Function subclasses must define backward(ctx, grad)")

    @classmethod
    def apply(cls, *args: Any) -> Tensor:
        from minigrad.tensor import Tensor, grad_edge, make_tensor

        if cls is Function:
            raise TypeError("call apply() on a subclass of mg.Function, not on Function itself")
        arrays = [a._impl.data if isinstance(a, Tensor) else a for a in args]
        recording = GRAD_MODE.enabled
        edges = tuple(grad_edge(a) if recording and isinstance(a, Tensor) else None for a in args)
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(e is not None for e in edges)
        ctx._input_shapes = tuple(np.shape(a) for a in arrays)
        out = cls.forward(ctx, *arrays)
        if isinstance(out, Tensor) or not isinstance(out, (np.ndarray, np.generic, float, int)):
            raise TypeError(
                f"{cls.__name__}.forward must return a numpy array, got {type(out).__name__}"
            )
        out = np.asarray(out)
        if any(e is not None for e in edges):
            node = cls._node_class(edges)
            node.saved = ctx
            return make_tensor(out, node)
        return make_tensor(out, None)
