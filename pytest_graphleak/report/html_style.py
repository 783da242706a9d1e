"""The HTML report's stylesheet: one inline ``<style>``, light and dark.

The status colours, the filter chips and what each chip shows are made from the status
table (``status.TABLE``: a colour token and a word per status), so a new status needs no
line here. Light and dark follow ``prefers-color-scheme`` (Chromium's
``--force-dark-mode`` shows the dark one).
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_graphleak.status import GROUP_CLEAN, TABLE

#: Each colour token's badge background (white text on it), light and dark themes.
BADGE_COLOURS: dict[str, tuple[str, str]] = {
    "red": ("#c62828", "#d84343"),
    "yellow": ("#9a5b00", "#a86a00"),
    "purple": ("#7b1fa2", "#9c3bc4"),
    "blue": ("#1f5fa8", "#2f72c0"),
    "cyan": ("#00707a", "#00838f"),
    "green": ("#2e7d32", "#3b8f40"),
}

_BASE = """
:root { color-scheme: light dark; --fg: #1d1d24; --bg: #ffffff; --muted: #5c5c66;
  --line: #dcdce4; --panel: #f4f4f8; --accent: #3b5bdb; --alarm: #c62828; --here: #ffe3a3;
  --change: #fff7e0; --change-line: #e0a800; --band: #2e7d32; --band-alpha: .16;
  --root: #dde8ff; --root-line: #3b5bdb; --leaked: #fde2e2; --leaked-line: #c62828;
  --known: #00707a; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e6ee; --bg: #16161c; --muted: #a6a6b4; --line: #3a3a46;
    --panel: #23232c; --accent: #8ea8ff; --alarm: #ff8a80; --here: #5a4a12;
    --change: #2b2615; --change-line: #b08a00; --band: #7ddc82; --band-alpha: .24;
    --root: #1f2b4d; --root-line: #8ea8ff; --leaked: #4a1f22; --leaked-line: #ff8a80;
    --known: #5fcfd8; }
}
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; padding: 0 1.5rem;
       color: var(--fg); background: var(--bg); max-width: 1100px; line-height: 1.4; }
a { color: var(--accent); }
[hidden] { display: none !important; }
a.id { font-family: ui-monospace, monospace; font-size: .85rem; text-decoration: none; }
a.id:hover, a.id:focus-visible { background: var(--panel); outline: 1px solid var(--line); }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
h2 { font-size: 1.05rem; margin: 0; display: inline; overflow-wrap: break-word; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
code, pre, .mono { font-family: ui-monospace, monospace; font-size: .85rem; }
.mono, code { overflow-wrap: break-word; }
pre { background: var(--panel); padding: .6rem; overflow-x: auto; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: .1rem .5rem; border-radius: .6rem; font-size: .8rem;
         font-weight: 600; margin-right: .5rem; color: #fff; white-space: nowrap;
         font-family: system-ui, sans-serif; }
.badge.kind { background: var(--panel); color: var(--fg); border: 1px solid var(--line); }
section.test { border: 1px solid var(--line); border-radius: .4rem; padding: .6rem 1rem;
               margin: 1rem 0; scroll-margin-top: .5rem; }
section.test > details > summary { cursor: pointer; }
section.test > details > summary .duration { float: right; margin-left: .5rem; }
table { border-collapse: collapse; margin: .4rem 0; }
td, th { border-bottom: 1px solid var(--line); padding: .2rem .6rem; text-align: left;
         vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.grew td { color: var(--alarm); font-weight: 600; }
td .mark { font: 600 .75rem system-ui, sans-serif; }
table.index { table-layout: fixed; width: 100%; }
table.index col.status { width: 8.5rem; } table.index col.growth { width: 9.5rem; }
table.index col.time { width: 4.8rem; }
table.index td { overflow-wrap: anywhere; }
table.index .said { font-size: .85rem; margin-top: .15rem; }
table.index .phone { display: none; }
table.index .said .pattern { font-weight: 600; }
table.index .said code { font-size: inherit; }
details.group { margin: .4rem 0 1rem; }
details.group > summary { cursor: pointer; color: var(--muted); padding: .3rem 0; }
details.group > table.index { margin-top: 0; }
.tools input { font: inherit; font-size: .9rem; padding: .25rem .6rem; min-width: 14rem;
               flex: 1 1 14rem; max-width: 28rem; border: 1px solid var(--line);
               border-radius: 1rem; background: var(--bg); color: var(--fg); }
.tools button { font: inherit; font-size: .9rem; padding: .2rem .7rem; cursor: pointer;
                border: 1px solid var(--line); border-radius: 1rem; background: var(--bg);
                color: var(--fg); }
.rate, .arrow, .flag { white-space: nowrap; }
.change { background: var(--change); border-left: 4px solid var(--change-line);
          padding: .4rem .8rem; margin: .6rem 0; }
.change h3 { margin-top: .2rem; }
.change dl { display: grid; grid-template-columns: max-content minmax(0, 1fr);
             gap: .25rem .8rem; margin: .2rem 0; }
.change dt { font-weight: 600; }
.change dd { margin: 0; overflow-wrap: break-word; }
.change dd.fix .fix-text { font-weight: 600; }
.change .qualifier { display: block; color: var(--muted); font-size: .85rem; }
.change pre { margin: .2rem 0; background: var(--bg); white-space: pre-wrap; }
.change dd.known { color: var(--known); }
.change dt:has(+ dd.known) { color: var(--known); }
.change dt:has(+ dd.known), .change dd.known { padding-bottom: .25rem;
                                               border-bottom: 1px dashed var(--change-line); }
section.baseline { background: var(--panel); border-left: 4px solid var(--known);
                   padding: .3rem .8rem; margin: .8rem 0; }
section.baseline p { margin: .4rem 0; }
section.baseline > p:first-child, section.baseline pre + p { font-weight: 600; }
section.baseline ul + p { color: var(--muted); font-size: .9rem; }
section.baseline ul { margin: .2rem 0; padding-left: 1.2rem; }
section.baseline pre { margin: .2rem 0 .4rem; background: var(--bg); }
.charts { display: flex; flex-wrap: wrap; gap: .6rem; max-width: 980px; }
svg.chart { background: var(--bg); border: 1px solid var(--line); height: auto;
            flex: 1 1 360px; width: 360px; max-width: min(100%, 480px); }
svg.chart .chart-title { font: 600 13px sans-serif; fill: var(--fg); }
svg.chart .tick { font: 12px sans-serif; fill: var(--muted); }
svg.chart text { fill: var(--fg); }
svg.chart text.tick { fill: var(--muted); }
svg.chart .axis { stroke: var(--muted); stroke-width: 1; }
svg.chart .warmup { fill: var(--panel); }
svg.chart .band { fill: var(--band); fill-opacity: var(--band-alpha); stroke: var(--band);
                  stroke-opacity: .7; stroke-dasharray: 4 3; }
svg.chart polyline.series { fill: none; stroke: var(--accent); stroke-width: 1.6; }
svg.chart polyline.grew { stroke: var(--alarm); }
svg.chart circle.series { fill: var(--accent); } svg.chart circle.grew { fill: var(--alarm); }
svg.chart .grid { stroke: var(--line); stroke-width: 1; }
.graph svg { max-width: 100%; height: auto; display: block; }
.graph.medium, .graph.narrow { display: none; }
.fullsize > div { overflow-x: auto; }
.fullsize svg { max-width: none; }
.graphviz svg { width: 100%; height: auto; }
svg.graph-drawing { background: var(--bg); }
svg.graph-drawing .node rect { fill: var(--panel); stroke: var(--muted); }
svg.graph-drawing .node.root rect { fill: var(--root); stroke: var(--root-line); }
svg.graph-drawing .node.leaked rect { fill: var(--leaked); stroke: var(--leaked-line); }
svg.graph-drawing .node text { fill: var(--fg); }
.swatch.root { background: var(--root); } .swatch.leaked { background: var(--leaked); }
.graphviz svg > g > polygon[fill="white"] { fill: var(--bg); }
.graphviz svg text { fill: var(--fg); }
.graphviz svg [stroke="black"] { stroke: var(--fg); }
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
.filter { display: flex; flex-wrap: wrap; gap: .4rem; margin: .6rem 0; align-items: center; }
.filter label { border: 1px solid var(--line); border-radius: 1rem; padding: .2rem .7rem;
                cursor: pointer; font-size: .9rem; white-space: nowrap; }
.filter label .dot { display: inline-block; width: .6rem; height: .6rem; border-radius: 50%;
                     margin-right: .3rem; }
input.show:focus-visible ~ header .filter { outline: 2px solid var(--accent); }
@media (max-width: 1099px) {
  .graph.wide { display: none; }
  .graph.medium { display: block; }
}
@media (max-width: 640px) {
  body { padding: 0 .6rem; margin: .6rem auto; }
  section.test { padding: .5rem; }
  td, th { padding: .2rem .25rem; }
  table { font-size: .8rem; }
  td.num code, table .mono { font-size: .75rem; }
  .charts { display: block; }
  svg.chart { width: 100%; }
  svg.chart .tick { font-size: 14px; }
  svg.chart .chart-title { font-size: 15px; }
  .change dl { grid-template-columns: minmax(0, 1fr); }
  .change dd { margin-bottom: .3rem; }
  .change dt:has(+ dd.known) { border-bottom: 0; padding-bottom: 0; }  /* stacked: one line */
  table.sites td:nth-child(4), table.sites th:nth-child(4) { display: none; }
  table.metrics td:nth-child(3), table.metrics th:nth-child(3),
  table.metrics td:nth-child(4), table.metrics th:nth-child(4) { display: none; }
  table.index { table-layout: auto; }
  table.index col.status, table.index col.time { display: none; }
  table.index col.growth { width: 6.8rem; }
  table.index td:nth-child(1), table.index th:nth-child(1),
  table.index td:nth-child(4), table.index th:nth-child(4) { display: none; }
  table.index .phone { display: block; }
  .tools input { flex-basis: 100%; max-width: none; }
  a.id, table.index .said { font-size: .75rem; }
  table.index .badge { font-size: .7rem; padding: .05rem .35rem; margin-right: 0; }
  .graph.wide, .graph.medium { display: none; }
  .graph.narrow { display: block; }
}
"""


def stylesheet(statuses: Iterable[str]) -> str:
    """The page's CSS: the base rules, a badge colour per status (light and dark), and
    the filter's rules for the chips of ``statuses`` (the ones the page has)."""
    light = " ".join(
        f".badge.{row.word} {{ background: {BADGE_COLOURS[row.colour][0]}; }}" for row in TABLE
    )
    dark = " ".join(
        f".badge.{row.word} {{ background: {BADGE_COLOURS[row.colour][1]}; }}" for row in TABLE
    )
    dots = " ".join(
        f".dot.{row.word} {{ background: {BADGE_COLOURS[row.colour][0]}; }}" for row in TABLE
    )
    shown = list(statuses)
    clean = next(row.word for row in TABLE if row.group == GROUP_CLEAN)
    chosen = ",\n".join(
        f"#show-{word}:checked ~ header label[for=show-{word}]" for word in ["all", *shown]
    )
    hidden = ",\n".join(f"#show-{word}:checked ~ main .row:not(.s-{word})" for word in shown)
    rules = [_BASE, light, f"@media (prefers-color-scheme: dark) {{ {dark} }}", dots]
    rules.append(
        f"{chosen} {{\n  background: var(--accent); border-color: var(--accent); "
        "color: var(--bg); }"
    )
    if hidden:
        rules.append(f"{hidden} {{ display: none; }}")
    if clean in shown:  # the "clean" chip shows the folded clean rows and cards, unfolded
        rules.append(
            f"@supports selector(::details-content) {{\n"
            f"#show-{clean}:checked ~ main details.group > summary {{ display: none; }}\n"
            f"#show-{clean}:checked ~ main details.group::details-content {{\n"
            "  content-visibility: visible; display: block; } }"
        )
    return "\n".join(rules) + "\n"
