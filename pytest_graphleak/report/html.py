"""The HTML report: one self-contained file rendered from the JSON document.

No script, no network: styles inline in ``<head>`` (``report.html_style``), charts as
inline SVG, the holder chain and the cycle drawn by the plugin itself
(``report.graph_svg``). The page opens with the session's count sentence, one chip per
status that counts exactly what that sentence counts (the document's ``summary``), and
an index: status, test, pattern, the fix, the growth and the time of each test, linked
to its card. Cards (``report.html_cards``) are ``<details>``: leaks and checks with no
verdict open, clean and known ones folded; "expand all" / "collapse all" are radio
inputs and CSS (``::details-content``). Anchors are made from the test ids, so a shared
link finds the same test after the next run. Light and dark follow
``prefers-color-scheme``. The layout holds at 360 px: wide tables scroll in place, and
the index and metric tables keep their growth column.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from pytest_graphleak.metrics import format_rate
from pytest_graphleak.patterns import FALLBACK
from pytest_graphleak.report.dot import render_svg
from pytest_graphleak.report.html_cards import (
    Cards,
    DotRenderer,
    badge,
    breakable,
    duration,
    shown_path,
    source_context,
    table,
)
from pytest_graphleak.report.html_style import stylesheet
from pytest_graphleak.report.json_doc import file_head
from pytest_graphleak.report.model import Report, TestRow, headline_growth
from pytest_graphleak.report.summary import no_rows
from pytest_graphleak.report.view import fix_of
from pytest_graphleak.status import DISPLAY_ORDER, display_key

__all__ = ["anchor_of", "is_html_report", "render_html", "shown_path", "source_context"]

#: What an anchor keeps of a test id as it is; anything else becomes ``-``.
_ANCHOR_SAFE = re.compile(r"[^A-Za-z0-9_.:/-]+")


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
    report = Report.from_dict(document)  # the typed read model: no dict read below
    # Leaks first, then by node id: the order is the same on every run and under xdist.
    rows = sorted(report.tests, key=lambda row: (display_key(row.status), row.nodeid))
    cards = Cards(draw, (environment or {}).get("rootdir"))
    header = [
        "<h1>graphleak report</h1>",
        f'<p class="muted">{escape(report.generated_by)} &middot; '
        f"{_summary_line(report)}</p>",
    ]
    header.extend(f'<p class="note">{escape(note)}</p>' for note in report.notes)
    header.append(_environment_block(environment or {}, rows))
    statuses = [w for w in DISPLAY_ORDER if any(row.status == w for row in rows)]
    inputs = _inputs(statuses) if rows else ""
    if rows:
        header.append(_chips(report.summary, statuses, len(rows)))
        anchors = anchors_of([row.nodeid for row in rows])
        main = [_index(rows, anchors)]
        main += [cards.card(row, anchors[row.nodeid]) for row in rows]
    else:
        main = [f"<p>{escape(no_rows(report.summary))}</p>"]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>graphleak report</title>"
        f"<style>{stylesheet(statuses)}</style></head><body>\n{inputs}\n"
        "<header>\n" + "\n".join(header) + "\n</header>\n"
        "<main>\n" + "\n".join(main) + "\n</main>\n</body></html>\n"
    )


def is_html_report(path: Path) -> bool:
    """A page written by ``--graphleak-html``, ``graphleak check --html`` or ``report``."""
    head = file_head(path)
    return head.startswith("<!DOCTYPE html>") and "<title>graphleak report</title>" in head


def anchor_of(nodeid: str) -> str:
    """A stable anchor for a test id: the id itself where every character is safe in a
    URL fragment, else its safe characters and a short hash of the whole id (so
    ``test_x[a b]`` and ``test_x[a-b]`` stay apart). The same id gives the same anchor on
    every run."""
    safe = _ANCHOR_SAFE.sub("-", nodeid).strip("-") or "test"
    if safe == nodeid:
        return f"t-{safe}"
    return f"t-{safe}-{hashlib.sha1(nodeid.encode('utf-8')).hexdigest()[:8]}"


def anchors_of(nodeids: Sequence[str]) -> dict[str, str]:
    """Each test id's anchor (``anchor_of``)."""
    return {nodeid: anchor_of(nodeid) for nodeid in nodeids}


def _inputs(statuses: Sequence[str]) -> str:
    """The filter's radio inputs (all, then one per status shown) and the fold's."""
    shows = [("all", "all tests"), *((w, f"{w} tests") for w in statuses)]
    out = [f'<input type="radio" name="show" class="show" id="show-{word}"'
           f'{" checked" if word == "all" else ""} aria-label="show {label}">'
           for word, label in shows]  # fmt: skip
    out += [f'<input type="radio" name="fold" class="fold" id="fold-{word}"'
            f'{" checked" if word == "each" else ""} aria-label="{label}">'
            for word, label in (("each", "cards as set"), ("open", "expand all"),
                                ("shut", "collapse all"))]  # fmt: skip
    return "".join(out)


def _chips(summary: Mapping[str, int], statuses: Sequence[str], rows: int) -> str:
    """One chip per status with tests, its number the summary's: what the header's
    sentence counts; then expand all / collapse all."""
    chips = ['<span class="muted">show:</span>', f'<label for="show-all">all ({rows})</label>']
    for word in statuses:
        count = summary.get(word, 0)
        chips.append(f'<label for="show-{word}"><i class="dot {word}"></i>'
                     f"{escape(word)} ({count})</label>")
    folds = ['<span class="muted">cards:</span>', '<label for="fold-each">as set</label>',
             '<label for="fold-open">expand all</label>',
             '<label for="fold-shut">collapse all</label>']  # fmt: skip
    return f'<nav class="filter">{"".join(chips)}</nav><nav class="filter">{"".join(folds)}</nav>'


def _summary_line(report: Report) -> str:
    told = report.sentence
    if report.warn_only:
        told += "; warn-only mode: leaks do not fail tests"
    return escape(told)


def _index(tests: Sequence[TestRow], anchors: Mapping[str, str]) -> str:
    """The top table: status, test, pattern, the fix, the growth, the time."""
    rows = []
    for test in tests:
        leaks = [c for c in test.checks if c.leaked]
        patterns = sorted({str(c.pattern or FALLBACK) for c in leaks})
        fixes = sorted({fix_of(str(c.pattern or FALLBACK), c.diagnosis) for c in leaks} - {""})
        # an unmeasured check's change (the probe to add), as its card and GitHub show it
        fixes += sorted({c.unmeasured_fix for c in test.checks if c.unmeasured} - {""})
        outlive = any(c.kind == "outlive" for c in test.checks)
        kind = ' <span class="badge kind">outlived the test</span>' if outlive else ""
        rows.append(
            f'<tr class="row s-{test.status}"><td>{badge(test.status)}</td>'
            f'<td class="mono"><a href="#{escape(anchors[test.nodeid])}">'
            f"{breakable(test.nodeid)}</a>{kind}</td>"
            f"<td>{escape(', '.join(patterns))}</td>"
            f'<td class="mono">{_growth(test)}</td>'
            f'<td class="fix">{breakable("; ".join(fixes))}</td>'
            f'<td class="num">{duration(test):.2f} s</td></tr>'
        )
    return table(("status", "test", "pattern", "growth", "fix", "time"), rows, css="index")


def _growth(test: TestRow) -> str:
    """A test's growth as HTML: the metric the terminal's short line names
    (``model.headline_growth``: tensors, then nodes, then memory) and its rate per step,
    which never breaks (``+1/step``)."""
    for check in test.checks:
        growth = headline_growth(check)
        if growth is not None:
            rate = format_rate(growth.per_step, check.declared(growth.metric).unit)
            return f'{breakable(growth.metric)} <span class="rate">{escape(rate)}</span>'
    return ""




def _environment_block(environment: Mapping[str, str], tests: Sequence[TestRow]) -> str:
    rows = [(str(k), str(v)) for k, v in environment.items() if v]
    seconds = [float(c.duration_s or 0) for t in tests for c in t.checks]
    if seconds:
        rows.append(("checks", f"{len(seconds)} took {sum(seconds):.2f} s in all "
                               f"(slowest {max(seconds):.2f} s)"))  # fmt: skip
    if not rows:
        return ""
    cells = [f'<tr><td>{escape(k)}</td><td class="mono">{escape(v)}</td></tr>' for k, v in rows]
    return f'<details class="env"><summary>environment</summary>{table((), cells)}</details>'

