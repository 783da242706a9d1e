"""The HTML report: one self-contained file rendered from the JSON document.

No script, no network: styles inline in ``<head>``, charts as inline SVG, the
retained graph as Graphviz's SVG at its natural size in a scrolling box (or, when
``dot`` is not on PATH, a line saying so with the DOT text folded away). An
environment block (time, versions, command, durations) and a few source lines around
each creation site come from the run that renders the page, when it has them.
Every piece of text that came from a test (node ids, chains, source lines, DOT)
is escaped. The layout holds at 480 px: wide tables and drawings scroll in place.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

from pytest_graphleak.metrics import format_amount, format_rate
from pytest_graphleak.report.dot import diagnosis_dot, render_svg
from pytest_graphleak.report.json_doc import STATUSES
from pytest_graphleak.report.svg import series_chart
from pytest_graphleak.result import FIXES

#: Renders DOT text to an inline ``<svg>``; None means "show the DOT text instead".
DotRenderer = Callable[[str], "str | None"]

_STATUS_WORDS = {
    "leaked": "LEAKED",
    "warned": "LEAK (warning only)",
    "xfailed": "LEAK (expected: xfail)",
    "error": "STEP RAISED",
    "unmeasured": "NOT MEASURED",
    "clean": "clean",
}

_STATUS_ORDER = {status: number for number, status in enumerate(STATUSES)}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d1d24; max-width: 1100px; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
h2 { font-size: 1.1rem; margin: 0; word-break: break-all; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
code, pre, .mono { font-family: ui-monospace, monospace; font-size: .85rem; }
pre { background: #f4f4f8; padding: .6rem; overflow-x: auto; }
.muted { color: #666; }
.badge { display: inline-block; padding: .1rem .5rem; border-radius: .6rem; font-size: .8rem;
         font-weight: 600; margin-right: .5rem; color: #fff; }
.leaked { background: #c62828; } .warned { background: #c77800; } .xfailed { background: #8d6e00; }
.error, .unmeasured { background: #6a1b9a; } .clean { background: #2e7d32; }
section.test { border: 1px solid #ddd; border-radius: .4rem; padding: .8rem 1rem; margin: 1rem 0; }
table { border-collapse: collapse; margin: .4rem 0; }
td, th { border-bottom: 1px solid #e4e4ea; padding: .2rem .6rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.grew td { color: #b71c1c; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: .6rem; }
svg.chart { background: #fff; border: 1px solid #e4e4ea; }
svg.chart .chart-title { font: 600 12px sans-serif; fill: #1d1d24; }
svg.chart .tick { font: 10px sans-serif; fill: #555; }
svg.chart .axis { stroke: #999; stroke-width: 1; }
svg.chart .warmup { fill: #e9e9f0; }
svg.chart polyline.series { fill: none; stroke: #3b5bdb; stroke-width: 1.6; }
svg.chart polyline.grew { stroke: #c62828; }
svg.chart circle.series { fill: #3b5bdb; } svg.chart circle.grew { fill: #c62828; }
svg.chart .grid { stroke: #eeeef3; stroke-width: 1; }
svg.chart { max-width: 100%; height: auto; }
ol.chain li { font-family: ui-monospace, monospace; font-size: .85rem; }
.graph { overflow: auto; max-height: 90vh; border: 1px solid #e4e4ea; background: #fff; }
.graph svg { max-width: none; height: auto; }
.legend { font-size: .85rem; color: #444; }
.legend span { display: inline-block; margin-right: 1rem; }
.swatch { display: inline-block; width: .9rem; height: .9rem; vertical-align: middle;
          margin-right: .25rem; border: 1px solid #999; }
.env { font-size: .85rem; }
.env td:first-child { color: #666; white-space: nowrap; }
pre.source { margin: .2rem 0 .6rem; }
pre.source .here { background: #ffe3a3; display: inline-block; width: 100%; }
.scroll { overflow-x: auto; max-width: 100%; }
@media (max-width: 600px) {
  body { margin: .6rem; }
  section.test { padding: .5rem; }
  td, th { padding: .2rem .3rem; }
  .charts { display: block; }
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
    None to never draw. ``environment`` (label -> text: time, versions, command, ...)
    is shown as the run's environment block; ``rootdir`` in it also locates relative
    creation-site paths for their source lines.
    """
    tests: Sequence[Mapping[str, Any]] = document.get("tests", [])
    body = [
        "<h1>graphleak report</h1>",
        f'<p class="muted">{escape(str(document.get("generated_by", "")))} &middot; '
        f"{_summary_line(document.get('summary', {}), bool(document.get('warn_only')))}</p>",
    ]
    body.extend(f'<p class="note">{escape(str(note))}</p>' for note in document.get("notes", []))
    body.append(_environment_block(environment or {}, tests))
    root = (environment or {}).get("rootdir")
    if not tests:
        body.append("<p>No test ran a graphleak check.</p>")
    else:
        # Leaks first, then by node id: the order is the same on every run and under xdist.
        tests = sorted(
            tests, key=lambda t: (_STATUS_ORDER.get(str(t.get("status")), 9), t["nodeid"])
        )
        body.append(_index(tests))
        body += [_test_section(test, f"t{n}", draw, root) for n, test in enumerate(tests)]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>graphleak report</title>"
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _summary_line(summary: Mapping[str, Any], warn_only: bool) -> str:
    parts = [f"{summary.get('checked', 0)} checked"]
    parts.extend(f"{summary[key]} {key}" for key in STATUSES if summary.get(key))
    if warn_only:
        parts.append("warn-only mode: leaks do not fail tests")
    return escape(", ".join(parts))


def _index(tests: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for number, test in enumerate(tests):
        status = str(test.get("status", "clean"))
        patterns = sorted({str(c["pattern"]) for c in test.get("checks", []) if c.get("pattern")})
        rows.append(
            f"<tr><td>{_badge(status)}</td>"
            f'<td class="mono"><a href="#t{number}">{escape(str(test.get("nodeid", "")))}</a></td>'
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


def _table(headers: Sequence[str], rows: Sequence[str]) -> str:
    """A table that scrolls sideways on a narrow screen; ``headers`` are escaped."""
    head = f"<tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr>" if headers else ""
    return f'<div class="scroll"><table>{head}{"".join(rows)}</table></div>'


def _badge(status: str) -> str:
    css = status if status in _STATUS_WORDS else "error"
    return f'<span class="badge {css}">{escape(_STATUS_WORDS.get(status, status))}</span>'


def _test_section(
    test: Mapping[str, Any], anchor: str, draw: DotRenderer | None, root: str | None
) -> str:
    status = str(test.get("status", "clean"))
    head = (
        f'<section class="test" id="{anchor}"><h2>{_badge(status)}'
        f"{escape(str(test.get('nodeid', '')))}</h2>"
        f'<p class="muted">pytest outcome: {escape(str(test.get("outcome", "")))}</p>'
    )
    body = "".join(_check_block(check, test, draw, root) for check in test.get("checks", []))
    if status == "clean":  # clean tests fold away; leaks stay open
        body = f"<details><summary>series and charts</summary>{body}</details>"
    return head + body + "</section>"


def _check_block(
    check: Mapping[str, Any], test: Mapping[str, Any], draw: DotRenderer | None, root: str | None
) -> str:
    parts: list[str] = []
    name = str(check.get("name", ""))
    if len(test.get("checks", [])) > 1 or (name and name != str(test.get("nodeid", ""))):
        parts.append(f"<h3>check <code>{escape(name)}</code></h3>")
    leaked, pattern = check.get("leaked"), check.get("pattern")
    line = f"{check.get('steps', 0)} measured steps after {check.get('warmup', 0)} warmup steps"
    if check.get("duration_s"):
        line += f" ({float(check['duration_s']):.2f} s)"
    line = escape(line)
    if leaked:
        line = f"<strong>{escape(str(pattern or 'leak'))}</strong> &middot; {line}"
    parts.append(f"<p>{line}</p>")
    if (check.get("verdict") or {}).get("reason"):
        parts.append(f"<p>verdict: {escape(str(check['verdict']['reason']))}</p>")
    if check.get("error"):
        parts.append(f"<p>the step raised: <code>{escape(str(check['error']))}</code></p>")
    if check.get("unmeasured") and not leaked:
        parts.append(f"<p>not measured, so no verdict: {escape(str(check['unmeasured']))}</p>")
    diagnosis = check.get("diagnosis") or {}
    if leaked and diagnosis.get("story"):
        parts.append(f"<p>what the numbers say: {escape(str(diagnosis['story']))}</p>")
    if leaked and diagnosis.get("fix"):
        parts.append(f"<p>fix: {escape(str(diagnosis['fix']))}</p>")
    elif leaked and pattern in FIXES:
        parts.append(f"<p>usual fix: {escape(FIXES[str(pattern)])}</p>")
    parts += [_metrics_table(check.get("metrics", {})), _charts(check)]
    if diagnosis:
        parts.append(_diagnosis_block(diagnosis, draw, root))
    return "".join(parts)


def _metrics_table(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    if not metrics:
        return ""
    rows = []
    for metric in _ordered(metrics):
        info = metrics[metric]
        unit = str(info.get("unit", "objects"))
        css = ' class="grew"' if info.get("grew") else ""
        rows.append(
            f'<tr{css}><td class="mono">{escape(metric)}</td>'
            f'<td class="num">{escape(format_amount(info.get("start"), unit))}</td>'
            f'<td class="num">{escape(format_amount(info.get("end"), unit))}</td>'
            f'<td class="num">{escape(format_rate(info.get("per_step"), unit))}</td>'
            f"<td>{'grew' if info.get('grew') else ''}</td></tr>"
        )
    return _table(("metric", "start", "end", "growth", ""), rows)


def _charts(check: Mapping[str, Any]) -> str:
    series: Mapping[str, Sequence[float]] = check.get("series", {})
    metrics: Mapping[str, Mapping[str, Any]] = check.get("metrics", {})
    units: Mapping[str, str] = check.get("units", {})
    drawn = [m for m in _ordered(metrics or dict.fromkeys(series)) if m in series]
    # A probe with nothing to count (torch.* in a minigrad test) would only add flat zeros.
    zeros = [m for m in drawn if not any(v for v in series[m])]
    warmup = int(check.get("warmup", 0))
    charts = [
        series_chart(series[m], warmup=warmup, title=m, unit=units.get(m, "objects"),
                     highlight=bool(metrics.get(m, {}).get("grew")))
        for m in drawn
        if m not in zeros
    ]
    if not charts:
        return ""
    legend = "shaded: warmup steps (not judged); bytes drawn as growth from the first measured step"
    if zeros:
        legend += f"; zero throughout, not drawn: {', '.join(zeros)}"
    return f'<p class="muted">{escape(legend)}</p><div class="charts">{"".join(charts)}</div>'


def _ordered(metrics: Mapping[str, Any]) -> list[str]:
    """Grown metrics first, then by name."""
    return sorted(metrics, key=lambda m: (not (metrics[m] or {}).get("grew"), m))


def _sites_block(
    title: str, count_header: str, sites: Sequence[Mapping[str, Any]], root: str | None
) -> str:
    """The sites as a table, then a few source lines around each."""
    rows = [
        f'<tr><td class="mono">{escape(str(s.get("filename", "")))}:'
        f"{escape(str(s.get('lineno', '')))}</td>"
        f'<td class="mono">{escape(str(s.get("function", "")))}</td>'
        f'<td class="num">{escape(str(s.get("count", "")))}</td>'
        f"<td><code>{escape(str(s.get('line', '')))}</code>"
        + (f' <span class="muted">(via {escape(str(s["via"]))})</span>' if s.get("via") else "")
        + "</td></tr>"
        for s in sites
    ]
    sources = (
        source_context(str(s.get("filename", "")), int(s.get("lineno") or 0), root) for s in sites
    )
    table = _table(("where", "function", count_header, "line"), rows)
    return f"<h3>{escape(title)}</h3>{table}" + "".join(sources)


def _diagnosis_block(
    diagnosis: Mapping[str, Any], draw: DotRenderer | None, root: str | None
) -> str:
    parts = []
    for key, title in (("chain", "culprit chain (root first)"), ("cycle", "reference cycle")):
        if diagnosis.get(key):
            items = "".join(f"<li>{escape(str(link))}</li>" for link in diagnosis[key])
            parts.append(f'<h3>{title}</h3><ol class="chain">{items}</ol>')
    for key, title, count_header in (
        ("sites", "creation sites", "objects/step"),
        ("stored_at", "stored at (the line that puts it in its holder)", "times/step"),
    ):
        if diagnosis.get(key):
            parts.append(_sites_block(title, count_header, diagnosis[key], root))
    notes = diagnosis.get("notes") or []
    if notes:
        parts.append("<ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
    dot_text = diagnosis_dot(diagnosis)
    if dot_text:
        svg = draw(dot_text) if draw is not None else None
        if svg is not None:
            parts.append(f'<h3>retained graph</h3>{_GRAPH_LEGEND}<div class="graph">{svg}</div>')
        else:
            parts.append(
                "<h3>retained graph</h3><p>Install Graphviz (<code>dot</code> on PATH, e.g. "
                "<code>apt-get install graphviz</code>) to draw this graph here.</p>"
                f"<details><summary>its DOT text</summary><pre>{escape(dot_text)}</pre></details>"
            )
    return "".join(parts)


_GRAPH_LEGEND = (
    '<p class="legend">'
    '<span><i class="swatch" style="background:#fde2e2"></i>what the leak keeps alive '
    "(autograd graph nodes outlined red)</span>"
    '<span><i class="swatch" style="background:#dde8ff"></i>where the chain starts: a '
    "fixture, self, a global, a local</span>"
    "<span>&rarr; solid: a reference (attribute, item, closure)</span>"
    "<span>&#8674; dashed: an autograd edge (grad_fn, next_functions)</span>"
    "<span>scroll to see all of it</span></p>"
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
    caption = f'<div class="mono muted">{escape(filename)}:{lineno}</div>'
    return f'{caption}<pre class="source">' + "\n".join(shown) + "</pre>"
