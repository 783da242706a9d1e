"""Who keeps the graphs a test left alive (``outlive/census``), told as a leak.

``explain(targets, holders, ...)`` searches from the roots the plugin offers (the test
module's globals, the test class's attributes, the user's other modules, the wider-scope
fixtures still alive) for the graph objects the test made (``targets``: the census,
which tells them by their nodes' numbers), and makes one
``CheckResult`` (``kind="outlive"``) per holder: how many tensors and graph nodes it
keeps, ``held by:`` (the chain from the root), ``created at:`` (minigrad's sites recorded
during the test, or ``site_of``: the sites a re-run of the test recorded), the pattern
(``classify.pattern_of``, the one decider) and the fix.

A tensor whose graph the test extended in place (``total += loss`` on a module's or a
session fixture's tensor) is the test's to answer for at once, even when a wider-scope
fixture holds it: the next test chains its graph onto the same one.

Only what a root reaches is reported. What nothing of the user's reaches is pytest's
(a failing test's traceback and its frames in ``sys.last_value``, captured logs and
warnings, the item's stash), a library's (torch's caches) or held from C++ only: none of
it is named (``docs/limits.md``). A graph that only a wider-scope fixture keeps is not
the test's leak while that fixture lives: it is handed back as ``Deferred`` and judged
when the fixture is torn down.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from pytest_graphleak.diagnose.backends import NODE, TENSOR, Backend
from pytest_graphleak.diagnose.classify import facts_of, pattern_of
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.facts import chain_of
from pytest_graphleak.diagnose.fix_verify import not_verified
from pytest_graphleak.diagnose.render import drawing
from pytest_graphleak.diagnose.search import Path, shortest_path
from pytest_graphleak.diagnose.sites import creation_site, function_at, most_common
from pytest_graphleak.heap.graphwalk import GraphWalk, grad_fn_of
from pytest_graphleak.outlive.found import (
    MAX_COUNTED,
    MAX_HOLDERS,
    MAX_VISITED,
    Deferred,
    Explained,
    Holder,
    Targets,
)
from pytest_graphleak.patterns import BY_WORD
from pytest_graphleak.probes.autograd.bundle import Site
from pytest_graphleak.result import CheckResult, Diagnosis, Verdict
from pytest_graphleak.words import outlive as said
from pytest_graphleak.words.fix import choose_fix
from pytest_graphleak.words.recorders import (
    argument_name,
    call_name,
    history_of,
    history_story,
    recorder_of,
    recorder_story,
)
from pytest_graphleak.words.verify import AUDIT, FIXTURE_TEARDOWN

#: Where an object was made, in user code (None: not recorded).
SiteOf = Callable[[Any], Site | None]


def explain(
    targets: Targets,
    holders: Sequence[Holder],
    *,
    nodeid: str,
    backends: list[Backend],
    made_by: str = "",
    fixture: str = "",
    site_of: SiteOf | None = None,
    keep_paths: bool = False,
    judging: Any = None,
) -> Explained:
    """One result per holder (at most ``MAX_HOLDERS``) of the graph objects the roots
    reach that ``targets`` made. ``made_by``: the test that made them, when it is not
    ``nodeid`` (a deferred graph judged after the teardown of ``fixture``, which kept it
    until then). ``site_of``: where an object was made (default: minigrad's record).
    Holds nothing after it returns, but the chains when ``keep_paths``. ``judging``: the
    fixture being torn down: the roots it owns are searched after the user's, and what
    they keep is reported, no longer deferred."""
    claimed: set[int] = set()

    def wanted(obj: object) -> bool:
        return id(obj) not in claimed and targets.made_during(obj)

    # The search does not enter autograd graphs: a graph made before the test holds no
    # node made during it, and one the test made is found at the tensor that carries it.
    kept_on_purpose = [id(h.value) for h in holders if h.kept]
    walker = ObjectEdges(
        backends, exclude=[id(targets), id(holders), id(claimed), *kept_on_purpose], graphs=False
    )
    outcome = Explained(walker=walker if keep_paths else None)
    where = site_of or _recorded_site(backends)
    plain = [(h.label, h.value) for h in holders if not h.fixture and not h.kept]
    live = [h for h in holders if h.fixture and not h.kept]
    torn = [(h.label, h.value) for h in live if judging is not None and h.owner is judging]
    fixtures = [(h.label, h.value) for h in live if judging is None or h.owner is not judging]
    owned = {id(h.value) for h in holders if h.fixture and h.exclusive}.difference(walker.exclude)
    while len(outcome.results) < MAX_HOLDERS:
        walker.exclude.update(owned)  # the user's roots do not pass through them
        path = _search(plain, wanted, walker)
        deferred = False
        if path is None:
            walker.exclude.difference_update(owned)
            path = _search(torn, wanted, walker)
        if path is None:
            path = _search(fixtures, wanted, walker)
            if path is None:
                break
            deferred = not _in_place(path, targets, backends)  # the fixture's while it lives
        kept = _kept_by(path.objects[0], wanted, walker)
        walker.exclude.difference_update(owned)
        if deferred:
            owner = next((h.owner for h in holders if h.label == path.root_label), None)
            outcome.deferred.append(
                Deferred(made_by or nodeid, path.root_label, _weak(kept, backends), owner)
            )
        else:
            in_place = _in_place(path, targets, backends)
            outcome.results.append(
                _result(path, kept, walker, backends, nodeid, made_by, fixture, in_place, where)
            )
        plain = [root for root in plain if root[0] != path.root_label]
        torn = [root for root in torn if root[0] != path.root_label]
        fixtures = [root for root in fixtures if root[0] != path.root_label]
        if keep_paths and not deferred:
            outcome.paths.append(path)
        else:
            path.clear()
        claimed.update(id(obj) for obj in kept)
        kept.clear()
    walker.exclude.difference_update(owned)
    last = outcome.results[-1].diagnosis if len(outcome.results) == MAX_HOLDERS else None
    if last is not None:  # the search stopped there: say so where the user reads
        last.notes.append(said.HOLDERS_NAMED.format(MAX_HOLDERS))
    return outcome


def _search(
    roots: list[tuple[str, object]], wanted: Callable[[object], bool], walker: ObjectEdges
) -> Path | None:
    if not roots:
        return None
    return shortest_path(roots, wanted, walker, max_visited=MAX_VISITED)


def _kept_by(root: object, wanted: Callable[[object], bool], walker: ObjectEdges) -> list[Any]:
    """The targets that ``root`` reaches (a bounded walk)."""
    seen = {id(root)}
    queue: deque[Any] = deque([root])
    kept: list[Any] = []
    try:
        while queue and len(seen) < MAX_COUNTED:
            obj = queue.popleft()
            if wanted(obj):
                kept.append(obj)
            for _, child in walker.edges(obj):
                if id(child) in seen or id(child) in walker.exclude:  # kept on purpose
                    continue
                if id(child) in walker.recomputed:  # a layer's weight, remade each forward
                    continue
                if wanted(child) or walker.walkable(child):
                    seen.add(id(child))
                    queue.append(child)
        return kept
    finally:
        queue.clear()


def _weak(objects: list[Any], backends: list[Backend]) -> list[weakref.ref[Any]]:
    refs = []
    for obj in objects:
        with contextlib.suppress(TypeError):  # a torch node: no weak references
            refs.append(weakref.ref(obj))
    return refs


def _result(
    path: Path,
    kept: list[Any],
    walker: ObjectEdges,
    backends: list[Backend],
    nodeid: str,
    made_by: str,
    fixture: str,
    in_place: bool,
    site_of: SiteOf,
) -> CheckResult:
    tensors = [obj for obj in kept if _kind(obj, backends) == TENSOR]
    nodes = [obj for obj in kept if _kind(obj, backends) == NODE]
    graph = GraphWalk()
    # Where each node of the kept graph was made, counted in the walk that counts them:
    # the holder's own tensor is one line (``TOTAL += loss``), the nodes it keeps are
    # mostly another (the forward that made ``loss``).
    made: Counter[Site] = Counter(site for t in tensors if (site := site_of(t)) is not None)

    def made_at(node: Any) -> None:
        site = site_of(node)
        if site is not None:
            made[site] += 1

    node_count = graph.count([*(grad_fn_of(t) for t in tensors), *nodes], made_at)
    reason_seen = Verdict(leaked=True)
    chain, links = chain_of(path, walker)
    # Kept once, not seen growing: a collection on the chain holding the graph is the
    # evidence, unless the test extended an older tensor's graph in place.
    facts = facts_of(links, kept_counts=not in_place, leaked_count=len(kept))
    pattern = pattern_of(reason_seen, facts)
    sites = [creation_site(site, count) for site, count in most_common(made)]
    maker = made_by or nodeid
    counted = f"{node_count:,}{'+' if graph.truncated else ''}"
    # made_by: judged at a wider-scope fixture's teardown, maybe for several tests
    reason = said.reason(
        len(tensors), counted, maker, in_place=in_place, fixture=fixture if made_by else ""
    )
    notes = [said.KEPT_BY.format(made_by, fixture)] if made_by else []
    if in_place:
        notes.append(said.IN_PLACE)
    diagnosis = Diagnosis(
        pattern,
        chain=chain,
        links=links,
        sites=sites,
        notes=notes,
        drawing=drawing(path, None, walker),
        story=_story(pattern, links, path.objects, sites),
        kept_without_graph=bool(tensors) and node_count == 0,  # the census keeps graph objects
    )
    diagnosis.fix = choose_fix(diagnosis)  # no stored line yet: the holder's name, none invented
    # judged at a fixture's teardown: no test of its own to run again, whatever the mode
    diagnosis.fix_tried = not_verified(diagnosis.fix, FIXTURE_TEARDOWN if made_by else AUDIT)
    tensors.clear()
    nodes.clear()
    return CheckResult(
        name=f"{nodeid}::outlive",
        steps=0,
        warmup=0,
        series={},
        units={},
        verdict=Verdict(leaked=True, pattern=pattern, reason=reason),
        diagnosis=diagnosis,
        kind="outlive",
    )


def _story(pattern: str, links: list[Any], objects: list[Any], sites: list[Any]) -> str:
    """What the pattern means here: in the user's words when a mock's records or a
    framework's record of logged values keep the graph (``words/recorders``), else the
    pattern's outlive meaning."""
    recorder = recorder_of(links)
    if recorder is not None:
        return recorder_story(recorder, argument_name(sites), call_name(objects))
    history = history_of(links)
    if history is not None:
        return history_story(history)
    return BY_WORD[pattern].outlive_meaning


def _kind(obj: object, backends: list[Backend]) -> str | None:
    for backend in backends:
        kind = backend.kind(obj)
        if kind is not None:
            return kind
    return None


def _in_place(path: Path, targets: Targets, backends: list[Backend]) -> bool:
    """The chain ends at a tensor whose graph the test extended in place."""
    return targets.grown_in_place(path.objects[-1])


def _recorded_site(backends: list[Backend]) -> SiteOf:
    """The sites a library recorded itself while the test ran (its bundle's
    ``record_sites``: minigrad's; torch records none then)."""

    def site_of(obj: Any) -> Site | None:
        site = next((found for b in backends if (found := b.creation_site(obj))), None)
        return None if site is None else (site[0], site[1], function_at(site[0], site[1]))

    return site_of
