"""``graphleak report`` validates a document against ``schema.json`` with its own small
validator: every document the plugin and ``graphleak check`` write passes it, and on
documents changed field by field it agrees with the reference implementation
(``jsonschema``, a dev dependency)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from suite_helpers import REPO, JsonDoc

from pytest_graphleak.report.json_doc import load_schema
from pytest_graphleak.report.validate import SchemaError, validate

SUITE = """
import pytest
import minigrad as mg

KEPT = []
CALLS = [0]

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_leaky():
    KEPT.append(mg.Tensor([1.0, 2.0], requires_grad=True).sum())

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_clean():
    (mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum().backward()

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_raises():
    CALLS[0] += 1
    if CALLS[0] == 4:
        raise ValueError("bad batch")

@pytest.mark.xfail(reason="known leak")
@pytest.mark.no_graph_growth(steps=8, warmup=2, diagnose=False)
def test_known_leak():
    KEPT.append(mg.Tensor([3.0], requires_grad=True) * 2)

def test_fixture_checks(graphleak):
    graphleak.check(lambda: None, steps=6, warmup=1)
    with graphleak.track(warmup=1) as t:
        for _ in range(8):
            t.step()
"""


@pytest.fixture(scope="module")
def written_documents(tmp_path_factory: pytest.TempPathFactory) -> list[JsonDoc]:
    """Reports as the tools write them: a pytest session and two graphleak check runs."""
    work = tmp_path_factory.mktemp("reports")
    (work / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "--graphleak",
            "--graphleak-report=session.json",
            "test_suite.py",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    (work / "steps.py").write_text("KEPT = []\n\ndef leaky():\n    KEPT.append([0] * 100000)\n")
    (work / "exits.py").write_text("import sys\nsys.exit(3)\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_graphleak",
            "check",
            "steps.py::leaky",
            "exits.py::f",
            "--steps",
            "6",
            "--json",
            "check.json",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    documents = [json.loads((work / name).read_text()) for name in ("session.json", "check.json")]
    statuses = {t["status"] for d in documents for t in d["tests"]}
    assert {"leaked", "clean", "error", "xfailed"} <= statuses, statuses
    return documents


def test_every_written_document_is_valid(written_documents: list[JsonDoc]) -> None:
    schema = load_schema()
    for document in written_documents:
        validate(document, schema)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value[:1]):  # the first item of each list is enough
            yield from _leaves(item, (*path, index))
    else:
        yield path


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    changed = copy.deepcopy(document)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def _changed_in_place(
    document: Any, path: tuple[Any, ...], values: tuple[Any, ...]
) -> Iterator[Any]:
    """``document`` with the field at ``path`` set to each value in turn, then restored
    (no copy per change: the documents are large)."""
    node = document
    for key in path[:-1]:
        node = node[key]
    original = node[path[-1]]
    try:
        for value in values:
            node[path[-1]] = value
            yield document
    finally:
        node[path[-1]] = original


def test_agrees_with_jsonschema_on_every_changed_field(
    written_documents: list[JsonDoc],
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = load_schema()
    reference = jsonschema.Draft202012Validator(schema)
    compared = rejected = 0
    for document in written_documents:
        for path in _leaves(document):
            if not path:
                continue
            for changed in _changed_in_place(document, path, ("x", None, -1, 1.5, True, {})):
                expected = reference.is_valid(changed)
                try:
                    validate(changed, schema)
                    ours = True
                except SchemaError:
                    ours = False
                assert ours == expected, (path, _value_at(changed, path))
                compared += 1
                rejected += not expected
    assert compared > 500 and rejected > 200, (compared, rejected)


def _value_at(document: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def test_an_error_names_the_field(written_documents: list[JsonDoc]) -> None:
    document = written_documents[0]
    changed = _set(document, ("tests", 1, "checks", 0, "steps"), "many")
    with pytest.raises(SchemaError) as caught:
        validate(changed, load_schema())
    assert caught.value.field == "tests[1].checks[0].steps"
    assert str(caught.value) == "tests[1].checks[0].steps: expected integer, got string 'many'"


def test_a_schema_keyword_it_cannot_check_is_an_error() -> None:
    with pytest.raises(SchemaError, match=r"\['pattern'\], which this reader lacks"):
        validate("abc", {"type": "string", "pattern": "^a"})
