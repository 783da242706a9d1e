"""Diagnosis of a leak verdict: the pattern, the culprit chain and the creation site.

``diagnose(verdict, metrics=..., step=..., roots=..., exclude=...) -> Diagnosis`` runs
only after a leak verdict; ``metrics`` are the series' declarations (what grew). With a
``step`` it runs a few more training steps (see ``observe``) to find the tensors and
graph nodes a step leaves behind, then

- the **chain**: the shortest path of labelled references from a root the user knows
  (fixture, ``self``, local, module global, closure cell) to a leaked object;
- the **cycle**: for leaks held by reference cycles, the objects of the cycle with edge
  labels, and which hook or pack hook holds it when the cycle runs through torch's C++;
- the **sites**: file:line of user code that made the leaked tensors and nodes;
- the **pattern** (``pattern_of``) and the retained graph as plain data
  (``drawing.Drawing``; the reports write it as Graphviz DOT).

Without a step (a hand-written loop checked with ``track()``) it inspects the heap as it
is. The returned ``Diagnosis`` is plain strings and numbers: nothing here keeps a
measured object alive after ``diagnose`` returns.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.diagnose.backends import NODE, TENSOR, Backend, active_backends
from pytest_graphleak.diagnose.classify import Grown, facts_of, grown_of, pattern_of
from pytest_graphleak.diagnose.cycles import (
    cycle_story,
    find_first,
    hook_sites,
    pack_hook_cycle,
)
from pytest_graphleak.diagnose.edges import ObjectEdges, items_of
from pytest_graphleak.diagnose.facts import chain_of, cycle_links_of
from pytest_graphleak.diagnose.heap import diagnose_heap
from pytest_graphleak.diagnose.holders import not_reached, plain_cycle, unrooted
from pytest_graphleak.diagnose.loop_memory import watch_growth
from pytest_graphleak.diagnose.memory import growing_holder
from pytest_graphleak.diagnose.observe import RECORDED_RUNS, RUNS, observe
from pytest_graphleak.diagnose.observed import Observation, SeenCycle
from pytest_graphleak.diagnose.render import drawing, render_cycle
from pytest_graphleak.diagnose.roots import all_roots
from pytest_graphleak.diagnose.search import Path, Searched, find_chain
from pytest_graphleak.diagnose.second import other_holder
from pytest_graphleak.diagnose.sites import memory_sites, per_step
from pytest_graphleak.diagnose.stored import root_reader, watch_holder
from pytest_graphleak.heap.containers import SIZED
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.heap.graphwalk import GraphWalk, grad_fn_of
from pytest_graphleak.metrics import Metric
from pytest_graphleak.patterns import MEMORY_GROWTH
from pytest_graphleak.probes.autograd.bundle import Site
from pytest_graphleak.result import CreationSite, Diagnosis, Link, Verdict
from pytest_graphleak.words import notes as said
from pytest_graphleak.words.fix import choose_fix, story_of
from pytest_graphleak.words.lines import STORING

__all__ = ["diagnose"]


def diagnose(
    verdict: Verdict,
    *,
    metrics: Mapping[str, Metric],
    step: Callable[[], object] | None,
    roots: Mapping[str, object],
    exclude: Collection[int] = (),
    observation: Observation | None = None,
) -> Diagnosis:
    """Refine a leak verdict into pattern, culprit chain, cycle and creation sites.

    ``observation``: what a running loop's last steps made (``LoopRecorder``), used
    instead of re-running a step; it is released here.
    """
    started = time.perf_counter()
    backends = active_backends()
    walker = ObjectEdges(backends, exclude=[*exclude, id(roots)])
    grown = grown_of(verdict, metrics)
    recorded = observation is not None and observation.recorded_runs > 0
    if step is None and not recorded:  # a hand-written loop: the heap as it is
        diagnosis = diagnose_heap(
            verdict,
            roots,
            walker,
            memory_only=grown.memory_only,
            graph_grew=grown.nodes,
            only_cycles=grown.only_cycles,
        )
    else:
        diagnosis = _diagnose_with_step(verdict, grown, step, roots, walker, backends, observation)
    if (
        step is None
        and observation is not None
        and grown.memory_only
        and diagnosis.pattern == MEMORY_GROWTH
        and not diagnosis.chain
    ):
        # A running loop: the arrays its roots reach, weighed again after its next step.
        observation.growth = watch_growth(
            diagnosis, roots, walker, files=observation.made_in, next_step=observation.wants_follow
        )
    diagnosis.notes.append(said.took(time.perf_counter() - started))
    return diagnosis


@dataclass
class _Found:
    """What the searches of one diagnosis found: the paths (let go in ``finally``), the
    cycle's labels and fix, and what a running loop's collections saw."""

    roots: list[tuple[str, object]]
    chain_path: Path | None = None
    cycle_path: Path | None = None
    cycle: list[str] = field(default_factory=list)
    cycle_links: list[Link] = field(default_factory=list)  # its typed links (the key)
    cycle_fix: str = ""
    change_at: list[CreationSite] = field(default_factory=list)  # a cycle's hook, closure
    seen: SeenCycle | None = None
    #: The chain's labels and typed links, read when it was found (``facts.chain_of``).
    chain: tuple[list[str], list[Link]] = ([], [])

    def clear(self) -> None:
        for path in (self.chain_path, self.cycle_path):
            if path is not None:
                path.clear()


def _diagnose_with_step(
    verdict: Verdict,
    grown: Grown,
    step: Callable[[], object] | None,
    roots: Mapping[str, object],
    walker: ObjectEdges,
    backends: list[Backend],
    observation: Observation | None,
) -> Diagnosis:
    """Facts (the searches, the watched holder, the sites), then the pattern, then the
    words (``words.fix``), from steps re-run or a running loop's recorded steps."""
    # A leak every k-th step needs k recorded runs to be made at all during the diagnosis.
    period = grown.period
    recorded = max(RECORDED_RUNS, period)
    if observation is not None:  # a loop's own last steps were recorded: no re-run
        obs = observation
    else:
        assert step is not None
        obs = observe(step, backends, runs=recorded + RUNS - RECORDED_RUNS, recorded_runs=recorded)
    notes: list[str] = []
    found = _Found([])
    try:
        if obs.error:
            notes.append(said.step_raised(obs.error))
        notes.extend(obs.trouble)
        site_files = {leaked.site[0] for leaked in obs.leaked if leaked.site is not None}
        site_files.update(site[0] for site in obs.node_sites.values())
        found.roots = all_roots(roots, step, site_files)
        _search(found, obs, grown, walker, notes)
        found.chain = chain_of(found.chain_path, walker)  # before more steps run
        watched = (
            watch_holder(
                found.chain_path,
                step,
                walker,
                steps=period,
                root=root_reader(found.chain_path, dict),
            )  # a global rebound too
            if found.chain_path is not None and step is not None and not obs.error
            else None
        )
        links = found.chain[1]  # growth seen below is a fact of its link (``Link.grew``)
        if watched is not None:
            for at, gained in watched.growth.items():
                links[at + 1].grew = gained
            notes.extend(watched.notes())
        elif found.chain_path is not None:  # a loop cannot be re-run: its recorded steps
            _grew_during_loop(found.chain_path, links, obs, notes, period)  # may show it
        diagnosis = _told(verdict, grown, step, obs, found, walker, notes)
        if obs.churn is not None:  # a library's own cycles: told, never the user's leak
            runs = max(1, min(obs.recorded_runs, obs.runs_done))
            churn = obs.churn.note(runs, obs.site_via)
            notes.append(churn)
            if not obs.cyclic and (found.seen is None or not found.seen.freed):
                diagnosis.library_cycles = churn  # all the cyclic garbage it saw
        if watched is not None and diagnosis.pattern in STORING:
            diagnosis.stored_at = per_step(watched.stored, watched.steps, watched.via)
            assert found.chain_path is not None  # watched: the chain was found
            grown_at = min(watched.growth) if watched.growth else None
            second = other_holder(
                found.chain_path, obs, found.roots, walker, step, period=period, holder_at=grown_at
            )
            if second.note:  # one round of fixes must be enough: the other holder is named
                notes.append(second.note)
                diagnosis.second_stored_at = second.stored_at
                diagnosis.second_links = second.links
        diagnosis.fix = choose_fix(diagnosis, cycle_fix=found.cycle_fix)
        if (
            step is None
            and obs.wants_follow
            and found.chain_path is not None
            and diagnosis.pattern in STORING
        ):
            obs.follow = (found.chain_path, walker)  # the loop watches it during its next step
            found.chain_path = None
        return diagnosis
    finally:
        found.clear()
        obs.release()


def _search(
    found: _Found, obs: Observation, grown: Grown, walker: ObjectEdges, notes: list[str]
) -> None:
    """The chain from a root to what the steps left alive, or the cycle that keeps it."""
    # Only memory grew and no tensor stayed alive: no graph node to look for either
    # (the memory survey finds the holder), so the chain search is skipped.
    alive = bool(obs.alive) or bool(obs.numbered)
    searched = Searched()
    if alive and not (grown.memory_only and not obs.alive):
        seeds = [leaked.obj for leaked in obs.alive]
        try:
            searched = find_chain(found.roots, _target_test(obs), walker, seeds=seeds)
        finally:
            seeds.clear()
        found.chain_path = searched.path
    hanging: tuple[Edge, object] | None = None
    if obs.cyclic:
        found.cycle_path = find_first(obs.cyclic, walker)
        if found.cycle_path is None:  # a cycle of plain objects, the tensor hangs off it
            plain = plain_cycle(obs, walker)
            if plain is not None:
                found.cycle_path, hanging = plain
        cyclic_tensors = sum(1 for item in obs.cyclic if item.kind == TENSOR)
        notes.append(said.cyclic(cyclic_tensors, len(obs.cyclic) - cyclic_tensors))
    elif obs.alive and found.chain_path is None:
        _unrooted(found, obs, walker, notes, searched)
    if found.cycle_path is not None:
        found.cycle = render_cycle(found.cycle_path, walker, hanging)
        found.cycle_links = cycle_links_of(found.cycle_path, walker)
        told, found.cycle_fix = cycle_story(found.cycle_path, walker, collectable=obs.cyclic != [])
        notes.extend(told)
        found.change_at = hook_sites(found.cycle_path)
        if hanging is not None:  # drawn too: the DOT shows the tensor's graph
            found.cycle_path.edges.append(hanging[0])
            found.cycle_path.objects.append(hanging[1])
    found.seen = seen = obs.seen_cycle if not obs.cyclic else None  # a loop's collections
    if seen is not None:
        notes.append(said.loop_freed(seen.freed))
        if not found.cycle and seen.cycle:
            found.cycle, found.cycle_fix = list(seen.cycle), seen.fix
            found.cycle_links = list(seen.cycle_links)
            found.change_at = list(seen.change_at)
            notes.extend(seen.notes)


def _unrooted(
    found: _Found, obs: Observation, walker: ObjectEdges, notes: list[str], searched: Searched
) -> None:
    """The search from the roots found no chain to what stayed alive: a cycle the
    collector cannot free, a pack hook, or a holder found by its referrers."""
    found.cycle_path = find_first(obs.alive, walker)
    if found.cycle_path is not None:
        notes.append(said.uncollectable(not_reached(searched)))
        return
    held = pack_hook_cycle(obs)
    if held:
        found.cycle, note = held
        notes.append(note)
    else:
        found.chain_path = unrooted(obs, walker, notes, searched)


def _told(
    verdict: Verdict,
    grown: Grown,
    step: Callable[[], object] | None,
    obs: Observation,
    found: _Found,
    walker: ObjectEdges,
    notes: list[str],
) -> Diagnosis:
    """The facts counted, the pattern decided (``pattern_of``), the diagnosis made."""
    graph = GraphWalk()
    nodes = _numbered_leaked_nodes(obs, found.chain_path, graph)
    runs = max(1, min(obs.recorded_runs, obs.runs_done))
    seen = found.seen
    sites = _sites(obs, nodes, runs, seen.sites if seen is not None else {})
    tensors = sum(1 for item in obs.leaked if item.kind == TENSOR)
    graph_nodes = len(obs.leaked) - tensors + len(nodes)
    facts = facts_of(
        found.chain[1],
        leaked_count=len(obs.leaked) + len(nodes),
        cyclic_count=len(obs.cyclic) + (seen.freed if seen is not None else 0),
        cycle_held=bool(found.cycle),  # with no chain: a cycle or pack hook holds them
        memory_only=grown.memory_only,
        graph_grew=graph_nodes > 0 or grown.nodes,
        only_cycles=grown.only_cycles,
    )
    pattern = pattern_of(verdict, facts)
    steps_word = said.steps_word(step is not None)
    if obs.leaked or nodes:
        later = obs.runs - obs.recorded_runs
        notes.insert(0, said.still_alive(runs, steps_word, later, tensors, graph_nodes))
    elif not obs.error:
        notes.insert(0, said.none_alive(steps_word))
    if graph.truncated or obs.node_sites_truncated:
        notes.append(said.TOO_LARGE)
    if step is not None and pattern == MEMORY_GROWTH and grown.memory_only and not obs.error:
        made: list[CreationSite] = []
        if found.chain_path is None:
            found.chain_path, made = growing_holder(found.roots, step, walker, notes)
            found.chain = chain_of(found.chain_path, walker)
        if made:
            notes.append(said.GROWING_SITES)
        sites = made or _memory_sites(step, notes)
    kept_tensors = grown.tensors or tensors > 0
    story = story_of(
        pattern,
        graph_grew=facts.graph_grew,
        tensors=kept_tensors,
        has_chain=found.chain_path is not None,
    )
    drawn = drawing(found.chain_path, found.cycle_path, walker) or (seen.drawing if seen else None)
    diagnosis = Diagnosis(
        pattern,
        cycle=found.cycle,
        cycle_links=found.cycle_links,
        sites=sites,
        notes=notes,
        drawing=drawn,
        story=story,
        change_at=found.change_at,
        kept_without_graph=kept_tensors and not facts.graph_grew,
    )
    diagnosis.chain, diagnosis.links = found.chain
    return diagnosis


def _target_test(obs: Observation) -> Callable[[object], bool]:
    """What the chain search looks for: a leaked object, or a node numbered by one of the
    recorded steps (a library whose nodes are told by number)."""
    ids = {id(leaked.obj) for leaked in obs.alive}
    numbered = [(backend, lo, hi) for backend, lo, hi in obs.numbered if hi > lo]

    def is_target(obj: object) -> bool:
        if id(obj) in ids:
            return True
        for backend, lo, hi in numbered:
            if backend.kind(obj) == NODE:
                seq = backend.sequence_nr(obj)
                return seq is not None and lo <= seq < hi
        return False

    return is_target


def _grew_during_loop(
    path: Path, links: list[Link], obs: Observation, notes: list[str], period: int
) -> None:
    """Mark the container on the chain that holds what several recorded loop steps made
    (the loop cannot be re-run to watch it grow, but its recorded steps show it), or,
    for a leak slower than one object a step (``period`` > 1: the recorded steps may
    make only one), what one of them made: its link's ``grew`` is how many of the
    recorded steps put something in it."""
    made_in = {id(leaked.obj): leaked.run for leaked in obs.leaked}
    for at, obj in enumerate(path.objects):
        if not isinstance(obj, SIZED):
            continue
        runs: set[int] = set()
        for item in items_of(obj):
            if id(item) in made_in:
                runs.add(made_in[id(item)])
            else:  # one record per step: {"loss": ...}, a distribution's .loc and .scale
                runs.update(made_in[id(sub)] for sub in _parts(item) if id(sub) in made_in)
        if len(runs) >= 2:
            notes.append(said.holds_recorded(type(obj).__name__, len(obj), len(runs)))
            links[at + 1].grew = len(runs)
            return
        if runs and period > 1:
            notes.append(
                said.holds_some_recorded(
                    type(obj).__name__, len(obj), len(runs), obs.recorded_runs, period
                )
            )
            links[at + 1].grew = len(runs)
            return


def _parts(item: object) -> list[object]:
    """What one entry of a container holds: a record's items, or an object's attributes
    (a kept ``Normal``'s ``.loc``)."""
    if isinstance(item, SIZED):
        return list(items_of(item))
    attrs = getattr(item, "__dict__", None)
    return list(attrs.values()) if isinstance(attrs, dict) else []


def _numbered_leaked_nodes(
    obs: Observation, chain_path: Path | None, graph: GraphWalk
) -> list[int]:
    """Numbers of the graph nodes made by the recorded runs and still alive, of the
    libraries whose nodes are told by number (those ``graph`` reaches within its bound)."""
    found: set[int] = set()
    for backend, lo, hi in obs.numbered:
        starts: list[Any] = [item.obj for item in obs.leaked if item.backend is backend]
        if chain_path is not None:
            starts.extend(o for o in chain_path.objects if backend.kind(o) is not None)
        frontier = [grad_fn_of(obj) if backend.kind(obj) == TENSOR else obj for obj in starts]
        starts.clear()

        def note(node: Any, backend: Backend = backend, lo: int = lo, hi: int = hi) -> None:
            seq = backend.sequence_nr(node)
            if seq is not None and lo <= seq < hi:
                found.add(seq)

        try:
            graph.count(frontier, note)
        finally:
            frontier.clear()
    return sorted(found)


def _sites(
    obs: Observation, node_seqs: list[int], runs: int, freed: Mapping[Site, int]
) -> list[CreationSite]:
    # Counted in a loop: Counter(iterable) here freed a few objects that the user had
    # frozen with gc.freeze() (tests/test_gc_state.py), and a check must leave them be.
    counts: Counter[Site] = Counter()
    sites = [leaked.site for leaked in obs.leaked]
    sites.extend(obs.node_sites.get(seq) for seq in node_seqs)
    for site in sites:
        if site is not None:
            counts[site] += 1
    for site, count in freed.items():  # what a loop's collections freed (``SeenCycle``)
        counts[site] += count
    return per_step(counts, runs, obs.site_via)


def _memory_sites(step: Callable[[], object], notes: list[str]) -> list[CreationSite]:
    try:
        found = memory_sites(step)
    except Exception as exc:
        notes.append(said.tracing_raised(exc))
        return []
    if found:
        notes.append(said.TRACED_SITES)
    return found
