"""The retained graph as plain data (``drawing.Drawing``), drawn as DOT by the reports only.

The diagnosis records what it found as typed nodes and edges; ``report/dot.py`` writes
the Graphviz text (issue 34, item 7: no rendering in ``diagnose/``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.render import drawing
from pytest_graphleak.diagnose.search import shortest_path
from pytest_graphleak.drawing import Drawing, DrawingEdge, DrawingNode
from pytest_graphleak.report.dot import diagnosis_dot, drawing_dot
from pytest_graphleak.report.json_doc import CheckedTest, build_document, dumps, load_schema
from pytest_graphleak.report.validate import validate
from pytest_graphleak.result import CheckResult, Diagnosis, Verdict

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphleak"


def sample() -> Drawing:
    return Drawing(
        nodes=[
            DrawingNode("fixture 'st'", "root"),
            DrawingNode("dict"),
            DrawingNode("list(len=3)"),
            DrawingNode('Tensor(shape=(), grad_fn="x")'),
            DrawingNode("MeanBackward0", "node"),
        ],
        edges=[
            DrawingEdge(0, 1, "root"),
            DrawingEdge(1, 2, "reference", "['rows']"),
            DrawingEdge(2, 3, "reference", ""),
            DrawingEdge(3, 4, "graph"),
        ],
    )


def test_a_drawing_is_written_as_dot_in_the_order_its_edges_reach_its_nodes() -> None:
    assert drawing_dot(sample()) == (
        "digraph graphleak {\n"
        "  rankdir=LR;\n"
        '  node [shape=box, fontname="monospace"];\n'
        '  r0 [label="fixture \'st\'", style=filled, fillcolor="#dde8ff"];\n'
        '  n0 [label="dict"];\n'
        "  r0 -> n0;\n"
        '  n1 [label="list(len=3)"];\n'
        "  n0 -> n1 [label=\"['rows']\"];\n"
        '  n2 [label="Tensor(shape=(), grad_fn=\\"x\\")"];\n'
        '  n1 -> n2 [label=" "];\n'
        '  n3 [label="MeanBackward0", style=filled, fillcolor="#fde2e2", color="#c62828", '
        "penwidth=1.5];\n"
        "  n2 -> n3 [style=dashed];\n"
        "}\n"
    )
    assert drawing_dot(Drawing([DrawingNode("alone")], [])) == (
        "digraph graphleak {\n  rankdir=LR;\n"
        '  node [shape=box, fontname="monospace"];\n  n0 [label="alone"];\n}\n'
    )


class Box:
    pass


def test_the_diagnosis_builds_a_drawing_of_plain_data() -> None:
    rows: list[Any] = [Box(), Box()]
    state = {"rows": rows}
    walker = ObjectEdges([])
    path = shortest_path([("fixture 'st'", state)], lambda o: o is rows[-1], walker)
    assert path is not None
    drawn = drawing(path, None, walker)
    path.clear()
    assert drawn is not None
    assert [(n.label, n.kind) for n in drawn.nodes] == [
        ("fixture 'st'", "root"),
        ("dict(len=1)", "object"),
        ("list(len=2)", "object"),
        ("Box", "object"),
    ]
    assert [(e.source, e.target, e.kind, e.label) for e in drawn.edges] == [
        (0, 1, "root", ""),
        (1, 2, "reference", "['rows']"),
        (2, 3, "reference", "[1]"),
    ]
    assert drawing(None, None, walker) is None


def test_the_document_carries_the_drawing_and_its_dot_text() -> None:
    result = CheckResult(
        name="t",
        steps=3,
        warmup=1,
        series={},
        units={},
        verdict=Verdict(True),
        diagnosis=Diagnosis("list-accumulation", chain=["fixture 'st'"], drawing=sample()),
    )
    data = result.to_dict()
    assert "dot" not in data["diagnosis"]  # the result holds the record, not its rendering
    back = CheckResult.from_dict(json.loads(json.dumps(data)))
    assert back.diagnosis is not None and back.diagnosis.drawing == sample()
    document = build_document([CheckedTest("t.py::t", "failed", [data])], generated_by="x")
    validate(json.loads(dumps(document)), load_schema())  # the reader `graphleak report` uses
    check = json.loads(dumps(document))["tests"][0]["checks"][0]
    assert check["diagnosis"]["dot"] == drawing_dot(sample())
    assert Drawing.from_dict(check["diagnosis"]["drawing"]) == sample()
    # Read back from the document (``graphleak report``): the same drawing, the same text.
    again = CheckResult.from_dict(check).diagnosis
    assert diagnosis_dot(again) == drawing_dot(sample())


def _writes_dot(path: Path) -> list[str]:
    """String constants of ``path`` that are DOT syntax."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and any(w in text for w in ("digraph", "rankdir", "fillcolor")):
            assert isinstance(node, ast.Constant)  # a string constant: an expression
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_only_the_reports_write_dot() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if "report" not in path.parts
        for hit in _writes_dot(path)
    ]
    assert found == []
