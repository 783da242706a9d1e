"""The pattern words and everything said about them: one row per word (bottom layer, plain data).

The words are the public contract (ARCHITECTURE.md section 4): the verdict's first guess,
the diagnosis, every report, the JSON schema's enums and the marker's help all read them
here. A new pattern is one row below plus its rule in ``diagnose/classify.pattern_of``
(the one decider); ``tests/test_patterns.py`` checks the schema against this table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Pattern = Literal["list-accumulation", "retained-grad-fn", "cycle", "memory-growth"]
#: The words by name: every other module refers to a pattern through these, never by its
#: string, so a word is spelled once (here) and a typo is a name error, not a silent miss.
LIST_ACCUMULATION: Pattern = "list-accumulation"
RETAINED_GRAD_FN: Pattern = "retained-grad-fn"
CYCLE: Pattern = "cycle"
MEMORY_GROWTH: Pattern = "memory-growth"


@dataclass(frozen=True)
class PatternFacts:
    """What is known about one pattern word."""

    word: str
    #: One line: what the word means (the failure text's ``pattern:`` line).
    meaning: str
    #: The usual fix, shown in every failure text unless the diagnosis found a better one.
    fix: str
    #: The grown metrics' declared ``counts`` (``metrics.Metric.counts``) that make the
    #: verdict guess this pattern before any diagnosis; the first row (in ``GUESS_ORDER``)
    #: whose counts grew wins.
    suggested_by: tuple[str, ...]
    #: Which grown metric the one-line message names: the first declared ``counts`` found.
    told_by: tuple[str, ...]
    #: When the kept tensors carry no autograd graph (no graph node grew), the usual
    #: meaning and fix are wrong (``.detach()`` is what the user already did): what the
    #: numbers say instead and the fix that applies ("" = this word has no such variant).
    no_graph_meaning: str = ""
    no_graph_fix: str = ""
    #: What the word means for a graph that outlived its test (the outlive audit saw it
    #: kept once, not grow); "" for words the audit never gives.
    outlive_meaning: str = ""


#: Fix for tensors kept without a graph: never ``.detach()``, which changes nothing.
_NO_GRAPH_KEPT_FIX = (
    "the kept tensors are already detached, so .detach() changes nothing: store plain "
    "numbers (.item()), bound or clear the container (collections.deque(maxlen=N), "
    "or clear it at the end of each epoch), and for metrics keep a fixed-size state "
    "(binned thresholds instead of every prediction; compute() and reset() each epoch)"
)

TABLE: tuple[PatternFacts, ...] = (
    PatternFacts(
        word=LIST_ACCUMULATION,
        meaning="each step adds graph-carrying tensors to a container that keeps growing",
        fix=(
            "store plain numbers (.item()) or detached tensors (.detach()) in the growing "
            "container, not graph-carrying tensors"
        ),
        suggested_by=("tensors",),
        told_by=("tensors", "nodes", "memory"),
        no_graph_meaning=(
            "each step adds tensors to a container that keeps growing; the kept tensors "
            "carry no autograd graph (no graph node grew), so what grows is their data"
        ),
        no_graph_fix=_NO_GRAPH_KEPT_FIX,
        outlive_meaning=(
            "the test put a graph-carrying tensor into a container that outlives it; code "
            "that does this once per step grows without bound"
        ),
    ),
    PatternFacts(
        word=RETAINED_GRAD_FN,
        meaning=(
            "a bounded set of live tensors reaches an autograd graph that grows every step "
            "(running total, hidden state or in-place accumulation not detached)"
        ),
        fix=(
            "cut the graph of long-lived tensors each step: update running totals with "
            ".item() or .detach() values, detach carried hidden state once per step (or "
            "unchain_backward()), update running stats under no_grad()"
        ),
        suggested_by=("nodes",),
        told_by=("nodes", "tensors"),
        outlive_meaning=(
            "a long-lived name or attribute refers to a tensor that carries the test's "
            "autograd graph"
        ),
    ),
    PatternFacts(
        word=CYCLE,
        meaning=(
            "tensors or graph nodes of each step are kept only by reference cycles, freed "
            "by the cyclic GC or never"
        ),
        fix=(
            "break the reference cycle: hold tensors weakly in hooks and closures, remove "
            "hooks after use, detach in saved-tensor pack hooks"
        ),
        suggested_by=("cycles",),
        told_by=("cycles", "tensors", "nodes"),
    ),
    PatternFacts(
        word=MEMORY_GROWTH,
        meaning="process or device memory grows while tensor and node counts stay flat",
        fix=(
            "memory grows while tensor and node counts stay flat: bound caches and buffers, "
            "keep running metrics instead of concatenating every step's outputs "
            "(torch.cat / np.concatenate into a kept array), free allocations outside autograd"
        ),
        suggested_by=("memory",),
        told_by=("memory",),
        no_graph_meaning=(
            "tensors that carry no autograd graph stay alive every step (no graph node grew)"
        ),
        no_graph_fix=(
            "find what keeps each step's tensors (see the notes) and let go of them: "
            "store plain numbers (.item()), bound or clear what collects them "
            "(collections.deque(maxlen=N), clear at the end of each epoch), join threads "
            "that hold them, keep no .numpy() views of step outputs"
        ),
    ),
)

#: The exact words, in the table's order (the order the docs and the schema list them).
PATTERNS: tuple[str, ...] = tuple(row.word for row in TABLE)
BY_WORD: dict[str, PatternFacts] = {row.word: row for row in TABLE}

#: The verdict's first guess: strongest evidence first (a cycle explains growing tensors
#: and nodes; tensors explain growing nodes); bytes alone are memory-growth.
GUESS_ORDER: tuple[str, ...] = (CYCLE, LIST_ACCUMULATION, RETAINED_GRAD_FN, MEMORY_GROWTH)
#: The word when nothing more specific is known (only memory grew).
FALLBACK = MEMORY_GROWTH

MEANINGS: dict[str, str] = {row.word: row.meaning for row in TABLE}
FIXES: dict[str, str] = {row.word: row.fix for row in TABLE}


def guess(counted: Iterable[str]) -> str:
    """The pattern a leak suggests from the declared ``counts`` of its grown metrics."""
    grown = set(counted)
    return next(
        (word for word in GUESS_ORDER if grown.intersection(BY_WORD[word].suggested_by)),
        FALLBACK,
    )


def words_text() -> str:
    """``list-accumulation, retained-grad-fn, cycle, memory-growth`` (help texts)."""
    return ", ".join(PATTERNS)
