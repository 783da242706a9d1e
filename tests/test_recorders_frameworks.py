"""Framework records of logged values as holders (issue 43 item 4): a graph kept in
transformers' ``TrainerState.log_history`` or ignite's ``State.metrics`` is told in the
user's words (what fills the record, as long as what it lives), and the fix names what
the user passes to the framework, never the record's insides. In-process: the words on
typed chains, then the audit's search on the real frameworks' objects (skipped when the
framework is not installed)."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

import pytest

from pytest_graphleak.result import Link
from pytest_graphleak.words.recorders import history_of, history_story

needs_torch = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")


def _chain(*links: tuple[str, str, str]) -> list[Link]:
    """A root global ``trainer``, then (type, edge, key) per link (the first is the root's
    object), ending at a tensor."""
    return [
        Link("root", "global", name="trainer"),
        *(Link("object", tp, edge=edge, key=key) for tp, edge, key in links),
        Link("tensor", "Tensor", graph=True),
    ]


def test_a_log_history_is_told_by_the_users_path_to_it() -> None:
    history = history_of(
        _chain(
            ("Trainer", "attribute", "state"),
            ("TrainerState", "attribute", "log_history"),
            ("list", "index", "0"),
            ("dict", "key", "'loss'"),
        )
    )
    assert history is not None
    assert history_story(history) == (
        "`trainer.state.log_history` keeps every dict logged with `Trainer.log()` (the "
        "trainer's own logs and the results of `compute_metrics`) for the whole run, so a "
        "graph-carrying tensor logged there stays alive as long as the trainer"
    )
    assert "Trainer.log()" in history.fix and "_" not in history.fix.split("Trainer.log()")[0]


def test_a_record_reached_through_a_container_is_named_by_its_type() -> None:
    history = history_of(
        _chain(("list", "index", "0"), ("State", "attribute", "metrics"), ("dict", "key", "'acc'"))
    )
    assert history is not None and history.holder == "engine.state.metrics"
    assert history.fix.endswith("where a handler sets engine.state.metrics[...]")


def test_a_record_not_on_the_path_to_the_graph_is_no_history() -> None:
    """Only the record the chain leaves through keeps the graph."""
    assert history_of(_chain(("State", "attribute", "output"))) is None
    assert history_of(_chain(("TrainerState", "key", "log_history"))) is None


def _explained(holder: object, keep: Any) -> tuple[str, str, list[str]]:
    """(the story, the fix, the chain) of the audit's finding for a graph ``keep`` stores
    in ``holder`` during a census."""
    import torch

    from pytest_graphleak.outlive import Census, Holder
    from pytest_graphleak.outlive.explain import explain

    census = Census()
    census.begin()
    keep((torch.ones(2, requires_grad=True) * 2).sum())
    assert census.finish()
    found = explain(
        census,
        [Holder("global 'trainer'", "m.trainer", holder)],
        nodeid="t",
        backends=census.backends,
    )
    try:
        [result] = found.results
        assert result.diagnosis is not None
        return result.diagnosis.story, result.diagnosis.fix, result.diagnosis.chain
    finally:
        found.release()


@needs_torch
@pytest.mark.skipif(find_spec("transformers") is None, reason="transformers is not installed")
def test_a_loss_logged_in_transformers_log_history() -> None:
    from transformers import TrainerState

    class Trainer:  # what a test keeps: the trainer, whose state has the log history
        def __init__(self) -> None:
            self.state = TrainerState()

    trainer = Trainer()
    story, fix, chain = _explained(
        trainer, lambda loss: trainer.state.log_history.append({"loss": loss, "step": 1})
    )
    assert chain[:3] == ["global 'trainer'", "Trainer.state", "TrainerState.log_history"]
    assert story.startswith(
        "`trainer.state.log_history` keeps every dict logged with `Trainer.log()`"
    )
    assert fix.startswith(
        "log numbers: put loss.item() (or loss.detach()) in the dict given to Trainer.log()"
    )


@needs_torch
@pytest.mark.skipif(find_spec("ignite") is None, reason="pytorch-ignite is not installed")
def test_a_metric_value_kept_in_ignites_state_metrics() -> None:
    from ignite.engine import Engine

    trainer = Engine(lambda engine, batch: None)
    story, fix, chain = _explained(
        trainer, lambda loss: trainer.state.metrics.__setitem__("loss", loss)
    )
    assert chain[:3] == ["global 'trainer'", "Engine.state", "State.metrics"]
    assert story.startswith(
        "`trainer.state.metrics` keeps the last value of every metric attached to the engine"
    )
    assert "stays alive as long as the engine" in story
    assert fix.endswith("where a handler sets trainer.state.metrics[...]")
