"""One order of a check's metrics on every surface (``report.model.metric_order``), and
a chart caption that names each tolerance band it draws.

A real check whose metrics span several probes (minigrad, process, gc) runs under
pytest in a subprocess; its metric names must come in the same order in the live
terminal (the failure text with its ``-v`` series, the report section), the GitHub
annotation and step summary, the JUnit properties, and everything rendered later from
its JSON report (``graphleak report``'s text, the HTML card's verdict, table and
charts): a JSON report keeps its keys sorted, so no surface may list them in a dict's
order.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pytest_graphleak.report.html_cards import Cards
from pytest_graphleak.report.model import metric_order
from pytest_graphleak.result import CheckResult, Declaration, Growth, Verdict

pytest_plugins = ["pytester"]

SPREAD = """\
import minigrad as mg
import pytest

losses = []


@pytest.mark.no_graph_growth(steps=6, warmup=2, probes=["minigrad", "process", "gc"])
def test_spread():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    losses.append((x * 2).sum())
"""

#: The listing order (``metrics.listing_key``): tensors, nodes, memory, cycles; among
#: metrics that count tensors, the one named for them first. Malloc's metric is missing
#: where mallinfo2 is not cheap on the heap; nothing else depends on this machine.
LISTED = (
    "minigrad.tensors",
    "minigrad.autograd_meta",
    "minigrad.nodes",
    "process.malloc_bytes",
    "process.rss_bytes",
    "gc.cyclic_garbage",
)


def _names(text: str) -> list[str]:
    """The metric names in ``text``, in the order they appear (``<wbr>`` and tags gone)."""
    plain = re.sub(r"<[^>]*>", "", text.replace("<wbr>", ""))
    return [m.group(0) for m in re.finditer("|".join(map(re.escape, LISTED)), plain)]


def _groups(lines: list[str]) -> list[list[str]]:
    """Each run of consecutive lines that begin with a metric name: the rows of one list."""
    groups: list[list[str]] = []
    previous = False
    for line in lines:
        first = line.split()[0] if line.split() else ""
        named = first in LISTED
        if named:
            if not previous:
                groups.append([])
            groups[-1].append(first)
        previous = named
    return groups


def _in_order(listed: list[str], order: list[str]) -> bool:
    return listed == [name for name in order if name in listed]


def test_every_surface_lists_a_checks_metrics_in_one_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("COLUMNS", "200")  # no row folds: each list is one line a metric
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_spread=SPREAD)
    live = pytester.runpytest_subprocess(
        "--graphleak",
        "-v",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "--graphleak-report=run.json",
        "--junitxml=junit.xml",
    )
    live.assert_outcomes(failed=1)
    command = [sys.executable, "-m", "pytest_graphleak", "report", "run.json"]
    text = subprocess.run(command, capture_output=True, text=True, cwd=pytester.path, timeout=120)
    subprocess.run(
        [*command, "--html", "out.html"],
        capture_output=True,
        cwd=pytester.path,
        timeout=120,
        check=False,
    )
    page = (pytester.path / "out.html").read_text(encoding="utf-8")

    # The reference: the HTML card's table, rendered from the JSON report: grown first,
    # then each part in the listing order.
    start = page.index('<table class="metrics">')
    table = page[start : page.index("</table>", start)]
    rows = re.findall(r"<tr( class=\"grew\")?><td class=\"mono\">(.*?)</td>", table)
    order = [_names(name)[0] for _, name in rows]
    grown = [_names(name)[0] for grew, name in rows if grew]
    assert grown[:3] == list(LISTED[:3]), order  # the minigrad counts grew, exactly
    assert {"process.rss_bytes", "gc.cyclic_garbage"} <= set(order), order
    assert order == [
        *[m for m in LISTED if m in grown],
        *[m for m in LISTED if m in order and m not in grown],
    ]

    lists: dict[str, list[str]] = {}
    out = live.outlines
    failures = out[out.index(next(x for x in out if "= FAILURES =" in x)) :]
    section = failures[failures.index(next(x for x in failures if "graphleak report" in x)) :]
    failure = failures[: len(failures) - len(section)]
    growth_rows, series_rows = _groups(failure)  # the "grew:" rows, then the -v series
    lists |= {"failure text": growth_rows, "-v series": series_rows}
    (lists["report section"],) = _groups(section)
    annotation = next(x for x in out if x.startswith("::error"))
    lists["annotation"] = _names(annotation.split("grows: ")[1].split("%0A")[0])
    step_summary = summary.read_text(encoding="utf-8").replace("\\_", "_")
    lists["step summary"] = _names(step_summary.split("grows: ")[1].split("<br>")[0])
    junit = (pytester.path / "junit.xml").read_text(encoding="utf-8")
    lists["junit"] = _names(" ".join(re.findall(r'name="graphleak\.([^"]*)\.per_step"', junit)))
    report_rows, report_series = _groups(text.stdout.splitlines())
    lists |= {"graphleak report": report_rows, "graphleak report series": report_series}
    verdict = re.search(r"<p>verdict: (.*?)</p>", page)
    assert verdict is not None
    lists["html verdict"] = _names(verdict.group(1))
    lists["html charts"] = [
        name for name in re.findall(r'aria-label="([^"]*)"', page) if name in LISTED
    ]
    for surface, listed in lists.items():
        assert listed, surface
        assert _in_order(listed, order), (surface, listed, order)
    for surface in (
        "failure text",
        "-v series",
        "report section",
        "annotation",
        "step summary",
        "graphleak report",
        "html verdict",
    ):
        assert lists[surface] == grown, surface  # the lists of what grew, all alike
    assert lists["junit"] == order


def _noisy_check(malloc: list[float]) -> CheckResult:
    """A leak of tensors with RSS and malloc sampled: each noisy metric with its own
    tolerance (malloc's a share of RSS's, as ``pipeline.declarations`` makes them)."""
    series = {
        "minigrad.tensors": [float(i) for i in range(8)],
        "process.rss_bytes": [1e8 + 4096.0 * i for i in range(8)],
        "process.malloc_bytes": malloc,
        "gc.cyclic_garbage": [0.0] * 8,
    }
    declarations = {
        "minigrad.tensors": Declaration("objects", "tensors"),
        "process.rss_bytes": Declaration("bytes", "memory", noisy=True, tolerance=1024.0**2),
        "process.malloc_bytes": Declaration(
            "bytes", "memory", noisy=True, tolerance=0.875 * 1024.0**2
        ),
        "gc.cyclic_garbage": Declaration("objects", "cycles"),
    }
    units = {name: found.unit for name, found in declarations.items()}
    verdict = Verdict(
        True,
        [Growth("minigrad.tensors", 2.0, 7.0, 1.0)],
        "list-accumulation",
        "grew: minigrad.tensors +1/step",
    )
    return CheckResult("t.py::test_x", 6, 2, series, units, verdict, declarations=declarations)


def _caption(check: CheckResult) -> str:
    charts = Cards(draw=None, root=None).charts(check)
    found = re.search(r'<p class="muted">(.*?)</p>', charts)
    assert found is not None
    return found.group(1)


def test_the_band_caption_names_each_banded_metric_with_its_own_tolerance() -> None:
    caption = _caption(_noisy_check([5e6 + 100.0 * i for i in range(8)]))
    assert (
        "green band: the growth per step tolerated as noise (process.malloc_bytes "
        "896.0 KiB/step, process.rss_bytes 1.0 MiB/step), growth inside it is not a "
        "leak"
    ) in caption
    assert "RSS and CUDA reserved" not in caption
    assert caption.endswith("zero throughout, not drawn: gc.cyclic_garbage")
    charts = Cards(draw=None, root=None).charts(_noisy_check([5e6] * 8))
    assert charts.count('<polygon class="band"') == 2  # one band a metric named


def test_the_caption_names_no_band_that_is_not_drawn() -> None:
    # malloc unreadable after warmup: its chart has no measured point, so no band
    check = _noisy_check([5e6, 5e6, *[float("nan")] * 6])
    caption = _caption(check)
    assert "(process.rss_bytes 1.0 MiB/step)" in caption, caption
    assert "process.malloc_bytes 896" not in caption
    charts = Cards(draw=None, root=None).charts(check)
    assert charts.count('<polygon class="band"') == 1
    # nothing noisy drawn: no band, no caption of one
    exact = _noisy_check([5e6] * 8)
    exact.series = {"minigrad.tensors": exact.series["minigrad.tensors"]}
    assert "green band" not in _caption(exact)


def test_a_report_written_before_declarations_lists_memory_before_unknown_counts() -> None:
    """Without declarations (an older report) a bytes metric counts memory and an object
    metric is of unknown kind: listed last, by name, still never in a dict's order."""
    check = CheckResult(
        "t.py::test_x",
        6,
        2,
        {},
        {"b.rss": "bytes", "a.count": "objects"},
        Verdict(False, reason="steady"),
    )
    assert metric_order(check, ["a.count", "b.rss", "minigrad.x"]) == [
        "b.rss",
        "a.count",
        "minigrad.x",
    ]
