"""The retained graph as plain data (``Drawing``): what a diagnosis draws and the reports
write as Graphviz DOT. Plain data (bottom layer: no import of the package); a
``result.Diagnosis`` carries one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DrawingNode:
    """One box of a ``Drawing``: its text and what it stands for."""

    label: str  # the object described (``list(len=3)``, ``Tensor(shape=(), ...)``)
    #: "root": the chain's root (the user's name for it); "node": a leaked autograd graph
    #: node (drawn to stand out); "object": anything else.
    kind: str = "object"


@dataclass
class DrawingEdge:
    """One arrow of a ``Drawing``, between two of its nodes (by their index)."""

    source: int
    target: int
    #: "root": from the root to the first object; "reference": a link of the chain or
    #: the cycle, ``label`` saying how (``['losses']``, ``.history``; "" for none);
    #: "graph": an edge of the retained autograd graph behind the chain's tensor.
    kind: str = "reference"
    label: str = ""


@dataclass
class Drawing:
    """The retained graph as plain data: the chain (or the cycle) and, behind its last
    tensor or node, the autograd graph, at most ``diagnose.render.MAX_DRAWN`` objects.
    The diagnosis makes it (``diagnose.render.drawing``); the reports draw it
    (``report.dot.drawing_dot``: Graphviz DOT). Nodes are listed in the order the
    edges first reach them."""

    nodes: list[DrawingNode] = field(default_factory=list)
    edges: list[DrawingEdge] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Drawing:
        return cls(
            nodes=[DrawingNode(**node) for node in data.get("nodes", [])],
            edges=[DrawingEdge(**edge) for edge in data.get("edges", [])],
        )
