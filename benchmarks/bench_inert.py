"""What the installed plugin costs a test when ``--graphleak`` is not given.

A project that has pytest-graphleak installed (as a dependency of a dependency, say) runs
its suite without ``--graphleak``: the plugin must then be inert, and cost a test nothing
it can measure. This generates 1,000 trivial tests (``assert i >= 0``) and runs them in
fresh ``pytest`` processes two ways, interleaved over rounds:

* ``-p no:graphleak`` (the plugin not loaded at all);
* the plugin installed, no ``--graphleak`` (what every such project gets).

Side by side, per test: the CPU time of the process (``time.process_time``; wall time on
a shared machine moves with the other processes' load) in the collection
(``pytest_collection``, so per-item work such as reading markers counts) plus the run
loop (``pytest_runtestloop``: every hook of every test's setup, call, teardown and
reports), divided by the number of tests; medians over rounds, their difference and
ratio. Per session: the CPU time from the interpreter's start to ``pytest_sessionstart``
(imports, plugin registration, configure).

What the plugin itself does per test is measured directly in one more session of each
kind: the number of its hook implementations that pytest calls while the tests run
(pluggy's hook-call monitor), and the CPU time of its only per-item work without the flag,
its ``pytest_collection_modifyitems`` (the marker check), called 50 times over the
collected items. The target (within 2 us a test) is judged on these: the side-by-side
difference of two processes on a shared machine moves by more than that between runs of
the same code, and is shown beside them.

    .venv/bin/python benchmarks/bench_inert.py [--quick] [--out PATH]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    QUICK_NO_DEV_PLUGINS,
    REPO_ROOT,
    fmt_num,
    markdown_table,
    parse_args,
    verdict_cell,
    write_results,
)

TESTS = 1_000
QUICK_TESTS = 200
ROUNDS = 15
QUICK_ROUNDS = 2
TARGET_US = 2.0
MODES = {
    "-p no:graphleak": ["-p", "no:graphleak"],
    "installed, no --graphleak": [],
}

CONFTEST = """
import json, os, time
import pytest

_TIMES = {}
_CALLS = {"hooks": 0}


def pytest_sessionstart(session):
    _TIMES["start"] = time.process_time()  # CPU since the interpreter started


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection(session):
    start = time.process_time()
    yield
    _TIMES["collection"] = time.process_time() - start


def pytest_collection_finish(session):
    if not os.environ.get("BENCH_INERT_COUNT"):
        return
    plugin = session.config.pluginmanager.get_plugin("graphleak")
    if plugin is None:
        return
    start = time.process_time()
    for _ in range(50):
        plugin.pytest_collection_modifyitems(config=session.config, items=session.items)
    _TIMES["item_work"] = (time.process_time() - start) / 50


def _ours(plugin):
    # a module plugin by its name, a plugin object by its class's module
    name = getattr(plugin, "__name__", None) if isinstance(plugin, type(os)) else None
    return (name or type(plugin).__module__).startswith("pytest_graphleak")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtestloop(session):
    undo = None
    if os.environ.get("BENCH_INERT_COUNT"):
        def before(name, impls, kwargs):
            _CALLS["hooks"] += sum(_ours(impl.plugin) for impl in impls)

        undo = session.config.pluginmanager.add_hookcall_monitoring(before, lambda *a: None)
    start = time.process_time()
    yield
    _TIMES["loop"] = time.process_time() - start
    if undo is not None:
        undo()


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_INERT_OUT"], "w") as out:
        json.dump({**_TIMES, **_CALLS, "tests": session.testscollected}, out)
"""

SUITE = """
import pytest


@pytest.mark.parametrize("i", range({tests}))
def test_trivial(i):
    assert i >= 0
"""


def _session(work: Path, extra: list[str], *, count: bool = False) -> dict[str, float]:
    out = work / "times.json"
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), BENCH_INERT_OUT=str(out), PYTHONDONTWRITEBYTECODE="1"
    )
    env.pop("BENCH_INERT_COUNT", None)
    if count:
        env["BENCH_INERT_COUNT"] = "1"
    # The development plugins are left out on both sides: they cost the same either way
    # and only add noise (and seconds of start-up) to a difference of microseconds.
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *QUICK_NO_DEV_PLUGINS,
        *extra,
        "test_trivial.py",
    ]
    proc = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(
            f"bench_inert: pytest {' '.join(extra)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    data: dict[str, float] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    return data


def _median_iqr(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return statistics.median(values), q[2] - q[0]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    tests = QUICK_TESTS if args.quick else TESTS
    rounds = QUICK_ROUNDS if args.quick else ROUNDS
    per_test: dict[str, list[float]] = {mode: [] for mode in MODES}
    collection: dict[str, list[float]] = {mode: [] for mode in MODES}
    startup: dict[str, list[float]] = {mode: [] for mode in MODES}
    exact: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "conftest.py").write_text(CONFTEST, encoding="utf-8")
        (work / "test_trivial.py").write_text(SUITE.format(tests=tests), encoding="utf-8")
        for extra in MODES.values():  # imports warm in the page cache, not measured
            _session(work, extra)
        for r in range(rounds):
            order = list(MODES.items())
            if r % 2:  # alternate which goes first, so neither always follows the other
                order.reverse()
            for mode, extra in order:
                data = _session(work, extra)
                assert data["tests"] == tests, data
                per_test[mode].append((data["collection"] + data["loop"]) / tests)
                collection[mode].append(data["collection"] / tests)
                startup[mode].append(data["start"])
        for mode, extra in MODES.items():
            exact[mode] = _session(work, extra, count=True)

    base, inert = (statistics.median(per_test[mode]) for mode in MODES)
    diffs = [b - a for a, b in zip(*per_test.values(), strict=True)]  # paired: same round
    rows = []
    for mode in MODES:
        median, iqr = _median_iqr(per_test[mode])
        start_median, start_iqr = _median_iqr(startup[mode])
        rows.append(
            [
                mode,
                f"{fmt_num(median * 1e6)} us (IQR {fmt_num(iqr * 1e6)})",
                f"{fmt_num(statistics.median(collection[mode]) * 1e6)} us",
                f"{fmt_num(start_median * 1e3)} ms (IQR {fmt_num(start_iqr * 1e3)})",
            ]
        )
    table = markdown_table(
        [
            "run",
            "CPU per test: collection + run loop (median over rounds)",
            "of which collection",
            "CPU per session: start to pytest_sessionstart",
        ],
        rows,
    )
    installed = exact["installed, no --graphleak"]
    hooks = installed["hooks"] / tests
    item_us = installed.get("item_work", 0.0) / tests * 1e6
    own_us = item_us  # and 0 for every hook that runs per test (counted: ``hooks``)
    met = hooks == 0 and own_us <= TARGET_US
    target = markdown_table(
        [
            "target",
            "tests",
            "hooks of the plugin called per test (run loop)",
            "its marker check at collection, per item",
            "side by side: over -p no:graphleak per test (medians; paired by round), ratio",
            "result",
        ],
        [
            [
                f"installed without --graphleak: <= {fmt_num(TARGET_US)} us per test",
                f"{tests:,}",
                fmt_num(hooks),
                f"{fmt_num(item_us)} us",
                f"{fmt_num((inert - base) * 1e6)} us; {fmt_num(statistics.median(diffs) * 1e6)} "
                "us; "
                f"{inert / base:.3f}x",
                verdict_cell(met),
            ]
        ],
    )
    reading = (
        "No hook of the plugin runs per test without `--graphleak`, so what it adds per test "
        "is its marker check at collection (a keyword lookup per item)"
        if hooks == 0
        else f"Without `--graphleak`, {fmt_num(hooks)} hook implementations of the plugin "
        "still run per test"
    )
    body = (
        f"{tests:,} trivial tests (`assert i >= 0`, parametrized), each run a fresh `pytest` "
        f"process (`-p no:cacheprovider -p no:randomly`, the development plugins left out "
        f"on both sides), the two runs interleaved over {rounds} rounds. Side by side, per "
        "test: the process's CPU time (`time.process_time`; wall time on a shared machine "
        "moves with the other processes' load) in the collection plus the run loop (every "
        "hook of every test's setup, call, teardown and reports), timed by hookwrappers of "
        "the conftest, divided by the number of tests; per session: the CPU time from the "
        "interpreter's start to `pytest_sessionstart` (imports, plugin registration).\n\n"
        f"{table}\n\n"
        "The plugin's own work per test, measured directly in one more session of each kind: "
        "the hooks pytest calls while the tests run (pluggy's hook-call monitor, not timed), "
        "and the CPU time of its `pytest_collection_modifyitems` (called 50 times over the "
        "collected items). The target is judged on these; the side-by-side difference of two "
        "processes is shown beside them.\n\n"
        f"{target}\n\n"
        f"{reading}. The side-by-side columns compare whole processes, which on a shared "
        "machine differ between runs of the same code (their IQR); what the plugin costs "
        "once per session, mostly its import (`pytest_graphleak.plugin` and what it "
        "imports), is the difference in the start-up column.\n"
    )
    write_results(
        "inert",
        "Installed without --graphleak: cost per test",
        body,
        out=args.out,
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
