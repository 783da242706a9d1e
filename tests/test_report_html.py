"""The HTML report, its SVG charts and the DOT drawings, checked with html.parser."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from suite_helpers import JsonDoc

from pytest_graphleak.drawing import Drawing, DrawingEdge, DrawingNode
from pytest_graphleak.engine.coverage import add_probe_fix
from pytest_graphleak.metrics import format_amount, format_rate
from pytest_graphleak.report import dot as dot_mod
from pytest_graphleak.report.dot import (
    chain_to_dot,
    cycle_to_dot,
    diagnosis_dot,
    drawing_dot,
    quote,
    render_svg,
)
from pytest_graphleak.report.html import render_html, source_context
from pytest_graphleak.report.html_script import SCRIPT
from pytest_graphleak.report.json_doc import CheckedTest, build_document, build_report
from pytest_graphleak.report.model import Report
from pytest_graphleak.report.svg import series_chart
from pytest_graphleak.result import (
    CheckResult,
    CreationSite,
    Declaration,
    Diagnosis,
    Growth,
    Verdict,
)

EVIL = "<script>alert('x')</script>"


class Page(HTMLParser):
    """Tags with attributes, the text, and tags opened inside <pre> and <svg class=chart>."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.pre_text: list[str] = []
        self._in_pre = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        self._in_pre -= tag == "pre"

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_pre:
            self.pre_text.append(data)

    def all(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.tags
            if t == tag and all(a.get(k.rstrip("_")) == v for k, v in attrs.items())
        ]


def leak(
    name: str, *, chain: list[str], drawn: Drawing | None = None, cycle: list[str] | None = None
) -> JsonDoc:
    calls = 3 + 6
    return CheckResult(
        name=name,
        steps=6,
        warmup=3,
        series={
            "minigrad.tensors": [float(i) for i in range(calls)],
            "minigrad.nodes": [2.0 * i for i in range(calls)],
            "process.rss_bytes": [1.0e8] * calls,
        },
        units={
            "minigrad.tensors": "objects",
            "minigrad.nodes": "objects",
            "process.rss_bytes": "bytes",
        },
        # what each counts orders the metrics on every surface (``model.metric_order``)
        declarations={
            "minigrad.tensors": Declaration("objects", "tensors"),
            "minigrad.nodes": Declaration("objects", "nodes"),
            "process.rss_bytes": Declaration("bytes", "memory"),
        },
        verdict=Verdict(
            True, [Growth("minigrad.tensors", 3.0, 8.0, 1.0)], "list-accumulation", EVIL
        ),
        diagnosis=Diagnosis(
            "list-accumulation",
            chain=chain,
            cycle=cycle or [],
            sites=[CreationSite("t.py", 4, f"losses.append(loss)  # {EVIL}", 1, "step")],
            notes=[f"note {EVIL}"],
            drawing=drawn,
        ),
    ).to_dict()


def document(**kwargs: Any) -> dict[str, Any]:
    clean = CheckResult(
        name="t.py::test_ok",
        steps=6,
        warmup=3,
        series={"minigrad.tensors": [4.0] * 9},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(False, reason="steady"),
    ).to_dict()
    tests = [
        CheckedTest(
            f"t.py::test_evil[{EVIL}]",
            "failed",
            [leak("x", chain=["fixture 'state'", f"dict['{EVIL}']", "Tensor(shape=())"])],
        ),
        CheckedTest("t.py::test_ok", "passed", [clean]),
        CheckedTest(
            "t.py::test_cycle",
            "passed",
            [leak("t.py::test_cycle", chain=[], cycle=["Tensor", "._hooks", "closure 'fn'"])],
        ),
    ]
    return build_document(tests, generated_by="pytest-graphleak test", **kwargs)


def test_page_is_self_contained_and_escapes_everything() -> None:
    html = render_html(Report.from_dict(document(warn_only=True)), draw=None)
    page = Page(html)
    assert html.startswith("<!DOCTYPE html>")
    assert page.all("meta", charset="utf-8")
    # Nothing loads: no external link, image, font or frame; the one script is inline and
    # the constant text of ``html_script`` (no data of the report in it).
    tags = {t for t, _ in page.tags}
    assert not tags & {"iframe", "img", "link", "object", "embed"}
    assert page.all("script") == [{}]
    assert f"<script>{SCRIPT}</script>" in html
    for _, attrs in page.tags:
        assert not any(k.startswith("on") for k in attrs)
        for key in ("href", "src", "xlink:href"):
            assert attrs.get(key, "#").startswith("#"), attrs
    assert "@import" not in html and "url(" not in html
    # The hostile strings arrive as text, never as markup.
    text = "".join(page.text)
    assert f"t.py::test_evil[{EVIL}]" in text
    assert f"dict['{EVIL}']" in text
    assert f"losses.append(loss)  # {EVIL}" in text
    assert "warn-only mode" in text


def test_every_series_gets_a_chart_with_the_warmup_shaded() -> None:
    page = Page(render_html(Report.from_dict(document()), draw=None))
    charts = page.all("svg", class_="chart")
    assert len(charts) == 3 + 1 + 3
    assert [a["aria-label"] for a in charts[:3]] == [
        "minigrad.tensors",  # grown metric first
        "minigrad.nodes",
        "process.rss_bytes",
    ]
    assert len(page.all("rect", class_="warmup")) == len(charts)
    assert len(page.all("polyline", class_="series grew")) == 2  # the two leaks' grown metric
    assert len(page.all("polyline", class_="series")) + 2 == len(charts)
    # The clean test folds away (its card and its index row in a folded group); the leaks
    # stay open (their full-size drawings fold away; with the chain and the cycle drawn,
    # no DOT text is shown).
    cards = page.all("details", class_="card")
    assert ["open" in card for card in cards] == [True, True, False]
    groups = page.all("details", class_="group row s-clean")
    assert len(groups) == 2 and not any("open" in group for group in groups)
    known = ("env", "fullsize", "card", "group row s-clean")
    others = [d for d in page.all("details") if d.get("class") not in known]
    assert others == []
    assert len(page.all("details", class_="fullsize")) == 2


def test_leaks_come_first_and_the_verdict_chain_sites_are_shown() -> None:
    page = Page(render_html(Report.from_dict(document()), draw=None))
    text = "".join(page.text)
    # Anchors come from the test ids: the same link finds the same test after a rerun.
    headings = [a["id"] for a in page.all("section")]
    assert headings[1:] == ["t-t.py::test_cycle", "t-t.py::test_ok"]
    assert headings[0].startswith("t-t.py::test_evil-script-alert-x-/script-")
    links = [a["href"] for a in page.all("a")]
    assert links == [f"#{anchor}" for anchor in headings]
    assert text.index("test_evil") < text.index("test_cycle") < text.index("t.py::test_ok")
    assert "list-accumulation" in text
    assert "store plain numbers" in text
    assert "held by (root first)" in text and "fixture 'state'" in text
    assert "reference cycle" in text and "closure 'fn'" in text
    assert "t.py:4" in text and "created at" in text


def test_retained_graph_drawn_without_graphviz_fitted_with_a_full_size_view() -> None:
    html = render_html(Report.from_dict(document()), draw=None)
    page = Page(html)
    drawings = page.all("svg", class_="graph-drawing")
    # The chain and the cycle, each four times: page, 800 px and phone layouts, full size.
    assert len(drawings) == 2 * 4
    assert all(d["viewbox"].startswith("0 0 ") for d in drawings)
    assert ".graph svg { max-width: 100%; height: auto;" in html
    assert len(page.all("details", class_="fullsize")) == 2
    assert "@media (max-width: 640px)" in html and ".graph.narrow { display: block; }" in html
    marked = [a["class"] for a in page.all("g") if a.get("class", "").startswith("node")]
    assert "node root" in marked and "node leaked" in marked
    text = "".join(page.text)
    assert f"dict['{EVIL}']" in text and "closure 'fn'" in text
    assert "Install Graphviz" not in text


def test_graphviz_drawing_is_an_option_beside_the_own_drawing() -> None:
    seen: list[str] = []

    def fake_draw(text: str) -> str:
        seen.append(text)
        return '<svg class="drawn"><g></g></svg>'

    drawn = Page(render_html(Report.from_dict(document()), draw=fake_draw))
    assert len(drawn.all("svg", class_="drawn")) == 2  # the chain and the cycle
    assert len(drawn.all("svg", class_="graph-drawing")) == 2 * 4
    assert any("closure 'fn'" in text for text in seen)
    # Without Graphviz, a diagnosis' own DOT drawing is kept as text to draw elsewhere.
    own_drawing = Drawing([DrawingNode("a"), DrawingNode("b")], [DrawingEdge(0, 1)])
    own = CheckedTest("t.py::test_dot", "failed", [leak("d", chain=[], drawn=own_drawing)])
    page = Page(render_html(build_report([own], generated_by="x"), draw=None))
    assert drawing_dot(own_drawing) in "".join(page.pre_text)
    refused = Page(render_html(Report.from_dict(document()), draw=lambda text: None))
    assert not refused.pre_text or "digraph" not in "".join(refused.pre_text)
    assert "what the leak keeps" in "".join(drawn.text)


def test_what_to_change_comes_first_with_relative_paths(tmp_path: Path) -> None:
    site = CreationSite(str(tmp_path / "pkg" / "train.py"), 7, "state.append(loss)", 1, "step")
    result = CheckResult(
        name="t",
        steps=4,
        warmup=1,
        series={"minigrad.tensors": [1.0, 2.0, 3.0, 4.0, 5.0]},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(True, [Growth("minigrad.tensors", 2.0, 5.0, 1.0)], "list-accumulation"),
        diagnosis=Diagnosis(
            "list-accumulation",
            chain=["fixture 'state'", "list(len=4)"],
            sites=[site],
            stored_at=[site],
            fix="append loss.item()",
        ),
    ).to_dict()
    doc = build_document([CheckedTest("t.py::t", "failed", [result])], generated_by="x")
    html = render_html(Report.from_dict(doc), draw=None, environment={"rootdir": str(tmp_path)})
    text = "".join(Page(html).text)
    change = text.index("what to change")
    assert change < text.index("measured steps") < text.index("minigrad.tensors", change)
    block = text[change : text.index("measured steps")]
    for line in (
        "pattern",
        "list-accumulation",
        "held by",
        "fixture 'state' -> list(len=4)",
        "stored at",
        "pkg/train.py:7 in step: state.append(loss)",
        "fix",
        "append loss.item()",
    ):
        assert line in block, line
    assert str(tmp_path) not in text[change:]  # only the environment block names rootdir
    assert 'class="fix"' in html


def test_dark_mode_and_a_filter_without_script() -> None:
    html = render_html(Report.from_dict(document()), draw=None)
    page = Page(html)
    assert "@media (prefers-color-scheme: dark)" in html
    # One chip per status the page has, counting what the summary counts (a warned
    # leak is no "leaked" one): radio inputs and CSS, which need no script.
    radios = page.all("input", type="radio")
    shows = ["show-all", "show-leaked", "show-warned", "show-clean"]
    assert [r["id"] for r in radios] == shows and "checked" in radios[0]
    labels = [a["for"] for a in page.all("label")]
    assert labels == shows
    sections = [a["class"] for a in page.all("section")]
    assert sections == ["test row s-leaked", "test row s-warned", "test row s-clean"]
    assert "#show-leaked:checked ~ main .row:not(.s-leaked)" in html
    # The "clean" chip unfolds the folded clean rows and cards.
    assert "#show-clean:checked ~ main details.group::details-content" in html
    # The text filter and expand/collapse all are the script's: hidden until it runs, so
    # with scripts off no dead control shows; no CSS overrides a card's own open state
    # (its marker always tells the truth).
    (tools,) = page.all("nav", id="tools")
    assert "hidden" in tools
    assert page.all("input", type="search", id="find")
    assert [b["id"] for b in page.all("button")] == ["expand", "collapse"]
    assert "details.card::details-content" not in html and "fold-" not in html
    assert "d.open = open" in SCRIPT and 'getElementById("find")' in SCRIPT
    text = "".join(page.text)
    assert "leaked (1)" in text and "warned (1)" in text and "clean (1)" in text
    assert "1 leaked, 1 warned, 1 clean" in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not on PATH")
def test_graphviz_renders_chain_cycle_and_hostile_labels() -> None:
    for text in (chain_to_dot(["a", EVIL, 'q"uote\\n\nnl']), cycle_to_dot(["x", "y"])):
        svg = render_svg(text)
        assert svg is not None and svg.startswith("<svg")
        page = Page(svg)
        assert not page.all("script")
        assert "<?xml" not in svg and "<!--" not in svg
    svg = render_svg(chain_to_dot(["a", EVIL]))
    assert svg is not None and EVIL in "".join(Page(svg).text)
    assert render_svg("this is not dot") is None


def test_render_svg_without_graphviz_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert render_svg(chain_to_dot(["a", "b"])) is None


def test_unsafe_graphviz_output_is_refused() -> None:
    inline = dot_mod._inline_svg
    assert inline('<?xml version="1.0"?><!-- c --><svg><text>on top</text></svg>') == (
        "<svg><text>on top</text></svg>"
    )
    assert inline("<svg><script>alert(1)</script></svg>") is None
    assert inline('<svg onload="alert(1)"></svg>') is None
    assert inline('<svg><a xlink:href="javascript:alert(1)"></a></svg>') is None
    assert inline("no svg here") is None


def test_dot_text_is_quoted_and_chosen_by_priority() -> None:
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    chain = chain_to_dot(["root", "leaf"])
    assert 'n0 [label="root"' in chain and "n0 -> n1;" in chain
    cycle = cycle_to_dot(["a", "b", "c"])
    assert "n2 -> n0;" in cycle
    assert "n0 -> n0;" in cycle_to_dot(["self"])
    drawn = Drawing([DrawingNode("r")], [])
    assert diagnosis_dot(Diagnosis("cycle", chain=["a"], drawing=drawn)) == drawing_dot(drawn)
    assert "n1 -> n0" in diagnosis_dot(Diagnosis("cycle", cycle=["a", "b"], chain=["c"]))
    assert 'label="c"' in diagnosis_dot(Diagnosis("cycle", chain=["c"]))
    assert diagnosis_dot(None) == "" and diagnosis_dot(Diagnosis("cycle")) == ""


def test_charts_handle_flat_empty_and_broken_series() -> None:
    flat = Page(series_chart([5.0] * 4, warmup=1, title="m", unit="objects"))
    assert len(flat.all("circle")) == 4
    empty = series_chart([], warmup=0, title="m", unit="objects")
    assert "no samples" in empty and "<polyline" not in empty
    broken = Page(series_chart([1.0, float("nan"), 3.0], warmup=0, title="m", unit="bytes"))
    assert len(broken.all("circle")) == 2 and not broken.all("rect")
    single = Page(series_chart([7.0], warmup=0, title=EVIL, unit="objects"))
    assert EVIL in "".join(single.text)


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (12.0, "objects", "12"),
        (0.5, "objects", "0.5"),
        (1 / 3, "objects", "0.33"),
        (-1536, "bytes", "-1.5 KiB"),
        (5 * 1024**4, "bytes", "5.0 TiB"),
        (512, "bytes", "512 B"),
        (1536, "bytes", "1.5 KiB"),
        (3 * 1024**2, "bytes", "3.0 MiB"),
        (None, "objects", "n/a"),
        (float("inf"), "bytes", "n/a"),
    ],
)
def test_format_amount(value: float | None, unit: str, text: str) -> None:
    """One formatter for every report: text failure, HTML, terminal summary, charts."""
    assert format_amount(value, unit) == text


def test_format_rate_has_a_sign() -> None:
    assert format_rate(1.0, "objects") == "+1/step"
    assert format_rate(-2 * 1024**2, "bytes") == "-2.0 MiB/step"
    assert format_rate(None, "bytes") == "n/a"


def test_dot_binary_accepts_our_dot_text() -> None:
    exe = shutil.which("dot")
    if exe is None:
        pytest.skip("Graphviz dot not on PATH")
    for text in (chain_to_dot(["a", EVIL, "b\\"]), cycle_to_dot(["x"])):
        done = subprocess.run([exe, "-Tcanon"], input=text.encode(), capture_output=True)
        assert done.returncode == 0, done.stderr


def test_all_zero_series_are_listed_but_not_drawn() -> None:
    check = CheckResult(
        name="t.py::test_mg",
        steps=4,
        warmup=1,
        series={"minigrad.tensors": [1.0, 2.0, 3.0, 4.0, 5.0], "torch.tensors": [0.0] * 5},
        units={"minigrad.tensors": "objects", "torch.tensors": "objects"},
        verdict=Verdict(True, [Growth("minigrad.tensors", 2.0, 5.0, 1.0)], "list-accumulation"),
    ).to_dict()
    doc = build_document([CheckedTest("t.py::test_mg", "failed", [check])], generated_by="x")
    page = Page(render_html(Report.from_dict(doc), draw=None))
    assert [a["aria-label"] for a in page.all("svg", class_="chart")] == ["minigrad.tensors"]
    text = "".join(page.text)
    assert "zero throughout, not drawn: torch.tensors" in text
    assert "torch.tensors" in text.split("zero throughout")[0]  # still in the metrics table


def test_noisy_bytes_are_drawn_as_growth_with_the_tolerance_band() -> None:
    base = 235.3 * 1024**2
    page = Page(
        series_chart([base, base + 12288], warmup=0, title="rss", unit="bytes", noise=1024**2)
    )
    assert page.all("svg", class_="chart")[0]["aria-label"] == "rss"
    assert "bytes, growth from 235.3 MiB" in page.text
    labels = [t for t in page.text if t.startswith(("+", "-"))]
    assert labels[0] == "+0 B" and "+512 KiB" in labels  # round ticks, growth from base
    assert labels[-1] == "+1 MiB"  # the band's one step of tolerance fits in the plot
    # 12 KiB against one step's 1 MiB tolerance: a ripple, not a bottom-to-top ramp,
    # inside the band the verdict calls noise.
    points = page.all("polyline")[0]["points"].split()
    ys = [float(point.split(",")[1]) for point in points]
    assert 0 < ys[0] - ys[1] < 2
    assert len(page.all("polygon", class_="band")) == 1


def test_exact_bytes_are_drawn_on_their_own_range() -> None:
    """torch.storage_bytes 88 B -> 148 B fills the chart on a byte axis, not a MiB one."""
    values = [88.0 + 4 * i for i in range(16)]
    page = Page(
        series_chart(values, warmup=1, title="torch.storage_bytes", unit="bytes", highlight=True)
    )
    labels = [t for t in page.text if t.startswith("+")]
    assert labels and all(label.endswith(" B") for label in labels), labels
    ys = [float(p.split(",")[1]) for p in page.all("polyline")[0]["points"].split()]
    assert ys[1] - ys[-1] > 80  # drawn growing over most of the plot's height
    assert not page.all("polygon", class_="band")
    steps = [t for t in page.text if t.isdigit() or t == "step 1"]
    assert steps[0] == "step 1" and steps[-1] == "16" and len(steps) >= 4  # a few x ticks
    assert "bytes, growth from 92 B" in page.text  # the y axis' unit


def test_source_context_around_a_creation_site(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("a = 1\nb = 2\nloss = model(x)\nc = 3\nd = 4\ne = 5\n")
    shown = Page(source_context("train.py", 3, str(tmp_path)))
    text = "".join(shown.pre_text)
    assert "3  loss = model(x)" in text and "1  a = 1" in text and "5  d = 4" in text
    assert "e = 5" not in text
    assert source_context("missing.py", 3, str(tmp_path)) == ""
    assert source_context(str(source), 99) == ""


def test_environment_block_and_narrow_layout() -> None:
    environment = {"time": "2026-11-23 14:00:00 UTC", "command": "pytest --graphleak"}
    page = Page(render_html(Report.from_dict(document()), draw=None, environment=environment))
    text = "".join(page.text)
    assert "pytest --graphleak" in text and "2026-11-23 14:00:00 UTC" in text
    assert "took" not in text  # none of these checks was timed: no "0 checks took 0.00 s"
    html = render_html(Report.from_dict(document()), draw=None)
    assert "@media (max-width: 640px)" in html and 'class="scroll"' in html


def test_own_drawing_lays_out_chains_and_cycles() -> None:
    from pytest_graphleak.report.graph_svg import (
        LINE_CHARS,
        MAX_LINES,
        chain_svg,
        cycle_svg,
        wrap_label,
    )

    chain = Page(chain_svg([f"n{i}" for i in range(6)], columns=4))
    assert len(chain.all("polyline", class_="edge")) == 5
    assert len(chain.all("polygon", class_="arrowhead")) == 5
    kinds = [a["class"] for a in chain.all("g")]
    assert kinds == ["node root", *["node "] * 4, "node leaked"]
    # Two rows of four columns: the edge into the second row turns (four corners).
    wrapped = [a["points"] for a in chain.all("polyline") if len(a["points"].split()) == 4]
    assert len(wrapped) == 1
    one = Page(cycle_svg(["self"]))
    assert len(one.all("polyline", class_="edge")) == 1  # back to itself
    column = Page(cycle_svg(["a", "b", "c"], columns=1))
    assert len(column.all("polyline", class_="edge")) == 3
    assert float(column.all("svg")[0]["width"]) < 300  # a phone's column
    lines = wrap_label("x" * 500)
    assert len(lines) == MAX_LINES and lines[-1].endswith("\u2026")
    assert all(len(line) <= LINE_CHARS for line in lines)
    hostile = Page(chain_svg([EVIL, "b"]))
    assert not hostile.all("script") and EVIL in "".join(hostile.text)
    assert chain_svg([]) == "" == cycle_svg([])


def test_error_unmeasured_and_outlive_cards_say_what_ran_and_what_to_change() -> None:
    site = CreationSite("t.py", 50, 'raise ValueError("bad batch at step 5")', 1, "test_bad")
    raised = CheckResult(
        name="t.py::test_bad",
        steps=16,
        warmup=3,
        series={},
        units={},
        verdict=Verdict(False, reason="the step raised; no verdict"),
        error="ValueError: bad batch at step 5",
        error_step=5,
        error_site=site,
    ).to_dict()
    unmeasured = CheckResult(
        name="t.py::test_um",
        steps=16,
        warmup=3,
        series={},
        units={},
        verdict=Verdict(False),
        unmeasured="no probe measured anything (torch: torch is not "
        "imported); yet the step made 95 minigrad tensors: add minigrad to the probes",
        unmeasured_fix=add_probe_fix("minigrad"),
    ).to_dict()
    outlive = leak("t.py::test_keeps::outlive", chain=["global 'history'", "list(len=1)"])
    outlive["kind"] = "outlive"
    doc = build_document(
        [
            CheckedTest("t.py::test_bad", "failed", [raised]),
            CheckedTest("t.py::test_um", "failed", [unmeasured]),
            CheckedTest("t.py::test_keeps", "passed", [outlive]),
        ],
        generated_by="x",
    )
    html = render_html(Report.from_dict(doc), draw=None)
    text = "".join(Page(html).text)
    # The step kept apart from the message: never "at step 5 at step 5".
    assert "ValueError: bad batch at step 5" in text and "at step 5 at step 5" not in text
    assert "raised at step 5 of 19" in text and "16 measured steps" not in text
    assert 't.py:50 in test_bad: raise ValueError("bad batch at step 5")' in text
    # The unmeasured card opens with the change to make, its syntax first.
    change = text.index("not measured, so there is no verdict")
    assert text.index('probes=["minigrad", ...]', change) < text.index("why", change)
    # The outlive row and card carry the test id pytest runs, with a badge.
    assert "t.py::test_keeps::outlive" not in text and "outlived the test" in text
    assert 'id="t-t.py::test_keeps"' in html
    # Error and unmeasured badges have colours of their own.
    style = html[html.index("<style>") : html.index("</style>")]
    colour = {
        w: re.search(rf"\.badge\.{w} {{ background: (#\w+)", style).group(1)  # type: ignore[union-attr]
        for w in ("error", "unmeasured")
    }
    assert colour["error"] != colour["unmeasured"]


def test_tokens_break_at_separators_and_the_top_tick_covers_the_data() -> None:
    from pytest_graphleak.report.graph_svg import wrap_label
    from pytest_graphleak.report.html_cards import breakable
    from pytest_graphleak.report.scale import axis

    assert wrap_label("Tensor(shape=(), grad_fn=SumBackward)") == [
        "Tensor(shape=(), grad_fn=",
        "SumBackward)",
    ]
    assert "loss.<wbr>item(<wbr>)" in breakable("loss.item()")
    assert '<span class="arrow">-&gt;</span>' in breakable("a -> b")
    # a flag is one unit (no break after its hyphens, none inserted), the text around it not
    assert breakable("or --graphleak-probes=minigrad,... on x.y") == (
        'or <span class="flag">--graphleak-probes=minigrad,...</span> on x.<wbr>y'
    )
    mib = 1024.0**2
    top, ticks = axis(0.0, 46 * mib, "bytes")
    assert top >= 46 * mib and ticks[-1] == top == 48 * mib
    assert axis(0.0, 33.0, "bytes")[1][-1] >= 33.0
    # The tolerance band spans the plot: its wedge ends at the last step, inside the plot.
    page = Page(series_chart([0.0] * 12, warmup=3, title="rss", unit="bytes", noise=mib))
    (band,) = page.all("polygon", class_="band")
    ys = [float(p.split(",")[1]) for p in band["points"].split()]
    assert min(ys) >= 42 - 0.5  # never above the plot's top (_TOP)


def _clean(name: str) -> dict[str, Any]:
    return CheckResult(
        name=name,
        steps=16,
        warmup=3,
        series={"minigrad.tensors": [4.0] * 19},
        units={"minigrad.tensors": "objects"},
        duration_s=0.02,
        verdict=Verdict(
            False,
            reason="no metric grew: no floor rose every k <= 5 steps over "
            "16 measured steps (1 metric judged)",
            slowest_leak_steps=5,
        ),
    ).to_dict()


def _index_rows(html: str) -> list[list[str]]:
    """Each index row's cells as text, in page order (the folded clean table's too)."""
    rows = re.findall(r'<tr class="row s-[^"]*"[^>]*>(.*?)</tr>', html)
    return [
        ["".join(Page(cell).text) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in rows
    ]


def test_index_is_four_columns_with_the_fix_under_the_test_and_clean_rows_folded() -> None:
    outlive = leak("t.py::test_keeps::outlive", chain=["global 'history'", "list(len=1)"])
    outlive["kind"] = "outlive"
    tests = [
        CheckedTest(f"t.py::test_step[{n}]", "passed", [_clean(f"t.py::test_step[{n}]")])
        for n in (10, 9, 100, 2)
    ]
    tests.append(CheckedTest("t.py::test_keeps", "passed", [outlive]))
    html = render_html(build_report(tests, generated_by="x"), draw=None)
    page = Page(html)
    # Four columns, only the test's flexible: the table fits 641-900 px (the fix is no
    # column of its own but a line under the test id).
    (table_html,) = re.findall(r'<table class="index">.*?</table>', html)[:1]
    assert [a["class"] for a in Page(table_html).all("col")] == ["status", "test", "growth", "time"]
    assert re.findall(r"<th>(\w+)</th>", table_html) == ["status", "test", "growth", "time"]
    assert "table.index { table-layout: fixed; width: 100%; }" in html
    rows = _index_rows(html)
    status, test, _, time = rows[0]
    assert status == "WARNING" and test.startswith("WARNINGt.py::test_keeps")
    assert "list-accumulation · fix: store plain numbers" in test
    # Nothing was timed in the outlive audit: a dash, not "0.00 s", and the environment
    # block counts only the checks that were timed.
    assert time == "\u2013" and "0.00 s" not in html
    assert "4 timed checks took 0.08 s in all (slowest 0.02 s)" in "".join(page.text)
    # The clean rows come after the finding, folded into one line, numbers in order.
    assert [r[1].removeprefix("CLEAN") for r in rows[1:]] == [
        f"t.py::test_step[{n}]" for n in (2, 9, 10, 100)
    ]
    groups = page.all("details", class_="group row s-clean")
    assert len(groups) == 2 and not any("open" in g for g in groups)
    summaries = "".join(page.text)
    assert "4 clean tests: nothing grew" in summaries and "cards of the 4 clean tests" in summaries
    # With no finding there is nothing to fold: every row shows.
    clean_only = render_html(build_report(tests[:4], generated_by="x"), draw=None)
    assert not Page(clean_only).all("details", class_="group row s-clean")
    assert [r[1].removeprefix("CLEAN") for r in _index_rows(clean_only)] == [
        f"t.py::test_step[{n}]" for n in (2, 9, 10, 100)
    ]


def test_test_ids_break_between_parts_and_are_not_underlined() -> None:
    from pytest_graphleak.report.html_cards import breakable_id

    assert breakable_id("tests/test_a.py::test_b_c[1-a_b]") == (
        "tests/<wbr>test_a.py::<wbr>test_b_c<wbr>[1-a_b]"
    )
    html = render_html(Report.from_dict(document()), draw=None)
    assert "a.id {" in html and "text-decoration: none" in html[html.index("a.id {") :][:200]
    links = Page(html).all("a", class_="id")
    assert links and all(a["href"].startswith("#t-") for a in links)
    assert "<h2>t.<wbr>py" not in html and "<h2>t.py::<wbr>test_ok</h2>" in html


def test_cards_use_the_same_words_and_a_clean_verdict_in_plain_words() -> None:
    unmeasured = CheckResult(
        name="t.py::test_um",
        steps=16,
        warmup=3,
        series={},
        units={},
        verdict=Verdict(False),
        unmeasured="no probe measured anything",
        unmeasured_fix=add_probe_fix("minigrad"),
    ).to_dict()
    verified = leak("t.py::test_leak", chain=["fixture 'state'", "list(len=9)"])
    verified["diagnosis"]["fix_tried"] = {
        "text": "t.py:4: losses.append(loss.item())",
        "verified": True,
        "steps": 19,
    }
    doc = build_document(
        [
            CheckedTest("t.py::test_um", "failed", [unmeasured]),
            CheckedTest("t.py::test_ok", "passed", [_clean("t.py::test_ok")]),
            CheckedTest("t.py::test_leak", "failed", [verified]),
        ],
        generated_by="x",
    )
    html = render_html(Report.from_dict(doc), draw=None)
    labels = re.findall(r"<dt>(.*?)</dt>", html)
    # "fix" on every card; the verified qualifier under the fix, not in the label column
    assert "to change" not in labels and labels.count("fix") == 2
    fix = re.search(r'<dt>fix</dt><dd class="fix">(.*?)</dd>', html.split("test_leak")[-1])
    assert fix is not None
    cell = "".join(Page(fix.group(1)).text)
    assert cell == (
        "t.py:4: losses.append(loss.item())verified: 19 more steps with this change grew nothing"
    )
    text = "".join(Page(html).text)
    assert "floor" not in text and "k <=" not in text
    assert (
        "verdict: nothing grew (1 metric judged over 16 measured steps after 3 warmup "
        "steps); a leak that grows at least once every 5 steps would have shown"
    ) in text
