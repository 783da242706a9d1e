"""The HTML report: one self-contained file rendered from the JSON document.

No script, no network: styles inline in ``<head>``, charts as inline SVG, the holder
chain and the cycle drawn by the plugin itself (``report.graph_svg``, fitted to the
page, one column on a phone, a full-size view in ``<details>``); Graphviz's drawing of
the retained graph as well when ``dot`` is on PATH. Each leak opens with what to change
(pattern, held by, stored at, fix). A filter (leaks, the baseline's known ones too /
unmeasured / clean) is radio inputs and CSS; light and dark follow ``prefers-color-scheme``.
Paths are relative to the rootdir, as the terminal shows them. An environment block and a
few source lines around each creation site come from the run that renders the page, when
it has them. Every piece of text that came from a test (node ids, chains, source lines,
DOT) is escaped. The layout holds at 360 px: wide tables scroll in place.
"""

from __future__ import annotations

import linecache
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from pytest_graphleak.metrics import format_amount, format_rate
from pytest_graphleak.patterns import FALLBACK
from pytest_graphleak.report.dot import diagnosis_dot, render_svg
from pytest_graphleak.report.graph_svg import chain_svg, cycle_svg
from pytest_graphleak.report.json_doc import file_head
from pytest_graphleak.report.span import head_label, span_text, step_numbers
from pytest_graphleak.report.summary import no_rows, sentence
from pytest_graphleak.report.svg import series_chart
from pytest_graphleak.report.view import ViewLine, diagnosis_view, to_change
from pytest_graphleak.result import CheckResult, display_path, relative_to
from pytest_graphleak.status import STATUSES
from pytest_graphleak.status import TABLE as STATUS_TABLE

#: How each kind of diagnosis line is set (``report.view``).
_VIEW_CSS = {"held-by": "mono", "cycle": "mono", "stored-at": "mono", "created-at": "mono",
             "fix": "fix"}  # fmt: skip

#: Renders DOT text to an inline ``<svg>``; None means "show the DOT text instead".
DotRenderer = Callable[[str], "str | None"]

#: The badge of each status: its word in the terminal (``status.TABLE``).
_STATUS_WORDS = {row.word: row.label for row in STATUS_TABLE}

_STATUS_ORDER = {status: number for number, status in enumerate(STATUSES)}

#: What the filter shows: its label, and the statuses in it.
_FILTERS = (
    ("leaks", "leaked", ("leaked", "warned", "xfailed", "known")),
    ("unmeasured", "unmeasured", ("error", "unmeasured")),
    ("clean", "clean", ("clean",)),
)
_GROUP = {status: group for group, _, statuses in _FILTERS for status in statuses}

_STYLE = """
:root { color-scheme: light dark; --fg: #1d1d24; --bg: #ffffff; --muted: #5c5c66;
  --line: #dcdce4; --panel: #f4f4f8; --accent: #3b5bdb; --alarm: #c62828; --here: #ffe3a3;
  --change: #fff7e0; --change-line: #e0a800; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e6ee; --bg: #16161c; --muted: #a6a6b4; --line: #3a3a46;
    --panel: #23232c; --accent: #8ea8ff; --alarm: #ff8a80; --here: #5a4a12;
    --change: #2b2615; --change-line: #b08a00; }
}
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; padding: 0 1.5rem;
       color: var(--fg); background: var(--bg); max-width: 1100px; line-height: 1.4; }
a { color: var(--accent); }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
h2 { font-size: 1.1rem; margin: 0; overflow-wrap: break-word; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
code, pre, .mono { font-family: ui-monospace, monospace; font-size: .85rem; }
.mono, code { overflow-wrap: break-word; }
pre { background: var(--panel); padding: .6rem; overflow-x: auto; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: .1rem .5rem; border-radius: .6rem; font-size: .8rem;
         font-weight: 600; margin-right: .5rem; color: #fff; white-space: nowrap; }
.leaked { background: #c62828; } .warned { background: #a85f00; } .xfailed { background: #7a6000; }
.error, .unmeasured { background: #6a1b9a; } .clean { background: #2e7d32; }
.known { background: #00727d; }
section.test { border: 1px solid var(--line); border-radius: .4rem; padding: .8rem 1rem;
               margin: 1rem 0; }
table { border-collapse: collapse; margin: .4rem 0; }
td, th { border-bottom: 1px solid var(--line); padding: .2rem .6rem; text-align: left;
         vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.grew td { color: var(--alarm); font-weight: 600; }
td .mark { font: 600 .75rem system-ui, sans-serif; }
.change { background: var(--change); border-left: 4px solid var(--change-line);
          padding: .4rem .8rem; margin: .6rem 0; }
.change h3 { margin-top: .2rem; }
.change dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem .8rem;
             margin: .2rem 0; }
.change dt { font-weight: 600; }
.change dd { margin: 0; overflow-wrap: anywhere; }
.change dd.fix { font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: .6rem; }
svg.chart { background: var(--bg); border: 1px solid var(--line); height: auto;
            flex: 1 1 340px; width: 340px; max-width: min(100%, 480px); }
.charts { max-width: 980px; }
svg.chart .chart-title { font: 600 12px sans-serif; fill: var(--fg); }
svg.chart .tick { font: 10px sans-serif; fill: var(--muted); }
svg.chart text { fill: var(--fg); }
svg.chart text.tick { fill: var(--muted); }
svg.chart .axis { stroke: var(--muted); stroke-width: 1; }
svg.chart .warmup { fill: var(--panel); }
svg.chart .band { fill: #2e7d32; fill-opacity: .16; }
svg.chart polyline.series { fill: none; stroke: var(--accent); stroke-width: 1.6; }
svg.chart polyline.grew { stroke: var(--alarm); }
svg.chart circle.series { fill: var(--accent); } svg.chart circle.grew { fill: var(--alarm); }
svg.chart .grid { stroke: var(--line); stroke-width: 1; }
.graph svg { max-width: 100%; height: auto; display: block; } .graph.narrow { display: none; }
.fullsize > div { overflow-x: auto; } .fullsize svg { max-width: none; }
.graphviz svg { width: 100%; height: auto; }
svg.graph-drawing { background: var(--bg); }
svg.graph-drawing .node rect { fill: var(--panel); stroke: var(--muted); }
svg.graph-drawing .node.root rect { fill: #dde8ff; stroke: #3b5bdb; }
svg.graph-drawing .node.leaked rect { fill: #fde2e2; stroke: #c62828; }
svg.graph-drawing .node text { fill: var(--fg); }
svg.graph-drawing .node.root text, svg.graph-drawing .node.leaked text { fill: #1d1d24; }
svg.graph-drawing .node text.tag { fill: var(--muted); }
svg.graph-drawing .edge { stroke: var(--muted); }
svg.graph-drawing .arrowhead { fill: var(--muted); }
.legend { font-size: .85rem; color: var(--muted); }
.legend span { display: inline-block; margin-right: 1rem; }
.swatch { display: inline-block; width: .9rem; height: .9rem; vertical-align: middle;
          margin-right: .25rem; border: 1px solid #999; }
.env { font-size: .85rem; }
.env td:first-child { color: var(--muted); white-space: nowrap; }
pre.source { margin: .2rem 0 .6rem; }
pre.source .here { background: var(--here); display: inline-block; width: 100%; }
.scroll { overflow-x: auto; max-width: 100%; }
input.show { position: absolute; opacity: 0; pointer-events: none; }
.filter { display: flex; flex-wrap: wrap; gap: .4rem; margin: .8rem 0; align-items: center; }
.filter label { border: 1px solid var(--line); border-radius: 1rem; padding: .2rem .7rem;
                cursor: pointer; font-size: .9rem; }
#show-all:checked ~ header label[for=show-all],
#show-leaks:checked ~ header label[for=show-leaks],
#show-unmeasured:checked ~ header label[for=show-unmeasured],
#show-clean:checked ~ header label[for=show-clean] {
  background: var(--accent); border-color: var(--accent); color: var(--bg); }
input.show:focus-visible ~ header .filter { outline: 2px solid var(--accent); }
#show-leaks:checked ~ main .g-unmeasured, #show-leaks:checked ~ main .g-clean,
#show-unmeasured:checked ~ main .g-leaks, #show-unmeasured:checked ~ main .g-clean,
#show-clean:checked ~ main .g-leaks, #show-clean:checked ~ main .g-unmeasured {
  display: none; }
@media (max-width: 640px) {
  body { padding: 0 .6rem; margin: .6rem auto; }
  section.test { padding: .5rem; }
  td, th { padding: .2rem .25rem; }
  table { font-size: .8rem; }
  td.num code, table .mono { font-size: .75rem; }
  .charts { display: block; }
  svg.chart { width: 100%; }
  .change dl { grid-template-columns: 1fr; }
  .change dd { margin-bottom: .3rem; }
  table.sites td:nth-child(4), table.sites th:nth-child(4) { display: none; }
  .graph.wide { display: none; }
  .graph.narrow { display: block; }
}
"""


def render_html(
    document: Mapping[str, Any],
    *,
    draw: DotRenderer | None = render_svg,
    environment: Mapping[str, str] | None = None,
) -> str:
    """The whole report page for a document from ``json_doc.build_document``.

    ``draw`` turns DOT text into inline SVG (default: Graphviz when on PATH); pass
    None to never draw with Graphviz (the plugin's own drawing of the chain and the
    cycle is always there). ``environment`` (label -> text: time, versions, command,
    ...) is shown as the run's environment block; ``rootdir`` in it also makes paths
    relative and locates creation sites for their source lines. The noise band drawn on
    the charts of noisy metrics (process RSS, CUDA reserved) is each check's own
    (``Declaration.tolerance``).
    """
    tests: Sequence[Mapping[str, Any]] = document.get("tests", [])
    root = (environment or {}).get("rootdir")
    view = _View(draw, root)
    # Leaks first, then by node id: the order is the same on every run and under xdist.
    tests = sorted(tests, key=lambda t: (_STATUS_ORDER.get(str(t.get("status")), 9), t["nodeid"]))
    groups = Counter(_GROUP.get(str(t.get("status")), "unmeasured") for t in tests)
    header = [
        "<h1>graphleak report</h1>",
        f'<p class="muted">{escape(str(document.get("generated_by", "")))} &middot; '
        f"{_summary_line(document.get('summary', {}), bool(document.get('warn_only')))}</p>",
    ]
    header.extend(f'<p class="note">{escape(str(note))}</p>' for note in document.get("notes", []))
    header.append(_environment_block(environment or {}, tests))
    inputs = "".join(
        f'<input type="radio" name="show" class="show" id="show-{group}"'
        f'{" checked" if group == "all" else ""} aria-label="show {label}">'
        for group, label in (("all", "all tests"), *((g, lbl) for g, lbl, _ in _FILTERS))
    )
    if tests:
        labels = ['<span class="muted">show:</span>', f'<label for="show-all">all ({len(tests)})'
                  "</label>"]  # fmt: skip
        labels += [f'<label for="show-{group}">{label} ({groups[group]})</label>'
                   for group, label, _ in _FILTERS]  # fmt: skip
        header.append(f'<nav class="filter">{"".join(labels)}</nav>')
        main = [_index(tests)]
        main += [view.test_section(test, f"t{n}") for n, test in enumerate(tests)]
    else:
        main = [f"<p>{escape(no_rows(document.get('summary', {})))}</p>"]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>graphleak report</title>"
        f"<style>{_STYLE}</style></head><body>\n{inputs}\n"
        "<header>\n" + "\n".join(header) + "\n</header>\n"
        "<main>\n" + "\n".join(main) + "\n</main>\n</body></html>\n"
    )


def is_html_report(path: Path) -> bool:
    """A page written by ``--graphleak-html``, ``graphleak check --html`` or ``report``."""
    head = file_head(path)
    return head.startswith("<!DOCTYPE html>") and "<title>graphleak report</title>" in head


def _summary_line(summary: Mapping[str, Any], warn_only: bool) -> str:
    told = sentence(summary)
    if warn_only:
        told += "; warn-only mode: leaks do not fail tests"
    return escape(told)


def _index(tests: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for number, test in enumerate(tests):
        status = str(test.get("status", "clean"))
        patterns = sorted({str(c["pattern"]) for c in test.get("checks", []) if c.get("pattern")})
        rows.append(
            f'<tr class="g-{_GROUP.get(status, "unmeasured")}"><td>{_badge(status)}</td>'
            f'<td class="mono"><a href="#t{number}">'
            f'{_breakable(str(test.get("nodeid", "")))}</a></td>'
            f"<td>{escape(', '.join(patterns))}</td></tr>"
        )
    return _table(("status", "test", "pattern"), rows)


def _environment_block(environment: Mapping[str, str], tests: Sequence[Mapping[str, Any]]) -> str:
    rows = [(str(k), str(v)) for k, v in environment.items() if v]
    seconds = [float(c.get("duration_s") or 0) for t in tests for c in t.get("checks", [])]
    if seconds:
        rows.append(("checks", f"{len(seconds)} took {sum(seconds):.2f} s in all "
                               f"(slowest {max(seconds):.2f} s)"))  # fmt: skip
    if not rows:
        return ""
    cells = [f'<tr><td>{escape(k)}</td><td class="mono">{escape(v)}</td></tr>' for k, v in rows]
    return f'<details class="env"><summary>environment</summary>{_table((), cells)}</details>'


def _table(headers: Sequence[str], rows: Sequence[str], css: str = "") -> str:
    """A table that scrolls sideways on a narrow screen; ``headers`` are escaped."""
    head = f"<tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr>" if headers else ""
    attr = f' class="{css}"' if css else ""
    return f'<div class="scroll"><table{attr}>{head}{"".join(rows)}</table></div>'


def _breakable(text: str) -> str:
    """Escaped, with break opportunities after ``::``, ``/`` and ``.`` (node ids, paths,
    metric names wrap between their parts on a phone, not inside a word)."""
    out = escape(text)
    for separator in ("::", "/", "."):
        out = out.replace(separator, separator + "<wbr>")
    return out


def _badge(status: str) -> str:
    css = status if status in _STATUS_WORDS else "error"
    return f'<span class="badge {css}">{escape(_STATUS_WORDS.get(status, status))}</span>'


def shown_path(filename: str, root: str | None) -> str:
    """A path as the terminal shows it: relative to the rootdir (or the working
    directory) when the file is under it, else as it is."""
    under_root = relative_to(filename, root) if root and os.path.isabs(filename) else None
    return under_root or display_path(filename)


class _View:
    """How the page draws a test: the Graphviz renderer and the rootdir that paths are
    shown relative to. Each block of a check is
    one method returning HTML text, so a new section is one more method and one more
    line in ``check_block``."""

    def __init__(self, draw: DotRenderer | None, root: str | None) -> None:
        self.draw = draw
        self.root = root

    def test_section(self, test: Mapping[str, Any], anchor: str) -> str:
        status = str(test.get("status", "clean"))
        head = (
            f'<section class="test g-{_GROUP.get(status, "unmeasured")}" id="{anchor}">'
            f"<h2>{_badge(status)}{_breakable(str(test.get('nodeid', '')))}</h2>"
            f'<p class="muted">pytest outcome: {escape(str(test.get("outcome", "")))}</p>'
        )
        checks = test.get("checks", [])
        body = "".join(self.check_block(check, test) for check in checks)
        if status == "clean":  # clean tests fold away; leaks stay open
            body = f"<details><summary>series and charts</summary>{body}</details>"
        return head + body + "</section>"

    def check_block(self, check: Mapping[str, Any], test: Mapping[str, Any]) -> str:
        """What to change first, the chain drawn, then the numbers, then the sites."""
        parts: list[str] = []
        name = str(check.get("name", ""))
        if len(test.get("checks", [])) > 1 or (name and name != str(test.get("nodeid", ""))):
            parts.append(f"<h3>check <code>{escape(name)}</code></h3>")
        diagnosis = check.get("diagnosis") or {}
        if check.get("leaked"):
            parts.append(self.what_to_change(check, diagnosis))
        if diagnosis:
            parts.append(self.graph(diagnosis))
        parts.append(self.outcome_lines(check))
        parts += [_metrics_table(check.get("metrics", {})), self.charts(check)]
        if diagnosis:
            parts.append(self.evidence(diagnosis))
        return "".join(parts)

    def what_to_change(self, check: Mapping[str, Any], diagnosis: Mapping[str, Any]) -> str:
        """The lines to act on (``view.to_change``): pattern, held by, cycle, stored at, fix."""
        pattern = str(check.get("pattern") or FALLBACK)
        outlive = check.get("kind") == "outlive"
        lines = to_change(diagnosis_view(pattern, diagnosis, path=self.shown, outlive=outlive))
        rows = [(line.label, self.view_cell(line), _VIEW_CSS.get(line.kind, "")) for line in lines]
        cells = "".join(f'<dt>{label}</dt><dd class="{css}">{text}</dd>' for label, text, css in rows)  # noqa: E501
        return f'<div class="change"><h3>what to change</h3><dl>{cells}</dl></div>'

    def view_cell(self, line: ViewLine) -> str:
        """One line of the diagnosis view as HTML: the pattern word strong, then its meaning."""
        if line.kind != "pattern":
            return escape(line.text)
        why = f" &middot; {escape(line.detail)}" if line.detail else ""
        return f"<strong>{escape(line.text)}</strong>{why}"

    def shown(self, filename: str) -> str:
        return shown_path(filename, self.root)

    def outcome_lines(self, check: Mapping[str, Any]) -> str:
        parts = []
        line = span_text(check)
        if check.get("kind") == "outlive":  # the audit after teardown: no steps, no series
            line = "outlived the test: still alive after its teardown"
        if check.get("duration_s"):
            line += f" ({float(check['duration_s']):.2f} s)"
        parts.append(f"<p>{escape(line)}</p>")
        if (check.get("verdict") or {}).get("reason"):
            parts.append(f"<p>verdict: {escape(str(check['verdict']['reason']))}</p>")
        if check.get("error"):
            parts.append(f"<p>the step raised: <code>{escape(str(check['error']))}</code></p>")
        if check.get("unmeasured") and not check.get("leaked"):
            parts.append(f"<p>not measured, so no verdict: {escape(str(check['unmeasured']))}</p>")
        return "".join(parts)

    def charts(self, check: Mapping[str, Any]) -> str:
        series: Mapping[str, Sequence[float]] = check.get("series", {})
        metrics: Mapping[str, Mapping[str, Any]] = check.get("metrics", {})
        units: Mapping[str, str] = check.get("units", {})
        drawn = [m for m in _ordered(metrics or dict.fromkeys(series)) if m in series]
        # A probe with nothing to count (torch.* in a minigrad test) would only add flat zeros.
        zeros = [m for m in drawn if not any(v for v in series[m])]
        warmup = int(check.get("warmup", 0))
        declared = CheckResult.from_dict(check).declared  # the noise each was judged with
        noises = {m: declared(m).tolerance for m in drawn}
        head = head_label(check)
        charts = [
            series_chart(series[m], warmup=warmup, title=m, unit=units.get(m, "objects"),
                         highlight=bool(metrics.get(m, {}).get("grew")), noise=noises[m],
                         steps=step_numbers(check, len(series[m])), head=head)
            for m in drawn
            if m not in zeros
        ]  # fmt: skip
        if not charts:
            return ""
        shaded = ("warmup steps" if head == "warmup" else
                  "the baseline sample the measured ones are compared with")  # fmt: skip
        legend = (f"each chart on its own scale; shaded: {shaded} (not judged); bytes drawn "
                  "as growth from the first measured step")  # fmt: skip
        tolerance = max((noises[m] for m in drawn if m not in zeros), default=0.0)
        if tolerance:
            legend += (f"; green band: the noise tolerance of RSS and CUDA reserved "
                       f"({format_amount(tolerance, 'bytes')}/step), growth inside it "
                       "is not a leak")  # fmt: skip
        if zeros:
            legend += f"; zero throughout, not drawn: {', '.join(zeros)}"
        return f'<p class="muted">{escape(legend)}</p><div class="charts">{"".join(charts)}</div>'

    def evidence(self, diagnosis: Mapping[str, Any]) -> str:
        """The creation and storing sites with their source, the notes."""
        parts = []
        for key, title, count_header in (
            ("sites", "created at", "objects/step"),
            ("stored_at", "stored at (the line that puts it in its holder)", "times/step"),
        ):
            if diagnosis.get(key):
                parts.append(self.sites_block(title, count_header, diagnosis[key]))
        notes = diagnosis.get("notes") or []
        if notes:
            parts.append("<ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
        return "".join(parts)

    def graph(self, diagnosis: Mapping[str, Any]) -> str:
        """The plugin's own drawing of the chain and the cycle, fitted to the page (one
        column on a phone) with a full-size view; Graphviz's drawing of the retained
        graph as well when ``dot`` is on PATH (or its DOT text when only it has one)."""
        parts = []
        for key, title, draw in (("chain", "held by (root first)", chain_svg),
                                 ("cycle", "reference cycle", cycle_svg)):  # fmt: skip
            labels = [str(x) for x in diagnosis.get(key) or []]
            if not labels:
                continue
            wide = draw(labels, columns=4)
            parts.append(
                f"<h3>{title}</h3>{_GRAPH_LEGEND}"
                f'<div class="graph wide">{wide}</div>'
                f'<div class="graph narrow">{draw(labels, columns=1)}</div>'
                f'<details class="fullsize"><summary>full size</summary><div>{wide}</div>'
                "</details>"
            )
        dot_text = diagnosis_dot(diagnosis)
        if dot_text:
            svg = self.draw(dot_text) if self.draw is not None else None
            if svg is not None:
                parts.append(
                    "<details class=\"graphviz\"><summary>Graphviz's drawing of the retained "
                    f'graph</summary><div class="graph">{svg}</div></details>'
                )
            elif diagnosis.get("dot") or not parts:
                parts.append(
                    "<details><summary>the retained graph as DOT text (draw it with "
                    "Graphviz: <code>dot -Tsvg</code>)</summary>"
                    f"<pre>{escape(dot_text)}</pre></details>"
                )
        return "".join(parts)

    def sites_block(self, title: str, count_header: str, sites: Sequence[Mapping[str, Any]]) -> str:
        """The sites as a table, then a few source lines around each."""
        rows = [
            f'<tr><td class="mono">{_breakable(shown_path(str(s.get("filename", "")), self.root))}:'
            f"{escape(str(s.get('lineno', '')))}</td>"
            f'<td class="mono">{escape(str(s.get("function", "")))}</td>'
            f'<td class="num">{escape(str(s.get("count", "")))}</td>'
            f"<td><code>{escape(str(s.get('line', '')))}</code>"
            + (f' <span class="muted">(via {escape(str(s["via"]))})</span>' if s.get("via") else "")
            + "</td></tr>"
            for s in sites
        ]
        sources = (
            source_context(str(s.get("filename", "")), int(s.get("lineno") or 0), self.root)
            for s in sites
        )
        table = _table(("where", "function", count_header, "line"), rows, css="sites")
        return f"<h3>{escape(title)}</h3>{table}" + "".join(sources)


def _metrics_table(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    if not metrics:
        return ""
    rows = []
    for metric in _ordered(metrics):
        info = metrics[metric]
        unit = str(info.get("unit", "objects"))
        css = ' class="grew"' if info.get("grew") else ""
        mark = ' <span class="mark">grew</span>' if info.get("grew") else ""
        rows.append(
            f'<tr{css}><td class="mono">{_breakable(metric)}{mark}</td>'
            f'<td class="num">{escape(format_amount(info.get("start"), unit))}</td>'
            f'<td class="num">{escape(format_amount(info.get("end"), unit))}</td>'
            f'<td class="num">{escape(format_rate(info.get("per_step"), unit))}</td></tr>'
        )
    return _table(("metric", "start", "end", "growth"), rows)


def _ordered(metrics: Mapping[str, Any]) -> list[str]:
    """Grown metrics first, then by name."""
    return sorted(metrics, key=lambda m: (not (metrics[m] or {}).get("grew"), m))


_GRAPH_LEGEND = (
    '<p class="legend">'
    '<span><i class="swatch" style="background:#dde8ff"></i>root: where the chain starts '
    "(a fixture, self, a global, a local)</span>"
    '<span><i class="swatch" style="background:#fde2e2"></i>leaked: what the leak keeps '
    "alive</span><span>&rarr; a reference (attribute, item, closure, autograd edge)</span></p>"
)


#: Source lines shown on each side of a creation site.
CONTEXT_LINES = 2


def source_context(filename: str, lineno: int, root: str | None = None) -> str:
    """A few numbered source lines around ``filename:lineno``, the line itself marked;
    ``""`` when the file cannot be read here (a report rendered on another machine)."""
    if not filename or lineno <= 0:
        return ""
    path = os.path.join(root or "", filename)  # as it is when absolute or without a root
    first = max(1, lineno - CONTEXT_LINES)
    lines = [linecache.getline(path, n) for n in range(first, lineno + CONTEXT_LINES + 1)]
    if not lines[lineno - first].strip():
        return ""  # unreadable here, or the file changed: show nothing rather than a guess
    width = len(str(lineno + CONTEXT_LINES))
    shown = []
    for number, text in enumerate(lines, start=first):
        if not text and number > lineno:
            break
        row = f"{number:>{width}}  {escape(text.rstrip())}"
        shown.append(f'<span class="here">{row}</span>' if number == lineno else row)
    caption = f'<div class="mono muted">{escape(shown_path(filename, root))}:{lineno}</div>'
    return f'{caption}<pre class="source">' + "\n".join(shown) + "</pre>"
