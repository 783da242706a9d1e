"""The HTML report's one inline script, and the controls only it shows.

The page works without it: the status chips are radio inputs and CSS, each card is a
``<details>`` that opens on its own, and a browser's find-in-page opens folded ones. The
script adds what CSS cannot do truthfully: a text filter over the tests, and "expand
all" / "collapse all", which set each card's own ``open`` (so every card's marker says
what is shown, and any card opens or shuts after either). Its controls are ``hidden``
until it runs, so a page opened with scripts off shows no dead button. It reads no data
of the report and loads nothing: the text is a constant.
"""

from __future__ import annotations

__all__ = ["SCRIPT", "TOOLS"]

#: The filter box and the two buttons, shown by ``SCRIPT``.
TOOLS = (
    '<nav class="filter tools" id="tools" hidden>'
    '<input type="search" id="find" placeholder="filter tests: id, pattern, fix" '
    'aria-label="filter tests by id, pattern or fix" autocomplete="off">'
    '<span class="muted" id="found" aria-live="polite"></span>'
    '<button type="button" id="expand">expand all</button>'
    '<button type="button" id="collapse">collapse all</button></nav>'
)

SCRIPT = """
(function () {
  "use strict";
  var all = function (css) { return Array.prototype.slice.call(document.querySelectorAll(css)); };
  var tools = document.getElementById("tools");
  var find = document.getElementById("find");
  var found = document.getElementById("found");
  var rows = all("table.index tr.row");
  var fold = function (open) {
    all("details.card, details.group").forEach(function (d) { d.open = open; });
  };
  document.getElementById("expand").addEventListener("click", function () { fold(true); });
  document.getElementById("collapse").addEventListener("click", function () { fold(false); });
  find.addEventListener("input", function () {
    var words = find.value.toLowerCase().split(/\\s+/).filter(Boolean);
    var shown = 0;
    rows.forEach(function (row) {
      var text = row.textContent.toLowerCase();
      var hit = words.every(function (w) { return text.indexOf(w) >= 0; });
      var card = document.getElementById(row.getAttribute("data-card"));
      row.hidden = !hit;
      if (card) { card.hidden = !hit; }
      shown += hit ? 1 : 0;
    });
    if (words.length) { all("details.group").forEach(function (d) { d.open = true; }); }
    found.textContent = words.length ? shown + " of " + rows.length + " tests" : "";
  });
  tools.hidden = false;
})();
"""
