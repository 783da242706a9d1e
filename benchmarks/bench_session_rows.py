"""Does the session report need its spool file? Memory and time per checked test.

The session reporter used to write each checked test's results to a private JSON-lines
spool file (with torn-line accounting) "so that thousands of checked tests keep O(1)
memory". This measures what that buys, side by side, for N checked tests whose results
are real ``CheckResult.to_dict()`` rows (a minigrad leak with its diagnosis, and clean
checks; one leak in ten):

* the spool: a line per test in a temporary file, read back at the end, which loads
  every row anyway because the summary and the reports need them all;
* rows kept in memory as the check dicts themselves;
* rows kept in memory as one compact JSON text per test (what replaced the spool);
* what pytest itself keeps per test of the same session (its reports and items), from a
  real ``pytest -p no:graphleak`` run of N trivial tests, for scale.

and what writing the JSON report costs at the end of the session: building the document
(``build_document``) and its text, as ``json_doc.dumps`` writes it now (the top level
indented, one line per test, json's C encoder) next to how it wrote it before (every value
on its own line, ``indent=2``, which makes json use its pure-Python encoder, after a walk
that turned non-finite numbers into ``null``), re-enacted here.

    .venv/bin/python benchmarks/bench_session_rows.py [--quick] [--out PATH]
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_graphleak.report.json_doc import CheckedTest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    REPO_ROOT,
    fmt_num,
    markdown_table,
    no_dev_plugins,
    parse_args,
    write_results,
)

SIZES = (1_000, 10_000)
#: A check as ``CheckResult.to_dict`` gives it; a test's row as it arrives.
Doc = dict[str, object]
Row = tuple[str, str, list[Doc]]

QUICK_SIZES = (1_000,)  # a size of the full run: the smoke test compares rows
#: A quick run's pytest session holds this many trivial tests (1,000 take seconds).
QUICK_PYTEST_TESTS = 100
LEAK_EVERY = 10


def _rows() -> tuple[Doc, Doc]:
    """A real leaky check (with its diagnosis) and a real clean one, as plain dicts."""
    import minigrad as mg
    from pytest_graphleak import check

    kept: list[object] = []
    w = mg.Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)

    def leaky() -> None:
        loss = (w * 2.0).sum()
        loss.backward()
        w.grad = None
        kept.append(loss)

    def clean() -> None:
        loss = (w * 2.0).sum()
        loss.backward()
        w.grad = None

    leak = check(leaky, name="tests/test_train.py::test_leaky_step").to_dict()
    ok = check(clean, name="tests/test_train.py::test_clean_step").to_dict()
    assert leak["leaked"] and not ok["leaked"]
    return leak, ok


def _checked_tests(n: int, leak: Doc, ok: Doc) -> list[Row]:
    """n (nodeid, outcome, checks) triples, each row its own objects (as they arrive
    from separate reports), not n references to one dict."""
    leak_text, ok_text = json.dumps(leak), json.dumps(ok)
    out: list[Row] = []
    for i in range(n):
        leaked = i % LEAK_EVERY == 0
        check = json.loads(leak_text if leaked else ok_text)
        nodeid = f"tests/test_suite_{i // 100}.py::test_step[{i}]"
        check["name"] = nodeid
        out.append((nodeid, "failed" if leaked else "passed", [check]))
    return out


# Three ways to keep the rows until the end of the session: (keep, finish) pairs. keep
# takes the arriving rows and returns what the reporter holds; finish turns that into the
# rows the summary and the reports are built from.
def _keep_dicts(arriving: list[Row], _: Path) -> object:
    from pytest_graphleak.report.json_doc import CheckedTest

    return {nodeid: CheckedTest(nodeid, outcome, checks) for nodeid, outcome, checks in arriving}


def _finish_dicts(held: object, _: Path) -> list[CheckedTest]:
    return list(held.values())  # type: ignore[attr-defined]


def _keep_text(arriving: list[Row], _: Path) -> object:
    return {
        nodeid: json.dumps([outcome, checks], separators=(",", ":"))
        for nodeid, outcome, checks in arriving
    }


def _finish_text(held: object, _: Path) -> list[CheckedTest]:
    from pytest_graphleak.report.json_doc import CheckedTest

    texts: dict[str, str] = held  # type: ignore[assignment]
    return [CheckedTest(nodeid, *json.loads(text)) for nodeid, text in texts.items()]


def _keep_spool(arriving: list[Row], directory: Path) -> object:
    """The removed ResultSpool's work, re-enacted: one JSON line per test, the file
    opened per test (no handle outlives a test)."""
    path = directory / "results.jsonl"
    for nodeid, outcome, checks in arriving:
        line = json.dumps({"nodeid": nodeid, "outcome": outcome, "checks": checks})
        with open(path, "ab") as handle:
            handle.write(line.encode("ascii") + b"\n")
    return None


def _finish_spool(_: object, directory: Path) -> list[CheckedTest]:
    from pytest_graphleak.report.json_doc import CheckedTest

    tests = {}
    for line in (directory / "results.jsonl").read_bytes().splitlines():
        record = json.loads(line)
        tests[record["nodeid"]] = CheckedTest(record["nodeid"], record["outcome"], record["checks"])
    return list(tests.values())


VARIANTS = {
    "dicts": (_keep_dicts, _finish_dicts),
    "compact JSON text": (_keep_text, _finish_text),
    "spool file": (_keep_spool, _finish_spool),
}


def _measure(variant: str, n: int, leak: Doc, ok: Doc) -> dict[str, float]:
    """Memory (tracemalloc, one pass) and time (another pass, tracing off) of a variant."""
    keep, finish = VARIANTS[variant]
    with tempfile.TemporaryDirectory(prefix="bench-rows-") as name:
        directory = Path(name)
        gc.collect()
        tracemalloc.start()  # before the rows arrive: what stays of them is what is held
        arriving = _checked_tests(n, leak, ok)
        held = keep(arriving, directory)
        del arriving
        gc.collect()
        during = tracemalloc.get_traced_memory()[0]
        rows = finish(held, directory)
        at_end = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del held, rows
    with tempfile.TemporaryDirectory(prefix="bench-rows-") as name:
        directory = Path(name)
        arriving = _checked_tests(n, leak, ok)
        gc.collect()
        start = time.perf_counter()
        held = keep(arriving, directory)
        keep_s = time.perf_counter() - start
        del arriving
        start = time.perf_counter()
        rows = finish(held, directory)
        finish_s = time.perf_counter() - start
        del held, rows
    gc.collect()
    return {"during": during, "at_end": at_end, "keep_s": keep_s, "finish_s": finish_s}


def _strict(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def _indented(document: Doc) -> str:
    """The report text as ``dumps`` wrote it before: every value on its own line."""
    return json.dumps(_strict(document), indent=2, sort_keys=True, allow_nan=False) + "\n"


def _document_cost(n: int, leak: Doc, ok: Doc) -> dict[str, float]:
    """Seconds to build the document and to write its text either way, and the sizes."""
    from pytest_graphleak.report.json_doc import build_document, dumps

    rows = _finish_dicts(_keep_dicts(_checked_tests(n, leak, ok), Path()), Path())
    gc.collect()
    start = time.perf_counter()
    document = build_document(rows, generated_by="bench")
    cost = {"build_s": time.perf_counter() - start}
    parsed = []  # the pure-Python encoder is slow: its text is made once, then compared
    for name, write in (("before", _indented), ("now", dumps)):
        start = time.perf_counter()
        text = write(document)
        cost[f"{name}_s"] = time.perf_counter() - start
        cost[f"{name}_bytes"] = len(text.encode())
        parsed.append(json.loads(text))
    assert parsed[0] == parsed[1]  # the same document
    return cost


PYTEST_PROBE = """
import os, psutil
def pytest_sessionfinish(session):
    rss = psutil.Process().memory_info().rss
    with open(os.environ["BENCH_RSS_OUT"], "w") as out:
        out.write(str(rss))
"""


def _pytest_rss(n: int, workdir: Path, quick: bool) -> float:
    """RSS at the end of a real pytest session of n trivial tests (graphleak off)."""
    tests = workdir / f"n{n}"
    tests.mkdir()
    (tests / "conftest.py").write_text(PYTEST_PROBE)
    (tests / "test_many.py").write_text(
        f"import pytest\n\n@pytest.mark.parametrize('i', range({n}))\ndef test_step(i):\n    pass\n"
    )
    out = tests / "rss.txt"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:graphleak",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *no_dev_plugins(quick),
            str(tests),
        ],
        cwd=tests,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env={**os.environ, "BENCH_RSS_OUT": str(out), "PYTHONPATH": str(REPO_ROOT)},
    )
    return float(out.read_text())


def _per_test(held: float, n: int) -> str:
    return f"{fmt_num(held / 2**20)} MiB ({fmt_num(held / n / 1024)} KiB/test)"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    leak, ok = _rows()
    leak_size = len(json.dumps(leak))
    ok_size = len(json.dumps(ok))
    rows, report_rows = [], []
    last: dict[str, dict[str, float]] = {}  # the largest size, per variant
    with tempfile.TemporaryDirectory(prefix="bench-pytest-") as directory:
        base = _pytest_rss(1, Path(directory), args.quick)
        for n in sizes:
            pytest_n = min(n, QUICK_PYTEST_TESTS) if args.quick else n
            pytest_rss = _pytest_rss(pytest_n, Path(directory), args.quick)
            pytest_per_test = (pytest_rss - base) / (pytest_n - 1)
            cost = _document_cost(n, leak, ok)
            for name, layout in (
                ("before", "indent=2, every value on its own line (before)"),
                ("now", "top level indented, one line per test (now)"),
            ):
                report_rows.append(
                    [
                        f"{n:,}",
                        layout,
                        f"{fmt_num(cost['build_s'])} s",
                        f"{fmt_num(cost[f'{name}_s'])} s",
                        f"{fmt_num(cost[f'{name}_s'] * 1e6 / n)} µs",
                        f"{fmt_num(cost[f'{name}_bytes'] / 2**20)} MiB",
                    ]
                )
            speedup = cost["before_s"] / cost["now_s"]
            for variant in VARIANTS:
                m = _measure(variant, n, leak, ok)
                last[variant] = m
                rows.append(
                    [
                        f"{n:,}",
                        variant,
                        _per_test(m["during"], n),
                        _per_test(m["at_end"], n),
                        f"{fmt_num(m['keep_s'] * 1e6 / n)} µs",
                        f"{fmt_num(m['finish_s'] * 1e6 / n)} µs",
                        f"{fmt_num(pytest_per_test / 1024)} KiB/test",
                    ]
                )
    table = markdown_table(
        [
            "checked tests",
            "rows kept as",
            "held while tests run",
            "held at the end",
            "keep, per test",
            "read back at the end, per test",
            "pytest's own memory per test (RSS)",
        ],
        rows,
    )
    report_table = markdown_table(
        [
            "checked tests",
            "report text",
            "build the document",
            "write its text",
            "write, per test",
            "size",
        ],
        report_rows,
    )
    dicts, text, spool = last["dicts"], last["compact JSON text"], last["spool file"]
    n = sizes[-1]
    body = (
        f"{table}\n\n"
        f"Rows: real `CheckResult.to_dict()` of a minigrad check, steps 16 after warmup 3: "
        f"a leak with its diagnosis ({leak_size:,} B of JSON) every {LEAK_EVERY}th test, "
        f"clean checks ({ok_size:,} B) otherwise. Memory: `tracemalloc` (Python "
        "allocations still held); pytest's own: RSS at session end of a real run of N "
        "trivial tests minus a run of one, per test"
        f"{f' (N = {QUICK_PYTEST_TESTS} in a quick run)' if args.quick else ''}.\n\n"
        f"Reading ({n:,} tests): the spool holds nothing while the tests run, but at "
        "the end the summary and the reports need every row, so it reads them all back: "
        f"{fmt_num(spool['at_end'] / n / 1024)} KiB/test then, as much as keeping the "
        f"dicts ({fmt_num(dicts['during'] / n / 1024)} KiB/test all along). Compact JSON "
        f"text holds {fmt_num(text['during'] / n / 1024)} KiB/test while the tests run "
        f"({text['during'] / dicts['during']:.0%} of the dicts) for "
        f"{fmt_num(text['keep_s'] * 1e6 / n)} µs of encoding per checked test, next to "
        "the milliseconds of a check's own steps, with no temporary file, no torn lines "
        "to account for and no read-back that can fail. So the session reporter keeps "
        "one compact JSON text per checked test in memory and writes each report once, "
        "atomically.\n\n"
        "### The JSON report at the end of the session\n\n"
        f"{report_table}\n\n"
        "Both texts hold the same document (checked by the benchmark); the new one is valid "
        "per `schema.json` as before, not byte-identical: each test is one line, which "
        f"json's C encoder writes ({speedup:.1f}x faster at {n:,} tests), and it is "
        f"{cost['before_bytes'] / cost['now_bytes']:.1f}x smaller without the indentation "
        "of every number. A non-finite number (a probe that failed to read) is looked for "
        "only when the C encoder refuses one, not by a second walk over every value.\n"
    )
    write_results(
        "session_rows",
        "session report: rows in memory vs a spool file",
        body,
        out=args.out,
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
