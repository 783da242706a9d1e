"""The pattern word, decided from facts the heap walk established (pure, no heap access).

Order of evidence, strongest first:

1. leaked tensors/nodes that only the cyclic GC frees, or that live on with no chain
   from any root while a reference cycle (or a saved-tensor pack hook) holds them:
   ``cycle``;
2. a chain from a root through a container whose length grew during a step:
   ``list-accumulation``;
3. any other leaked tensor or node (a bounded set of live tensors whose graph grows):
   ``retained-grad-fn``;
4. nothing leaked that the heap walk can see, and only memory grew: ``memory-growth``.

With no evidence at all the verdict's first guess from the series stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_graphleak.result import PATTERNS, Verdict

_OBJECT_PREFIXES = ("torch.tensors", "torch.nodes", "minigrad.", "cuda.tensors")


@dataclass(frozen=True)
class Facts:
    leaked_count: int = 0  # leaked tensors + nodes seen by the diagnosis
    cyclic_count: int = 0  # of which only the cyclic GC frees
    has_chain: bool = False
    container_grew: bool = False
    cycle_held: bool = False  # no chain, but a cycle or pack hook keeps them alive


def only_memory_grew(verdict: Verdict) -> bool:
    metrics = [g.metric for g in verdict.growths]
    if not metrics:
        return False
    return not any(m.startswith(_OBJECT_PREFIXES) or m == "gc.cyclic_garbage" for m in metrics)


def classify(verdict: Verdict, facts: Facts) -> str:
    if facts.cyclic_count > 0 or (facts.cycle_held and not facts.has_chain):
        return "cycle"
    if facts.has_chain and facts.container_grew:
        return "list-accumulation"
    if facts.leaked_count > 0 or facts.has_chain:
        return "retained-grad-fn"
    if only_memory_grew(verdict):
        return "memory-growth"
    if verdict.pattern in PATTERNS:
        return verdict.pattern
    return "memory-growth" if not verdict.growths else "retained-grad-fn"
