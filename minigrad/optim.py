"""Optimizers: SGD (momentum, Nesterov, weight decay) and Adam, with torch's update rules.

Updates run in place on the parameters' arrays (no graph is recorded; each write bumps
the TensorImpl's version). Optimizer state is plain numpy arrays, so it never shows up
in ``mg.stats()``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from minigrad.tensor import Tensor

__all__ = ["SGD", "Adam", "Optimizer"]


class Optimizer:
    def __init__(self, params: Iterable[Tensor], lr: float) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or not p.is_leaf or not p.requires_grad:
                raise TypeError(
                    f"{type(self).__name__}: parameter {i} ({p!r}) is not a leaf tensor "
                    "that requires grad"
                )
        _check("lr", lr, type(self).__name__)
        self.lr = float(lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = Tensor(np.zeros_like(p._impl.data))

    def step(self) -> None:
        raise NotImplementedError


def _check(name: str, value: float, owner: str, upper: float | None = None) -> None:
    if not isinstance(value, (int, float)) or value < 0 or (upper is not None and value >= upper):
        bound = f"[0, {upper})" if upper is not None else ">= 0"
        raise ValueError(f"{owner}: {name}={value!r} must be a number {bound}")


class SGD(Optimizer):
    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr)
        _check("momentum", momentum, "SGD")
        _check("weight_decay", weight_decay, "SGD")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.weight_decay, self.nesterov = float(weight_decay), nesterov
        self.buffers: list[np.ndarray | None] = [None] * len(self.params)

    def step(self) -> None:
        for i, p in enumerate(self.params):
            grad = p.grad
            if grad is None:
                continue
            impl = p._impl
            d_p = grad._impl.data
            if self.weight_decay:
                d_p = d_p + self.weight_decay * impl.data
            if self.momentum:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = np.array(d_p, copy=True)
                else:
                    buf *= self.momentum
                    buf += (1 - self.dampening) * d_p
                d_p = d_p + self.momentum * buf if self.nesterov else buf
            impl.data -= self.lr * d_p
            impl.version += 1


class Adam(Optimizer):
    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        _check("betas[0]", betas[0], "Adam", upper=1.0)
        _check("betas[1]", betas[1], "Adam", upper=1.0)
        _check("eps", eps, "Adam")
        _check("weight_decay", weight_decay, "Adam")
        self.beta1, self.beta2 = float(betas[0]), float(betas[1])
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.steps = 0
        self.exp_avg = [np.zeros_like(p._impl.data) for p in self.params]
        self.exp_avg_sq = [np.zeros_like(p._impl.data) for p in self.params]

    def step(self) -> None:
        self.steps += 1
        b1, b2 = self.beta1, self.beta2
        step_size = self.lr / (1 - b1**self.steps)
        sqrt_c2 = np.sqrt(1 - b2**self.steps)
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            grad = p.grad
            if grad is None:
                continue
            impl = p._impl
            g = grad._impl.data
            if self.weight_decay:
                g = g + self.weight_decay * impl.data
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            denom = np.sqrt(v)
            denom /= sqrt_c2
            denom += self.eps
            impl.data -= step_size * (m / denom)
            impl.version += 1
