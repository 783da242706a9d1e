"""The two engines the demo can train on: minigrad (default) and PyTorch (``--torch``).

A backend builds a fresh model, optimizer and batch source for each run, and counts
what is alive for the per-step log: minigrad's exact ``mg.stats()`` counters, or, on
PyTorch, the plugin's own torch probe (alive tensors and graph nodes). torch is
imported only by ``torch_backend()``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pytest_graphleak.exceptions import UsageError
from pytest_graphleak.probes.torch_probe import WeakBaseline, count_nodes, tensors_among

# The tiny character transformer: small enough for ~80 steps in a few seconds.
D_MODEL, HEADS, LAYERS, BLOCK, BATCH = 32, 4, 1, 16, 8


class Counter(Protocol):
    """Made just before a run's check, after its model; read inside each step."""

    #: alive-count key -> plot metric ("tensors" / "nodes")
    plot_keys: dict[str, str]

    def read(self) -> tuple[dict[str, int], dict[str, int]]: ...  # alive, created


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
    counter: type[Counter]
    close: Callable[[], None] = lambda: None  # undo process-wide settings made for the demo


def _text_batches(seed: int) -> tuple[int, Callable[[], tuple[np.ndarray, np.ndarray]]]:
    from minigrad.data import TEXT, CharVocab, batches

    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    rng = np.random.default_rng(seed)
    return vocab.size, lambda: batches(ids, BLOCK, BATCH, rng)


class MinigradCounter:
    plot_keys = {"TensorImpl": "tensors", "Node": "nodes"}  # noqa: RUF012

    def read(self) -> tuple[dict[str, int], dict[str, int]]:
        import minigrad as mg

        stats = mg.stats()
        alive = {kind: stats[kind]["alive"] for kind in ("TensorImpl", "Node", "AutogradMeta")}
        created = {kind: stats[kind]["created"] for kind in ("TensorImpl", "Node")}
        return alive, created


def minigrad_backend() -> Backend:
    def build(seed: int) -> Parts:
        import minigrad as mg

        vocab_size, next_batch = _text_batches(seed)
        model = mg.nn.TinyTransformer(
            vocab_size,
            d_model=D_MODEL,
            n_heads=HEADS,
            n_layers=LAYERS,
            block_size=BLOCK,
            rng=np.random.default_rng(seed),
        )
        optimizer = mg.optim.Adam(model.parameters(), lr=3e-3)
        return Parts(model, optimizer, mg.functional.cross_entropy, next_batch)

    return Backend("minigrad", build, MinigradCounter)


class TorchCounter:
    """Alive tensors and graph nodes on PyTorch, read inside the step.

    The check freezes the heap it starts from, so a scan during the step sees only the
    objects made since; every tensor seen is remembered weakly (the torch probe's
    ``WeakBaseline``), which covers the tensors frozen at the end of warmup too. Nodes
    are counted by the torch probe's own walk of ``grad_fn.next_functions``.
    """

    plot_keys = {"Tensor": "tensors", "Node": "nodes"}  # noqa: RUF012

    def __init__(self) -> None:
        self._seen = WeakBaseline()
        gc.collect()
        self._absorb()

    def _absorb(self) -> None:
        objects = gc.get_objects()
        try:
            self._seen.add(tensors_among(objects))  # (add() empties the list)
        finally:
            objects.clear()

    def read(self) -> tuple[dict[str, int], dict[str, int]]:
        self._absorb()
        tensors = list(self._seen.alive())
        try:
            return {"Tensor": len(tensors), "Node": count_nodes(tensors, ())}, {}
        finally:
            tensors.clear()


def torch_backend() -> Backend:
    try:
        import torch
    except ImportError as exc:
        raise UsageError(
            f"--torch needs PyTorch, which cannot be imported here ({exc}); install it "
            "(pip install torch) or run `graphleak demo` without --torch: it uses minigrad"
        ) from None

    from pytest_graphleak.demo import torch_model

    # A model this small runs fastest on one thread; more threads only wait on each
    # other (badly so on a busy machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def build(seed: int) -> Parts:
        vocab_size, numpy_batch = _text_batches(seed)
        model, optimizer = torch_model.build(
            vocab_size, dim=D_MODEL, heads=HEADS, context=BLOCK, seed=seed
        )
        return Parts(
            model, optimizer, torch_model.loss_fn, lambda: torch_model.as_batch(*numpy_batch())
        )

    return Backend("torch", build, TorchCounter, lambda: torch.set_num_threads(threads))
