"""Every op, in one place each: a ``<Op>Backward`` node class whose static ``forward``
sits beside its ``backward``.

``forward(*arrays, *args) -> (out, saved)`` computes on numpy arrays and says what backward
will need; the dispatchers below record a node only when grad mode is on and some input
requires grad. ``backward(grad) -> tuple`` returns one gradient per input, skipping
(``None``) inputs whose edge is ``None``: no work is spent on gradients nobody wants.
Gradients of broadcast inputs are summed back to the input's shape (``unbroadcast``).
Non-tensor operands (Python numbers, numpy arrays) are constants: no edge, no gradient.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from minigrad.autograd import GRAD_MODE, Node
from minigrad.tensor import Tensor, grad_edge, make_tensor

Array = np.ndarray
Grads = tuple[Array | None, ...]


def unbroadcast(g: Array, shape: tuple[int, ...]) -> Array:
    """Sum ``g`` over the axes that broadcasting added or stretched to reach ``shape``."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if stretched:
        g = g.sum(axis=stretched, keepdims=True)
    return g


# --------------------------------------------------------------------------- dispatch
def _data(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x._impl.data
    if isinstance(x, (int, float, np.ndarray, np.generic)):
        return x
    raise TypeError(f"minigrad op: unsupported operand of type {type(x).__name__}: {x!r}")


class OpNode(Node):
    """A node of a built-in op: its ``forward`` on arrays sits beside its ``backward``."""

    __slots__ = ()
    forward: ClassVar[Callable[..., tuple[Array, Any]]]

    @property
    def edges(self) -> tuple[Node | None, ...]:
        """``next_nodes`` while backward can still run (it never runs on a released node)."""
        assert self.next_nodes is not None, "backward through a released node"
        return self.next_nodes


def _edge(x: Any) -> Node | None:
    return grad_edge(x) if isinstance(x, Tensor) else None


def unary(cls: type[OpNode], x: Tensor, *args: Any) -> Tensor:
    out, saved = cls.forward(x._impl.data, *args)
    if GRAD_MODE.enabled and x._meta is not None:
        edge = grad_edge(x)
        if edge is not None:
            node = cls((edge,))
            node.saved = saved
            return make_tensor(out, node)
    return make_tensor(out, None)


def binary(cls: type[OpNode], a: Any, b: Any) -> Tensor:
    out, saved = cls.forward(_data(a), _data(b))
    if GRAD_MODE.enabled:
        ea, eb = _edge(a), _edge(b)
        if ea is not None or eb is not None:
            node = cls((ea, eb))
            node.saved = saved
            return make_tensor(out, node)
    return make_tensor(out, None)


def nary(cls: type[OpNode], inputs: Sequence[Any], *args: Any) -> Tensor:
    out, saved = cls.forward(*[_data(x) for x in inputs], *args)
    if GRAD_MODE.enabled:
        edges = tuple(_edge(x) for x in inputs)
        if any(e is not None for e in edges):
            node = cls(edges)
            node.saved = saved
            return make_tensor(out, node)
    return make_tensor(out, None)


def inplace(cls: type[OpNode], t: Tensor, other: Any, what: str) -> Tensor:
    """``t <op>= other`` in place: t's storage is rebound to the result and its version
    bumped; under grad mode t's grad_fn becomes the op's node (its old graph is an input),
    which is how ``total.add_(loss)`` keeps every step's graph alive."""
    t._check_inplace(what)
    data = t._impl.data
    out, saved = cls.forward(data, _data(other))
    if out.shape != data.shape:
        raise ValueError(f"{what}: result shape {out.shape} cannot be written into {data.shape}")
    out = out.astype(data.dtype, copy=False)
    if GRAD_MODE.enabled:
        ea, eb = grad_edge(t), _edge(other)
        if ea is not None or eb is not None:
            node = cls((ea, eb))
            node.saved = saved
            meta = t._meta
            if meta is None:
                from minigrad.tensor import AutogradMeta

                meta = t._meta = AutogradMeta(node)
            else:
                meta.grad_fn = node
    t._impl.data = out  # rebinding keeps arrays saved by earlier nodes intact
    t._impl.version += 1
    return t


# --------------------------------------------------------------------------- arithmetic
class AddBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Any, b: Any) -> tuple[Array, Any]:
        return np.add(a, b), (np.shape(a), np.shape(b))

    def backward(self, g: Array) -> Grads:
        sa, sb = self.saved
        na, nb = self.edges
        return (
            unbroadcast(g, sa) if na is not None else None,
            unbroadcast(g, sb) if nb is not None else None,
        )


class SubBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Any, b: Any) -> tuple[Array, Any]:
        return np.subtract(a, b), (np.shape(a), np.shape(b))

    def backward(self, g: Array) -> Grads:
        sa, sb = self.saved
        na, nb = self.edges
        return (
            unbroadcast(g, sa) if na is not None else None,
            unbroadcast(-g, sb) if nb is not None else None,
        )


class MulBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Any, b: Any) -> tuple[Array, Any]:
        return np.multiply(a, b), (a, b)

    def backward(self, g: Array) -> Grads:
        a, b = self.saved
        na, nb = self.edges
        return (
            unbroadcast(g * b, np.shape(a)) if na is not None else None,
            unbroadcast(g * a, np.shape(b)) if nb is not None else None,
        )


class DivBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Any, b: Any) -> tuple[Array, Any]:
        return np.divide(a, b), (a, b)

    def backward(self, g: Array) -> Grads:
        a, b = self.saved
        na, nb = self.edges
        return (
            unbroadcast(g / b, np.shape(a)) if na is not None else None,
            unbroadcast(-g * a / (b * b), np.shape(b)) if nb is not None else None,
        )


class PowBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Any, b: Any) -> tuple[Array, Any]:
        out = np.power(a, b)
        return out, (a, b, out)

    def backward(self, g: Array) -> Grads:
        a, b, out = self.saved
        na, nb = self.edges
        ga = gb = None
        if na is not None:
            ga = unbroadcast(g * b * np.power(a, b - 1), np.shape(a))
        if nb is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                log_a = np.where(a > 0, np.log(np.where(a > 0, a, 1)), 0)
            gb = unbroadcast(g * out * log_a, np.shape(b))
        return ga, gb


class NegBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        return np.negative(a), None

    def backward(self, g: Array) -> Grads:
        return (-g,)


class MatmulBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Any, b: Any) -> tuple[Array, Any]:
        return np.matmul(a, b), (a, b)

    def backward(self, g: Array) -> Grads:
        a, b = self.saved
        na, nb = self.edges
        # 1-d operands are promoted to matrices (as matmul does), then squeezed back.
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        b2 = b.reshape(-1, 1) if b.ndim == 1 else b
        g2 = g
        if b.ndim == 1:
            g2 = np.expand_dims(g2, -1)
        if a.ndim == 1:
            g2 = np.expand_dims(g2, -2)
        ga = gb = None
        if na is not None:
            ga = unbroadcast(np.matmul(g2, np.swapaxes(b2, -1, -2)), a2.shape).reshape(a.shape)
        if nb is not None:
            gb = unbroadcast(np.matmul(np.swapaxes(a2, -1, -2), g2), b2.shape).reshape(b.shape)
        return ga, gb


class LinearBackward(OpNode):
    """``x @ weight.T + bias`` in one node (weight is ``(out, in)``, as torch)."""

    __slots__ = ()

    @staticmethod
    def forward(x: Array, w: Array, b: Array | None = None) -> tuple[Array, Any]:
        out = x @ w.T
        if b is not None:
            out += b  # out is a fresh array: safe to add in place
        return out, (x, w)

    def backward(self, g: Array) -> Grads:
        x, w = self.saved
        edges = self.edges
        nx, nw = edges[0], edges[1]
        g2 = g.reshape(-1, g.shape[-1])
        gx = g @ w if nx is not None else None
        gw = g2.T @ x.reshape(-1, x.shape[-1]) if nw is not None else None
        if len(edges) == 2:
            return gx, gw
        gb = g2.sum(axis=0) if edges[2] is not None else None
        return gx, gw, gb


# --------------------------------------------------------------------------- reductions
def _norm_axis(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    for ax in axes:
        if not -ndim <= ax < builtins.max(ndim, 1):
            raise ValueError(f"axis {ax} is out of range for a {ndim}-d tensor")
    return tuple(ax % ndim if ndim else 0 for ax in axes)


def _expand(g: Array, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Array:
    """Broadcast a reduced gradient back over the reduced axes (a read-only view)."""
    if not keepdims and shape:
        g = np.expand_dims(g, axes)
    return np.broadcast_to(g, shape)


class SumBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array, axis: Any, keepdims: bool) -> tuple[Array, Any]:
        axes = _norm_axis(axis, a.ndim)
        return np.asarray(a.sum(axis=axes, keepdims=keepdims)), (a.shape, axes, keepdims)

    def backward(self, g: Array) -> Grads:
        shape, axes, keepdims = self.saved
        return (_expand(g, shape, axes, keepdims),)


class MeanBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array, axis: Any, keepdims: bool) -> tuple[Array, Any]:
        axes = _norm_axis(axis, a.ndim)
        count = 1
        for ax in axes:
            count *= a.shape[ax]
        return np.asarray(a.mean(axis=axes, keepdims=keepdims)), (a.shape, axes, keepdims, count)

    def backward(self, g: Array) -> Grads:
        shape, axes, keepdims, count = self.saved
        return (_expand(g / count, shape, axes, keepdims),)


class MaxBackward(OpNode):
    """Max over axes; ties share the gradient equally."""

    __slots__ = ()

    @staticmethod
    def forward(a: Array, axis: Any, keepdims: bool) -> tuple[Array, Any]:
        axes = _norm_axis(axis, a.ndim)
        kept = a.max(axis=axes, keepdims=True)
        out = kept if keepdims else np.squeeze(kept, axis=axes)
        return np.asarray(out), (a, kept, axes, keepdims)

    def backward(self, g: Array) -> Grads:
        a, kept, axes, keepdims = self.saved
        mask = (a == kept).astype(a.dtype)
        mask /= mask.sum(axis=axes, keepdims=True)
        return (mask * _expand(g, a.shape, axes, keepdims),)


# --------------------------------------------------------------------------- elementwise
class ExpBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        out = np.exp(a)
        return out, out

    def backward(self, g: Array) -> Grads:
        return (g * self.saved,)


class LogBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        return np.log(a), a

    def backward(self, g: Array) -> Grads:
        return (g / self.saved,)


class SqrtBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        out = np.sqrt(a)
        return out, out

    def backward(self, g: Array) -> Grads:
        return (g / (2 * self.saved),)


class TanhBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        out = np.tanh(a)
        return out, out

    def backward(self, g: Array) -> Grads:
        out = self.saved
        return (g * (1 - out * out),)


class ReluBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        out = np.maximum(a, 0)
        return out, out

    def backward(self, g: Array) -> Grads:
        return (g * (self.saved > 0),)


class SigmoidBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array) -> tuple[Array, Any]:
        # Two branches so that exp never overflows.
        e = np.exp(-np.abs(a))
        out = np.where(a >= 0, 1 / (1 + e), e / (1 + e)).astype(a.dtype, copy=False)
        return out, out

    def backward(self, g: Array) -> Grads:
        out = self.saved
        return (g * out * (1 - out),)


# --------------------------------------------------------------------------- shape
class ReshapeBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array, shape: Any) -> tuple[Array, Any]:
        return a.reshape(shape), a.shape

    def backward(self, g: Array) -> Grads:
        return (g.reshape(self.saved),)


class PermuteBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array, axes: tuple[int, ...]) -> tuple[Array, Any]:
        return np.transpose(a, axes), np.argsort(axes)

    def backward(self, g: Array) -> Grads:
        return (np.transpose(g, self.saved),)


class TransposeBackward(OpNode):
    """Swap two axes (or reverse all of them)."""

    __slots__ = ()

    @staticmethod
    def forward(a: Array, d0: int | None, d1: int | None) -> tuple[Array, Any]:
        if d0 is None or d1 is None:  # transpose(): all axes reversed
            return a.T, None
        return np.swapaxes(a, d0, d1), (d0, d1)

    def backward(self, g: Array) -> Grads:
        if self.saved is None:
            return (g.T,)
        return (np.swapaxes(g, *self.saved),)


def _is_advanced(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return builtins.any(isinstance(i, (np.ndarray, list)) for i in items)


def _plain_index(index: Any) -> Any:
    """Tensors used as indices become arrays; boolean masks become integer arrays."""
    if isinstance(index, tuple):
        parts: list[Any] = []
        for i in index:
            i = _plain_index(i)
            if isinstance(i, tuple):  # a boolean mask expands to one array per axis
                parts.extend(i)
            else:
                parts.append(i)
        return tuple(parts)
    if isinstance(index, Tensor):
        index = index._impl.data
    if isinstance(index, list):
        index = np.asarray(index)
    if isinstance(index, np.ndarray) and index.dtype == np.bool_:
        return np.nonzero(index)
    return index


class IndexBackward(OpNode):
    """``a[index]`` with ints, slices, None, Ellipsis, integer arrays and boolean masks."""

    __slots__ = ()

    @staticmethod
    def forward(a: Array, index: Any) -> tuple[Array, Any]:
        return np.asarray(a[index]), (a.shape, a.dtype, index, _is_advanced(index))

    def backward(self, g: Array) -> Grads:
        shape, dtype, index, advanced = self.saved
        ga = np.zeros(shape, dtype)
        if advanced:
            np.add.at(ga, index, g)  # repeated indices add up
        else:
            ga[index] = g  # basic indexing never repeats an element
        return (ga,)


class CatBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(*arrays_and_axis: Any) -> tuple[Array, Any]:
        *arrays, axis = arrays_and_axis
        bounds = np.cumsum([a.shape[axis] for a in arrays])[:-1]
        return np.concatenate(arrays, axis=axis), (axis, bounds)

    def backward(self, g: Array) -> Grads:
        axis, bounds = self.saved
        return tuple(np.split(g, bounds, axis=axis))


class StackBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(*arrays_and_axis: Any) -> tuple[Array, Any]:
        *arrays, axis = arrays_and_axis
        return np.stack(arrays, axis=axis), axis

    def backward(self, g: Array) -> Grads:
        axis = self.saved
        return tuple(np.moveaxis(g, axis, 0))


# --------------------------------------------------------------------------- fused NN ops
class SoftmaxBackward(OpNode):
    __slots__ = ()

    @staticmethod
    def forward(a: Array, axis: int) -> tuple[Array, Any]:
        e = np.exp(a - a.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e, (e, axis)

    def backward(self, g: Array) -> Grads:
        out, axis = self.saved
        return (out * (g - (g * out).sum(axis=axis, keepdims=True)),)


class LogSoftmaxBackward(OpNode):
    """Stable: ``x - max - log(sum(exp(x - max)))``."""

    __slots__ = ()

    @staticmethod
    def forward(a: Array, axis: int) -> tuple[Array, Any]:
        shifted = a - a.max(axis=axis, keepdims=True)
        out = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        return out, (out, axis)

    def backward(self, g: Array) -> Grads:
        out, axis = self.saved
        return (g - np.exp(out) * g.sum(axis=axis, keepdims=True),)


class CrossEntropyBackward(OpNode):
    """Mean (or sum) negative log-likelihood of integer targets under a stable log-softmax
    over the last axis; ``logits (..., C)``, ``targets (...)``."""

    __slots__ = ()

    @staticmethod
    def forward(logits: Array, targets: Array, reduction: str) -> tuple[Array, Any]:
        classes = logits.shape[-1]
        flat = logits.reshape(-1, classes)
        t = np.asarray(targets).reshape(-1)
        if t.shape[0] != flat.shape[0]:
            raise ValueError(
                f"cross_entropy: {flat.shape[0]} rows of logits {logits.shape} but "
                f"{t.shape[0]} targets {np.shape(targets)}"
            )
        if t.size and (t.min() < 0 or t.max() >= classes):
            raise IndexError(f"cross_entropy: target out of range [0, {classes}): {t}")
        shifted = flat - flat.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        sums = e.sum(axis=1, keepdims=True)
        rows = np.arange(flat.shape[0])
        nll = np.log(sums[:, 0]) - shifted[rows, t]
        total = nll.sum(dtype=logits.dtype)
        n = flat.shape[0]
        out = total / n if reduction == "mean" else total
        e /= sums  # softmax, reused by backward
        scale = n if reduction == "mean" else 1
        return np.asarray(out, dtype=logits.dtype), (e, t, logits.shape, scale)

    def backward(self, g: Array) -> Grads:
        probs, t, shape, n = self.saved
        grad = probs.copy()  # saved probs must survive a retain_graph=True backward
        grad[np.arange(grad.shape[0]), t] -= 1
        grad *= g / n
        return grad.reshape(shape), None


class LayerNormBackward(OpNode):
    """Normalize over the last axis, then scale and shift: one node instead of eight."""

    __slots__ = ()

    @staticmethod
    def forward(x: Array, w: Array, b: Array, eps: float) -> tuple[Array, Any]:
        mu = x.mean(axis=-1, keepdims=True)
        xc = x - mu
        var = (xc * xc).mean(axis=-1, keepdims=True)
        rstd = 1.0 / np.sqrt(var + eps)
        xhat = xc * rstd
        return xhat * w + b, (xhat, rstd, w)

    def backward(self, g: Array) -> Grads:
        xhat, rstd, w = self.saved
        nx, nw, nb = self.edges
        lead = tuple(range(g.ndim - 1))
        gw = (g * xhat).sum(axis=lead) if nw is not None else None
        gb = g.sum(axis=lead) if nb is not None else None
        gx = None
        if nx is not None:
            gh = g * w
            gx = rstd * (
                gh
                - gh.mean(axis=-1, keepdims=True)
                - xhat * (gh * xhat).mean(axis=-1, keepdims=True)
            )
        return gx, gw, gb


class EmbeddingBackward(OpNode):
    """Rows of a weight table: ``weight[indices]``."""

    __slots__ = ()

    @staticmethod
    def forward(w: Array, idx: Array) -> tuple[Array, Any]:
        return w[idx], (w.shape, w.dtype, idx)

    def backward(self, g: Array) -> Grads:
        shape, dtype, idx = self.saved
        gw = np.zeros(shape, dtype)
        np.add.at(gw, idx.reshape(-1), g.reshape(-1, shape[-1]))
        return gw, None


# --------------------------------------------------------------------------- public functions
def add(a: Any, b: Any) -> Tensor:
    return binary(AddBackward, a, b)


def sub(a: Any, b: Any) -> Tensor:
    return binary(SubBackward, a, b)


def mul(a: Any, b: Any) -> Tensor:
    return binary(MulBackward, a, b)


def div(a: Any, b: Any) -> Tensor:
    return binary(DivBackward, a, b)


def pow(a: Any, b: Any) -> Tensor:  # the operator's name, as in torch
    return binary(PowBackward, a, b)


def matmul(a: Any, b: Any) -> Tensor:
    return binary(MatmulBackward, a, b)


def neg(a: Tensor) -> Tensor:
    return unary(NegBackward, a)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    if bias is None:
        return nary(LinearBackward, (x, weight))
    return nary(LinearBackward, (x, weight, bias))


def sum(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return unary(SumBackward, a, axis, keepdims)


def mean(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return unary(MeanBackward, a, axis, keepdims)


def max(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return unary(MaxBackward, a, axis, keepdims)


def exp(a: Tensor) -> Tensor:
    return unary(ExpBackward, a)


def log(a: Tensor) -> Tensor:
    return unary(LogBackward, a)


def sqrt(a: Tensor) -> Tensor:
    return unary(SqrtBackward, a)


def tanh(a: Tensor) -> Tensor:
    return unary(TanhBackward, a)


def relu(a: Tensor) -> Tensor:
    return unary(ReluBackward, a)


def sigmoid(a: Tensor) -> Tensor:
    return unary(SigmoidBackward, a)


def reshape(a: Tensor, shape: Any) -> Tensor:
    return unary(ReshapeBackward, a, shape)


def transpose(a: Tensor, *dims: int) -> Tensor:
    if len(dims) == 0:
        return unary(TransposeBackward, a, None, None)
    if len(dims) != 2:
        raise TypeError(f"transpose() takes no axes or two axes to swap, got {dims}")
    return unary(TransposeBackward, a, dims[0], dims[1])


def permute(a: Tensor, dims: Sequence[int]) -> Tensor:
    dims = tuple(dims)
    if sorted(d % a.ndim for d in dims) != list(range(a.ndim)):
        raise ValueError(f"permute{dims}: not a permutation of the {a.ndim} axes of {a.shape}")
    return unary(PermuteBackward, a, tuple(d % a.ndim for d in dims))


def getitem(a: Tensor, index: Any) -> Tensor:
    return unary(IndexBackward, a, _plain_index(index))


def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    if not tensors:
        raise ValueError("cat() needs at least one tensor")
    return nary(CatBackward, tuple(tensors), axis)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    if not tensors:
        raise ValueError("stack() needs at least one tensor")
    return nary(StackBackward, tuple(tensors), axis)


def softmax(a: Tensor, axis: int = -1) -> Tensor:
    return unary(SoftmaxBackward, a, axis)


def log_softmax(a: Tensor, axis: int = -1) -> Tensor:
    return unary(LogSoftmaxBackward, a, axis)


def cross_entropy(logits: Tensor, targets: Any, reduction: str = "mean") -> Tensor:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")
    t = targets._impl.data if isinstance(targets, Tensor) else np.asarray(targets)
    if not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"cross_entropy: targets must be integer class indices, got {t.dtype}")
    return nary(CrossEntropyBackward, (logits, t), reduction)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    return nary(LayerNormBackward, (x, weight, bias), eps)


def embedding(weight: Tensor, indices: Any) -> Tensor:
    idx = indices._impl.data if isinstance(indices, Tensor) else np.asarray(indices)
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"embedding: indices must be integers, got {idx.dtype}")
    return nary(EmbeddingBackward, (weight, idx))
