"""The one fact builder (``diagnose.facts``): a found chain as typed links.

Each link says what the object is and how the chain leaves it, so the pattern and the
words never read a label back: a root's kind and name, an attribute, a key, an index, a
closure cell, a generator's frame, a custom Function's ctx attribute; a container's
base and length; a tensor's shape and whether it carries a graph; a TensorDict-like
object. The JSON report carries them (``diagnosis.links``) and reads them back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphleak.diagnose.backends import active_backends
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.facts import links_of, root_link
from pytest_graphleak.diagnose.search import shortest_path
from pytest_graphleak.result import CheckResult, Diagnosis, Link, Verdict
from pytest_graphleak.words.chain import holder_text, names_of

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")


def _links(roots: list[tuple[str, object]], target: object) -> list[Link]:
    walker = ObjectEdges(active_backends())
    path = shortest_path(roots, lambda o: o is target, walker)
    assert path is not None
    try:
        return links_of(path, walker)
    finally:
        path.clear()


def test_root_links_carry_their_kind_and_the_users_name() -> None:
    assert root_link("fixture 'st'") == Link("root", "fixture", name="st")
    assert root_link("global 'train.HISTORY'").name == "HISTORY"
    assert root_link("fixture 'state' (session scope)").name == "state"
    assert root_link("self") == Link("root", "self", name="self")
    assert root_link("function step closure 'kept'").name == ""  # not a name in the code
    assert root_link("unknown root") == Link("root", "unknown")


def test_a_dict_of_lists_gives_key_index_and_tensor_facts() -> None:
    loss = (torch.ones(2, requires_grad=True) * 2).sum()
    state: dict[str, Any] = {"losses": [1.0, loss]}
    links = _links([("fixture 'state'", state)], loss)
    assert [(link.kind, link.type, link.edge) for link in links] == [
        ("root", "fixture", ""),
        ("container", "dict", "key"),
        ("container", "list", "index"),
        ("tensor", "Tensor", ""),
    ]
    assert links[1].key == "'losses'" and links[1].base == "dict" and links[1].grows
    assert links[2].length == 2 and links[2].key == "1"
    assert links[3].shape == [] and links[3].graph
    assert holder_text(links) == "state['losses']"
    assert [link.type for link in names_of(links)] == ["fixture", "dict"]


def test_attributes_cells_and_generator_frames_are_typed_edges() -> None:
    out = torch.ones(3, requires_grad=True) * 2

    class Trainer:
        def __init__(self) -> None:
            self.last = out

    def make() -> Any:
        kept = out

        def step() -> Any:
            return kept

        return step

    def frames() -> Any:
        held = out
        yield held

    trainer, step, paused = Trainer(), make(), frames()
    next(paused)
    assert [(link.edge, link.key) for link in _links([("self", trainer)], out)][:2] == [
        ("", ""),
        ("attribute", "last"),
    ]
    cell = _links([("local 'step'", step)], out)
    assert "closure cell" in [link.edge for link in cell], cell
    frame = _links([("local 'gen'", paused)], out)
    assert frame[1].edge == "generator frame" and frame[1].key == "held", frame


def test_a_custom_functions_ctx_attribute_is_its_own_edge() -> None:
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.kept = x * 3  # a tensor of its own, kept on the ctx
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad * 2

    x = torch.ones(2, requires_grad=True)
    keep: Callable[[torch.Tensor], torch.Tensor] = Keep.apply
    y = keep(x)
    kept = getattr(y.grad_fn, "kept")  # noqa: B009 -- set on ctx: torch's Node type lacks it
    links = _links([("local 'y'", y)], kept)
    assert ("ctx attribute", "kept") in [(link.edge, link.key) for link in links], links


def test_the_links_travel_through_the_json_report() -> None:
    links = [
        Link("root", "fixture", name="st"),
        Link("container", "list", edge="index", key="0", base="list", length=3, grows=True),
        Link("tensor", "Tensor", shape=[2, 4], graph=True),
    ]
    diagnosis = Diagnosis(
        "list-accumulation", chain=["fixture 'st'", "list(len=3)", "T"], links=links, fix="f"
    )
    result = CheckResult("t", 0, 0, {}, {}, Verdict(leaked=True), diagnosis=diagnosis)
    assert CheckResult.from_dict(result.to_dict()).diagnosis == diagnosis
