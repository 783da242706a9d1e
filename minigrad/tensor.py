"""Tensor (the user's handle) -> TensorImpl (numpy data, version) + AutogradMeta (on demand).

- ``TensorImpl`` owns the numpy array and a version counter bumped by every in-place
  write. ``detach()`` makes a new handle over the same TensorImpl.
- ``AutogradMeta`` (grad, grad_fn, requires_grad, hooks, the leaf's AccumulateGrad node)
  exists only for tensors that take part in autograd: a plain data tensor has none.
- ``Tensor`` is the handle users hold: it accepts user attributes (``t.note = ...``) and
  weak references, like a torch tensor.

Ownership runs one way: Tensor -> AutogradMeta -> grad_fn Node -> parent Nodes. No node
refers to a tensor, and a leaf's AccumulateGrad refers to its meta weakly, so graphs are
freed by reference counting alone.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from minigrad.autograd import (
    GRAD_MODE,
    AccumulateGrad,
    HookDict,
    Node,
    RemovableHandle,
    add_hook,
    release_graph,
    run_backward,
)
from minigrad.counters import (
    COUNTS,
    IMPL_CREATED,
    IMPL_FREED,
    META_CREATED,
    META_FREED,
    RECORDING,
    user_site,
)


class TensorImpl:
    """The storage behind a Tensor: a numpy array and its version counter."""

    __slots__ = ("__weakref__", "_site", "data", "version")

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.version = 0
        COUNTS[IMPL_CREATED] += 1
        if RECORDING[0]:
            self._site = user_site()

    def __del__(self) -> None:
        COUNTS[IMPL_FREED] += 1

    def __repr__(self) -> str:
        return f"<TensorImpl shape={self.data.shape} dtype={self.data.dtype} v{self.version}>"


class AutogradMeta:
    """Autograd state of one tensor, made on demand."""

    __slots__ = (
        "__weakref__",
        "grad",
        "grad_accumulator",
        "grad_fn",
        "hooks",
        "requires_grad",
        "retains_grad",
    )

    def __init__(self, grad_fn: Node | None, requires_grad: bool = True) -> None:
        self.grad_fn = grad_fn
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        self.hooks: HookDict | None = None
        self.grad_accumulator: AccumulateGrad | None = None
        self.retains_grad = False
        COUNTS[META_CREATED] += 1

    def __del__(self) -> None:
        COUNTS[META_FREED] += 1


_new = object.__new__


def make_tensor(data: np.ndarray, grad_fn: Node | None) -> Tensor:
    """Wrap an op's output array (no copy, no checks): the hot path of every op."""
    t = _new(Tensor)
    t._impl = TensorImpl(data)
    t._meta = None if grad_fn is None else AutogradMeta(grad_fn)
    return t


def grad_edge(t: Tensor) -> Node | None:
    """The node a gradient for ``t`` flows into: its grad_fn, its accumulator, or None."""
    meta = t._meta
    if meta is None:
        return None
    if meta.grad_fn is not None:
        return meta.grad_fn
    if meta.requires_grad:
        acc = meta.grad_accumulator
        if acc is None:
            acc = meta.grad_accumulator = AccumulateGrad(meta, t._impl)
        return acc
    return None


#: numpy dtype kinds a tensor can hold: bool, signed, unsigned, float, complex.
_NUMERIC_KINDS = frozenset("biufc")


def _as_array(data: Any, dtype: Any) -> np.ndarray:
    if isinstance(data, Tensor):
        return np.array(data._impl.data, dtype=dtype)  # a new tensor never aliases another
    if isinstance(data, np.ndarray):
        arr = data if dtype is None else data.astype(dtype, copy=False)
    else:
        arr = np.asarray(data, dtype=dtype)
        if dtype is None and arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # Python floats default to float32, as in torch
    if arr.dtype.kind not in _NUMERIC_KINDS:  # text, bytes, objects, dates: as torch refuses
        raise TypeError(
            f"mg.Tensor: cannot make a tensor from {type(data).__name__} {data!r} "
            f"(numpy dtype {arr.dtype}): tensors hold numbers or booleans"
        )
    return arr


class Tensor:
    """An n-dimensional array that can record the ops applied to it.

    ``Tensor(data, requires_grad=False, dtype=None)``: ``data`` is an array-like; a numpy
    array of the requested dtype is used without copying. Python floats become float32.
    """

    __slots__ = ("__dict__", "__weakref__", "_impl", "_meta")
    __array_priority__ = 1000  # ndarray <op> Tensor defers to Tensor's reflected operator

    _impl: TensorImpl
    _meta: AutogradMeta | None

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None) -> None:
        arr = _as_array(data, dtype)
        self._impl = TensorImpl(arr)
        self._meta = None
        if requires_grad:
            self.requires_grad = True

    # ------------------------------------------------------------------ autograd state
    @property
    def requires_grad(self) -> bool:
        meta = self._meta
        return meta is not None and (meta.requires_grad or meta.grad_fn is not None)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        meta = self._meta
        if meta is not None and meta.grad_fn is not None:
            if not value:
                raise RuntimeError(
                    "requires_grad can only be changed on a leaf tensor; use detach() to get "
                    "a tensor without a graph"
                )
            return
        if value and not np.issubdtype(self._impl.data.dtype, np.floating):
            raise TypeError(
                f"only floating point tensors can require gradients, got {self._impl.data.dtype}"
            )
        if meta is None:
            if not value:
                return
            meta = self._meta = AutogradMeta(None, requires_grad=True)
        meta.requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def grad_fn(self) -> Node | None:
        meta = self._meta
        return None if meta is None else meta.grad_fn

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self) -> Tensor | None:
        meta = self._meta
        return None if meta is None else meta.grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f".grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape:
                raise ValueError(f".grad of shape {value.shape} assigned to a {self.shape} tensor")
        meta = self._meta
        if meta is None:
            if value is None:
                return
            meta = self._meta = AutogradMeta(None, requires_grad=False)
        meta.grad = value

    def backward(self, grad: Tensor | np.ndarray | None = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` defaults to 1 for a one-element tensor. Without ``retain_graph`` the graph
        is cut as backward runs: backward through it a second time raises RuntimeError.
        """
        root = grad_edge(self)
        if root is None:
            raise RuntimeError(
                f"backward() on {self!r}: the tensor does not require grad and has no grad_fn "
                "(was it made under no_grad(), or from tensors without requires_grad=True?)"
            )
        data = self._impl.data
        if grad is None:
            if data.size != 1:
                raise RuntimeError(
                    f"backward() without a grad argument needs a one-element tensor, got shape "
                    f"{data.shape}; pass grad= of the same shape"
                )
            g = np.ones_like(data)
        else:
            g = np.asarray(grad._impl.data if isinstance(grad, Tensor) else grad, data.dtype)
            if g.shape != data.shape:
                raise ValueError(f"backward(grad=...): grad shape {g.shape} != {data.shape}")
        run_backward(root, g, retain_graph)

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; it may return a
        replacement. A leaf's hooks live in its AutogradMeta, a non-leaf's on its grad_fn."""
        meta = self._meta
        if meta is None or not (meta.requires_grad or meta.grad_fn is not None):
            raise RuntimeError("register_hook on a tensor that does not require grad")
        if meta.grad_fn is not None:
            node = meta.grad_fn
            if node.pre_hooks is None:
                node.pre_hooks = HookDict()
            return add_hook(node.pre_hooks, hook)
        if meta.hooks is None:
            meta.hooks = HookDict()
        return add_hook(meta.hooks, hook)

    def retain_grad(self) -> None:
        """Keep ``.grad`` of a non-leaf tensor after backward (the hook holds it weakly)."""
        meta = self._meta
        if meta is None or not self.requires_grad:
            raise RuntimeError("retain_grad on a tensor that does not require grad")
        if meta.grad_fn is None or meta.retains_grad:  # a leaf keeps its .grad anyway
            return
        meta.retains_grad = True
        meta_ref = weakref.ref(meta)

        def store(grad: Tensor) -> None:
            m = meta_ref()
            if m is not None:
                old = m.grad
                total = grad._impl.data if old is None else old._impl.data + grad._impl.data
                m.grad = make_tensor(total, None)

        self.register_hook(store)

    def detach(self) -> Tensor:
        """A new handle over the same TensorImpl, outside any graph."""
        t = _new(Tensor)
        t._impl = self._impl
        t._meta = None
        return t

    def detach_(self) -> Tensor:
        """Make this tensor a leaf that does not require grad (its graph is left alone)."""
        meta = self._meta
        if meta is not None:
            meta.grad_fn = None
            meta.requires_grad = False
        return self

    def unchain_backward(self) -> Tensor:
        """Cut the graph behind this tensor: release every node it reaches (saved arrays and
        edges) and make it a leaf without grad. For truncated BPTT on a hidden state.
        Other tensors sharing that graph can no longer backward through it."""
        node = self.grad_fn
        if node is not None:
            release_graph(node)
            self.detach_()
        return self

    # ------------------------------------------------------------------ data access
    @property
    def data(self) -> Tensor:
        """A detached handle over the same storage (as torch's ``.data``)."""
        return self.detach()

    @data.setter
    def data(self, value: Tensor | np.ndarray) -> None:
        arr = value._impl.data if isinstance(value, Tensor) else np.asarray(value)
        self._impl.data = arr
        self._impl.version += 1

    def numpy(self) -> np.ndarray:
        """The underlying array (shared, not copied)."""
        return self._impl.data

    def item(self) -> float:
        if (data := self._impl.data).size != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {data.shape}")
        value: float = data.item()
        return value

    def tolist(self) -> Any:
        return self._impl.data.tolist()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._impl.data.shape

    @property
    def ndim(self) -> int:
        return self._impl.data.ndim

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._impl.data.dtype

    @property
    def version(self) -> int:
        return self._impl.version

    def size(self, dim: int | None = None) -> Any:
        shape = self._impl.data.shape
        return shape if dim is None else shape[dim]

    def numel(self) -> int:
        return int(self._impl.data.size)

    def dim(self) -> int:
        return self._impl.data.ndim

    def __len__(self) -> int:
        if not self._impl.data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return len(self._impl.data)

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        return bool(self._impl.data)

    def __float__(self) -> float:
        return float(self.item())

    def __repr__(self) -> str:
        parts = [f"shape={self._impl.data.shape}"]
        node = self.grad_fn
        if node is not None:
            parts.append(f"grad_fn={type(node).__name__}")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        return f"{type(self).__name__}({', '.join(parts)})"

    # ------------------------------------------------------------------ in-place writes
    def _check_inplace(self, what: str) -> None:
        meta = self._meta
        if GRAD_MODE.enabled and meta is not None and meta.grad_fn is None and meta.requires_grad:
            raise RuntimeError(
                f"{what}: a leaf tensor that requires grad is used in an in-place operation; "
                "wrap the update in mg.no_grad()"
            )

    def zero_(self) -> Tensor:
        self._check_inplace("zero_()")
        self._impl.data.fill(0)
        self._impl.version += 1
        return self

    def fill_(self, value: float) -> Tensor:
        self._check_inplace("fill_()")
        self._impl.data.fill(value)
        self._impl.version += 1
        return self

    def copy_(self, src: Tensor | np.ndarray) -> Tensor:
        self._check_inplace("copy_()")
        self._impl.data[...] = src._impl.data if isinstance(src, Tensor) else src
        self._impl.version += 1
        return self

    def add_(self, other: Any) -> Tensor:
        return _ops.inplace(_ops.AddBackward, self, other, "add_()")

    def sub_(self, other: Any) -> Tensor:
        return _ops.inplace(_ops.SubBackward, self, other, "sub_()")

    def mul_(self, other: Any) -> Tensor:
        return _ops.inplace(_ops.MulBackward, self, other, "mul_()")

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Tensor:
        return _ops.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _ops.add(other, self)

    def __iadd__(self, other: Any) -> Tensor:
        return _ops.add(self, other)  # rebinds, as ``total += loss`` does for immutable values

    def __sub__(self, other: Any) -> Tensor:
        return _ops.sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _ops.sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _ops.mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _ops.mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _ops.div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _ops.div(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _ops.pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _ops.pow(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return _ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _ops.matmul(other, self)

    def __neg__(self) -> Tensor:
        return _ops.neg(self)

    def __getitem__(self, index: Any) -> Tensor:
        return _ops.getitem(self, index)

    # ------------------------------------------------------------------ methods
    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        return _ops.sum(self, axis, keepdims)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        return _ops.mean(self, axis, keepdims)

    def max(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _ops.max(self, axis, keepdims)

    def exp(self) -> Tensor:
        return _ops.exp(self)

    def log(self) -> Tensor:
        return _ops.log(self)

    def sqrt(self) -> Tensor:
        return _ops.sqrt(self)

    def tanh(self) -> Tensor:
        return _ops.tanh(self)

    def relu(self) -> Tensor:
        return _ops.relu(self)

    def sigmoid(self) -> Tensor:
        return _ops.sigmoid(self)

    def softmax(self, axis: int = -1) -> Tensor:
        return _ops.softmax(self, axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return _ops.log_softmax(self, axis)

    def reshape(self, *shape: Any) -> Tensor:
        return _ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    view = reshape

    def transpose(self, *dims: int) -> Tensor:
        """``transpose()`` reverses all axes; ``transpose(d0, d1)`` swaps two (as torch)."""
        return _ops.transpose(self, *dims)

    def permute(self, *dims: Any) -> Tensor:
        return _ops.permute(self, dims[0] if len(dims) == 1 else dims)

    @property
    def T(self) -> Tensor:
        return _ops.transpose(self)


from minigrad import ops as _ops  # noqa: E402  (ops builds on the classes above)
