"""heap.graphwalk: exact under its bound, a stable lower bound past it, holds nothing."""

from __future__ import annotations

import gc
import weakref

from pytest_graphleak.heap.graphwalk import GraphWalk


class Node:
    """A graph node as torch and minigrad show it: ``next_functions`` pairs, Nones too."""

    def __init__(self, *inputs: Node | None) -> None:
        self.inputs = list(inputs)

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        return tuple((node, 0) for node in self.inputs)


def chain(length: int, below: Node | None = None) -> Node:
    node = below if below is not None else Node()
    for _ in range(length - (below is None)):
        node = Node(node)
    return node


def test_counts_distinct_nodes_of_a_dag_exactly() -> None:
    leaf = Node()
    a, b = Node(leaf, None), Node(leaf)
    top = Node(a, b)
    visited: list[int] = []
    walk = GraphWalk()
    assert walk.count([top, a, None], lambda n: visited.append(id(n))) == 4
    assert len(visited) == 4 and not walk.truncated


def test_past_the_bound_the_count_is_a_stable_lower_bound_that_still_grows() -> None:
    walk = GraphWalk(new_per_walk=10)
    top = chain(100)
    first = walk.count([top])
    assert walk.truncated and 10 <= first < 100
    assert walk.count([top]) == first  # the same graph: the same count, every sample
    grown = chain(5, below=top)  # five more nodes on top: counted, the cut stays cut
    assert walk.count([grown]) == first + 5


def test_an_unchanged_bound_walk_in_a_new_check_gives_the_same_count() -> None:
    top = chain(50)
    assert GraphWalk(new_per_walk=10).count([top]) == GraphWalk(new_per_walk=10).count([top])
    assert GraphWalk().count([top]) == 50


def test_keeps_no_node_alive() -> None:
    top = chain(30)
    ref = weakref.ref(top.inputs[0])
    walk = GraphWalk(new_per_walk=5)
    walk.count([top])
    del top
    gc.collect()
    assert ref() is None
