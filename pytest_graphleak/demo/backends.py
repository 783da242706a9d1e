"""The two engines the demo can train on: minigrad (default) and PyTorch (``--torch``).

A backend builds a fresh model, optimizer and batch source for each run, and counts
what is alive for the per-step log: minigrad's exact ``mg.stats()`` counters, or, on
PyTorch, the plugin's own torch probe (alive tensors and graph nodes). torch is
imported only by ``torch_backend()``.
"""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pytest_graphleak.cli.exits import UsageError

# The tiny character transformer: small enough for ~80 steps in a few seconds.
D_MODEL, HEADS, LAYERS, BLOCK, BATCH = 32, 4, 1, 16, 8


class Counter(Protocol):
    #: alive-count key -> plot metric ("tensors" / "nodes")
    plot_keys: dict[str, str]

    def begin(self) -> None: ...
    def read(self) -> tuple[dict[str, int], dict[str, int]]: ...  # alive, created
    def end(self) -> None: ...


@dataclass
class Parts:
    model: Any
    optimizer: Any
    loss_fn: Callable[[Any, Any], Any]
    next_batch: Callable[[], tuple[Any, Any]]


@dataclass
class Backend:
    name: str
    build: Callable[[int], Parts]  # seed -> a fresh model, optimizer and data
    counter: Counter


def _text_batches(seed: int) -> tuple[int, Callable[[], tuple[np.ndarray, np.ndarray]]]:
    from minigrad.data import TEXT, CharVocab, batches

    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    rng = np.random.default_rng(seed)
    return vocab.size, lambda: batches(ids, BLOCK, BATCH, rng)


class MinigradCounter:
    plot_keys = {"TensorImpl": "tensors", "Node": "nodes"}  # noqa: RUF012

    def begin(self) -> None:
        pass

    def read(self) -> tuple[dict[str, int], dict[str, int]]:
        import minigrad as mg

        stats = mg.stats()
        alive = {kind: stats[kind]["alive"] for kind in ("TensorImpl", "Node", "AutogradMeta")}
        created = {kind: stats[kind]["created"] for kind in ("TensorImpl", "Node")}
        return alive, created

    def end(self) -> None:
        pass


def minigrad_backend() -> Backend:
    def build(seed: int) -> Parts:
        import minigrad as mg

        vocab_size, next_batch = _text_batches(seed)
        model = mg.nn.TinyTransformer(
            vocab_size, d_model=D_MODEL, n_heads=HEADS, n_layers=LAYERS, block_size=BLOCK,
            rng=np.random.default_rng(seed),
        )
        optimizer = mg.optim.Adam(model.parameters(), lr=3e-3)
        return Parts(model, optimizer, mg.functional.cross_entropy, next_batch)

    return Backend("minigrad", build, MinigradCounter())


class TorchCounter:
    """Alive tensors and graph nodes, read inside the step by the plugin's torch probe.

    The check freezes the heap it started from, so a scan during the step sees only
    objects made since; every tensor seen is remembered weakly, which covers the
    tensors frozen at the end of warmup too.
    """

    plot_keys = {"Tensor": "tensors", "Node": "nodes"}  # noqa: RUF012

    def __init__(self) -> None:
        self._probe: Any = None

    def begin(self) -> None:
        from pytest_graphleak.probes.torch_probe import TorchProbe

        self._probe = TorchProbe()
        gc.collect()
        heap = gc.get_objects()
        try:
            self._probe.start(heap)
        finally:
            heap.clear()

    def read(self) -> tuple[dict[str, int], dict[str, int]]:
        fresh = gc.get_objects()
        try:
            self._probe.absorb(fresh)
        finally:
            fresh.clear()
        values = self._probe.sample([])
        return {"Tensor": int(values["torch.tensors"]), "Node": int(values["torch.nodes"])}, {}

    def end(self) -> None:
        if self._probe is not None:
            self._probe.stop()
            self._probe = None


def torch_backend() -> Backend:
    if importlib.util.find_spec("torch") is None:
        raise UsageError(
            "--torch needs PyTorch, which is not installed in this environment "
            "(pip install torch), or run `graphleak demo` without --torch: it uses minigrad"
        )
    from pytest_graphleak.demo import torch_model

    def build(seed: int) -> Parts:
        vocab_size, numpy_batch = _text_batches(seed)
        model, optimizer = torch_model.build(
            vocab_size, dim=D_MODEL, heads=HEADS, context=BLOCK, seed=seed
        )
        return Parts(model, optimizer, torch_model.loss_fn,
                     lambda: torch_model.as_batch(*numpy_batch()))

    return Backend("torch", build, TorchCounter())
