"""A generator's local variables are named in the holder chain.

A training loop written as a generator keeps its state in the paused frame's locals;
the chain names them (``generator train_loop() local 'losses' -> list(len=12)``) instead
of an unnamed ``generator -> Tensor``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import minigrad as mg
from pytest_graphleak import check
from pytest_graphleak.diagnose.backends import active_backends
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.report.text import render_text


def _weights(backend: str) -> Any:
    if backend == "torch":
        torch = pytest.importorskip("torch")
        return torch.ones(4, requires_grad=True)
    return mg.Tensor([1.0, 1.0, 1.0, 1.0], requires_grad=True)


def train_loop(w: Any) -> Iterator[None]:
    losses = []
    while True:
        loss = (w * 2.0).sum()
        losses.append(loss)
        yield


def running_total(w: Any) -> Iterator[None]:
    total = (w * 0.0).sum()
    while True:
        total = total + (w * 2.0).sum()
        yield


@pytest.mark.parametrize("backend", ["torch", "minigrad"])
def test_a_generator_loops_list_is_named_by_its_local(backend: str) -> None:
    gen = train_loop(_weights(backend))
    result = check(lambda: next(gen), steps=8, warmup=2)
    text = render_text(result)
    assert result.diagnosis is not None and result.diagnosis.pattern == "list-accumulation"
    assert " -> generator train_loop() local 'losses' -> list(len=" in text, text
    assert "generator -> " not in text
    assert "stored at: " in text and "losses.append(loss)" in text


@pytest.mark.parametrize("backend", ["torch", "minigrad"])
def test_a_generator_loops_running_total_is_named_and_its_rebinding_stored(backend: str) -> None:
    gen = running_total(_weights(backend))
    result = check(lambda: next(gen), steps=8, warmup=2)
    text = render_text(result)
    assert result.diagnosis is not None and result.diagnosis.pattern == "retained-grad-fn"
    assert " -> generator running_total() local 'total' -> " in text, text
    # The rebinding of the paused frame's local is watched too: the line that stores it.
    assert "total = total + (w * 2.0).sum()" in text


def test_edges_of_a_generator_are_its_locals_until_it_finishes() -> None:
    kept = [object()]

    def gen() -> Iterator[int]:
        box = kept
        yield len(box)

    walker = ObjectEdges(active_backends())
    paused = gen()
    next(paused)
    assert (Edge("local", "box"), kept) in [(e, o) for e, o in walker.edges(paused)]
    assert Edge("local", "box").text() == " local 'box'" and Edge("local", "box").named
    for _ in paused:
        pass
    assert [e for e, _ in walker.edges(paused) if e.kind == "local"] == []
