"""One view of a diagnosis (``report/view.py``): the failure text, the session summary's
lines of a warned check and the HTML page's "what to change" all draw the same lines."""

from __future__ import annotations

import re
from html import unescape

from pytest_graphleak.patterns import FIXES, MEANINGS
from pytest_graphleak.plugin.terminal import detail_lines
from pytest_graphleak.report.html import render_html
from pytest_graphleak.report.json_doc import CheckedTest, build_report
from pytest_graphleak.report.text import render_text
from pytest_graphleak.report.view import LABELS, diagnosis_view, to_change
from pytest_graphleak.result import CheckResult, CreationSite, Diagnosis, Growth, Verdict

SITE = CreationSite("train.py", 12, "kept.append(loss)", 1, "step")
MADE = CreationSite("train.py", 10, "loss = model(x).sum()", 2, "step")


def _leak(**diagnosis: object) -> CheckResult:
    verdict = Verdict(True, [Growth("minigrad.tensors", 3.0, 8.0, 1.0)], "list-accumulation")
    found = Diagnosis("list-accumulation", **diagnosis) if diagnosis else None  # type: ignore[arg-type]
    return CheckResult(
        "t.py::test_step",
        6,
        2,
        {"minigrad.tensors": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"minigrad.tensors": "objects"},
        verdict,
        found,
    )


FULL = _leak(
    chain=["fixture 'state'", "list(len=8)", "Tensor(shape=())"],
    sites=[MADE],
    stored_at=[SITE],
    notes=["a note"],
)


def test_the_view_orders_and_tags_every_line() -> None:
    view = diagnosis_view("list-accumulation", FULL.diagnosis)
    assert [line.kind for line in view] == [
        "pattern",
        "held-by",
        "created-at",
        "stored-at",
        "note",
        "fix",
    ]
    assert [line.plain() for line in view] == [
        f"pattern: list-accumulation ({MEANINGS['list-accumulation']})",
        "held by: fixture 'state' -> list(len=8) -> Tensor(shape=())",
        "created at: train.py:10 in step: loss = model(x).sum()  (2 per step)",
        "stored at: train.py:12 in step: kept.append(loss)  (once per step)",
        "note: a note",
        f"fix: {FIXES['list-accumulation']}",
    ]
    assert set(LABELS) == {line.kind for line in view} | {"cycle"}


def test_every_surface_draws_the_view() -> None:
    check = FULL.to_dict()
    view = diagnosis_view("list-accumulation", FULL.diagnosis)
    text = render_text(FULL)
    assert all(f"  {line.plain()}\n" in text + "\n" for line in view)
    assert detail_lines(FULL) == [
        line.plain() for line in view if line.kind not in ("pattern", "note")
    ]
    page = unescape(
        render_html(
            build_report([CheckedTest("t.py::test_step", "failed", [check])], generated_by="test")
        )
    )
    # break opportunities at separators and an unbroken arrow: no text of their own
    page = re.sub(r"<wbr>|<span class=\"arrow\">(->)</span>", r"\1", page)
    change = page[page.index("what to change") :]
    for line in to_change(view):
        assert f"<dt>{line.label}</dt>" in change and line.text in change, line


def test_without_a_diagnosis_the_pattern_and_its_usual_fix_remain() -> None:
    view = diagnosis_view("cycle", None)
    assert [line.kind for line in view] == ["pattern", "fix"]
    assert view[1].text == FIXES["cycle"]
    assert render_text(_leak()).endswith(f"  fix: {FIXES['list-accumulation']}")


def test_to_change_falls_back_to_the_first_creation_site() -> None:
    found = _leak(sites=[MADE, SITE]).diagnosis
    kinds = [line.kind for line in to_change(diagnosis_view("list-accumulation", found))]
    assert kinds == ["pattern", "created-at", "fix"]


def test_a_line_that_acts_less_often_than_once_a_step_says_so() -> None:
    from collections import Counter

    from pytest_graphleak.diagnose.sites import per_step

    site = ("train.py", 12, "step")
    (rare,) = per_step(Counter({site: 1}), 3)  # once in the 3 steps watched
    (often,) = per_step(Counter({site: 7}), 3)
    assert (rare.count, rare.every) == (1, 3) and (often.count, often.every) == (3, 1)
    found = _leak(sites=[rare], stored_at=[rare]).diagnosis
    details = {line.kind: line.detail for line in diagnosis_view("list-accumulation", found)}
    assert details["created-at"] == "1 in 3 steps" and details["stored-at"] == "once in 3 steps"
