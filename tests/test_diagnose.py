"""diagnose(): pattern, culprit chain, cycle and creation sites on small leaky steps.

Each test builds a leaky (or clean) step inline, calls ``diagnose`` directly with a
verdict, and checks the plain-data ``Diagnosis``. The catalogue of real leaks is tested
in ``test_catalogue.py``.
"""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import minigrad as mg
from pytest_graphleak.diagnose import diagnose
from pytest_graphleak.diagnose.backends import active_backends
from pytest_graphleak.diagnose.classify import Facts, only_memory_grew, pattern_of
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.render import MAX_DRAWN, drawing, render_chain
from pytest_graphleak.diagnose.search import Path, find_cycle, shortest_path
from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.probes import METRICS
from pytest_graphleak.report.dot import drawing_dot
from pytest_graphleak.result import Growth, Verdict

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

THIS_FILE = __file__


def leak_verdict(*metrics: str, pattern: str | None = None) -> Verdict:
    growths = [Growth(m, 1.0, 20.0, 1.0) for m in metrics or ("torch.nodes",)]
    return Verdict(leaked=True, growths=growths, pattern=pattern, reason="test")


def run(step: Any, n: int = 3) -> None:
    for _ in range(n):
        step()


def site_lines(diagnosis: Any) -> list[str]:
    return [s.line for s in diagnosis.sites if s.filename == THIS_FILE]


# --------------------------------------------------------------------------- torch
def test_torch_list_accumulation_chain_site_and_growth_note() -> None:
    model = torch.nn.Linear(3, 1)
    state: dict[str, Any] = {"losses": [], "lr": 0.1}

    def step() -> None:
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        state["losses"].append(loss)

    run(step)
    d = diagnose(
        leak_verdict("torch.tensors", "torch.nodes"),
        metrics=METRICS,
        step=step,
        roots={"fixture 'state'": state},
    )
    assert d.pattern == "list-accumulation"
    assert d.chain[:2] == ["fixture 'state'", "dict['losses']"]
    assert d.chain[2].startswith("list(len=")
    assert d.chain[3] == "Tensor(shape=(), grad_fn=MeanBackward0)"
    assert "loss = model(torch.ones(2, 3)).pow(2).mean()" in site_lines(d)
    assert any("grows by 1 per step" in n for n in d.notes)
    assert d.drawing is not None
    dot = drawing_dot(d.drawing)
    assert dot.startswith("digraph graphleak {") and "MeanBackward0" in dot


@pytest.mark.parametrize("every", [3, 5])
def test_a_list_that_grows_every_kth_step_is_list_accumulation(every: int) -> None:
    model = torch.nn.Linear(3, 1)
    state: dict[str, Any] = {"losses": [], "calls": 0}

    def step() -> None:
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        state["calls"] += 1
        if state["calls"] % every == 0:
            state["losses"].append(loss)

    run(step, n=2 * every)
    # the plugin's verdict: one more tensor every `every` steps
    verdict = Verdict(
        leaked=True,
        growths=[
            Growth("torch.tensors", 1.0, 1.0 + 16 / every, 1 / every),
            Growth("torch.nodes", 3.0, 3.0 + 48 / every, 3 / every),
        ],
        reason="test",
    )
    d = diagnose(verdict, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    assert d.pattern == "list-accumulation", d.notes
    assert d.chain[:2] == ["fixture 'state'", "dict['losses']"]
    # runs only as many steps as it takes: the note names the steps when more than one
    assert any("grows by 1" in n for n in d.notes), d.notes


def test_torch_running_total_is_retained_grad_fn_through_an_attribute() -> None:
    class Trainer:
        def __init__(self) -> None:
            self.model = torch.nn.Linear(3, 1)
            self.total = torch.zeros(())

    trainer = Trainer()

    def step() -> None:
        loss = trainer.model(torch.ones(2, 3)).sum()
        loss.backward()
        trainer.total += loss

    run(step)
    d = diagnose(leak_verdict("torch.nodes"), metrics=METRICS, step=step, roots={"self": trainer})
    assert d.pattern == "retained-grad-fn"
    assert d.chain[:3] == ["self", "Trainer.total", "Tensor(shape=(), grad_fn=AddBackward0)"]
    assert "AddBackward0" in d.chain[3]
    assert "trainer.total += loss" in site_lines(d)


def test_torch_hook_closure_is_a_cycle_held_from_cpp() -> None:
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        h = w * 2
        h.register_hook(lambda g: g * h.detach())
        h.sum().backward()

    run(step)
    d = diagnose(leak_verdict("torch.tensors"), metrics=METRICS, step=step, roots={})
    assert d.pattern == "cycle"
    assert d.chain == []
    text = " -> ".join(d.cycle)
    assert "._backward_hooks" in text and "closure 'h'" in text
    assert d.cycle[0].startswith("Tensor(shape=(3,), grad_fn=MulBackward0)")
    assert any("not even gc.collect()" in n for n in d.notes)
    assert "h = w * 2" in site_lines(d)


def test_torch_identity_pack_hook_is_named() -> None:
    w = torch.ones(4, requires_grad=True)

    def keep(t: torch.Tensor) -> torch.Tensor:
        return t

    def step() -> None:
        with torch.autograd.graph.saved_tensors_hooks(keep, keep):
            y = torch.sigmoid(w * 3)
        y.sum().item()

    run(step)
    d = diagnose(leak_verdict("torch.tensors"), metrics=METRICS, step=step, roots={})
    assert d.pattern == "cycle"
    assert any("pack hook" in line and "keep" in line for line in d.cycle)
    assert any("saved-tensor pack hook" in n for n in d.notes)


def test_torch_function_mode_is_gone_after_diagnosis() -> None:
    def step() -> None:
        torch.ones(2).add(1)

    before = torch._C._len_torch_function_stack()
    diagnose(leak_verdict(), metrics=METRICS, step=step, roots={})
    assert torch._C._len_torch_function_stack() == before


# --------------------------------------------------------------------------- minigrad
def test_minigrad_list_and_closure_root() -> None:
    rng = np.random.default_rng(0)
    model = mg.nn.Linear(4, 2, rng=rng)
    history: list[Any] = []

    def step() -> None:
        out = model(mg.Tensor(np.ones((3, 4), np.float32))).sum()
        history.append(out)

    run(step)
    previous = mg.is_recording_creation_sites()
    d = diagnose(leak_verdict("minigrad.tensors"), metrics=METRICS, step=step, roots={})
    assert mg.is_recording_creation_sites() is previous
    assert d.pattern == "list-accumulation"
    assert d.chain[0] == "closure 'history'"
    assert d.chain[1].startswith("list(len=")
    assert d.chain[2] == "Tensor(shape=(), grad_fn=SumBackward)"
    assert "out = model(mg.Tensor(np.ones((3, 4), np.float32))).sum()" in site_lines(d)


def test_minigrad_hidden_state_retained_through_a_fixture() -> None:
    rng = np.random.default_rng(1)
    cell = mg.nn.RNNCell(2, 3, rng=rng)
    state = {"h": mg.zeros(1, 3)}

    def step() -> None:
        state["h"] = cell(mg.ones(1, 2), state["h"])

    run(step)
    d = diagnose(
        leak_verdict("minigrad.nodes"), metrics=METRICS, step=step, roots={"fixture 'state'": state}
    )
    assert d.pattern == "retained-grad-fn"
    tensor = "Tensor(shape=(1, 3), grad_fn=TanhBackward)"
    assert d.chain[:3] == ["fixture 'state'", "dict['h']", tensor]
    assert 'state["h"] = cell(mg.ones(1, 2), state["h"])' in site_lines(d)


def test_minigrad_collectable_cycle_and_gc_state_restored() -> None:
    def step() -> None:
        out = mg.ones(2, requires_grad=True) * 2
        vars(out)["again"] = lambda: out  # out -> __dict__ -> closure -> out

    run(step)
    gc.disable()
    gc.set_debug(gc.DEBUG_UNCOLLECTABLE)
    garbage = len(gc.garbage)
    try:
        d = diagnose(leak_verdict("gc.cyclic_garbage"), metrics=METRICS, step=step, roots={})
        assert not gc.isenabled()
        assert gc.get_debug() == gc.DEBUG_UNCOLLECTABLE
        assert len(gc.garbage) == garbage
        assert gc.get_freeze_count() == 0
    finally:
        gc.set_debug(0)
        gc.enable()
    assert d.pattern == "cycle"
    assert d.cycle[0] == "Tensor(shape=(2,), grad_fn=MulBackward).again"
    assert "closure 'out'" in d.cycle[1]
    assert any("freed only by gc.collect()" in n for n in d.notes)


# --------------------------------------------------------------------------- contract
def test_diagnosis_is_plain_data_and_keeps_nothing_alive() -> None:
    kept: list[Any] = []
    refs: list[weakref.ref[Any]] = []

    def step() -> None:
        t = torch.ones(2, requires_grad=True) * 3
        refs.append(weakref.ref(t))
        kept.append(t)

    run(step)
    d = diagnose(
        leak_verdict("torch.tensors"), metrics=METRICS, step=step, roots={"local 'kept'": kept}
    )
    json.dumps(asdict(d))  # plain strings and numbers only
    kept.clear()
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_excluded_and_plugin_objects_never_appear() -> None:
    holder: dict[str, list[object]] = {"secret": []}
    public: list[Any] = []

    def step() -> None:
        t = torch.ones(1, requires_grad=True) * 2
        holder["secret"].append(t)
        public.append(t)

    run(step)
    d = diagnose(
        leak_verdict(),
        metrics=METRICS,
        step=step,
        roots={"fixture 'holder'": holder, "fixture 'public'": public},
        exclude=[id(holder)],
    )
    assert d.chain[0] == "fixture 'public'"
    assert "secret" not in " ".join(d.chain)
    assert all("pytest_graphleak" not in line for line in d.chain + d.cycle)


def test_a_raising_step_gives_a_note_not_an_exception() -> None:
    calls = {"n": 0}

    def step() -> None:
        calls["n"] += 1
        if calls["n"] >= 2:
            raise ValueError("boom")

    d = diagnose(leak_verdict(pattern="retained-grad-fn"), metrics=METRICS, step=step, roots={})
    assert d.pattern == "retained-grad-fn"
    assert any("ValueError: boom" in n for n in d.notes)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_user_frozen_heap_is_left_frozen() -> None:
    losses: list[Any] = []

    def step() -> None:
        losses.append(torch.ones(1, requires_grad=True) * 2)

    sentinel: list[Any] = []  # frozen with the user's heap: gc.get_objects() skips it then
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        d = diagnose(leak_verdict(), metrics=METRICS, step=step, roots={"local 'losses'": losses})
        # Still frozen: nothing of it was unfrozen and left so. (Not "the same count": the
        # diagnosis lifts the freeze and puts it back, and another thread of the process,
        # e.g. an xdist worker's, makes and frees objects meanwhile.)
        assert frozen > 0 and not any(obj is sentinel for obj in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(obj is sentinel for obj in gc.get_objects())  # the check can tell
    assert d.pattern == "list-accumulation"
    assert d.chain[0] == "local 'losses'"


def test_memory_growth_names_the_allocating_line() -> None:
    cache: list[np.ndarray] = []

    def step() -> None:
        cache.append(np.ones(200_000))

    d = diagnose(leak_verdict("process.rss_bytes"), metrics=METRICS, step=step, roots={})
    assert d.pattern == "memory-growth"
    assert "cache.append(np.ones(200_000))" in site_lines(d)


def test_memory_growth_names_the_container_that_holds_the_bytes() -> None:
    state: dict[str, list[Any]] = {"log": [], "cache": []}

    def step() -> None:
        state["log"].append(1.5)  # grows too, but by a few bytes
        state["cache"].append(np.ones(100_000))  # 800 KB a step

    run(step)
    d = diagnose(
        leak_verdict("process.rss_bytes"),
        metrics=METRICS,
        step=step,
        roots={"fixture 'state'": state},
    )
    assert d.pattern == "memory-growth"
    assert d.chain[0] == "fixture 'state'" and "['cache']" in " ".join(d.chain), d.chain
    assert any(note.startswith("grows by 781.") for note in d.notes), d.notes
    assert all(site.filename == THIS_FILE for site in d.sites), d.sites  # no stdlib frame


def test_memory_growth_names_an_array_replaced_by_a_bigger_one() -> None:
    class Eval:
        preds = torch.zeros(0, 100)

    loop = Eval()

    def step() -> None:
        loop.preds = torch.cat((loop.preds, torch.ones(64, 100)))  # same slot, more bytes

    run(step)
    d = diagnose(
        leak_verdict("torch.storage_bytes"),
        metrics=METRICS,
        step=step,
        roots={"local 'loop'": loop},
    )
    assert d.pattern == "memory-growth"
    assert d.chain[0] == "local 'loop'" and "preds" in " ".join(d.chain), d.chain
    assert any("25.0 KiB per step" in note and "same place" in note for note in d.notes)


def test_memory_growth_finds_a_holder_in_the_steps_closure() -> None:
    hidden: list[bytes] = []

    def step() -> None:
        hidden.append(bytes(300_000))

    run(step)
    d = diagnose(
        leak_verdict("process.rss_bytes"), metrics=METRICS, step=step, roots={}
    )  # no root given
    assert d.pattern == "memory-growth"
    assert d.chain[0] == "closure 'hidden'", d.chain
    assert "hidden.append(bytes(300_000))" in site_lines(d)


def test_without_a_step_the_heap_is_inspected() -> None:
    losses = [torch.ones(1, requires_grad=True) * i for i in range(4)]
    d = diagnose(
        leak_verdict("torch.tensors"), metrics=METRICS, step=None, roots={"local 'losses'": losses}
    )
    assert d.pattern == "list-accumulation"
    assert d.chain[:2] == ["local 'losses'", "list(len=4)"]

    total = torch.zeros(())
    for i in range(5):
        total = total + torch.ones((), requires_grad=True) * i
    d = diagnose(
        leak_verdict("torch.nodes"), metrics=METRICS, step=None, roots={"local 'total'": total}
    )
    assert d.pattern == "retained-grad-fn"
    assert d.chain[0] == "local 'total'"
    assert any("autograd graph has" in n for n in d.notes)


# --------------------------------------------------------------------------- pieces
@pytest.mark.parametrize(
    ("facts", "first", "expected"),
    [
        (Facts(leaked_count=3, cyclic_count=1, has_chain=True), "list-accumulation", "cycle"),
        (Facts(leaked_count=3, cycle_held=True), "list-accumulation", "cycle"),
        # a chain from a root outranks a cycle seen beside it
        (Facts(leaked_count=3, has_chain=True, cycle_held=True), "cycle", "retained-grad-fn"),
        (Facts(leaked_count=3, has_chain=True, container_grew=True), "cycle", "list-accumulation"),
        (Facts(leaked_count=3, has_chain=True), "list-accumulation", "retained-grad-fn"),
        (Facts(memory_only=True), "memory-growth", "memory-growth"),
        # leaked objects the heap walk saw outrank a count that saw only bytes
        (Facts(leaked_count=1, memory_only=True), "memory-growth", "retained-grad-fn"),
        # no evidence at all: the verdict's first guess stands
        (Facts(), "cycle", "cycle"),
        (Facts(), None, "retained-grad-fn"),
    ],
)
def test_pattern_of(facts: Facts, first: str | None, expected: str) -> None:
    verdict = Verdict(True, [Growth("torch.nodes", 0, 1, 1)], pattern=first)
    assert pattern_of(verdict, facts) == expected


def test_only_memory_grew_reads_the_declarations() -> None:
    def grew(*names: str) -> Verdict:
        return Verdict(True, [Growth(name, 0, 1, 1) for name in names])

    assert only_memory_grew(grew("process.rss_bytes", "torch.storage_bytes"), METRICS)
    assert not only_memory_grew(grew("process.rss_bytes", "gc.cyclic_garbage"), METRICS)
    assert not only_memory_grew(grew("minigrad.autograd_meta"), METRICS)
    assert not only_memory_grew(grew(), METRICS)
    assert not only_memory_grew(grew("undeclared.bytes"), METRICS)  # unknown: not proof


def test_edge_texts_and_long_node_runs_are_elided() -> None:
    assert Edge("key", "losses").text() == "['losses']"
    assert Edge("index", 3).text() == "[3]"
    assert Edge("attr", "hidden").text() == ".hidden"
    assert Edge("closure", "h").text() == " closure 'h'"
    assert Edge("next", 0).text() == ".next_functions[0]"
    walker = ObjectEdges(active_backends())
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(12):
        y = y * 1.5
    first = y.grad_fn
    path = shortest_path([("local 'y'", y)], lambda o: o is x, walker)
    assert path is not None
    chain = render_chain(path, walker)
    assert chain[0] == "local 'y'" and chain[-1] == "Tensor(shape=(1,), requires_grad=True)"
    assert any("more graph nodes" in label for label in chain)
    assert len(chain) < 12
    drawn = drawing(path, None, walker)
    assert drawn is not None and len(drawn.nodes) <= MAX_DRAWN + 1
    dot = drawing_dot(drawn)
    assert dot.count("->") <= 60 and "MulBackward0" in dot
    assert first is y.grad_fn


def test_find_cycle_returns_the_closing_edge() -> None:
    walker = ObjectEdges(active_backends())
    a: dict[str, Any] = {}
    b = [a]
    a["back"] = b
    path = find_cycle(a, walker)
    assert isinstance(path, Path)
    assert path.objects[0] is a and path.objects[-1] is a
    assert [e.text() for e in path.edges] == ["['back']", "[0]"]


def test_minigrad_only_process_without_torch() -> None:
    """The diagnosis never imports torch: a process where torch cannot load still works."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import minigrad as mg
        from pytest_graphleak.diagnose import diagnose
        from pytest_graphleak.probes import METRICS
        from pytest_graphleak.result import Growth, Verdict
        kept = []
        def step():
            kept.append(mg.ones(2, requires_grad=True) * 2)
        for _ in range(3):
            step()
        d = diagnose(Verdict(True, [Growth("minigrad.tensors", 1, 9, 1)]), metrics=METRICS,
                     step=step, roots={})
        print(d.pattern, d.chain[0], d.sites[0].filename, d.sites[0].lineno)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split("\n")[0] == "list-accumulation global 'kept' <string> 10"


def test_a_root_reaching_a_huge_dataset_does_not_starve_the_others() -> None:
    dataset = [[i] for i in range(200_000)]  # the first root reaches 200k objects
    losses: list[Any] = []

    def step() -> None:
        losses.append(torch.ones(1, requires_grad=True) * 2)

    run(step)
    d = diagnose(
        leak_verdict(),
        metrics=METRICS,
        step=step,
        roots={"fixture 'dataset'": dataset, "fixture 'losses'": losses},
    )
    assert d.pattern == "list-accumulation"
    assert d.chain[0] == "fixture 'losses'"


# --------------------------------------------------------------------------- odd heaps
class _Referent:
    pass


def test_dead_and_live_weak_proxies_on_the_heap_do_not_break_the_diagnosis() -> None:
    """A dead ``weakref.proxy`` raises ReferenceError on any attribute or isinstance
    check (every torch.compile model leaves some): the diagnosis must not touch them."""
    alive = _Referent()
    kept: list[Any] = []
    holder = {"kept": kept, "dead": None, "live": weakref.proxy(alive)}

    def step() -> None:
        kept.append(torch.ones(2, requires_grad=True) * 2)
        dead = weakref.proxy(_Referent())  # its referent is gone at once
        kept.append(dead)
        holder["dead"] = dead

    run(step)
    d = diagnose(
        leak_verdict("torch.tensors"),
        metrics=METRICS,
        step=step,
        roots={"fixture 'holder'": holder},
    )
    assert not any("diagnosis failed" in note for note in d.notes), d.notes
    assert d.pattern == "list-accumulation"
    assert d.chain[0] in ("closure 'kept'", "fixture 'holder'"), d.chain
    assert d.chain[-2].startswith("list(len="), d.chain


def test_creation_sites_with_equal_counts_are_listed_in_source_order() -> None:
    # The walk meets tensors in address order, which reused memory makes vary from run to
    # run; the listed sites must not.
    from collections import Counter

    from pytest_graphleak.diagnose.sites import MAX_SITES, per_step

    counts = Counter(
        {("b.py", 9, "f"): 4, ("a.py", 51, "f"): 4, ("a.py", 49, "f"): 4, ("a.py", 7, "g"): 8}
    )
    listed = [(site.filename, site.lineno) for site in per_step(counts, steps=4)]
    assert listed == [("a.py", 7), ("a.py", 49), ("a.py", 51), ("b.py", 9)][:MAX_SITES]
    reversed_insertion = Counter(dict(reversed(list(counts.items()))))
    assert [(s.filename, s.lineno) for s in per_step(reversed_insertion, steps=4)] == listed
