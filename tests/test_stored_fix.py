"""The fix is worded for the ``stored at:`` line, with the user's own expressions.

Unit tests of ``words.lines`` for each shape it knows (and the lines it leaves to
the pattern's usual fix), then real leaks through the public ``check()`` / ``track()``
with torch and minigrad: the one fix reaches the text, the JSON data, the view and the
GitHub summary alike.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

import minigrad as mg
from pytest_graphleak import check, track
from pytest_graphleak.diagnose.facts import root_link
from pytest_graphleak.loop import LoopCheck
from pytest_graphleak.patterns import FIXES
from pytest_graphleak.report.github_rows import report_rows
from pytest_graphleak.report.model import Report
from pytest_graphleak.report.text import render_text
from pytest_graphleak.report.view import diagnosis_view
from pytest_graphleak.result import CheckResult, CreationSite, Diagnosis, Link, Verdict
from pytest_graphleak.settings import Settings
from pytest_graphleak.words import lines
from pytest_graphleak.words.chain import holder_text
from pytest_graphleak.words.fix import choose_fix, usual_fix
from pytest_graphleak.words.lines import growth_fix
from pytest_graphleak.words.source import statement_text
from pytest_graphleak.words.verify import PILED_UP

LIST, RETAINED = "list-accumulation", "retained-grad-fn"
pytest_plugins = ["pytester"]

#: The typed links a chain label stands for, for writing the cases below as the chain
#: reads (``facts.links_of`` makes them from the objects; this reads a test's labels).
_TENSOR = re.compile(r"^(\w+)\(shape=\(([^)]*)\)(, grad_fn=)?")
_SIZED = re.compile(r"^(\w+)\(len=(\d+)\)$")
_KEYED = re.compile(r"^(\w+)\[(.+)\]$")
_ATTR = re.compile(r"^(\w+)\.(\w+)$")
_BUILTIN = ("list", "deque", "dict", "set", "tuple", "frozenset")
_TUPLES = ("Batch",)  # the namedtuples of the cases below


def links(chain: list[str] | None) -> list[Link] | None:
    if chain is None:
        return None
    made = [root_link(chain[0])]
    for label in chain[1:]:
        if m := _TENSOR.match(label):
            shape = [int(n) for n in m.group(2).replace(" ", "").split(",") if n]
            made.append(Link("tensor", m.group(1), shape=shape, graph=bool(m.group(3))))
        elif m := _SIZED.match(label):
            name = m.group(1)
            base = name if name in _BUILTIN else "tuple" if name in _TUPLES else "list"
            made.append(Link("container", name, edge="index", base=base, length=int(m.group(2))))
        elif m := _KEYED.match(label):
            base = "dict" if "dict" in m.group(1).lower() else ""
            made.append(Link("container", m.group(1), edge="key", key=m.group(2), base=base))
        elif m := _ATTR.match(label):
            made.append(Link("object", m.group(1), edge="attribute", key=m.group(2)))
        else:
            made.append(Link("node" if "Backward" in label else "object", label))
    return made


def stored_fix(pattern: str, line: str, chain: list[str] | None = None) -> str:
    return lines.stored_fix(pattern, line, links(chain))


def kept_fix(pattern: str, line: str, chain: list[str] | None = None) -> str:
    return lines.kept_fix(pattern, line, links(chain))


def reword_fix(diagnosis: Diagnosis) -> None:
    """The one chooser, as every surface gets it (``words.fix.choose_fix``)."""
    diagnosis.links = links(diagnosis.chain) or [] if diagnosis.chain else diagnosis.links
    diagnosis.fix = choose_fix(diagnosis)


@pytest.mark.parametrize(
    ("pattern", "line", "fix"),
    [
        (
            LIST,
            "preds.append(out)",
            "store out.detach() (or out.item() for a scalar) instead of out, so that preds "
            "keeps no graph: preds.append(out.detach())",
        ),
        (
            LIST,
            "self.history.append(logits)  # kept for the plot",
            "store logits.detach() (or logits.item() for a scalar) instead of logits, so that "
            "self.history keeps no graph: self.history.append(logits.detach())",
        ),
        (
            LIST,
            "if keep: kept.append(a + b)",
            "store (a + b).detach() (or (a + b).item() for a scalar) instead of a + b, so that "
            "kept keeps no graph: kept.append((a + b).detach())",
        ),
        (
            LIST,
            "cache[k] = feats",
            "store feats.detach() (or feats.item() for a scalar) instead of feats, so that "
            "cache keeps no graph: cache[k] = feats.detach()",
        ),
        (
            LIST,
            "outputs += [out]",
            "store out.detach() (or out.item() for a scalar) instead of out, so that outputs "
            "keeps no graph: outputs += [out.detach()]",
        ),
        (
            LIST,
            "preds.append((out, y))",
            "store (out, y) in preds with its graph-carrying tensors detached (.detach(), or "
            ".item() for a scalar)",
        ),
        (
            LIST,
            "self.queue = torch.cat([keys, self.queue])[: self.size]",
            "join keys.detach() instead of keys, so that self.queue keeps no graph: "
            "self.queue = torch.cat([keys.detach(), self.queue])[: self.size]",
        ),
        (
            RETAINED,
            "total += loss",
            "cut the graph that total keeps: total += loss.item() for a scalar (or "
            "loss.detach() to keep a tensor) instead of total += loss",
        ),
        (
            RETAINED,
            "self.avg.add_(loss)",
            "update self.avg with loss.detach() so that it keeps no graph: "
            "self.avg.add_(loss.detach()) (or make the update under no_grad())",
        ),
        (
            RETAINED,
            "self.m = 0.9 * self.m + 0.1 * x.mean(0)",
            "cut the graph that self.m keeps: self.m = (0.9 * self.m + 0.1 * x.mean(0)).detach() "
            "(or compute it under no_grad())",
        ),
        (
            RETAINED,
            "h = self.cell(x, h)[0] + h",
            "detach h once per step (h = h.detach() at the start or end of each step), so that "
            "it carries no graph from one step to the next; if nothing backpropagates through "
            "it, compute it under no_grad()",
        ),
        (
            RETAINED,
            "out, h = self.rnn(x, h)",
            "detach h once per step (h = h.detach() at the start or end of each step), so that "
            "it carries no graph from one step to the next; if nothing backpropagates through "
            "it, compute it under no_grad()",
        ),
    ],
)
def test_each_known_shape_is_worded_with_the_lines_own_names(
    pattern: str, line: str, fix: str
) -> None:
    assert stored_fix(pattern, line) == fix


@pytest.mark.parametrize(
    ("pattern", "line"),
    [
        (LIST, "preds.append("),  # cut off inside a multi-line statement
        (LIST, "kept.append(out.detach().cpu())"),  # nothing of a graph is kept there
        (LIST, "total += loss.item()"),
        (LIST, "kept.append(float(loss))"),
        (LIST, "record(loss)"),  # a call into the user's function: its shape is unknown
        (LIST, "metric.update(preds, target)"),
        (LIST, "a.append(x); b.append(y)"),  # two stores: which one is unknown
        (LIST, "loss = model(x).sum()"),  # a fresh local each step stores nothing
        (RETAINED, "h, c = self.rnn(x, h, c)"),  # two states: which one is unknown
        ("memory-growth", "preds.append(out)"),  # no stored-at line for this pattern
        ("cycle", "preds.append(out)"),
    ],
)
def test_other_lines_keep_the_usual_fix(pattern: str, line: str) -> None:
    assert stored_fix(pattern, line) == ""


SCALAR = "Tensor(shape=(), grad_fn=MeanBackward0)"
MATRIX = "Tensor(shape=(2, 4), grad_fn=AddmmBackward0)"
LOSSES = ["fixture 'state'", "dict['losses']", "list(len=24)", SCALAR]


@pytest.mark.parametrize(
    ("line", "chain", "fix"),
    [
        # A scalar in the chain: .item() is the fix; a larger tensor: .detach().
        (
            'state["losses"].append(loss)',
            LOSSES,
            'store loss.item() (a plain number) instead of loss, so that state["losses"] keeps no '
            'graph: state["losses"].append(loss.item())',
        ),
        (
            "cache[k] = emb",
            ["local 'cache'", "dict[3]", MATRIX],
            "store emb.detach() instead of emb, so that cache keeps no graph: "
            "cache[k] = emb.detach()",
        ),
        (
            "total += loss",
            ["local 'total'", SCALAR, "MeanBackward0"],
            "cut the graph that total keeps: total += loss.item() instead of total += loss",
        ),
        # A module global and a dict entry grown in place (the outlive audit's chains).
        (
            "TOTAL += loss",
            ["global 'train.TOTAL'", SCALAR],
            "cut the graph that TOTAL keeps: TOTAL += loss.item() instead of TOTAL += loss",
        ),
        (
            'state["total"] += loss',
            ["fixture 'state' (session scope)", "dict['total']", SCALAR],
            'cut the graph that state["total"] keeps: state["total"] += loss.item() instead of '
            'state["total"] += loss',
        ),
        # A record of several tensors, made elsewhere: the chain shows the dict.
        (
            "outputs.append(record)",
            ["self", "Loop.outputs", "list(len=24)", "dict['loss']", SCALAR],
            "store record in outputs with its graph-carrying tensors detached (.detach(), or "
            ".item() for a scalar)",
        ),
        (
            "kept.append(pair)",
            ["local 'kept'", "list(len=24)", "tuple(len=2)", SCALAR],
            "store pair in kept with its graph-carrying tensors detached (.detach(), or .item() "
            "for a scalar)",
        ),
        # docs/cuda.md's recorded CUDA leak: its stored-at line and chain.
        (
            'state["outputs"].append(out)  # the leak: each step\'s output and its graph',
            [
                "fixture 'state'",
                "dict['outputs']",
                "list(len=24)",
                "Tensor(shape=(64, 256), grad_fn=AddmmBackward0)",
            ],
            'store out.detach() instead of out, so that state["outputs"] keeps no graph: '
            'state["outputs"].append(out.detach())',
        ),
        # The chain disagrees with the line's shape: the usual fix stays.
        ("kept.append(x)", ["local 'box'", "Box.x", SCALAR], ""),
        ("cache[k] = emb", ["local 'cache'", "dict[3]", "tuple(len=2)", SCALAR], ""),
        ("total += loss", ["local 'other'", SCALAR], ""),
        ('state["total"] += loss', ["fixture 'state'", "dict['count']", SCALAR], ""),
        (
            "h, c = self.rnn(x, h, c)",
            ["self", "Net.c", SCALAR],
            "detach c once per step (c = c.detach() at the start or end of each step), so that "
            "it carries no graph from one step to the next; if nothing backpropagates through "
            "it, compute it under no_grad()",
        ),
    ],
)
def test_the_holder_chain_picks_item_or_detach_and_vetoes_a_shape_it_contradicts(
    line: str, chain: list[str], fix: str
) -> None:
    assert stored_fix(LIST, line, chain) == fix


# -- real leaks through the public API ----------------------------------------------------
def _agree(result: CheckResult, pattern: str, fix: str) -> str:
    """The one fix everywhere: the JSON data, the view, the text and the GitHub row."""
    assert result.leaked and result.diagnosis is not None, result
    assert result.diagnosis.pattern == pattern, result.diagnosis.notes
    data = result.to_dict()
    # What the fix line shows: the change that was verified, else the advice.
    tried = result.diagnosis.fix_tried
    shown = tried.text if tried is not None and tried.verified else fix
    written = data["diagnosis"]["fix"]
    assert (written["advice"], written["text"]) == (fix, shown)  # advice: worded from the facts
    view = diagnosis_view(pattern, CheckResult.from_dict(data).diagnosis)
    assert [line.text for line in view if line.kind == "fix"] == [shown]
    label = next(line.label for line in view if line.kind == "fix")
    assert f"  {label}: {shown}" in render_text(result)
    document = {"tests": [{"nodeid": "t.py::test", "outcome": "failed", "checks": [data]}]}
    assert report_rows(Report.from_dict(document), {})[0].fix == shown
    assert FIXES[pattern] not in render_text(result)
    return fix


class _Model:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.history: list[Any] = []
        self.cache: dict[int, Any] = {}
        self.total: Any = 0.0
        self.step_no = 0
        if backend == "torch":
            torch = pytest.importorskip("torch")
            self.w = torch.ones(4, requires_grad=True)
        else:
            self.w = mg.Tensor([1.0, 1.0, 1.0, 1.0], requires_grad=True)

    def forward(self) -> Any:
        return (self.w * 2.0).sum()

    def keep_history(self) -> None:
        logits = self.forward()
        self.history.append(logits)

    def keep_cache(self) -> None:
        self.step_no += 1
        feats = self.w * 2.0  # not a scalar: .detach(), not .item()
        self.cache[self.step_no] = feats

    def keep_total(self) -> None:
        out = self.forward()
        self.total += out


@pytest.mark.parametrize("backend", ["torch", "minigrad"])
@pytest.mark.parametrize(
    ("method", "pattern", "fix"),
    [
        (
            "keep_history",
            LIST,
            "store logits.item() (a plain number) instead of logits, so that self.history keeps "
            "no graph: self.history.append(logits.item())",
        ),
        (
            "keep_cache",
            LIST,
            "store feats.detach() instead of feats, so that self.cache keeps no graph: "
            "self.cache[self.step_no] = feats.detach()",
        ),
        (
            "keep_total",
            RETAINED,
            "cut the graph that self.total keeps: self.total += out.item() instead of "
            "self.total += out",
        ),
    ],
)
def test_check_words_the_fix_for_the_stored_line(
    backend: str, method: str, pattern: str, fix: str
) -> None:
    model = _Model(backend)
    result = check(getattr(model, method), steps=8, warmup=2)
    _agree(result, pattern, fix)


def test_a_loop_words_the_fix_for_the_line_seen_in_its_next_step() -> None:
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(4, 1)
    preds = []
    with track(warmup=2, steps=8) as t:
        for _ in range(12):
            out = net(torch.randn(2, 4))  # shape (2, 1): .detach()
            preds.append(out)
            t.step()
    assert t.result is not None
    _agree(
        t.result,
        LIST,
        "store out.detach() instead of out, so that preds keeps no graph: "
        "preds.append(out.detach())",
    )


def test_a_window_modes_first_leak_names_its_lines_and_a_tail_judged_late_says_why_not() -> None:
    # Before a first leak, window mode records creation sites in a window only once a
    # measured count rose above its baseline: the first leaky window has its lines. A
    # tail judged after the loop ended (unknown length) recorded none: it says why, and
    # its fix names no variable of the user's.
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(4, 1)
    kept: list[Any] = []
    loop = LoopCheck(Settings(warmup=2), name="run", on_leak="warn", window=20, sample_every=2)
    loop.start(length=None, roots=lambda: {"kept": kept})
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for i in range(70):
            loss = net(torch.randn(2, 4)).pow(2).mean()
            if i >= 25:
                kept.append(loss)
            loop.after_step()
        loop.finish()
    names = [result.name for result in loop.results]
    assert names == ["run steps 1-22", "run steps 23-42", "run steps 43-62", "run steps 63-70"]
    first, tail = loop.results[1], loop.results[3]
    text = render_text(first)
    assert "created at: " in text and "stored at: " in text and "kept.append(loss)" in text
    assert "fix (not verified): store loss.item() (a plain number) instead of loss" in text
    tail_text = render_text(tail)
    assert "created at: " not in tail_text and "stored at: " not in tail_text
    assert "no created-at or stored-at line: a running loop's steps cannot be re-run" in tail_text
    assert f"  fix (not verified): {FIXES[LIST]}" in tail_text


# -- tensors kept without a graph: the container to bound or clear is named ----------------
NO_GRAPH = "the kept tensors are already detached, so .detach() changes nothing: "
METRICS_TAIL = (
    "and for metrics keep a fixed-size state (binned thresholds instead of every "
    "prediction; compute() and reset() each epoch)"
)


@pytest.mark.parametrize(
    ("line", "chain", "fix"),
    [
        (
            'state["losses"].append(loss.detach())',
            LOSSES,
            NO_GRAPH + 'store loss.item() instead, or bound or clear state["losses"] '
            '(collections.deque(maxlen=N), or state["losses"].clear() at the end of each '
            "epoch), " + METRICS_TAIL,
        ),
        (
            "preds.append(logits.detach().cpu())",
            ["local 'preds'", "list(len=24)", MATRIX],
            NO_GRAPH + "bound or clear preds (collections.deque(maxlen=N), or preds.clear() at "
            "the end of each epoch), " + METRICS_TAIL,
        ),
        (
            "loop.outputs.append(output)",
            ["self", "Loop.outputs", "list(len=24)", "dict['prediction']", MATRIX],
            NO_GRAPH + "bound or clear loop.outputs (collections.deque(maxlen=N), or "
            "loop.outputs.clear() at the end of each epoch), " + METRICS_TAIL,
        ),
        (
            "state.auroc.update(probs.detach(), labels)",
            ["x", "BinaryAUROC.preds", "list(len=24)", MATRIX],
            "",
        ),  # a call into a library: the table's wording
        ("preds.append(logits.detach())", ["local 'box'", "Box.x", MATRIX], ""),
    ],
)
def test_kept_without_graph_names_the_container_to_bound(
    line: str, chain: list[str], fix: str
) -> None:
    assert kept_fix(LIST, line, chain) == fix
    assert kept_fix(RETAINED, line, chain) == ""


@pytest.mark.parametrize("backend", ["torch", "minigrad"])
def test_check_names_the_container_of_detached_tensors(backend: str) -> None:
    model = _Model(backend)

    def keep_detached() -> None:
        loss = model.forward()
        model.history.append(loss.detach())

    result = check(keep_detached, steps=8, warmup=2)
    assert result.diagnosis is not None and result.diagnosis.story, result.diagnosis
    assert result.diagnosis.kept_without_graph
    _agree(
        result,
        LIST,
        NO_GRAPH + "store loss.item() instead, or bound or clear model.history "
        "(collections.deque(maxlen=N), or model.history.clear() at the end of each epoch), "
        + METRICS_TAIL,
    )


def test_a_loop_names_the_container_of_detached_tensors_seen_in_its_next_step() -> None:
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(4, 1)
    preds = []
    with track(warmup=2, steps=8) as t:
        for _ in range(12):
            out = net(torch.randn(2, 4))
            preds.append(out.detach())
            t.step()
    assert t.result is not None and t.result.diagnosis is not None
    assert t.result.diagnosis.kept_without_graph and t.result.diagnosis.story
    _agree(
        t.result,
        LIST,
        NO_GRAPH + "bound or clear preds (collections.deque(maxlen=N), or preds.clear() at "
        "the end of each epoch), " + METRICS_TAIL,
    )


def test_reword_fix_reads_the_graph_flag_not_the_story() -> None:
    # The outlive audit's story is never "" and its tensors carry a graph: the fix is the
    # graph one. The flag, set where the diagnosis is made, decides; the story does not.
    def diagnosis(*, story: str, bare: bool) -> Diagnosis:
        stored = [CreationSite("train.py", 3, "preds.append(out)", 1)]
        chain = ["global 'preds'", "list(len=24)", MATRIX]
        return Diagnosis(
            LIST, chain=chain, stored_at=stored, story=story, fix="usual", kept_without_graph=bare
        )

    told = diagnosis(story="the test put a graph-carrying tensor into a container", bare=False)
    reword_fix(told)
    assert told.fix == (
        "store out.detach() instead of out, so that preds keeps no graph: "
        "preds.append(out.detach())"
    )
    bare = diagnosis(story="", bare=True)
    reword_fix(bare)
    assert bare.fix.startswith(NO_GRAPH + "bound or clear preds ")
    none = Diagnosis(LIST, fix="usual")  # no stored-at line and no chain: the usual fix
    reword_fix(none)
    assert none.fix == FIXES[LIST]
    assert (
        CheckResult.from_dict(
            CheckResult("t", 0, 0, {}, {}, Verdict(leaked=True), diagnosis=bare).to_dict()
        ).diagnosis
        == bare
    )


# -- a statement over several lines: the whole statement is read from the file -------------
def test_a_statement_over_several_lines_is_read_whole(tmp_path: Any) -> None:
    source = tmp_path / "train.py"
    lines = ["def step(kept, out):", "    kept.append(", "        out", "    )", "    total = 1"]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert statement_text(str(source), 2) == "kept.append(out)"
    assert statement_text(str(source), 3) == "kept.append(out)"  # a continuation line
    assert statement_text(str(source), 5) == ""  # whole on its line: its text as written
    assert statement_text(str(source), 1) == ""  # a def line: no simple statement
    assert statement_text(str(tmp_path / "gone.py"), 2) == ""


def test_check_words_the_fix_of_an_append_written_over_three_lines() -> None:
    model = _Model("torch")

    def keep() -> None:
        logits = model.forward()
        # the append written over three lines is what this test is about: kept as it is
        # fmt: off
        model.history.append(
            logits
        )
        # fmt: on

    result = check(keep, steps=8, warmup=2)
    assert result.diagnosis is not None
    assert [site.line for site in result.diagnosis.stored_at] == ["model.history.append("]
    _agree(
        result,
        LIST,
        "store logits.item() (a plain number) instead of logits, so that model.history keeps "
        "no graph: model.history.append(logits.item())",
    )


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (
            "preds = torch.cat([preds, out.detach()])",
            "preds is rebuilt bigger every step (torch.cat of itself and out.detach()), so it "
            "keeps every step's output: update running metrics (counts, sums) from out step by "
            "step instead, or bound preds (keep its last rows)",
        ),
        (
            "loop.preds_host = logits if loop.preds_host is None else "
            "torch.cat((loop.preds_host, logits), dim=0)",
            "loop.preds_host is rebuilt bigger every step (torch.cat of itself and logits)",
        ),
        (
            "self.rows = np.concatenate([self.rows, batch])",
            "self.rows is rebuilt bigger every step (np.concatenate of itself and batch)",
        ),
        ("preds = torch.cat([preds, a, b])", ""),  # two added: which is the step's output?
        ("preds = torch.cat([old, out])", ""),  # not rebuilt from itself
        ("preds.append(out)", ""),
        ("preds = torch.cat([preds,", ""),  # cut off inside the statement
    ],
)
def test_a_memory_growth_fix_is_worded_for_the_line_that_rebuilds_the_buffer(
    line: str, words: str
) -> None:
    fix = growth_fix(line)
    assert fix.startswith(words) if words else fix == ""
    diagnosis = Diagnosis(
        "memory-growth", fix=FIXES["memory-growth"], sites=[CreationSite("f.py", 1, line, 1)]
    )
    reword_fix(diagnosis)  # from created at when no stored-at line is known
    assert diagnosis.fix == (fix or FIXES["memory-growth"])


# -- the user's own names: extend, the holder of the chain, a later backward (issue 34) --
ROWS = [
    "fixture 'st'",
    "dict['rows']",
    "list(len=48)",
    "Tensor(shape=(3,), grad_fn=UnbindBackward0)",
]


def test_an_extend_of_a_split_tensor_splits_the_detached_tensor() -> None:
    assert stored_fix(LIST, 'st["rows"].extend(out.unbind(0))', ROWS) == (
        'store out.detach().unbind(0) instead of out.unbind(0), so that st["rows"] keeps no '
        'graph: st["rows"].extend(out.detach().unbind(0))'
    )
    assert stored_fix(LIST, "rows.extend(model(x).split(2))", None) == (
        "store model(x).detach().split(2) instead of model(x).split(2), so that rows keeps "
        "no graph: rows.extend(model(x).detach().split(2))"
    )
    assert stored_fix(LIST, "rows.extend(out.detach().unbind(0))", None) == ""  # cut already
    assert stored_fix(LIST, "rows.extend(batch)", None) == ""  # what it holds is not known


@pytest.mark.parametrize(
    ("chain", "holder"),
    [
        (ROWS, "st['rows']"),
        (["global 'tests.test_x.HISTORY'", "list(len=5)", "Tensor(shape=())"], "HISTORY"),
        (["self", "Trainer.history", "deque(len=3)", "Tensor(shape=())"], "self.history"),
        (["self", "Model.total", "Tensor(shape=(), grad_fn=AddBackward0)"], "self.total"),
        (["local 'cache'", "dict[3]", "Tensor(shape=(2,))"], "cache"),
        (["fixture 'state' (session scope)", "dict['total']", "Tensor(shape=())"], "state"),
        (["unknown root", "list(len=3)", "Tensor(shape=())"], ""),
        (["function step closure 'kept'", "list(len=3)", "Tensor(shape=())"], ""),
    ],
)
def test_the_usual_fix_names_the_chains_holder_and_no_invented_variable(
    chain: list[str], holder: str
) -> None:
    assert holder_text(links(chain) or []) == holder
    fix = usual_fix(LIST, links(chain) or [])
    assert fix == (
        f"store plain numbers (.item()) or detached tensors (.detach()) in {holder}, not "
        "graph-carrying tensors"
        if holder
        else ""
    )
    assert "loss" not in FIXES[LIST] + FIXES[RETAINED]
    diagnosis = Diagnosis(LIST, chain=chain)  # no stored-at line: the audit without re-run
    reword_fix(diagnosis)
    assert diagnosis.fix == (fix or FIXES[LIST])


def test_a_running_totals_usual_fix_names_the_entry_that_keeps_it() -> None:
    chain = ["fixture 'state' (session scope)", "dict['total']", "Tensor(shape=())"]
    assert usual_fix(RETAINED, links(chain) or []) == (
        "cut the graph that state['total'] keeps, each step: update it with .item() or "
        ".detach() values, detach it once per step if it is carried state (or "
        "unchain_backward()), or update it under no_grad()"
    )


def test_a_step_that_extends_with_a_split_tensor_gets_the_fix_in_its_own_words() -> None:
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 3)
    st: dict[str, list[Any]] = {"rows": []}

    def step() -> None:
        out = lin(torch.randn(2, 4))
        out.sum().backward()
        st["rows"].extend(out.unbind(0))

    result = check(step, steps=8, warmup=2)
    _agree(
        result,
        LIST,
        'store out.detach().unbind(0) instead of out.unbind(0), so that st["rows"] keeps '
        'no graph: st["rows"].extend(out.detach().unbind(0))',
    )
    assert result.diagnosis is not None
    assert [s.line for s in result.diagnosis.stored_at] == ['st["rows"].extend(out.unbind(0))']


def _deferred_fix(holder: str, lineno: int, line: str, *, bound: bool) -> str:
    return (
        f"the tensors in {holder} are used with their graphs by a later backward (line "
        f"{lineno}: {line}), so .item() or .detach() here would break it: clear {holder} "
        f"right after that backward ({holder}.clear()), so that it keeps only what the "
        "next backward needs" + (", or bound it with collections.deque(maxlen=N)" * bound)
    )


def test_a_list_read_by_a_later_backward_is_cleared_after_it_never_item() -> None:
    """fix_item_breaks_deferred_backward: ``.item()`` here crashes the 4th step."""
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 1)
    st: dict[str, list[Any]] = {"pending": []}

    def step(clear: bool = False) -> None:
        loss = lin(torch.randn(2, 4)).pow(2).mean()
        st["pending"].append(loss)
        if len(st["pending"]) % 4 == 0:
            torch.stack(st["pending"][-4:]).mean().backward()
            if clear:
                st["pending"].clear()

    result = check(step, steps=12, warmup=3)
    backward_line = step.__code__.co_firstlineno + 4
    fix = _deferred_fix(
        'st["pending"]',
        backward_line,
        'torch.stack(st["pending"][-4:]).mean().backward()',
        bound=False,
    )
    _agree(result, LIST, fix)  # a slice is read: a deque would break it, so not offered
    assert result.diagnosis is not None
    assert result.diagnosis.chain[-2].startswith("list(len=")
    assert [s.line for s in result.diagnosis.stored_at] == ['st["pending"].append(loss)']
    st["pending"].clear()
    assert not check(lambda: step(clear=True), steps=12, warmup=3).leaked  # the fix holds


def test_a_minigrad_list_summed_into_a_later_backward_is_cleared_after_it() -> None:
    w = mg.Tensor([1.0, 2.0], requires_grad=True)
    pending: list[Any] = []

    def step() -> None:
        loss = (w * 3.0).sum()
        pending.append(loss)
        if len(pending) % 2 == 0:
            total = pending[-1] + pending[-2]
            total.backward()

    result = check(step, steps=12, warmup=3)
    fix = _deferred_fix(
        "pending", step.__code__.co_firstlineno + 5, "total.backward()", bound=True
    )  # (no slice is read: a deque would do)
    _agree(result, LIST, fix)


DEFERRED = """
import pytest, torch
M = torch.nn.Linear(4, 1)

@pytest.fixture
def st():
    return {"pending": [], "opt": torch.optim.SGD(M.parameters(), lr=0.01)}

@pytest.mark.no_graph_growth
def test_deferred_backward(st):
    loss = M(torch.randn(2, 4)).pow(2).mean()
    st["pending"].append(loss)
    if len(st["pending"]) % 4 == 0:
        torch.stack(st["pending"][-4:]).mean().backward()
        st["opt"].step(); st["opt"].zero_grad()
"""


def test_the_deferred_backward_repro_under_pytest(pytester: pytest.Pytester) -> None:
    """shared/repros/round4/fix_item_breaks_deferred_backward, and its fix applied."""
    pytest.importorskip("torch")
    fixed = DEFERRED.replace(".backward()\n", '.backward()\n        st["pending"].clear()\n')
    # A subprocess: an in-process run drops the torch modules it imported first
    # (optimizer.step() imports torch._dynamo), and the next test to import them again
    # fails. The third file keeps a graph in a module list: the outlive audit, without
    # its re-run, has no stored-at line and words the fix with the chain's holder, ``H``.
    keep = "import torch\nM = torch.nn.Linear(4, 1)\nH = []\n\n\ndef test_keep():\n"
    keep += "    H.append(M(torch.randn(2, 4)).sum())\n"
    pytester.makepyfile(test_deferred=DEFERRED, test_deferred_fixed=fixed, test_keep=keep)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--graphleak")
    result.assert_outcomes(failed=1, passed=2)  # the fixed twin passes; the audit warns
    out = result.stdout.str()
    fix = _deferred_fix(
        'st["pending"]', 13, 'torch.stack(st["pending"][-4:]).mean().backward()', bound=False
    )
    for line in (
        "graphleak: test_deferred.py::test_deferred_backward leaks: list-accumulation",
        "  held by: fixture 'st' -> dict['pending'] -> list(len=24) -> "
        "Tensor(shape=(), grad_fn=MeanBackward0)",
        '  stored at: test_deferred.py:11 in test_deferred_backward: st["pending"].append(loss)'
        "  (once per step)",
        f"  fix (not verified): {fix}",
        "    held by: global 'test_keep.H' -> list(len=1) -> "
        "Tensor(shape=(), grad_fn=SumBackward0)",
        "    fix (not verified): store plain numbers (.item()) or detached tensors (.detach()) "
        "in H, not graph-carrying tensors",
    ):
        # the failure text wraps at 80 columns: compared with its whitespace folded
        assert " ".join(line.split()) in " ".join(out.split()), line
    assert "append(loss.item())" not in result.stdout.str()


def test_a_kept_object_whose_attribute_carries_the_graph_is_named_with_it() -> None:
    """A trace or a distribution in a growing list (issue 34): the chain shows which
    attribute carries the graph, and the fix names it, not an invented ``loss``."""
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 2)

    class Trace:
        def __init__(self, out: Any) -> None:
            self.out = out

    traces: list[Any] = []
    dists: list[Any] = []

    def keep_trace() -> None:
        tr = Trace(lin(torch.randn(3, 4)))
        traces.append(tr)

    def keep_distribution() -> None:
        out = lin(torch.randn(3, 4))
        dists.append(torch.distributions.Normal(out, 1.0))

    trace = check(keep_trace, steps=8, warmup=2)
    _agree(
        trace,
        LIST,
        "traces keeps each Trace with the graph that its .out carries: keep "
        "tr.out.detach() instead of tr, or detach tr.out before it is stored" + PILED_UP,
    )
    dist = check(keep_distribution, steps=8, warmup=2)
    _agree(
        dist,
        LIST,
        "dists keeps each Normal with the graph that its .loc carries: build it from "
        "detached tensors (.detach()), or keep only detached tensors taken from it" + PILED_UP,
    )  # Normal(out.detach(), 1.0) was tried: the list still grew
    for result, link, line in (
        (trace, "Trace.out", "traces.append(tr)"),
        (dist, "Normal.loc", "dists.append(torch.distributions.Normal(out, 1.0))"),
    ):
        assert result.diagnosis is not None
        assert result.diagnosis.chain[1:3] == [result.diagnosis.chain[1], link]
        assert result.diagnosis.chain[1].startswith("list(len=")
        assert [s.line for s in result.diagnosis.stored_at] == [line]


def test_a_loop_whose_backward_comes_before_the_store_in_its_body() -> None:
    """The backward at the top of the loop body runs after the store, in the next turn;
    the loop's own next step finds the stored line (``track()``)."""
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 1)
    pending: list[Any] = []
    with track(warmup=2, steps=12) as t:
        for step in range(20):
            if step % 4 == 3:
                torch.stack(pending[-3:]).mean().backward()
            loss = lin(torch.randn(2, 4)).pow(2).mean()
            pending.append(loss)
            t.step()
    assert t.result is not None
    first = test_a_loop_whose_backward_comes_before_the_store_in_its_body.__code__.co_firstlineno
    _agree(
        t.result,
        LIST,
        _deferred_fix(
            "pending", first + 9, "torch.stack(pending[-3:]).mean().backward()", bound=False
        ),
    )


def test_a_number_taken_from_the_container_feeds_no_backward(tmp_path: Any) -> None:
    """``n = len(pending)`` then ``(loss / n).backward()``: the backward runs through
    ``loss``, not through the kept tensors, so ``.item()`` on the stored line is right."""
    from pytest_graphleak.words.lines import deferred_fix

    source = tmp_path / "steps.py"
    source.write_text(
        "def step():\n"
        "    loss = model(x)\n"
        "    pending.append(loss)\n"
        "    n = len(pending)\n"
        "    print(torch.stack(pending).mean().item())\n"
        "    (loss / n).backward()\n"
    )
    site = CreationSite(str(source), 3, "pending.append(loss)", 1)
    chain = ["local 'pending'", "list(len=3)", SCALAR]
    assert deferred_fix(LIST, site, "pending.append(loss)", links(chain) or []) == ""
    assert fix_of_line(site, chain).startswith("store loss.item() (a plain number)")


def fix_of_line(site: CreationSite, chain: list[str]) -> str:
    from pytest_graphleak.words.lines import fix_for_stored

    return fix_for_stored(LIST, [site], links(chain) or [])


def test_a_kept_object_is_worded_with_the_path_to_its_tensor() -> None:
    """The typed chain gives the path from the kept object to the tensor, however deep."""
    chain = ["local 'rollouts'", "list(len=3)", "Rollout.data", "dict['obs']", MATRIX]
    assert stored_fix(LIST, "rollouts.append(r)", chain) == (
        "rollouts keeps each Rollout with the graph that its .data['obs'] carries: keep "
        "r.data['obs'].detach() instead of r, or detach r.data['obs'] before it is stored"
    )


HELPERS = """
class Accumulator:
    def step(self):
        loss = self.model(x)
        self.pending.append(loss)
        if len(self.pending) == 4:
            self.flush()

    def flush(self):
        torch.stack(self.pending).mean().backward()
        self.optimizer.step()

    def log(self):
        print(len(self.pending), self.pending[-1].item())


def step(st):
    loss = model(x)
    st["pending"].append(loss)
    if len(st["pending"]) % 4 == 0:
        flush(st, scale=0.5)


def flush(state, scale):
    total = torch.stack(state["pending"][-4:]).mean() * scale
    total.backward()


def logged(st):
    loss = model(x)
    st["pending"].append(loss)
    show(st)


def show(state):
    print(sum(x.item() for x in state["pending"]))
"""


def test_a_backward_in_a_helper_the_step_calls_is_seen(tmp_path: Any) -> None:
    """Issue 34: ``self.flush()`` (a method of the same class) or ``flush(st)`` (a
    function of the module) that runs the backward through the container: one level of
    calls is read, the container renamed as the helper names it. A helper that only reads
    numbers from it feeds no backward: ``.item()`` stays the fix there."""
    from pytest_graphleak.words.lines import deferred_fix

    source = tmp_path / "helpers.py"
    source.write_text(HELPERS)
    method = CreationSite(str(source), 5, "self.pending.append(loss)", 1)
    chain = ["local 'self'", "Accumulator.pending", "list(len=3)", SCALAR]
    assert deferred_fix(LIST, method, method.line, links(chain) or []) == _deferred_fix(
        "self.pending", 10, "torch.stack(self.pending).mean().backward() in flush()", bound=True
    )
    function = CreationSite(str(source), 19, 'st["pending"].append(loss)', 1)
    chain = ["local 'st'", "dict['pending']", "list(len=3)", SCALAR]
    assert deferred_fix(LIST, function, function.line, links(chain) or []) == _deferred_fix(
        'st["pending"]', 26, "total.backward() in flush()", bound=False
    )  # a slice is read
    only_numbers = CreationSite(str(source), 31, 'st["pending"].append(loss)', 1)
    assert deferred_fix(LIST, only_numbers, only_numbers.line, links(chain) or []) == ""


def test_a_step_whose_helper_runs_the_deferred_backward_gets_the_clear_fix() -> None:
    torch = pytest.importorskip("torch")

    class Accumulator:
        def __init__(self) -> None:
            self.model = torch.nn.Linear(4, 1)
            self.pending: list[Any] = []

        def step(self) -> None:
            loss = self.model(torch.randn(2, 4)).pow(2).mean()
            self.pending.append(loss)
            if len(self.pending) % 4 == 0:
                self.flush()

        def flush(self) -> None:
            torch.stack(self.pending[-4:]).mean().backward()

    acc = Accumulator()
    result = check(acc.step, steps=12, warmup=3)
    first = Accumulator.flush.__code__.co_firstlineno
    _agree(
        result,
        LIST,
        _deferred_fix(
            "self.pending",
            first + 1,
            "torch.stack(self.pending[-4:]).mean().backward() in flush()",
            bound=False,
        ),
    )
