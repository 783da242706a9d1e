#!/usr/bin/env python3
"""Open a graphleak HTML report in real headless Chromium and check that it works offline.

    python scripts/check_html_chromium.py [REPORT.html] [--screenshot OUT.png] [--width 480]

Without REPORT.html, a sample report (a leaky, a warned and a clean check, with
a retained-graph drawing) is rendered first. Checks, each a failure when broken:
  * Chromium loads the file and exits cleanly;
  * no console message at all (the report has no script, so any message is an error);
  * the page makes no network request (read from Chromium's net log);
  * the DOM Chromium built holds every chart: one <svg class="chart"> with a
    <polyline> per metric series in the report;
  * a screenshot is written (look at it: the charts must be drawn).
Needs Debian's ``chromium`` (``apt-get install -y chromium``); not part of the
default test run. Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    # Any host lookup fails, so a page that tried the network could not hide it.
    "--host-resolver-rules=MAP * ~NOTFOUND",
]


def sample_report(path: Path) -> None:
    """A report with every section the renderer has: charts, chain, sites, a graph."""
    from pytest_graphleak.report.html import render_html
    from pytest_graphleak.report.json_doc import CheckedTest, build_report
    from pytest_graphleak.result import CheckResult, CreationSite, Diagnosis, Growth, Verdict

    warmup, steps = 3, 12
    calls = warmup + steps
    leaky = CheckResult(
        name="tests/test_train.py::test_step[list]",
        steps=steps,
        warmup=warmup,
        series={
            "minigrad.tensors": [40.0 + 3 * i for i in range(calls)],
            "minigrad.nodes": [25.0 + 2 * i for i in range(calls)],
            "process.rss_bytes": [9.0e7 + (i % 3) * 4096 for i in range(calls)],
        },
        units={
            "minigrad.tensors": "objects",
            "minigrad.nodes": "objects",
            "process.rss_bytes": "bytes",
        },
        verdict=Verdict(
            leaked=True,
            growths=[
                Growth("minigrad.tensors", 49.0, 82.0, 3.0),
                Growth("minigrad.nodes", 31.0, 53.0, 2.0),
            ],
            pattern="list-accumulation",
            reason="minigrad.tensors grew by 3 per step over 12 steps",
        ),
        diagnosis=Diagnosis(
            pattern="list-accumulation",
            chain=["fixture 'state'", "dict['losses']", "list(len=15)", "Tensor(shape=(), <loss>)"],
            sites=[CreationSite("tests/test_train.py", 21, "losses.append(loss)", 3, "step")],
            notes=["the list grows by one graph-carrying tensor per step"],
        ),
    )
    cyclic = CheckResult(
        name="tests/test_hooks.py::test_hook",
        steps=steps,
        warmup=warmup,
        series={"torch.tensors": [10.0 + i // 2 for i in range(calls)]},
        units={"torch.tensors": "objects"},
        verdict=Verdict(True, [Growth("torch.tensors", 11.0, 17.0, 0.5)], "cycle", "cycle"),
        diagnosis=Diagnosis(
            pattern="cycle", cycle=["Tensor", "._backward_hooks", "dict", "closure 'fn'"]
        ),
    )
    clean = CheckResult(
        name="tests/test_train.py::test_step[fixed]",
        steps=steps,
        warmup=warmup,
        series={"minigrad.tensors": [40.0 + min(i, 2) for i in range(calls)]},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(False, reason="steady after warmup"),
    )
    tests = [
        CheckedTest(leaky.name, "failed", [leaky.to_dict()]),
        CheckedTest(cyclic.name, "passed", [cyclic.to_dict()]),
        CheckedTest(clean.name, "passed", [clean.to_dict()]),
    ]
    report = build_report(tests, generated_by="check_html_chromium sample")
    path.write_text(render_html(report), encoding="utf-8")


def run_chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def page_requests(net_log: Path) -> list[str]:
    """URLs the page itself asked for over the network (not Chromium's own traffic):
    requests whose network isolation key is the page's file:// origin."""
    if not net_log.exists():
        return []
    log = json.loads(net_log.read_text(encoding="utf-8", errors="replace"))
    urls = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if "url" in params and "file://" in str(params.get("network_isolation_key", "")):
            urls.append(params["url"])
    return sorted(set(urls))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", nargs="?", help="the HTML report (default: a sample)")
    parser.add_argument("--screenshot", default=None, help="PNG to write (default: beside it)")
    parser.add_argument("--chromium", default="chromium", help="the browser executable")
    parser.add_argument(
        "--width", type=int, default=1200, help="window width in px (480: the narrow layout)"
    )
    parser.add_argument("--height", type=int, default=1800, help="window height in px")
    args = parser.parse_args(argv)

    chromium = shutil.which(args.chromium)
    if chromium is None:
        print(f"error: {args.chromium!r} not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="graphleak-chromium-"))
    report = Path(args.report) if args.report else work / "sample.html"
    if not args.report:
        sample_report(report)
    if not report.is_file():
        print(f"error: no such report: {report}", file=sys.stderr)
        return 2
    url = report.resolve().as_uri()
    shot = Path(args.screenshot) if args.screenshot else report.with_suffix(".png")
    problems: list[str] = []

    net_log = work / "net.json"
    taken = run_chromium(
        chromium,
        work / "profile-1",
        "--enable-logging=stderr",
        "--v=0",
        f"--log-net-log={net_log}",
        f"--window-size={args.width},{args.height}",
        f"--screenshot={shot.resolve()}",
        url,
    )
    if taken.returncode != 0:
        problems.append(f"chromium exited with {taken.returncode}: {taken.stderr[-2000:]}")
    console = [line for line in taken.stderr.splitlines() if ":CONSOLE" in line]
    problems.extend(f"console message: {line}" for line in console)
    problems.extend(f"network request from the page: {u}" for u in page_requests(net_log))
    if not shot.is_file() or shot.stat().st_size < 5000:
        problems.append(f"no usable screenshot at {shot}")

    dumped = run_chromium(chromium, work / "profile-2", "--dump-dom", url)
    dom = dumped.stdout
    source = report.read_text(encoding="utf-8")
    expected = source.count('class="chart"')
    drawn = len(re.findall(r'<svg[^>]*class="chart"[^>]*>.*?<polyline', dom, re.DOTALL))
    if expected == 0:
        problems.append("the report has no chart at all")
    if drawn != expected:
        problems.append(f"{drawn} of {expected} charts have a drawn series in Chromium's DOM")

    print(f"report:     {report}")
    print(f"screenshot: {shot}")
    print(f"charts:     {drawn} drawn of {expected}")
    graphs = dom.count('<div class="graph">')
    print(f"graphs:     {graphs} retained-graph drawings")
    for problem in problems:
        print(f"FAIL: {problem}")
    print("OK" if not problems else f"{len(problems)} problem(s)")
    shutil.rmtree(work / "profile-1", ignore_errors=True)
    shutil.rmtree(work / "profile-2", ignore_errors=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
