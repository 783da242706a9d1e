"""The one walker over autograd graph nodes: iterative, bounded, safe on deep graphs.

torch keeps the Python wrapper of a graph node alive for as long as the node lives once
Python has touched it (``grad_fn``, ``next_functions``), and a graph whose nodes were
wrapped by the tens of thousands in one go can no longer be freed: its deallocation
recurses through the wrappers and overflows the C stack (a 50,000-node chain walked
once kills the process with SIGSEGV when the graph is freed). So a walk never holds a
wrapper after it returns, and wraps at most ``new_per_walk`` nodes it has not expanded
before (10,000 by default: a chain of 40,000 freshly wrapped nodes still frees, 50,000
does not).

A ``GraphWalk`` lives as long as one check: nodes it expanded before (by ``id``: a
touched node keeps its wrapper, so its id is stable while it lives) are walked again
for free, and a node it had to leave unexpanded when a walk reached its bound stays
unexpanded for the rest of the check. A graph that does not change therefore gives the
same count at every sample, a graph that grows by fewer nodes per step than the bound
is counted exactly, and one that grows faster is counted as a lower bound that still
grows (``truncated`` says so): the wrappers of earlier samples stay alive with their
nodes, and callers pass them in as held nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: Nodes a walk may expand for the first time (each expansion wraps the node's inputs).
NEW_PER_WALK = 10_000


def grad_fn_of(obj: Any) -> Any:
    """``obj.grad_fn``, or None when it has none or reading it raises. torch raises on a
    view made under ``no_grad`` whose base was changed in place since (what
    ``nn.init.orthogonal_`` leaves behind): any use of its graph raises too, so it carries
    none the plugin can count or walk, and a read made inside the user's step (a
    recording mode, a line tracer) must never raise into it."""
    try:
        return obj.grad_fn
    except Exception:
        return None


class GraphWalk:
    """Walks over graph nodes (torch's and minigrad's ``next_functions``), bounded per
    walk, remembered for one check."""

    def __init__(self, *, new_per_walk: int = NEW_PER_WALK) -> None:
        self.new_per_walk = new_per_walk
        self._expanded: set[int] = set()  # ids only: never keeps a node alive
        self._cut: set[int] = set()
        #: Some walk stopped at its bound: its count (and later ones) is a lower bound.
        self.truncated = False

    def count(self, starts: Iterable[Any], visit: Callable[[Any], None] | None = None) -> int:
        """Distinct nodes reachable from ``starts`` (within the bound), calling ``visit``
        on each. Holds the wrappers while it walks (so ids stay unique), none after."""
        seen: dict[int, Any] = {}
        stack = [node for node in starts if node is not None]
        push = stack.append
        expanded, cut = self._expanded, self._cut
        budget = self.new_per_walk
        try:
            while stack:
                node = stack.pop()
                key = id(node)
                if key in seen:
                    continue
                seen[key] = node
                if visit is not None:
                    visit(node)
                if key not in expanded:
                    if key in cut:
                        continue
                    if budget <= 0:
                        cut.add(key)
                        self.truncated = True
                        continue
                    budget -= 1
                    expanded.add(key)
                try:
                    pairs = node.next_functions
                except Exception:  # a released, foreign or exotic node: nothing more to walk
                    continue
                for child, _ in pairs:
                    if child is not None and id(child) not in seen:
                        push(child)
            return len(seen)
        finally:
            seen.clear()
            stack.clear()
