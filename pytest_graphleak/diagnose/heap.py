"""Diagnosis without a step (a hand-written loop checked with ``track()``).

No step can be re-run, so nothing tells this step's objects from older ones. What the
roots hold now still names the culprit in the common cases:

- a container holding several graph-carrying tensors -> ``list-accumulation``;
- otherwise the root-reachable tensor with the largest autograd graph ->
  ``retained-grad-fn``;
- the verdict's own evidence of cycles (only the cyclic garbage grew, or the verdict's
  guess) -> ``cycle``: the collector freed each step's cycle when the step was sampled,
  so the heap holds nothing of it to draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.classify import facts_of, pattern_of
from pytest_graphleak.diagnose.edges import ObjectEdges, items_of
from pytest_graphleak.diagnose.facts import chain_of
from pytest_graphleak.diagnose.render import drawing
from pytest_graphleak.diagnose.roots import given_roots
from pytest_graphleak.diagnose.search import Path, extend, shortest_path
from pytest_graphleak.heap.containers import SIZED
from pytest_graphleak.heap.graphwalk import GraphWalk, grad_fn_of
from pytest_graphleak.heap.quiet import silenced
from pytest_graphleak.patterns import CYCLE
from pytest_graphleak.result import Diagnosis, Verdict
from pytest_graphleak.words import notes as said
from pytest_graphleak.words.fix import choose_fix, story_of

_MIN_ACCUMULATED = 2
_GRAPH_LIMIT = 5_000


def _tensor(obj: Any, walker: ObjectEdges, *, graph: bool) -> bool:
    """A tensor (with ``graph``: one that carries an autograd graph)."""
    found = walker.backend_of(obj)
    if found is None or found[1] != TENSOR:
        return False
    return not graph or grad_fn_of(obj) is not None


def _accumulates(obj: object, walker: ObjectEdges, *, graph: bool) -> bool:
    if not isinstance(obj, SIZED) or len(obj) < _MIN_ACCUMULATED:
        return False
    count = 0
    for item in islice(items_of(obj), 1000):
        if _tensor(item, walker, graph=graph):
            count += 1
            if count >= _MIN_ACCUMULATED:
                return True
    return False


def _graph_size(tensor: Any, walker: ObjectEdges) -> tuple[int, str]:
    """The number of nodes of the tensor's graph, and as text ("5012+" past the bound)."""
    if walker.backend_of(tensor) is None:
        return 0, "0"
    graph = GraphWalk(new_per_walk=_GRAPH_LIMIT)
    size = graph.count([grad_fn_of(tensor)])
    return size, f"{size}+" if graph.truncated else str(size)


def _diagnosis(
    verdict: Verdict,
    notes: list[str],
    path: Path | None,
    walker: ObjectEdges,
    *,
    kept_counts: bool = False,
    leaked_count: int = 0,
    cyclic_count: int = 0,
    memory_only: bool = False,
    graph_grew: bool = True,
    only_cycles: bool = False,
) -> Diagnosis:
    """The diagnosis of what the walk found: the word is ``pattern_of``'s, from the
    counts and the chain's typed links (``facts_of``; ``kept_counts``: a container
    the walk found holding graph tensors is the evidence, no steps were watched)."""
    chain, links = chain_of(path, walker)
    facts = facts_of(
        links,
        kept_counts=kept_counts,
        leaked_count=leaked_count,
        cyclic_count=cyclic_count,
        memory_only=memory_only,
        graph_grew=graph_grew,
        only_cycles=only_cycles,
    )
    pattern = pattern_of(verdict, facts)
    story = story_of(pattern, graph_grew=facts.graph_grew, tensors=True, has_chain=facts.has_chain)
    # Tensors grew or were found (tensors=True), without a graph; only cycles: unknown.
    bare = not facts.graph_grew and not facts.only_cycles
    diagnosis = Diagnosis(
        pattern,
        chain=chain,
        links=links,
        notes=notes,
        story=story,
        kept_without_graph=bare,
        drawing=drawing(path, None, walker),
    )
    diagnosis.fix = choose_fix(diagnosis)
    return diagnosis


@silenced
def diagnose_heap(
    verdict: Verdict,
    roots: Mapping[str, object],
    walker: ObjectEdges,
    *,
    memory_only: bool,
    graph_grew: bool,
    only_cycles: bool = False,
) -> Diagnosis:
    notes = [said.NO_LINES]
    if only_cycles:  # containers of older tensors the roots reach are not what grew
        notes.append(said.CYCLES_FREED)
        return _diagnosis(verdict, notes, None, walker, graph_grew=False, only_cycles=True)
    labelled = given_roots(roots)
    # Tensors grew and graph nodes did not: a container of tensors the roots reach is
    # list-accumulation, else memory-growth; never retained-grad-fn (no graph grew). The
    # word is pattern_of's, the one decider, from what this walk found.
    graph = graph_grew or memory_only
    path = shortest_path(labelled, lambda o: _accumulates(o, walker, graph=graph), walker)
    try:
        if path is not None:
            container: Any = path.objects[-1]  # a container _accumulates accepted
            extend(path, next(t for t in items_of(container) if _tensor(t, walker, graph=graph)))
            notes.append(said.container_of(type(container).__name__, len(container), graph=graph))
            return _diagnosis(verdict, notes, path, walker, kept_counts=True, graph_grew=graph)
        if not graph:
            return _diagnosis(verdict, notes, None, walker, graph_grew=False)
        # The verdict's own evidence of cycles (cyclic garbage grew) outranks a graph the
        # roots reach: no search for one then.
        cyclic = int(verdict.pattern == CYCLE)
        best: tuple[tuple[int, str], Path] | None = None
        for root in labelled if not cyclic else ():  # a graph tensor root is its own path
            candidate = shortest_path(
                [root], lambda o: _tensor(o, walker, graph=True), walker, max_visited=20_000
            )
            if candidate is None:
                continue
            size = _graph_size(candidate.objects[-1], walker)
            if best is None or size > best[0]:
                if best is not None:
                    best[1].clear()
                best = (size, candidate)
            else:
                candidate.clear()
        if best is not None:
            size, path = best
            notes.append(said.graph_size(size[1]))
            return _diagnosis(verdict, notes, path, walker, leaked_count=1)
        if cyclic:
            notes.append(said.CYCLES_FREED)
        return _diagnosis(
            verdict, notes, None, walker, cyclic_count=cyclic, memory_only=memory_only
        )
    finally:
        if path is not None:
            path.clear()
