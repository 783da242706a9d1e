"""The pattern word, decided from facts the heap walk established (pure, no heap access).

Order of evidence, strongest first:

1. leaked tensors/nodes that only the cyclic GC frees, or that live on with no chain
   from any root while a reference cycle (or a saved-tensor pack hook) holds them:
   ``cycle``;
2. a chain from a root through a container whose length grew during a step:
   ``list-accumulation``;
3. no graph node grew (neither a metric that counts nodes nor among the leaked
   objects): tensors without a graph pile up, and nothing on a chain grows:
   ``memory-growth`` (never ``retained-grad-fn``, which means a growing graph);
4. any other leaked tensor or node (a bounded set of live tensors whose graph grows):
   ``retained-grad-fn``;
5. nothing leaked that the heap walk can see, and only memory grew (the grown metrics'
   declarations count no graph objects): ``memory-growth``.

With no evidence at all the verdict's first guess from the series stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_graphleak.metrics import Metric
from pytest_graphleak.result import PATTERNS, Verdict


@dataclass(frozen=True)
class Facts:
    leaked_count: int = 0  # leaked tensors + nodes seen by the diagnosis
    cyclic_count: int = 0  # of which only the cyclic GC frees
    has_chain: bool = False
    container_grew: bool = False
    cycle_held: bool = False  # no chain, but a cycle or pack hook keeps them alive
    memory_only: bool = False  # the verdict saw only memory grow (``only_memory_grew``)
    graph_grew: bool = True  # graph nodes grew (a nodes metric) or leaked (diagnosis)


def only_memory_grew(verdict: Verdict, metrics: Mapping[str, Metric]) -> bool:
    """Some metric grew and every grown one is declared as memory (no graph objects)."""
    grown = [metrics.get(g.metric) for g in verdict.growths]
    return bool(grown) and all(m is not None and not m.graph for m in grown)


def nodes_grew(verdict: Verdict, metrics: Mapping[str, Metric]) -> bool:
    """Did a metric declared as counting graph nodes grow?"""
    declared = [metrics.get(g.metric) for g in verdict.growths]
    return any(m is not None and m.counts == "nodes" for m in declared)


def tensors_grew(verdict: Verdict, metrics: Mapping[str, Metric]) -> bool:
    """Did a metric declared as counting tensors grow?"""
    declared = [metrics.get(g.metric) for g in verdict.growths]
    return any(m is not None and m.counts == "tensors" for m in declared)


def pattern_of(verdict: Verdict, facts: Facts) -> str:
    if facts.cyclic_count > 0 or (facts.cycle_held and not facts.has_chain):
        return "cycle"
    if facts.has_chain and facts.container_grew:
        return "list-accumulation"
    if not facts.graph_grew:
        return "memory-growth"
    if facts.leaked_count > 0 or facts.has_chain:
        return "retained-grad-fn"
    if facts.memory_only:
        return "memory-growth"
    if verdict.pattern in PATTERNS:
        return verdict.pattern
    return "memory-growth" if not verdict.growths else "retained-grad-fn"
