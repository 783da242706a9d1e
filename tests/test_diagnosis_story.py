"""The diagnosis tells the story the numbers tell: detached tensors, unrooted holders,
threads, and the ``stored at:`` line that puts a leaked tensor into its holder.

Each test builds a small leaky step inline and calls ``diagnose`` with the verdict the
plugin would give it (which counts grew), then checks the plain-data ``Diagnosis`` and
its rendered text.
"""

from __future__ import annotations

import collections
import sys
import threading
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphleak.diagnose import diagnose
from pytest_graphleak.diagnose.classify import Facts, pattern_of
from pytest_graphleak.probes import METRICS
from pytest_graphleak.report.dot import drawing_dot
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult, Diagnosis, Growth, Verdict
from pytest_graphleak.words.notes import UNROOTED

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

THIS_FILE = __file__


def verdict(*metrics: str) -> Verdict:
    return Verdict(True, [Growth(m, 1.0, 20.0, 1.0) for m in metrics], reason="test")


def run(step: Any, n: int = 3) -> None:
    for _ in range(n):
        step()


def text_of(d: Diagnosis, v: Verdict) -> str:
    series = {g.metric: [g.start, g.end] for g in v.growths}
    result = CheckResult("t", 2, 0, series, dict.fromkeys(series, "objects"), v, d)
    return render_text(result)


def stored_lines(d: Diagnosis) -> list[str]:
    return [s.line for s in d.stored_at if s.filename == THIS_FILE]


# --------------------------------------------------------------------------- no graph
def test_detached_accumulation_says_no_graph_and_never_advises_detach() -> None:
    model = torch.nn.Linear(3, 1)
    state: dict[str, Any] = {"losses": []}

    def step() -> None:
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        state["losses"].append(loss.detach())

    run(step)
    v = verdict("torch.tensors", "torch.storage_bytes")  # graph nodes stayed flat
    d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    assert d.pattern == "list-accumulation", d.notes
    assert "carry no autograd graph" in d.story
    assert "loss.item()" in d.fix and "deque(maxlen" in d.fix and "reset()" in d.fix
    assert "already detached" in d.fix
    text = text_of(d, v)
    assert "graph-carrying" not in text
    assert "(or loss.detach())" not in text
    assert 'state["losses"].append(loss.detach())' in stored_lines(d)


def test_graph_carrying_accumulation_keeps_the_usual_story() -> None:
    state: dict[str, Any] = {"losses": []}
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        state["losses"].append((w * 2).sum())

    run(step)
    v = verdict("torch.tensors", "torch.nodes")
    d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    assert d.pattern == "list-accumulation"
    assert d.story == ""  # the usual meaning; the fix is worded for the stored line:
    assert d.fix == (
        "store (w * 2).sum().item() (a plain number) instead of (w * 2).sum(), so that "
        'state["losses"] keeps no graph: state["losses"].append((w * 2).sum().item())'
    )
    assert "graph-carrying" in text_of(d, v)


def test_tensors_in_numpy_arrays_are_found_through_the_array_base() -> None:
    model = torch.nn.Linear(4, 2)
    state: dict[str, Any] = {"preds": []}

    def step() -> None:
        with torch.no_grad():
            state["preds"].append(model(torch.randn(8, 4)).numpy())

    run(step)
    v = verdict("torch.tensors", "torch.storage_bytes")
    d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'st'": state})
    assert d.pattern == "list-accumulation", d.notes
    assert d.chain[:2] == ["fixture 'st'", "dict['preds']"]
    assert "ndarray.base" in d.chain
    assert "carry no autograd graph" in d.story


@pytest.fixture
def hidden_store() -> Iterator[str]:
    """A module without a file, looked up by name each step: an object no root reaches,
    like a fixture from request.getfixturevalue or a library's own list."""
    store = types.ModuleType("graphleak_hidden_store")
    store.box = {"keep": []}  # type: ignore[attr-defined]
    sys.modules[store.__name__] = store
    yield store.__name__
    del sys.modules[store.__name__]


def test_a_holder_no_root_reaches_is_found_by_its_referrers(hidden_store: str) -> None:
    w = torch.ones(2, requires_grad=True)

    def step() -> None:
        box = sys.modules[hidden_store].box
        box["keep"].append(w * 2)

    run(step)
    d = diagnose(verdict("torch.tensors", "torch.nodes"), metrics=METRICS, step=step, roots={})
    assert d.pattern == "list-accumulation", d.notes
    assert d.chain[0] == UNROOTED
    assert d.chain[1] == "dict['keep']"
    assert any("request.getfixturevalue" in n for n in d.notes)
    assert 'box["keep"].append(w * 2)' in stored_lines(d)


def test_tensors_held_by_a_running_thread_are_named_and_not_retained_grad_fn() -> None:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def work() -> None:
        kept = torch.randn(10)
        stop.wait(30)
        del kept

    def step() -> None:
        thread = threading.Thread(target=work, daemon=True, name="holder")
        thread.start()
        threads.append(thread)

    try:
        run(step)
        v = verdict("torch.tensors", "torch.storage_bytes")
        d = diagnose(v, metrics=METRICS, step=step, roots={})
        assert d.pattern == "memory-growth", d.notes
        assert any("local 'kept' of work()" in n and "thread 'holder'" in n for n in d.notes)
        assert "no graph node grew" in d.story
        assert "retained-grad-fn" not in text_of(d, v)
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def test_no_holder_at_all_says_so_and_why(hidden_store: str) -> None:
    def step() -> None:  # arrays in a list no root reaches: gc sees no link to the tensor
        sys.modules[hidden_store].box["keep"].append(torch.randn(5).numpy())

    run(step)
    v = verdict("torch.tensors", "torch.storage_bytes")
    d = diagnose(v, metrics=METRICS, step=step, roots={})
    assert d.pattern == "memory-growth", d.notes
    note = next(n for n in d.notes if n.startswith("no holder found"))
    assert "C++" in note and "thread" in note and ".numpy()" in note
    assert "retained-grad-fn" not in text_of(d, v)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (Facts(leaked_count=3, graph_grew=False), "memory-growth"),
        (Facts(leaked_count=3, has_chain=True, graph_grew=False), "memory-growth"),
        (
            Facts(leaked_count=3, has_chain=True, container_grew=True, graph_grew=False),
            "list-accumulation",
        ),
        (Facts(leaked_count=3, cyclic_count=3, graph_grew=False), "cycle"),
        (Facts(leaked_count=3, has_chain=True), "retained-grad-fn"),
    ],
)
def test_classify_never_says_retained_grad_fn_without_graph_growth(
    facts: Facts, expected: str
) -> None:
    assert pattern_of(verdict("torch.tensors"), facts) == expected


# --------------------------------------------------------------------------- stored at
class Meter:
    def __init__(self) -> None:
        self.running = torch.zeros(())
        self.avg = torch.zeros(())

    def update_ema(self, loss: Any) -> None:
        self.running = 0.9 * self.running + 0.1 * loss

    def update_inplace(self, loss: Any) -> None:
        self.avg.add_(loss)


@pytest.mark.parametrize(
    ("method", "line"),
    [
        ("update_ema", "self.running = 0.9 * self.running + 0.1 * loss"),
        ("update_inplace", "self.avg.add_(loss)"),
    ],
)
def test_stored_at_names_the_line_that_updates_the_holder(method: str, line: str) -> None:
    meter = Meter()
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        loss = (w * 3).sum()
        getattr(meter, method)(loss)

    run(step)
    v = verdict("torch.nodes")
    d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'meter'": meter})
    assert d.pattern == "retained-grad-fn", d.notes
    assert stored_lines(d) == [line], d.stored_at
    assert d.stored_at[0].function == method
    assert f"stored at: {THIS_FILE}" in text_of(d, v) or "stored at: tests/" in text_of(d, v)


def test_a_change_made_inside_a_library_is_charged_to_the_calling_user_line() -> None:
    kept = collections.UserList[torch.Tensor]()  # its append runs in the standard library
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        loss = (w * 2).sum()
        kept.append(loss)

    run(step)
    d = diagnose(verdict("torch.nodes"), metrics=METRICS, step=step, roots={"fixture 'kept'": kept})
    assert d.pattern == "list-accumulation", d.notes
    assert stored_lines(d) == ["kept.append(loss)"]


def test_the_callers_trace_function_is_restored() -> None:
    state: dict[str, Any] = {"losses": []}
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        state["losses"].append((w * 2).sum())

    def tracer(frame: Any, event: str, arg: Any) -> None:
        return None

    run(step)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        d = diagnose(
            verdict("torch.nodes"), metrics=METRICS, step=step, roots={"fixture 'state'": state}
        )
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
    assert d.stored_at


def test_stored_at_travels_through_json() -> None:
    state: dict[str, Any] = {"losses": []}
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        state["losses"].append((w * 2).sum())

    run(step)
    v = verdict("torch.nodes")
    d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    result = CheckResult("t", 2, 0, {"torch.nodes": [1, 2]}, {"torch.nodes": "objects"}, v, d)
    data = result.to_dict()
    assert data["diagnosis"]["stored_at"][0]["line"] == 'state["losses"].append((w * 2).sum())'
    again = CheckResult.from_dict(data)
    assert again.diagnosis is not None
    assert again.diagnosis.stored_at == d.stored_at


# --------------------------------------------------------------------------- created at
def test_created_at_is_the_users_line_with_the_library_line_beside_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "site-packages" / "fakelib"  # an installed package
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(
        "def compute_loss(w):\n    scaled = w * 3\n    return scaled.sum()\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(library.parent))
    import fakelib  # type: ignore[import-not-found]

    state: dict[str, Any] = {"losses": []}
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        state["losses"].append(fakelib.compute_loss(w))

    try:
        run(step)
        v = verdict("torch.nodes")
        d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    finally:
        sys.modules.pop("fakelib", None)
    mine = [s for s in d.sites if s.filename == THIS_FILE]
    assert mine, d.sites
    assert all(s.line == 'state["losses"].append(fakelib.compute_loss(w))' for s in mine)
    assert {s.via for s in mine} <= {"fakelib/__init__.py:2", "fakelib/__init__.py:3"}
    assert any(s.via for s in mine)
    assert "  (via fakelib/__init__.py:" in text_of(d, v)
    # a tensor made by torch itself for the user's line names no library
    assert not any("torch/" in s.via for s in d.sites)


# --------------------------------------------------------------------------- cycle
class Record:
    def __init__(self, out: Any) -> None:
        self.out = out
        self.other: Record | None = None


def test_a_cycle_of_plain_objects_is_drawn_with_the_tensor_it_holds() -> None:
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        first, second = Record((w * 2).sum()), Record(None)
        first.other, second.other = second, first  # only the cyclic GC frees them

    run(step)
    v = verdict("torch.nodes", "gc.cyclic_garbage")
    d = diagnose(v, metrics=METRICS, step=step, roots={})
    assert d.pattern == "cycle", d.notes
    assert d.cycle[:2] == ["Record.other", "Record.other"], d.cycle
    assert d.cycle[2].startswith("Record (the same object: the cycle closes)")
    assert "Record.out holds Tensor(shape=(), grad_fn=SumBackward0)" in d.cycle[2]
    assert "cycle: Record.other -> Record.other -> Record (the same object" in text_of(d, v)
    assert d.drawing is not None and "SumBackward0" in drawing_dot(d.drawing)
    assert not any("no chain from a fixture" in n for n in d.notes)


# --------------------------------------------------------------------------- no step
def test_a_hand_written_loop_keeping_detached_tensors_is_not_retained_grad_fn() -> None:
    model = torch.nn.Linear(3, 1)
    losses: list[Any] = []
    for _ in range(4):
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        losses.append(loss.detach())
    v = verdict("torch.tensors")
    d = diagnose(v, metrics=METRICS, step=None, roots={"local 'losses'": losses})
    assert d.pattern == "list-accumulation", d.notes
    assert d.chain[0] == "local 'losses'"
    assert "carry no autograd graph" in d.story and "already detached" in d.fix
    held: list[Any] = [losses]  # nothing the roots reach holds a container of tensors
    d = diagnose(v, metrics=METRICS, step=None, roots={"local 'held'": len(held)})
    assert d.pattern == "memory-growth", d.notes
    assert "retained-grad-fn" not in text_of(d, v)


def test_html_report_shows_stored_at_story_and_fix() -> None:
    from pytest_graphleak.report.html import render_html
    from pytest_graphleak.report.json_doc import CheckedTest, build_document
    from pytest_graphleak.report.model import Report

    model = torch.nn.Linear(3, 1)
    state: dict[str, Any] = {"losses": []}

    def step() -> None:
        state["losses"].append(model(torch.ones(2, 3)).sum().detach())

    run(step)
    v = verdict("torch.tensors")
    d = diagnose(v, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    result = CheckResult(
        "t.py::test_x", 2, 0, {"torch.tensors": [1, 2]}, {"torch.tensors": "objects"}, v, d
    )
    doc = build_document(
        [CheckedTest("t.py::test_x", "failed", [result.to_dict()])], generated_by="test"
    )
    page = render_html(Report.from_dict(doc), draw=None)
    assert "stored at (the line that puts it in its holder)" in page
    assert "state[&quot;losses&quot;].append(" in page
    assert "carry no autograd graph" in page
    assert "already detached" in page


# --------------------------------------------------------------------------- memory survey
def test_the_memory_survey_walks_a_small_root_even_when_a_huge_one_comes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_graphleak.diagnose import memory
    from pytest_graphleak.diagnose.backends import active_backends
    from pytest_graphleak.diagnose.edges import ObjectEdges

    huge = [[{"row": i, "col": j} for j in range(20)] for i in range(20_000)]
    cache: dict[str, Any] = {"blobs": []}
    walker = ObjectEdges(active_backends())
    monkeypatch.setattr(memory, "MAX_READ", 2_000)  # little is read
    monkeypatch.setattr(memory, "MAX_PER_ROOT", 10**9)
    found = memory.survey([("fixture 'huge'", huge), ("fixture 'cache'", cache)], walker)
    try:
        assert id(cache["blobs"]) in found.lengths  # reached within the first few turns
    finally:
        found.release()


def test_sites_recorded_as_file_and_line_get_their_function(tmp_path: Any) -> None:
    from pytest_graphleak.diagnose.sites import function_at

    source = tmp_path / "steps.py"
    source.write_text(
        "x = 1\n"
        "class Trainer:\n"
        "    def compute_loss(self):\n"
        "        def inner():\n"
        "            return 2\n"
        "        return inner()\n",
        encoding="utf-8",
    )
    name = str(source)
    assert function_at(name, 1) == ""
    assert function_at(name, 2) == "Trainer"
    assert function_at(name, 3) == "compute_loss"
    assert function_at(name, 5) == "inner"
    assert function_at(name, 6) == "compute_loss"
    assert function_at(str(tmp_path / "missing.py"), 3) == ""


def test_minigrad_sites_name_their_function() -> None:
    import minigrad as mg

    state: dict[str, Any] = {"losses": []}
    w = mg.Tensor([1.0, 2.0], requires_grad=True)

    def minigrad_step() -> None:
        state["losses"].append((w * 2).sum())

    run(minigrad_step)
    d = diagnose(
        verdict("minigrad.nodes"),
        metrics=METRICS,
        step=minigrad_step,
        roots={"fixture 'state'": state},
    )
    mine = [s for s in d.sites if s.filename == THIS_FILE]
    assert mine and {s.function for s in mine} == {"minigrad_step"}, d.sites
