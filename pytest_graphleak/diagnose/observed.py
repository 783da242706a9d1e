"""What a diagnosis's steps made and left alive, as plain records: the recorder
(``loop_recorder``, ``observe``) fills them, the searches (``cycles``, ``churn``,
``holders``, ``second``) and ``diagnose`` read them. Below all of them, so that no
module that reads a record imports the one that makes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.drawing import Drawing
from pytest_graphleak.paths import display_path
from pytest_graphleak.probes.autograd import Backend
from pytest_graphleak.probes.autograd.bundle import Site
from pytest_graphleak.result import CreationSite, Link
from pytest_graphleak.words import notes as said


@dataclass
class SeenCycle:
    """A cycle among a loop's recorded objects, seen as the collector freed it: plain data."""

    cycle: list[str]  # rendered, as ``Diagnosis.cycle``
    drawing: Drawing | None  # as ``Diagnosis.drawing``
    notes: list[str]
    fix: str  # "" for the pattern's usual fix
    #: tensors and graph nodes of the recorded steps that only the collector freed
    freed: int = 0
    sites: dict[Site, int] = field(default_factory=dict)  # their creation sites, counted
    #: The line to change: the cycle's hook or closure of the user's (``hook_sites``).
    change_at: list[CreationSite] = field(default_factory=list)
    #: The cycle's typed links (``Diagnosis.cycle_links``).
    cycle_links: list[Link] = field(default_factory=list)


@dataclass
class Churn:
    """Tensors without a graph that a library's own reference cycles held: plain data."""

    tensors: int = 0  # over the recorded steps
    #: The library whose objects are on those cycles (``sdelib``); "" when none is known.
    library: str = ""
    sites: dict[Site, int] = field(default_factory=dict)  # where they were made, counted

    def add(self, other: Churn) -> None:
        self.tensors += other.tensors
        self.library = self.library or other.library
        for site, count in other.sites.items():
            self.sites[site] = self.sites.get(site, 0) + count

    def note(self, steps: int, via: dict[Site, str] | None = None) -> str:
        """``sdelib makes 15 tensors a step that only the cyclic collector frees ...``"""
        line = inner = ""
        if self.sites:
            site = max(self.sites, key=lambda s: (self.sites[s], s))
            line = f"{display_path(site[0])}:{site[1]}"
            inner = (via or {}).get(site, "")
        return said.churn(self.library, self.tensors / max(1, steps), line, inner)


@dataclass
class Leaked:
    """One leaked object, held strongly until ``Observation.release()``."""

    obj: Any
    backend: Backend
    kind: str  # "tensor" | "node"
    run: int  # which recorded step made it (1-based)
    site: Site | None


@dataclass
class Observation:
    #: steps run, and how many of them recorded what they made
    runs: int
    recorded_runs: int
    alive: list[Leaked] = field(default_factory=list)  # held by live references
    cyclic: list[Leaked] = field(default_factory=list)  # found only by the cyclic GC
    #: The node numbers of the recorded runs, [lo, hi), per library whose nodes are told
    #: by number (``Backend.node_number_now``: torch's C++ nodes).
    numbered: list[tuple[Backend, int, int]] = field(default_factory=list)
    node_sites: dict[int, Site] = field(default_factory=dict)
    pack_hooks: dict[int, Any] = field(default_factory=dict)
    #: user site -> library line that made a tensor for it ("via"), when there was one
    site_via: dict[Site, str] = field(default_factory=dict)
    #: The other objects the collector found with the cyclic ones (plain objects of a
    #: cycle that holds a leaked tensor), kept to draw that cycle.
    garbage: list[Any] = field(default_factory=list)
    #: The creation sites of graph nodes were recorded for the first nodes only.
    node_sites_truncated: bool = False
    runs_done: int = 0
    error: str | None = None
    #: What a loop's collections freed of its recorded objects (see ``LoopRecorder``).
    seen_cycle: SeenCycle | None = None
    #: Set by a loop that can watch its next step: the diagnosis leaves the chain it
    #: found in ``follow`` (path, walker) for ``stored.LiveWatch``, instead of freeing it.
    wants_follow: bool = False
    follow: Any = None
    #: A loop's memory-growth: the slots it weighs again after its next step
    #: (``loop_memory.GrowthWatch``), left here by the diagnosis like ``follow``.
    growth: Any = None
    #: The files where the recorded steps made tensors (their module globals are roots).
    made_in: set[str] = field(default_factory=set)
    #: What the recording could not do, as notes (it never raises into the step).
    trouble: list[str] = field(default_factory=list)
    #: Tensors without a graph that only a library's own reference cycles held, taken
    #: out of ``cyclic`` (and out of what a loop's collections saw): not the user's leak.
    churn: Churn | None = None

    def release(self) -> None:
        self.alive.clear()
        self.cyclic.clear()
        self.garbage.clear()

    @property
    def leaked(self) -> list[Leaked]:
        return [*self.cyclic, *self.alive]
