"""A second holder: the step leaks into two places, and the chain names one.

``losses.append(loss)`` and ``outs[i] = out`` in one step: the tensor count grows by 2
a step, the chain search finds ``losses`` first, and the user who fixes it sees the test
fail again on ``outs``. ``other_holder`` counts the leaked graph-carrying tensors that
the named holder does not reach, searches a chain to them from the same roots and, when
one is found, watches a step to find the line that stores them: a note names that holder
and its line, so that one round of fixes is enough.

Every path it finds is let go before it returns; the note is plain text.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pytest_graphleak.diagnose.backends import TENSOR
from pytest_graphleak.diagnose.churn import carries_graph
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.facts import chain_of
from pytest_graphleak.diagnose.observed import Observation
from pytest_graphleak.diagnose.search import Path, shortest_path
from pytest_graphleak.diagnose.sites import per_step
from pytest_graphleak.diagnose.stored import root_reader, watch_holder
from pytest_graphleak.paths import display_path
from pytest_graphleak.result import CreationSite, Link
from pytest_graphleak.words import notes as said

#: Objects looked at from the named holder, at most, to see which leaked tensors it keeps.
_REACH = 5_000


@dataclass
class Second:
    """The second holder: the note that names it, the lines that store into it and its
    chain's typed links (``Diagnosis.second_stored_at``, ``second_links``)."""

    note: str = ""
    stored_at: list[CreationSite] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)


def other_holder(
    path: Path,
    obs: Observation,
    roots: Sequence[tuple[str, object]],
    walker: ObjectEdges,
    step: Callable[[], object] | None,
    *,
    period: int,
    holder_at: int | None = None,
) -> Second:
    """The holder of the leaked graph-carrying tensors that ``path``'s holder (its
    object at ``holder_at``: the container that grew; else the one that holds the
    tensor) does not keep; an empty ``Second`` when it keeps them all or no other chain
    reaches them."""
    at = holder_at if holder_at is not None else max(0, len(path.objects) - 2)
    holder = path.objects[at]
    leaked = [item for item in obs.alive if item.kind == TENSOR and carries_graph(item)]
    try:
        kept = _reached(holder, walker)
        others = {id(item.obj) for item in leaked if id(item.obj) not in kept}
        if not others or len(others) == len(leaked):
            return Second()
        seeds = [item.obj for item in leaked if id(item.obj) in others]
        second = shortest_path(roots, lambda obj: id(obj) in others, walker, seeds=seeds)
        seeds.clear()
        if second is None:
            return Second()
        lines: list[CreationSite] = []
        try:
            if any(obj is holder for obj in second.objects):  # the same holder after all
                return Second()
            labels, links = chain_of(second, walker)
            where = ""
            if step is not None:
                watched = watch_holder(
                    second, step, walker, steps=period, root=root_reader(second, dict)
                )
                lines = per_step(watched.stored, watched.steps, watched.via)
                if lines:
                    line = lines[0]
                    place = f"{display_path(line.filename)}:{line.lineno}"
                    where = f" (stored at {place}: {line.line})"
        finally:
            second.clear()
        runs = max(1, min(obs.recorded_runs, obs.runs_done))
        total, other = len(leaked) / runs, len(others) / runs
        note = said.second_holder(
            _count(total - other),
            _count(total),
            _count(other),
            other != 1,
            " -> ".join(labels),
            where,
        )
        return Second(note, lines, links)
    finally:
        leaked.clear()


def _count(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _reached(start: object, walker: ObjectEdges) -> set[int]:
    """Ids of what ``start`` reaches by plain references (not through autograd graphs)."""
    plain = ObjectEdges(walker.backends, walker.exclude, graphs=False)
    seen = {id(start)}
    queue: deque[object] = deque([start])
    visited = 0
    try:
        while queue and visited < _REACH:
            obj = queue.popleft()
            visited += 1
            try:
                out = list(plain.edges(obj))
            except Exception:
                continue
            for _, child in out:
                if id(child) not in seen and plain.walkable(child):
                    seen.add(id(child))
                    queue.append(child)
            out.clear()
        return seen
    finally:
        queue.clear()
