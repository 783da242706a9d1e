"""The one fix chooser: which fix a diagnosis shows, chosen once from its facts.

``choose_fix(diagnosis)`` is called wherever a diagnosis is made or learns more (the
step check, the heap of a running loop, that loop's next step, the outlive audit and
its re-run); ``Diagnosis.fix`` then holds the fix that the terminal, the text report,
the JSON, the HTML page and the GitHub annotation all show. In order:

- ``cycle``: the fix worded for the cycle's own link (``cycles.cycle_story``);
- ``memory-growth``: the line that rebuilds a kept array one step bigger
  (``lines.growth_fix``), else the no-graph fix when tensors without a graph are kept;
- ``list-accumulation`` and ``retained-grad-fn`` through a ``functools`` cache: clear
  or bound the cache (``cache_fix``), never ``.detach()`` what a backward runs through;
- ``list-accumulation`` and ``retained-grad-fn``: the ``stored at:`` line, worded with
  the user's own expressions (``lines.fix_for_stored``: a later backward through the
  container first, then the line's shape, checked against the typed chain); without a
  line of a known shape, the no-graph fix when the kept tensors carry no graph, else the
  pattern's fix worded with the holder that the chain names (``usual_fix``);
- a graph kept in what a mock records (``words/recorders``): ``reset_mock()``, a
  function-scoped fixture, or detaching in the code that calls it;
- otherwise the pattern's usual fix (``patterns.FIXES``): never "".

``story_of`` words what the pattern means when the numbers say more than its usual
meaning (tensors kept without a graph).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_graphleak.patterns import (
    BY_WORD,
    CYCLE,
    LIST_ACCUMULATION,
    MEMORY_GROWTH,
    RETAINED_GRAD_FN,
)
from pytest_graphleak.result import Diagnosis, Link
from pytest_graphleak.words.chain import cached, holder_text
from pytest_graphleak.words.lines import GROWING, STORING, fix_for_stored, growth_fix
from pytest_graphleak.words.recorders import (
    argument_name,
    history_of,
    recorder_fix,
    recorder_of,
)
from pytest_graphleak.words.source import first_statement


def choose_fix(diagnosis: Diagnosis, *, cycle_fix: str | None = None) -> str:
    """The fix ``diagnosis`` shows (see the module docstring). ``cycle_fix``: a cycle's
    own fix; None keeps the one it was given when it was diagnosed."""
    pattern = diagnosis.pattern
    row = BY_WORD.get(pattern)
    usual = row.fix if row is not None else ""
    no_graph = row.no_graph_fix if row is not None and diagnosis.kept_without_graph else ""
    if pattern == CYCLE:
        return cycle_fix or (diagnosis.fix if cycle_fix is None else "") or usual
    if pattern == GROWING:  # the line that rebuilds the buffer, stored or made
        lines = diagnosis.stored_at or diagnosis.sites
        return (growth_fix(first_statement(lines[0])) if lines else "") or no_graph or usual
    recorder = recorder_of(diagnosis.links) if pattern in STORING else None
    if recorder is not None:  # a mock's records: what the user controls, not its insides
        return recorder_fix(recorder, argument_name([*diagnosis.stored_at, *diagnosis.sites]))
    history = history_of(diagnosis.links) if pattern in STORING else None
    if history is not None:  # a framework's record of what was logged: what is logged
        return history.fix
    if pattern in STORING and cached(diagnosis.links):  # never .detach() what backward uses
        return cache_fix(cached(diagnosis.links))
    if pattern in STORING:
        worded = fix_for_stored(
            pattern, diagnosis.stored_at, diagnosis.links, graph=not diagnosis.kept_without_graph
        )
        return worded or no_graph or usual_fix(pattern, diagnosis.links) or usual
    return usual


def cache_fix(cache: str) -> str:
    """The fix for graph-carrying results kept by a ``functools`` cache ``cache``: bound
    or clear it; ``.detach()`` in the cached function would break a backward through
    its result (repro ``fix_detach_breaks_cached_backward``)."""
    return (
        f"{cache} is a functools cache that keeps every result it returned, with its "
        "autograd graph, one per distinct argument: clear it once the step is done with "
        f"its results ({cache}.cache_clear()), bound it (@functools.lru_cache(maxsize=N) "
        "keeps N graphs at most), or cache the inputs and run the model outside the "
        "cache; .detach() inside the cached function would break the backward that runs "
        "through its result"
    )


def usual_fix(pattern: str, links: Sequence[Link]) -> str:
    """The pattern's usual fix with the holder from the chain in it, when it has one ("":
    the table's wording, which names no variable, stays)."""
    holder = holder_text(links, container=pattern == LIST_ACCUMULATION)
    if not holder:
        return ""
    if pattern == LIST_ACCUMULATION:
        return (
            f"store plain numbers (.item()) or detached tensors (.detach()) in {holder}, "
            "not graph-carrying tensors"
        )
    if pattern == RETAINED_GRAD_FN:
        return (
            f"cut the graph that {holder} keeps, each step: update it with .item() or "
            ".detach() values, detach it once per step if it is carried state (or "
            "unchain_backward()), or update it under no_grad()"
        )
    return ""


def story_of(pattern: str, *, graph_grew: bool, tensors: bool, has_chain: bool) -> str:
    """What ``pattern`` means here when tensors pile up but no graph node grew
    (``losses.append(loss.detach())``, a metric's list state): the table's no-graph
    meaning; "" when the usual meaning is true."""
    row = BY_WORD.get(pattern)
    if graph_grew or not tensors or row is None or not row.no_graph_meaning:
        return ""
    if pattern == MEMORY_GROWTH:  # what the diagnosis found about a holder
        where = (
            "and no container on the chain below grows"
            if has_chain
            else "and no holder that grows was found"
        )
        return f"{row.no_graph_meaning}, {where}"
    return row.no_graph_meaning
