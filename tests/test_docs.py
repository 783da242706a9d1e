"""The documentation site's generated pages build from their sources (the whole site is
built by ``mkdocs build --strict`` in .ci/run; these checks are the fast part of it)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from types import ModuleType

import pytest
from suite_helpers import REPO


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("_docs_hooks", REPO / "docs/hooks/generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_options_page_lists_every_declared_option(hooks: ModuleType) -> None:
    from pytest_graphleak.options import OPTIONS

    page = hooks.options_page()
    for option in OPTIONS:
        assert f"## `{option.key}`" in page and f"`{option.ini}`" in page
    assert "Precedence: marker" in page
    # Every flag is one unbreakable unit (extra.css: code.flag), never split at a hyphen.
    assert '<code class="flag">graphleak check --rss-tolerance</code>' in page
    assert '<code class="flag">--graphleak-rss-tolerance=SIZE</code>' in page
    assert not re.search(r"`--", page)  # no flag left as a plain code span
    css = (REPO / "docs/stylesheets/extra.css").read_text(encoding="utf-8")
    assert re.search(r"code\.flag \{\s*white-space: nowrap;", css)


def test_json_page_lists_every_schema_property(hooks: ModuleType) -> None:
    schema = json.loads((REPO / "pytest_graphleak/report/schema.json").read_text())
    page = hooks.json_page()
    for name in schema["properties"]:
        assert f"| `{name}` |" in page
    for name in schema["$defs"]["check"]["properties"]:
        assert f"| `tests[].checks[].{name}` |" in page


def test_cli_help_and_minigrad_names(hooks: ModuleType) -> None:
    help_text = hooks.cli_help()
    for command in ("demo", "check", "report"):
        assert f"### `graphleak {command} --help`" in help_text
    assert "| `mg.Tensor` |" in hooks.minigrad_names()


def test_every_nav_page_exists_or_is_generated_or_left_out_on_purpose() -> None:
    """The nav names pages other helpers write (diagnosis, limits, integrations, cost):
    the hook leaves a missing one out; every other page must exist."""
    generated = {"options.md", "json-report.md", "catalogue.md"}
    optional = {
        "integrations/index.md",
        "integrations/lightning.md",
        "limits.md",
        "integrations/transformers.md",
        "integrations/ignite.md",
        "cost.md",
        "diagnosis.md",
    }
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    pages = [line.rsplit(": ", 1)[1].strip() for line in nav.splitlines() if ".md" in line]
    missing = [p for p in pages if not (REPO / "docs" / p).exists()]
    assert set(missing) <= generated | optional, missing


def test_every_field_of_the_json_report_is_described(hooks: ModuleType) -> None:
    """The JSON report page is generated from schema.json: a field added without a
    description would show up there with an empty meaning."""
    undescribed = [
        line.split(" | ")[0].strip("| ")
        for line in hooks.json_page().splitlines()
        if line.startswith("| `") and line.rstrip().endswith(("|  |", "| (optional) |"))
    ]
    assert not undescribed, f"schema.json fields without a description: {undescribed}"


def test_outputs_compare_without_their_durations(hooks: ModuleType) -> None:
    """The build warns when README's example output is stale; a rerun that differs only
    in durations (and the banner padding that follows them) is the same output."""
    one = (
        "== FAILURES ==\n  16 steps (0.36 s); grew:\n  note: diagnosis took 0.04 s\n"
        "== 1 failed in 14.53s =="
    )
    two = (
        "= FAILURES =\n  16 steps (0.44 s); grew:\n  note: diagnosis took 0.06 s\n"
        "=== 1 failed in 9.1s ==="
    )
    assert hooks.comparable(one) == hooks.comparable(two)
    assert hooks.comparable(one) != hooks.comparable(one.replace("16 steps", "17 steps"))
    link = "[owner/repo#12](https://github.com/owner/repo/issues/12)"
    assert hooks._source_link("owner/repo#12") == link
    assert hooks._source_link("seed engine (issue 2)") == "seed engine (issue 2)"
    assert hooks._code_cell("--x=a|b") == "<code>--x=a&#124;b</code>"


def test_a_pages_test_failure_is_cut_from_pytests_output(hooks: ModuleType) -> None:
    """`pytest failure` markers show the failure text of a real run: the user's line and
    the report, "..." once per left-out gap (a labelled line with the lines it goes on
    in), nothing past the test's failure."""
    out = "\n".join(
        [
            "t.py F",
            "",
            "=== FAILURES ===",
            "___ test_x ___",
            "t.py:9: in test_x",
            "    trainer.fit()",
            "graphleak: t.py::test_x leaks: lists",
            "  16 measured steps after 3 warmup steps (0.1 s); grew:",
            "    torch.nodes  14 -> 59  +3/step",
            "  held by: trainer -> T.losses -> list(len=19) ->",
            "           Tensor(shape=())",
            "  created at: t.py:5 in step: loss = f(x)  (2 per step)",
            "  note: diagnosis took 0.01 s",
            "--- rank 0 ---",
            "  fix: store plain numbers",
            "--- Captured stderr call ---",
            "noise",
            "___ test_y ___",
            "graphleak: t.py::test_y leaks: lists",
            "  held by: another test",
        ]
    )
    where = ["t.py:9: in test_x", "    trainer.fit()"]
    assert hooks.failure_lines(out, "short") == [
        *where,
        "graphleak: t.py::test_x leaks: lists",
        "  ...",
        "  held by: trainer -> T.losses -> list(len=19) ->",
        "           Tensor(shape=())",
        "  created at: t.py:5 in step: loss = f(x)  (2 per step)",
        "  ...",
        "--- rank 0 ---",
        "  ...",
    ]
    full = hooks.failure_lines(out, "full")
    assert full[:3] == [*where, "graphleak: t.py::test_x leaks: lists"]
    assert full[-1] == "  fix: store plain numbers" and len(full) == 11
    assert hooks.failure_lines(out, "sites") == [
        "held by: trainer -> T.losses -> list(len=19) ->",
        "         Tensor(shape=())",
        "created at: t.py:5 in step: loss = f(x)  (2 per step)",
    ]
    assert hooks.failure_lines("1 passed", "full") == []


def test_a_marked_tests_failure_text_is_cut_from_the_failures_section(hooks: ModuleType) -> None:
    out = "\n".join(
        [
            "test_lazy.py F",
            "",
            "=== FAILURES ===",
            "___ test_step ___",
            "graphleak: test_lazy.py::test_step: not measured, so no verdict: no probe measured",
            "  note: more",
            "=== graphleak report ===",
            "graphleak: 1 checked: 1 unmeasured",
        ]
    )
    assert hooks.marker_failure_lines(out) == [
        "graphleak: test_lazy.py::test_step: not measured, so no verdict: no probe measured",
        "  note: more",
    ]
    assert hooks.marker_failure_lines("graphleak: 1 checked: 1 clean\n1 passed") == []


def test_a_pages_outlive_warning_is_cut_from_the_warnings_summary(hooks: ModuleType) -> None:
    source = "history = []\n\ndef test_one_step():\n    history.append(loss)\n"
    out = "\n".join(
        [
            "tests/test_train.py::test_one_step",
            "  /tmp/x/tests/test_train.py:3: GraphOutliveWarning: graphleak: t left graphs "
            "(outlive)",
            "    held by: global 'test_train.history' -> list(len=1)",
            "    def test_one_step():",
            "",
            "-- Docs: https://docs.pytest.org",
        ]
    )
    assert hooks.outlive_lines(out, source) == [
        "GraphOutliveWarning: graphleak: t left graphs (outlive)",
        "  held by: global 'test_train.history' -> list(len=1)",
    ]
    assert hooks.outlive_lines("1 passed", source) == []


def test_a_catalogue_text_is_what_pytest_prints_without_v(hooks: ModuleType) -> None:
    """The docs show a failure text under "pytest --graphleak ...": no series block (only
    -v prints it) and 80 columns, as pytest's own output."""
    from pytest_graphleak.result import CheckResult, Diagnosis, Growth, Verdict

    chain = [
        "fixture 'state'",
        "dict['losses']",
        "list(len=24)",
        "Tensor(shape=(), grad_fn=MeanBackward0)",
    ]
    check = CheckResult(
        name="examples/x.py::test_leaky",
        steps=16,
        warmup=3,
        series={"minigrad.tensors": [float(i) for i in range(19)]},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(
            True, [Growth("minigrad.tensors", 3.0, 18.0, 1.0)], "list-accumulation", "grew"
        ),
        diagnosis=Diagnosis("list-accumulation", chain=chain),
    ).to_dict()
    text = hooks.failure_text(check)
    lines = text.splitlines()
    assert lines[0] == "graphleak: examples/x.py::test_leaky leaks: list-accumulation"
    assert "series (" not in text and "held by: fixture 'state'" in text
    assert max(len(line) for line in lines) <= 80  # the headline too


def test_the_readme_output_fits_80_columns_and_a_stacked_table_names_its_columns(
    hooks: ModuleType,
) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- example:output -->\n```text\n(.*?)\n```", readme, re.S)
    assert block is not None
    assert max(len(line) for line in block.group(1).splitlines()) <= 80
    assert "The fix is in the last line" not in readme  # pytest's result line is last
    table = (
        '<div class="stack-table labelled"><table><thead><tr><th></th><th>a</th>'
        "<th><code>b</code></th></tr></thead><tbody><tr><td>counts</td><td>x</td>"
        "<td>y</td></tr></tbody></table>"
    )
    labelled = hooks.on_page_content(table + "</div>", None, None, None)
    assert '<td data-label="">counts</td><td data-label="a">x</td>' in labelled
    assert '<td data-label="b">y</td>' in labelled
    # output blocks keep the terminal's lines and scroll sideways on a phone
    css = (REPO / "docs/stylesheets/extra.css").read_text(encoding="utf-8")
    rule = css[css.index(".md-typeset .output pre > code {") :][:120]
    assert "white-space: pre;" in rule and "overflow-x: auto;" in rule


def test_a_fix_line_is_cut_with_the_lines_it_goes_on_in(hooks: ModuleType) -> None:
    story = [
        "graphleak: t.py::test_keep leaks: list-accumulation",
        "  note: x",
        "  fix (verified: 19 more steps with this change grew nothing): t.py:11:",
        "      losses.append(loss.item())",
        "  kept on purpose? ...",
    ]
    assert hooks.fix_lines(story) == story[2:4]
    assert hooks.fix_lines(story[:2]) == []
