"""The JSON report document: layout, statuses, metrics, schema, stable text, atomic writes."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from suite_helpers import JsonDoc

from pytest_graphleak.drawing import Drawing, DrawingEdge, DrawingNode
from pytest_graphleak.report.dot import drawing_dot
from pytest_graphleak.report.json_doc import (
    CheckedTest,
    build_document,
    dumps,
    load_schema,
    write_text_atomic,
)
from pytest_graphleak.result import CheckResult, CreationSite, Diagnosis, Growth, Verdict


def leaky_check(name: str = "t.py::test_leak", warmup: int = 2, steps: int = 5) -> JsonDoc:
    calls = warmup + steps
    return CheckResult(
        name=name,
        steps=steps,
        warmup=warmup,
        series={
            "torch.tensors": [float(3 + 2 * i) for i in range(calls)],
            "process.rss_bytes": [1.0e6 + 4096 * i for i in range(calls)],
        },
        units={"torch.tensors": "objects", "process.rss_bytes": "bytes"},
        verdict=Verdict(
            True, [Growth("torch.tensors", 7.0, 15.0, 2.0)], "retained-grad-fn", "nodes grew"
        ),
        diagnosis=Diagnosis(
            "retained-grad-fn",
            chain=["global 'total'", "Tensor(shape=(), grad_fn=AddBackward0)"],
            sites=[CreationSite("t.py", 9, "loss = model(x)", 1, "step", via="lib/m.py:3")],
            drawing=Drawing([DrawingNode("a"), DrawingNode("b")], [DrawingEdge(0, 1)]),
            stored_at=[CreationSite("t.py", 10, "total += loss", 1, "step")],
        ),
        duration_s=0.25,
    ).to_dict()


def clean_check(name: str = "t.py::test_ok") -> JsonDoc:
    return CheckResult(
        name=name,
        steps=4,
        warmup=1,
        series={"minigrad.tensors": [5.0, 6.0, 6.0, 6.0, 6.0]},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(False, reason="steady"),
    ).to_dict()


def error_check() -> JsonDoc:
    return CheckResult(
        name="t.py::test_err",
        steps=4,
        warmup=2,
        series={"minigrad.tensors": [5.0, 6.0]},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(False),
        error="RuntimeError: boom at step 3",
    ).to_dict()


def sample_tests() -> list[CheckedTest]:
    return [
        CheckedTest("t.py::test_leak", "failed", [leaky_check()]),
        CheckedTest("t.py::test_ok", "passed", [clean_check()]),
        CheckedTest("t.py::test_warn", "passed", [leaky_check("t.py::test_warn")]),
        CheckedTest("t.py::test_err", "failed", [error_check()]),
        CheckedTest("t.py::test_both", "failed", [clean_check("a"), leaky_check("b")]),
    ]


def test_statuses_and_summary_counts() -> None:
    statuses = {t.nodeid: t.status for t in sample_tests()}
    assert statuses == {
        "t.py::test_leak": "leaked",
        "t.py::test_ok": "clean",
        "t.py::test_warn": "warned",
        "t.py::test_err": "error",
        "t.py::test_both": "leaked",
    }
    document = build_document(sample_tests(), generated_by="pytest-graphleak test")
    assert document["summary"] == {
        "checked": 5,
        "leaked": 2,
        "warned": 1,
        "xfailed": 0,
        "error": 1,
        "unmeasured": 0,
        "known": 0,
        "clean": 1,
        "audited": 0,
    }
    assert [t["nodeid"] for t in document["tests"]] == sorted(statuses)


def test_document_validates_and_round_trips_through_json() -> None:
    document = build_document(sample_tests(), generated_by="x", warn_only=True, notes=["n"])
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    loaded = json.loads(dumps(document))
    jsonschema.validate(loaded, schema)
    assert loaded == document
    # Every check in the document is still a CheckResult, its drawing's DOT text beside it.
    drawn = 0
    for test in loaded["tests"]:
        for check in test["checks"]:
            result = CheckResult.from_dict(check)
            diagnosis = check.get("diagnosis")
            if diagnosis is not None:
                dot = diagnosis.pop("dot")
                drawing = result.diagnosis.drawing if result.diagnosis else None
                assert dot == (drawing_dot(drawing) if drawing else "")
                drawn += bool(dot)
            assert result.to_dict().items() <= check.items()
    assert drawn >= 1


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("schema",), 2),
        (("tests", 0, "status"), "leaky"),
        (("tests", 0, "checks", 0, "pattern"), "list_accumulation"),
        (("tests", 0, "checks", 0, "units", "torch.tensors"), "tensors"),
        (("summary", "checked"), -1),
        (("tests", 0, "checks", 1, "diagnosis", "stored_at", 0, "lineno"), "10"),
        (("tests", 0, "checks", 1, "diagnosis", "sites", 0, "via"), 3),
        (("tests", 0, "checks", 1, "diagnosis", "story"), None),
    ],
)
def test_schema_rejects_a_wrong_document(path: tuple[Any, ...], value: object) -> None:
    document = json.loads(dumps(build_document(sample_tests(), generated_by="x")))
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, load_schema())


def metric_summary(check: JsonDoc) -> dict[str, JsonDoc]:
    """The ``metrics`` of ``check`` in the document that the report writes."""
    document = build_document([CheckedTest("t.py::t", "failed", [check])], generated_by="test")
    metrics: dict[str, JsonDoc] = document["tests"][0]["checks"][0]["metrics"]
    return metrics


def test_the_documents_metrics_use_the_verdict_for_grown_ones_and_the_slope_otherwise() -> None:
    metrics = metric_summary(leaky_check(warmup=2, steps=5))
    assert metrics["torch.tensors"] == {
        "unit": "objects",
        "start": 7.0,
        "end": 15.0,
        "per_step": 2.0,
        "grew": True,
    }
    rss = metrics["process.rss_bytes"]
    assert (rss["unit"], rss["grew"]) == ("bytes", False)
    assert rss["per_step"] == pytest.approx(4096.0)
    # A step that raised before the measured calls leaves nothing to summarise.
    assert metric_summary(error_check())["minigrad.tensors"]["start"] is None
    assert metric_summary(error_check())["minigrad.tensors"]["per_step"] is None


def test_dumps_is_stable_and_strict() -> None:
    tests = sample_tests()
    text = dumps(build_document(tests, generated_by="x"))
    random.Random(7).shuffle(tests)
    assert dumps(build_document(tests, generated_by="x")) == text
    # The top level indented, one line per test (in node id order), then the closing lines.
    lines = text.splitlines()
    start = lines.index('  "tests": [')
    rows = lines[start + 1 : start + 1 + len(tests)]
    assert [json.loads(row.rstrip(","))["nodeid"] for row in rows] == sorted(
        test.nodeid for test in tests
    )
    assert lines[start + 1 + len(tests) :] == ["  ],", '  "warn_only": false', "}"]
    assert json.loads(dumps(build_document([], generated_by="x")))["tests"] == []
    check = clean_check()
    check["series"]["minigrad.tensors"][2] = math.nan
    odd = dumps(build_document([CheckedTest("t.py::n", "passed", [check])], generated_by="x"))
    assert "NaN" not in odd
    loaded = json.loads(odd)
    assert loaded["tests"][0]["checks"][0]["series"]["minigrad.tensors"][2] is None
    jsonschema.validate(loaded, load_schema())


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_text_atomic(target, "old\n")
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert (target.stat().st_mode & 0o777) == 0o644


def test_atomic_write_failure_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    target.write_text("old\n")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_atomic_write_into_a_missing_directory_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_text_atomic(tmp_path / "missing" / "r.json", "x")
