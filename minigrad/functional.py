"""Functional forms of the ops used by nn: losses, softmax, normalisation, embedding.

``cross_entropy`` and ``log_softmax`` subtract the row maximum before exponentiating, so
logits in the thousands give finite losses and gradients.
"""

from __future__ import annotations

from typing import Any

from minigrad import ops
from minigrad.ops import (
    cross_entropy,
    embedding,
    layer_norm,
    linear,
    log_softmax,
    relu,
    sigmoid,
    softmax,
    tanh,
)
from minigrad.tensor import Tensor

__all__ = [
    "cross_entropy",
    "embedding",
    "layer_norm",
    "linear",
    "log_softmax",
    "mse_loss",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
]


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    """Mean (or summed) squared error; ``target`` may be a Tensor or an array (a constant)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"mse_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    target_shape = target.shape if hasattr(target, "shape") else ()
    if target_shape and tuple(target_shape) != input.shape:
        raise ValueError(f"mse_loss: input shape {input.shape} != target shape {target_shape}")
    diff = ops.sub(input, target)
    sq = ops.mul(diff, diff)
    return ops.mean(sq) if reduction == "mean" else ops.sum(sq)
