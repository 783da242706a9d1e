#!/usr/bin/env python3
"""Measure the HTML report's layout in headless Chromium at the widths people read it at.

    python scripts/report_layout.py REPORT.html [--widths 1280,900,800,641,420,360]

For each width, a copy of the page with a measuring script appended is loaded with
``--dump-dom``, in a frame of that width (``HOST``); the script writes what it found into
the DOM, as JSON:

* ``overflow``: how many px the page is wider than the window (0: nothing is cut);
* ``index_right``: how far the index table's right edge is past the window (<= 0 fits);
* ``tick_px``: the smallest rendered chart tick (its font size times the chart's scale),
  every card and group opened (last, after the fold checks);
* ``fold``: after "collapse all", whether every card's marker says shut, and whether one
  card then opens by its own summary (its content shows); after "expand all", whether
  every card is open.

Prints one line per width and exits 1 when something is cut, a tick is under 10 px or a
fold control lies. Needs ``chromium`` (Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from check_html_chromium import run_chromium  # noqa: E402

#: Appended to the page: measures, then writes ``<pre id="layout">JSON</pre>``.
MEASURE = """<script>
(function () {
  var width = window.innerWidth, out = {window: width};
  out.overflow = Math.max(0, document.documentElement.scrollWidth - width);
  var index = document.querySelector("table.index");
  out.index_right = index ? Math.round(index.getBoundingClientRect().right - width) : null;
  var cards = Array.prototype.slice.call(document.querySelectorAll("details.card"));
  var collapse = document.getElementById("collapse"), expand = document.getElementById("expand");
  if (collapse && cards.length) {
    collapse.click();
    var shut = cards.every(function (d) { return !d.open; });
    var first = cards[0];
    first.querySelector("summary").click();
    var body = first.querySelector("summary").nextElementSibling;
    var opened = first.open && body !== null && body.getBoundingClientRect().height > 0;
    expand.click();
    var all = cards.every(function (d) { return d.open; });
    out.fold = {collapse_all_shuts: shut, one_opens_after: opened, expand_all_opens: all};
  }
  // Every chart as it reads once opened: a folded card's or group's content has no
  // layout of its width until it opens (its size would be a stale one).
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var ticks = [];
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    if (!box.width || (svg.checkVisibility && !svg.checkVisibility())) { return; }
    var scale = box.width / svg.viewBox.baseVal.width;
    svg.querySelectorAll("text.tick").forEach(function (t) {
      ticks.push(parseFloat(getComputedStyle(t).fontSize) * scale);
    });
  });
  out.tick_px = ticks.length ? Math.round(Math.min.apply(null, ticks) * 10) / 10 : null;
  var pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


#: The page measured in a frame of the width asked for: headless Chromium's window is
#: never narrower than 500 px for ``--dump-dom`` (a 360 px window measures at 500 px),
#: a frame is as narrow as it is told. The frame's measures are copied out to be dumped.
HOST = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="page" src="{src}" style="width:{width}px;height:900px;border:0"></iframe>
<script>
document.getElementById("page").onload = function () {{
  var found = this.contentDocument.getElementById("layout");
  var pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = found ? found.textContent : "null";
  document.body.appendChild(pre);
}};
</script></body></html>"""


def measure(chromium: str, page: Path, width: int, work: Path) -> dict[str, object]:
    """The page's measures at ``width`` px (see the module's docstring)."""
    copy = work / f"measure-{width}.html"
    html = page.read_text(encoding="utf-8")
    copy.write_text(html.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    host = work / f"host-{width}.html"
    host.write_text(HOST.format(src=copy.name, width=width), encoding="utf-8")
    done = run_chromium(
        chromium,
        work / "profile",
        "--dump-dom",
        "--virtual-time-budget=2000",
        "--allow-file-access-from-files",
        "--window-size=1400,900",
        host.as_uri(),
    )
    found = re.search(r'<pre id="layout">(.*?)</pre>', done.stdout, re.S)
    measures = json.loads(found.group(1).replace("&quot;", '"')) if found else None
    if not isinstance(measures, dict):
        raise SystemExit(f"no measures at {width} px:\n{done.stderr[-1500:]}")
    shown = measures.pop("window")
    if shown != width:  # a measure of another width would pass for this one's
        raise SystemExit(f"asked for {width} px, the page was {shown} px wide")
    return measures


def problems(found: dict[str, object]) -> list[str]:
    """What the measures say is wrong."""
    wrong = []
    if found["overflow"]:
        wrong.append(f"page {found['overflow']} px too wide")
    right = found.get("index_right")
    if isinstance(right, int) and right > 0:
        wrong.append(f"index table {right} px past the window")
    tick = found.get("tick_px")
    if isinstance(tick, (int, float)) and tick < 10:
        wrong.append(f"chart ticks {tick} px")
    fold = found.get("fold")
    if isinstance(fold, dict):
        wrong += [f"fold: {name} is false" for name, ok in fold.items() if not ok]
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--widths", default="1280,900,800,641,420,360")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory(prefix="graphleak-layout-") as tmp:
        for width in (int(w) for w in args.widths.split(",") if w.strip()):
            found = measure(chromium, args.report.resolve(), width, Path(tmp))
            wrong = problems(found)
            bad += bool(wrong)
            print(f"{width:>5} px  {json.dumps(found)}  {'; '.join(wrong) or 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
