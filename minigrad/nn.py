"""Neural-network modules built only from public ops.

``Module`` finds its parameters and submodules in its attributes (in assignment order):
``Parameter`` values, ``Module`` values, and lists/tuples of modules. ``parameters()``,
``zero_grad(set_to_none=True)``, ``train()``/``eval()``, ``state_dict()``/``load_state_dict()``.
Initialisation follows torch's defaults; every module takes an optional numpy ``rng``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from minigrad import functional as F
from minigrad import ops
from minigrad.tensor import Tensor

__all__ = [
    "CausalSelfAttention",
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleList",
    "Parameter",
    "RNNCell",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "TinyTransformer",
    "TransformerBlock",
]


class Parameter(Tensor):
    """A leaf tensor that a Module owns; requires grad by default."""

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        super().__init__(data, requires_grad=requires_grad)


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng()


def _uniform(rng: np.random.Generator, bound: float, *shape: int) -> Parameter:
    return Parameter(rng.uniform(-bound, bound, size=shape).astype(np.float32))


class Module:
    training: bool = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def _members(self) -> Iterator[tuple[str, Any]]:
        for name, value in vars(self).items():
            if isinstance(value, (Parameter, Module)):
                yield name, value
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, (Parameter, Module)):
                        yield f"{name}.{i}", item

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for name, value in self._named_parameters_all(prefix):
            if id(value) not in seen:  # a shared parameter is listed once
                seen.add(id(value))
                yield name, value

    def _named_parameters_all(self, prefix: str) -> Iterator[tuple[str, Parameter]]:
        for name, value in self._members():
            if isinstance(value, Parameter):
                yield prefix + name, value
            else:
                yield from value._named_parameters_all(prefix + name + ".")

    def parameters(self) -> Iterator[Parameter]:
        for _, p in self.named_parameters():
            yield p

    def children(self) -> Iterator[Module]:
        for _, value in self._members():
            if isinstance(value, Module):
                yield value

    def modules(self) -> Iterator[Module]:
        yield self
        for child in self.children():
            yield from child.modules()

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = Tensor(np.zeros_like(p.numpy()))

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: p.numpy().copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        params = dict(self.named_parameters())
        missing = params.keys() - state.keys()
        unexpected = state.keys() - params.keys()
        if missing or unexpected:
            raise KeyError(
                f"load_state_dict: missing {sorted(missing)}, unexpected {sorted(unexpected)}"
            )
        for name, p in params.items():
            value = np.asarray(state[name], dtype=p.dtype)
            if value.shape != p.shape:
                raise ValueError(f"load_state_dict: {name} has shape {value.shape}, not {p.shape}")
            p.data = value.copy()  # a new array and a version bump, as an in-place write

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ModuleList(Module):
    def __init__(self, modules: list[Module] | tuple[Module, ...] = ()) -> None:
        self.items = list(modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Module:
        return self.items[i]


class Sequential(ModuleList):
    def __init__(self, *modules: Module) -> None:
        super().__init__(modules)

    def forward(self, x: Tensor) -> Tensor:
        for m in self.items:
            x = m(x)
        return x


class Linear(Module):
    """``y = x @ weight.T + bias``; weight is ``(out_features, in_features)``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        gen = _rng(rng)
        bound = 1.0 / math.sqrt(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform(gen, bound, out_features, in_features)
        self.bias = _uniform(gen, bound, out_features) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias is not None})"


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class Embedding(Module):
    def __init__(
        self, num_embeddings: int, embedding_dim: int, rng: np.random.Generator | None = None
    ) -> None:
        gen = _rng(rng)
        self.weight = Parameter(
            gen.standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        )

    def forward(self, indices: Any) -> Tensor:
        return F.embedding(self.weight, indices)


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        self.eps = eps
        self.weight = Parameter(np.ones(dim, np.float32))
        self.bias = Parameter(np.zeros(dim, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight, self.bias, self.eps)


class RNNCell(Module):
    """Elman cell: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""

    def __init__(
        self, input_size: int, hidden_size: int, rng: np.random.Generator | None = None
    ) -> None:
        gen = _rng(rng)
        bound = 1.0 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.weight_ih = _uniform(gen, bound, hidden_size, input_size)
        self.weight_hh = _uniform(gen, bound, hidden_size, hidden_size)
        self.bias_ih = _uniform(gen, bound, hidden_size)
        self.bias_hh = _uniform(gen, bound, hidden_size)

    def forward(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        if h is None:
            h = Tensor(np.zeros((x.shape[0], self.hidden_size), x.dtype))
        pre = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self.weight_hh, self.bias_hh)
        return ops.tanh(pre)


class CausalSelfAttention(Module):
    """Multi-head self-attention where position t attends only to positions <= t."""

    def __init__(
        self, d_model: int, n_heads: int, block_size: int, rng: np.random.Generator | None = None
    ) -> None:
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        gen = _rng(rng)
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.query = Linear(d_model, d_model, rng=gen)
        self.key = Linear(d_model, d_model, rng=gen)
        self.value = Linear(d_model, d_model, rng=gen)
        self.proj = Linear(d_model, d_model, rng=gen)
        # Additive mask: a large negative number above the diagonal (finite, so no NaN).
        above = np.triu(np.ones((block_size, block_size), dtype=bool), k=1)
        self.mask = np.where(above, np.float32(-1e9), np.float32(0))

    def _heads(self, x: Tensor, batch: int, steps: int) -> Tensor:
        return x.reshape(batch, steps, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        batch, steps, d_model = x.shape
        q = self._heads(self.query(x), batch, steps)
        k = self._heads(self.key(x), batch, steps)
        v = self._heads(self.value(x), batch, steps)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = ops.softmax(scores + self.mask[:steps, :steps], axis=-1)
        out = (att @ v).transpose(1, 2).reshape(batch, steps, d_model)
        projected: Tensor = self.proj(out)
        return projected


class TransformerBlock(Module):
    """Pre-norm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(
        self, d_model: int, n_heads: int, block_size: int, rng: np.random.Generator | None = None
    ) -> None:
        gen = _rng(rng)
        self.ln1 = LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, block_size, rng=gen)
        self.ln2 = LayerNorm(d_model)
        self.mlp = Sequential(
            Linear(d_model, 4 * d_model, rng=gen), ReLU(), Linear(4 * d_model, d_model, rng=gen)
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        mixed: Tensor = self.mlp(self.ln2(x))
        return x + mixed


class TinyTransformer(Module):
    """A character-level GPT: token + position embeddings, blocks, final norm, head.

    ``forward(idx)`` takes integer token ids ``(batch, steps)`` and returns logits
    ``(batch, steps, vocab_size)``.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 32,
        n_heads: int = 4,
        n_layers: int = 2,
        block_size: int = 32,
        rng: np.random.Generator | None = None,
    ) -> None:
        gen = _rng(rng)
        self.block_size = block_size
        self.tok_emb = Embedding(vocab_size, d_model, rng=gen)
        self.pos_emb = Embedding(block_size, d_model, rng=gen)
        self.blocks = [
            TransformerBlock(d_model, n_heads, block_size, rng=gen) for _ in range(n_layers)
        ]
        self.ln_f = LayerNorm(d_model)
        self.head = Linear(d_model, vocab_size, rng=gen)

    def forward(self, idx: Any) -> Tensor:
        ids = idx.numpy() if isinstance(idx, Tensor) else np.asarray(idx)
        steps = ids.shape[-1]
        if steps > self.block_size:
            raise ValueError(f"sequence length {steps} exceeds block_size {self.block_size}")
        x = self.tok_emb(ids) + self.pos_emb(np.arange(steps))
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(self.ln_f(x))
        return logits
