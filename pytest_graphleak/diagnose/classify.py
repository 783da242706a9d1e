"""The pattern word, decided from facts the heap walk established (pure, no heap access).

Order of evidence, strongest first:

1. leaked tensors/nodes that only the cyclic GC frees, or that live on with no chain
   from any root while a reference cycle (or a saved-tensor pack hook) holds them, or a
   series in which only the cyclic garbage grew (what the collector freed each step was
   gone before the diagnosis could look, as in a loop that collects after every step):
   ``cycle``;
2. a chain from a root through a container whose length grew during a step, through a
   ``functools`` cache (one result per distinct argument), or (the outlive audit, which
   sees a graph kept once, not growing) through a container that holds a tensor the
   test made: ``list-accumulation``;
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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_graphleak.metrics import Metric
from pytest_graphleak.patterns import (
    CYCLE,
    LIST_ACCUMULATION,
    MEMORY_GROWTH,
    PATTERNS,
    RETAINED_GRAD_FN,
)
from pytest_graphleak.result import Link, Verdict
from pytest_graphleak.words.chain import CACHES


@dataclass(frozen=True)
class Facts:
    """What the diagnosis established, made by ``facts_of`` (the one place a diagnosis
    builds it): the chain's three (``has_chain``, ``container_grew``,
    ``kept_in_container``) are read from its typed links; the rest are counts."""

    leaked_count: int = 0  # leaked tensors + nodes seen by the diagnosis
    cyclic_count: int = 0  # of which only the cyclic GC frees
    has_chain: bool = False
    container_grew: bool = False
    cycle_held: bool = False  # no chain, but a cycle or pack hook keeps them alive
    memory_only: bool = False  # the verdict saw only memory grow (``only_memory_grew``)
    graph_grew: bool = True  # graph nodes grew (a nodes metric) or leaked (diagnosis)
    only_cycles: bool = False  # the only grown metrics count cyclic garbage
    #: The outlive audit: a container on the chain holds a graph tensor the test made
    #: (seen kept once; ``container_grew`` needs growth seen over steps).
    kept_in_container: bool = False


#: The edges by which a chain leaves a collection for one of its entries (a list's or a
#: numpy object array's index, a dict's key, a set's member).
ENTRY_EDGES = frozenset({"index", "key", "member"})


def facts_of(
    links: Sequence[Link] = (),
    *,
    kept_counts: bool = False,
    leaked_count: int = 0,
    cyclic_count: int = 0,
    cycle_held: bool = False,
    memory_only: bool = False,
    graph_grew: bool = True,
    only_cycles: bool = False,
) -> Facts:
    """What a diagnosis found, as ``Facts``: the one place every diagnosis path (steps
    re-run, a running loop's recorded steps, the heap as it is, the outlive audit) turns
    its counts and chain into the evidence ``pattern_of`` decides on.

    The chain's facts are read from its typed links (``Diagnosis.links``, root first;
    none: no chain): a link that gained entries while the steps were watched
    (``Link.grew``) is a container that grew. ``kept_counts``: no steps were watched (the
    outlive audit, which sees a graph kept once; a heap searched for a container of
    graph tensors), so a collection on the chain that holds the kept object for one of
    its entries is the evidence (``kept_in_container``)."""
    grew = any(link.grew > 0 for link in links)
    held = kept_counts and any(link.edge in ENTRY_EDGES for link in links[1:])
    # A functools cache keeps one result per distinct argument: a container that grows
    # by key, whether or not the steps watched showed a new key.
    held = held or any(link.type in CACHES for link in links[1:])
    return Facts(
        leaked_count=leaked_count,
        cyclic_count=cyclic_count,
        has_chain=bool(links),
        container_grew=grew,
        cycle_held=cycle_held,
        memory_only=memory_only,
        graph_grew=graph_grew,
        only_cycles=only_cycles,
        kept_in_container=held,
    )


@dataclass(frozen=True)
class Grown:
    """What the verdict's grown metrics are, read from their declarations."""

    memory_only: bool  # only memory grew: no tensor, node or cycle count
    period: int  # steps it takes to see one more leaked object
    nodes: bool  # a metric that counts graph nodes grew
    tensors: bool  # a metric that counts tensors grew
    only_cycles: bool = False  # every grown metric counts cyclic garbage


#: Most steps run to see a container on the chain grow (a leak every k-th step).
_MAX_GROWTH_STEPS = 6


def only_memory_grew(verdict: Verdict, metrics: Mapping[str, Metric]) -> bool:
    """Some metric grew and every grown one is declared as memory (no graph objects)."""
    grown = [metrics.get(g.metric) for g in verdict.growths]
    return bool(grown) and all(m is not None and not m.graph for m in grown)


def grown_of(verdict: Verdict, metrics: Mapping[str, Metric]) -> Grown:
    """What grew, by the declarations. ``period``: a leak of one tensor every 4th step grew
    the count by 0.25 per step, so it needs up to 4 steps to show. (From graph nodes alone
    this is a lower bound: a step may leak several nodes at once.)"""
    declared = [(g.per_step, metrics.get(g.metric)) for g in verdict.growths]
    counts = {m.counts for _, m in declared if m is not None}
    rates = [r for r, m in declared if m is not None and m.counts in ("tensors", "nodes") and r > 0]
    period = max(1, min(_MAX_GROWTH_STEPS, math.ceil(1 / min(rates) - 1e-9))) if rates else 1
    cycles_only = counts == {"cycles"} and all(m is not None for _, m in declared)
    return Grown(
        only_memory_grew(verdict, metrics),
        period,
        "nodes" in counts,
        "tensors" in counts,
        only_cycles=cycles_only,
    )


def pattern_of(verdict: Verdict, facts: Facts) -> str:
    if facts.cyclic_count > 0 or facts.only_cycles or (facts.cycle_held and not facts.has_chain):
        return CYCLE
    if facts.has_chain and (facts.container_grew or facts.kept_in_container):
        return LIST_ACCUMULATION
    if not facts.graph_grew:
        return MEMORY_GROWTH
    if facts.leaked_count > 0 or facts.has_chain:
        return RETAINED_GRAD_FN
    if facts.memory_only:
        return MEMORY_GROWTH
    if verdict.pattern in PATTERNS:
        return verdict.pattern
    return MEMORY_GROWTH if not verdict.growths else RETAINED_GRAD_FN
