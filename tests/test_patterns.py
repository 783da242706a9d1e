"""The patterns table is the one home of the pattern words: the JSON schema, the verdict's
first guess, the help texts and the failure texts all agree with it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pytest_graphleak import patterns
from pytest_graphleak.diagnose.classify import Facts, pattern_of
from pytest_graphleak.metrics import Metric
from pytest_graphleak.result import Diagnosis, Verdict
from pytest_graphleak.verdict import first_pattern
from pytest_graphleak.words.fix import choose_fix, story_of

SCHEMA = Path(patterns.__file__).parent / "report" / "schema.json"


def test_schema_enums_are_the_table_words() -> None:
    defs = json.loads(SCHEMA.read_text(encoding="utf-8"))["$defs"]
    assert defs["pattern_or_null"]["enum"] == [*patterns.PATTERNS, None]
    assert defs["diagnosis"]["properties"]["pattern"]["enum"] == list(patterns.PATTERNS)


def test_every_row_is_complete_and_the_orders_cover_the_words() -> None:
    assert sorted(patterns.GUESS_ORDER) == sorted(patterns.PATTERNS)
    assert patterns.FALLBACK in patterns.PATTERNS
    assert patterns.Pattern.__args__ == patterns.PATTERNS  # type: ignore[attr-defined]
    for row in patterns.TABLE:
        assert row.meaning and row.fix and row.suggested_by and row.told_by, row.word
        assert bool(row.no_graph_meaning) == bool(row.no_graph_fix), row.word
        # tensors kept without a graph: .detach() is never the advice
        assert ".detach()" not in row.no_graph_fix.replace(".detach() changes nothing", "")


@pytest.mark.parametrize("row", patterns.TABLE, ids=lambda row: row.word)
def test_the_verdict_guesses_each_word_from_its_counts(row: patterns.PatternFacts) -> None:
    grown = [Metric(f"p.{counts}", "objects", counts) for counts in row.suggested_by]  # type: ignore[arg-type]
    assert first_pattern(grown) == row.word


def test_the_no_graph_story_and_fix_come_from_the_table() -> None:
    kept = patterns.BY_WORD["list-accumulation"]
    assert story_of("list-accumulation", graph_grew=False, tensors=True, has_chain=True) == (
        kept.no_graph_meaning
    )
    assert "(.item())" in kept.no_graph_fix and "deque(maxlen=N)" in kept.no_graph_fix
    story = story_of("memory-growth", graph_grew=False, tensors=True, has_chain=False)
    assert story.startswith(patterns.BY_WORD["memory-growth"].no_graph_meaning)
    assert story_of("retained-grad-fn", graph_grew=False, tensors=True, has_chain=True) == ""
    bare = Diagnosis("memory-growth", kept_without_graph=True)  # the chooser's no-graph fix
    assert choose_fix(bare) == patterns.BY_WORD["memory-growth"].no_graph_fix
    bare.pattern = "list-accumulation"
    assert choose_fix(bare) == kept.no_graph_fix


def test_the_one_decider_only_gives_table_words() -> None:
    facts = [
        Facts(),
        Facts(cyclic_count=1),
        Facts(has_chain=True, container_grew=True),
        Facts(graph_grew=False),
        Facts(leaked_count=2),
        Facts(memory_only=True),
    ]
    for fact in facts:
        for guess in (*patterns.PATTERNS, None):
            assert pattern_of(Verdict(True, [], guess), fact) in patterns.PATTERNS


def test_marker_help_names_every_word(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    assert f"({patterns.words_text()})" in result.stdout.str().replace("\n", " ")


#: Strings equal to a pattern word that name something else: the ``cycle:`` line of a
#: failure text (a view line's kind) and the DOT graph of a cycle.
_NOT_THE_PATTERN = {
    "report/view.py",
    "report/github.py",
    "report/github_rows.py",
    "report/html_cards.py",
    "report/dot.py",
}


_SCOPES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _docstrings(tree: ast.Module) -> set[int]:
    bodies = [node for node in ast.walk(tree) if isinstance(node, _SCOPES)]
    return {
        id(node.body[0].value)
        for node in bodies
        if node.body and isinstance(node.body[0], ast.Expr)
    }


def test_no_module_but_patterns_spells_a_pattern_word() -> None:
    """Every other module names a word through ``patterns`` (``patterns.CYCLE``...), so a
    word is spelled once and a misspelt one is a name error (issue 46)."""
    package = Path(patterns.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if where == "patterns.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in patterns.PATTERNS
                and id(node) not in docs
            ):
                if node.value == patterns.CYCLE and where in _NOT_THE_PATTERN:
                    continue
                found.append(f"{where}:{node.lineno} {node.value!r}")
    assert found == []
