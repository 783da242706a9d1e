"""No reference cycles by construction: with the cyclic GC off, 200 training steps of an MLP,
an RNN with truncated BPTT and a tiny transformer leave every alive count flat; keeping
losses (with their graphs) makes the counts grow."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import minigrad as mg
from minigrad import functional as F
from minigrad.data import TEXT, CharVocab, batches

Step = Callable[[], None]
STEPS = 200


@pytest.fixture
def gc_off() -> Iterator[None]:
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def alive() -> dict[str, int]:
    return {kind: counts["alive"] for kind, counts in mg.stats().items()}


def alive_series(step: Step, steps: int = STEPS) -> list[dict[str, int]]:
    series = []
    for _ in range(steps):
        step()
        series.append(alive())
    return series


def mlp_step(history: list[object] | None = None) -> Step:
    rng = np.random.default_rng(0)
    model = mg.nn.Sequential(
        mg.nn.Linear(20, 16, rng=rng), mg.nn.ReLU(), mg.nn.Linear(16, 4, rng=rng)
    )
    opt = mg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = rng.standard_normal((8, 20)).astype(np.float32)
    y = rng.integers(0, 4, 8)

    def step() -> None:
        loss = F.cross_entropy(model(mg.Tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if history is not None:
            history.append(loss)  # the leak: the loss tensor and its graph root stay alive

    return step


def rnn_step(detach: bool = True) -> Step:
    rng = np.random.default_rng(1)
    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    cell = mg.nn.RNNCell(vocab.size, 16, rng=rng)
    head = mg.nn.Linear(16, vocab.size, rng=rng)
    emb = np.eye(vocab.size, dtype=np.float32)
    opt = mg.optim.Adam([*cell.parameters(), *head.parameters()], lr=1e-2)
    state: dict[str, object] = {"h": None, "pos": 0}

    def step() -> None:
        pos = int(state["pos"])  # type: ignore[call-overload]
        chunk = ids[pos : pos + 9]
        state["pos"] = (pos + 8) % (len(ids) - 9)
        h = state["h"]
        losses = []
        for t in range(8):
            h = cell(mg.Tensor(emb[chunk[t : t + 1]]), h)
            losses.append(F.cross_entropy(head(h), chunk[t + 1 : t + 2]))
        loss = mg.stack(losses).mean()
        opt.zero_grad()
        if detach:
            loss.backward()
            assert isinstance(h, mg.Tensor)
            h.unchain_backward()  # truncated BPTT
        else:
            loss.backward(retain_graph=True)  # the "fix" for the freed-graph error that leaks
        state["h"] = h
        opt.step()

    return step


def transformer_step(history: list[object] | None = None) -> Step:
    rng = np.random.default_rng(2)
    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    model = mg.nn.TinyTransformer(
        vocab.size, d_model=16, n_heads=2, n_layers=1, block_size=8, rng=rng
    )
    opt = mg.optim.Adam(model.parameters(), lr=3e-3)

    def step() -> None:
        x, y = batches(ids, 8, 4, rng)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if history is not None:
            history.append(F.cross_entropy(model(x), y))  # evaluated with grad on, and kept

    return step


@pytest.mark.parametrize(
    "make", [mlp_step, rnn_step, transformer_step], ids=["mlp", "rnn", "transformer"]
)
def test_alive_counts_stay_flat_with_gc_disabled(gc_off: None, make: Callable[[], Step]) -> None:
    start = alive()
    series = alive_series(make())
    # After the first step (optimizer state, accumulators), every step ends identical.
    assert all(s == series[1] for s in series[1:]), (
        f"alive counts moved: {series[1]} -> {series[-1]}"
    )
    assert (
        series[-1]["TensorImpl"] > start["TensorImpl"]
    )  # the model itself is alive: counts are real
    assert gc.collect() == 0  # nothing was left for the cyclic GC


def test_appending_losses_makes_counts_grow(gc_off: None) -> None:
    history: list[object] = []
    step = mlp_step(history)
    series = alive_series(step, steps=50)
    for kind in ("TensorImpl", "Node", "AutogradMeta"):
        assert series[-1][kind] - series[9][kind] == 40, kind  # exactly one more per step
    history.clear()  # freed by reference counting alone (the GC is off)
    assert alive() == {kind: n - 50 for kind, n in series[-1].items()}


def test_keeping_evaluated_graphs_grows_nodes_by_a_whole_graph_per_step(gc_off: None) -> None:
    history: list[object] = []
    series = alive_series(transformer_step(history), steps=30)
    per_step = (series[-1]["Node"] - series[9]["Node"]) / 20
    assert per_step > 20  # each kept loss holds its whole forward graph
    assert all(b["Node"] - a["Node"] == per_step for a, b in itertools.pairwise(series[9:]))


def test_rnn_with_retained_graph_grows_every_step(gc_off: None) -> None:
    series = alive_series(rnn_step(detach=False), steps=20)
    # The hidden state's history piles up: each step keeps at least a node per time step.
    growth = [b["Node"] - a["Node"] for a, b in itertools.pairwise(series)]
    assert all(g >= 8 for g in growth), growth


def test_hook_capturing_its_own_tensor_is_a_cycle_only_gc_frees(gc_off: None) -> None:
    w = mg.Tensor(np.ones(3), requires_grad=True)
    (w * 2).sum().backward()  # w's AccumulateGrad now exists
    base = alive()

    def step() -> None:
        h = w * 2
        h.register_hook(lambda g: g * h.sum().item())  # closure -> h -> node -> hook: a cycle

    for _ in range(10):
        step()
    assert alive()["Node"] - base["Node"] == 10
    assert gc.collect() > 0
    assert alive() == base
