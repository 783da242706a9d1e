"""minigrad: a small autograd engine on numpy with exact TensorImpl / Node / AutogradMeta counts.

``import minigrad as mg`` gives a torch-like API (see ARCHITECTURE.md section 2)::

    x = mg.Tensor([[1.0, 2.0]], requires_grad=True)
    loss = (x @ x.T).mean()
    loss.backward()          # x.grad; the graph is cut as backward runs
    mg.stats()    # {"TensorImpl": {"alive": .., "created": ..}, "Node": .., "AutogradMeta": ..}

Creation sites (off by default; for leak diagnosis)::

    mg.record_creation_sites(True)            # or: with mg.recording_creation_sites(): ...
    mg.creation_site(tensor_or_node)          # -> (filename, lineno) of user code, or None

Graph edges: ``node.next_nodes`` (tuple of Node | None, one per input) and the torch-style
``node.next_functions`` (``((node, 0), ...)``); ``tensor.grad_fn`` is a Node or None;
node classes are named ``<Op>Backward`` (AddBackward, MatmulBackward, MeanBackward, ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad import autograd, counters, functional, nn, optim
from minigrad.autograd import (
    AccumulateGrad,
    Function,
    FunctionCtx,
    Node,
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from minigrad.counters import (
    creation_site,
    is_recording_creation_sites,
    record_creation_sites,
    recording_creation_sites,
    stats,
)
from minigrad.ops import cat, stack
from minigrad.tensor import AutogradMeta, Tensor, TensorImpl

__all__ = [
    "AccumulateGrad",
    "AutogradMeta",
    "Function",
    "FunctionCtx",
    "Node",
    "Tensor",
    "TensorImpl",
    "arange",
    "autograd",
    "cat",
    "counters",
    "creation_site",
    "enable_grad",
    "functional",
    "is_grad_enabled",
    "is_recording_creation_sites",
    "nn",
    "no_grad",
    "ones",
    "optim",
    "randn",
    "record_creation_sites",
    "recording_creation_sites",
    "set_grad_enabled",
    "stack",
    "stats",
    "tensor",
    "zeros",
]


def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


def tensor(data: Any, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def zeros(*shape: Any, requires_grad: bool = False, dtype: Any = np.float32) -> Tensor:
    return Tensor(np.zeros(_shape(shape), dtype), requires_grad=requires_grad)


def ones(*shape: Any, requires_grad: bool = False, dtype: Any = np.float32) -> Tensor:
    return Tensor(np.ones(_shape(shape), dtype), requires_grad=requires_grad)


def randn(
    *shape: Any,
    requires_grad: bool = False,
    dtype: Any = np.float32,
    rng: np.random.Generator | None = None,
) -> Tensor:
    gen = rng if rng is not None else np.random.default_rng()
    return Tensor(gen.standard_normal(_shape(shape)).astype(dtype), requires_grad=requires_grad)


def arange(*args: Any, dtype: Any = None) -> Tensor:
    return Tensor(np.arange(*args, dtype=dtype))
