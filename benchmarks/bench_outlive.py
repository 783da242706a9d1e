"""What the outlive audit costs per test: 1,000 unmarked torch tests, a 150k-object heap.

With ``--graphleak`` every test is audited after its teardown for autograd graphs it made
that are still alive (``pytest_graphleak/outlive/``): each autograd library's
node counter read when its call phase begins and after its teardown, and when the test
made graph nodes, a search from the roots for graphs numbered in between. This runs the
same generated suite (1,000 tests, each a forward and backward pass of a small torch
model; every tenth keeps ``loss.item()`` in a module list; a conftest that imports torch
and fills the heap with 150,000 objects) three ways, interleaved over rounds, each a
fresh ``pytest`` process:

* plain ``pytest`` (no ``--graphleak``);
* ``pytest --graphleak --graphleak-outlive=off`` (the plugin on, the audit off);
* ``pytest --graphleak`` (the audit on, its default ``warn``);

and times each test's whole protocol (setup, call, teardown and the audit) with a
hookwrapper of the conftest. It also times the census alone in this process, around one
torch step, on heaps of 10k to 1M objects (with the search from a module global that
holds the model), the peak RSS of a suite that leaves cyclic garbage, and what
``--graphleak-outlive-sites=rerun`` costs a test the audit names (50 tests that each
append their loss to a module list).

    .venv/bin/python benchmarks/bench_outlive.py [--quick] [--out PATH]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    QUICK_NO_DEV_PLUGINS,
    REPO_ROOT,
    fill_heap,
    fmt_num,
    markdown_table,
    parse_args,
    pin_threads,
    tracked_object_count,
    write_results,
)

TESTS = 1_000
QUICK_TESTS = 200  # quick: fewer tests, one round (the target row names no count)
HEAP_OBJECTS = 150_000
ROUNDS = 5
QUICK_ROUNDS = 1
TARGET_MS = 0.5
GARBAGE_TESTS = 9_000
QUICK_GARBAGE_TESTS = 2_000
OFFENDERS = 50
QUICK_OFFENDERS = 5  # the rows are the runs, not the count: a quick run needs a few
RERUN_MODES = {
    "plain pytest": [],
    "--graphleak (sites off)": ["--graphleak"],
    "--graphleak --graphleak-outlive-sites=rerun": [
        "--graphleak",
        "--graphleak-outlive-sites=rerun",
    ],
}
MODES = {
    "plain pytest": [],
    "--graphleak --graphleak-outlive=off": ["--graphleak", "--graphleak-outlive=off"],
    "--graphleak (audit on)": ["--graphleak"],
}
#: A quick run's sessions: the audit's paths and what they are compared with.
QUICK_MODES = (
    "plain pytest",
    "--graphleak (audit on)",
    "--graphleak --graphleak-outlive-sites=rerun",
)

CONFTEST = f"""
import json, os, time
import pytest
import torch

torch.set_num_threads(1)
HEAP = [{{"i": i}} for i in range({HEAP_OBJECTS})]
TIMES = []


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.perf_counter()
    yield
    TIMES.append(time.perf_counter() - start)


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_OUTLIVE_TIMES"], "w") as out:
        json.dump({{"times": TIMES, "objects": len(__import__("gc").get_objects())}}, out)
"""

SUITE = """
import pytest
import torch

MODEL = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
LOSSES = []


@pytest.mark.parametrize("i", range({tests}))
def test_step(i):
    x = torch.randn(8, 16)
    loss = MODEL(x).pow(2).mean()
    loss.backward()
    MODEL.zero_grad(set_to_none=True)
    if i % 10 == 0:
        LOSSES.append(loss.item())
    assert loss.item() >= 0
"""


OFFENDING = """
import pytest
import torch

MODEL = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
LOSSES = []


@pytest.mark.parametrize("i", range({tests}))
def test_step(i):
    x = torch.randn(8, 16)
    loss = MODEL(x).pow(2).mean()
    LOSSES.append(loss)
"""


def _run_suite(
    folder: Path, args: list[str], *, strict: bool = True, plugins: tuple[str, ...] = ()
) -> tuple[list[float], int, float]:
    """Per-test protocol times (s), gc-tracked objects at the end, session wall time.
    ``strict``: an outlive warning fails the run (no test may be named); ``plugins``:
    ``-p no:...`` arguments (a quick run leaves out the dev environment's plugins)."""
    times_file = folder / "times.json"
    env = {
        **os.environ,
        "BENCH_OUTLIVE_TIMES": str(times_file),
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
    }
    strictly = ["-W", "error::pytest_graphleak.GraphOutliveWarning"] if strict else []
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        *plugins,
        *strictly,
        *args,
        str(folder),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        what = " ".join(args) or "plain"
        raise SystemExit(f"bench_outlive: {what} failed:\n{done.stdout}{done.stderr}")
    data = json.loads(times_file.read_text())
    return data["times"], int(data["objects"]), wall


def _suite_table(
    tests: int, rounds: int, plugins: tuple[str, ...], modes: dict[str, list[str]]
) -> tuple[str, dict[str, float]]:
    per_test: dict[str, list[float]] = {mode: [] for mode in modes}
    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    objects = 0
    with tempfile.TemporaryDirectory(prefix="bench-outlive-") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (folder / "test_suite.py").write_text(SUITE.format(tests=tests))
        for _ in range(rounds):
            for mode, args in modes.items():
                times, objects, wall = _run_suite(folder, args, plugins=plugins)
                per_test[mode].append(statistics.median(times))
                walls[mode].append(wall)
    medians = {mode: statistics.median(values) * 1e3 for mode, values in per_test.items()}
    plain = medians["plain pytest"]
    rows = []
    for mode in modes:
        wall = statistics.median(walls[mode])
        extra = medians[mode] - plain
        rows.append(
            [
                mode,
                f"{fmt_num(medians[mode])} ms",
                f"{fmt_num(extra)} ms",
                f"{medians[mode] / plain:.2f}x",
                f"{fmt_num(wall)} s",
            ]
        )
    audit = medians["--graphleak (audit on)"] - plain
    verdict = "**met**" if audit <= TARGET_MS else "**not met**"
    head = [
        "run",
        "per test (median of round medians)",
        "over plain pytest",
        "ratio",
        "session wall time",
    ]
    table = markdown_table(head, rows)
    target = markdown_table(
        [
            "target",
            "tests",
            "heap (gc objects at the end)",
            "audit on, over plain pytest, per test",
            "result",
        ],
        [
            [
                f"audit on, over plain pytest: <= {TARGET_MS:g} ms per test",
                f"{tests:,}",
                f"{objects:,}",
                f"{fmt_num(audit)} ms",
                verdict,
            ]
        ],
    )
    return table + "\n\n" + target, medians


def _census_table(quick: bool) -> str:
    """The census alone, around one torch step, in this process (heap filled here): the
    counters read before and after, then the search from the roots that the audit runs
    when the test made graph nodes (nothing is found: the step keeps no graph)."""
    import gc

    import torch

    from pytest_graphleak.outlive.census import Census, TypeKinds
    from pytest_graphleak.outlive.explain import explain
    from pytest_graphleak.outlive.found import Holder

    pin_threads()
    model = torch.nn.Linear(16, 1)
    roots = {"MODEL": model, "LOSSES": [0.5] * 100}  # what a test module's globals hold
    holders = [Holder(f"global '{name}'", name, value) for name, value in roots.items()]
    rows = []
    heap: list[object] = []
    kinds = TypeKinds()  # kept across tests, as the audit keeps it
    for size in (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000):
        heap.extend(fill_heap(size - len(heap)))
        gc.collect()
        plain, audited = [], []
        searched = 0
        for _ in range(30 if quick else 300):
            start = time.perf_counter()
            model(torch.randn(4, 16)).sum().backward()
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            census = Census(kinds)
            census.begin()
            model(torch.randn(4, 16)).sum().backward()
            assert census.finish()
            young = census.young()  # as the audit does: the young generations first,
            if young is None:  # else (a collection moved them on) the roots' search
                found = explain(census, holders, nodeid="t", backends=census.backends)
                assert not found.results and not found.deferred
                searched += 1
            else:
                young.extend(census.grown_near(roots.values()))
                assert not young
            audited.append(time.perf_counter() - start)
        step, both = statistics.median(plain) * 1e3, statistics.median(audited) * 1e3
        rows.append(
            [
                f"{size:,}",
                f"{tracked_object_count():,}",
                f"{fmt_num(step)} ms",
                f"{fmt_num(both)} ms",
                f"{fmt_num(both - step)} ms",
                f"{searched} of {len(audited)}",
            ]
        )
    heap.clear()
    return markdown_table(
        [
            "heap filled to",
            "gc-tracked objects",
            "torch step alone",
            "step inside the census",
            "census cost",
            "roots searched",
        ],
        rows,
    )


GARBAGE_CONFTEST = """
import json, os, resource
import pytest


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: freed by the cyclic collector only
        self.payload = bytearray(20_000)


@pytest.fixture
def cyclic():
    return Node()


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_OUTLIVE_TIMES"], "w") as out:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        json.dump({"times": [0.0], "objects": len(__import__("gc").get_objects()),
                   "peak_mib": peak}, out)
"""

GARBAGE_SUITE = """
import pytest


@pytest.mark.parametrize("i", range({tests}))
def test_uses_cyclic_fixture(cyclic, i):
    assert cyclic.me is cyclic
"""


def _garbage_table(tests: int, rounds: int, plugins: tuple[str, ...]) -> str:
    """Peak RSS of a suite whose every test leaves ~20 KB of cyclic garbage (a fixture's
    value in a reference cycle): what the collector frees must be what it frees without
    the plugin."""
    modes = {"plain pytest": [], "--graphleak (audit on)": ["--graphleak"]}
    peaks: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-outlive-garbage-") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text(GARBAGE_CONFTEST)
        (folder / "test_garbage.py").write_text(GARBAGE_SUITE.format(tests=tests))
        for _ in range(rounds):
            for mode, args in modes.items():
                _run_suite(folder, args, plugins=plugins)
                data = json.loads((folder / "times.json").read_text())
                peaks[mode].append(float(data["peak_mib"]))
    plain = statistics.median(peaks["plain pytest"])
    rows = []
    for mode in modes:
        peak = statistics.median(peaks[mode])
        rows.append([mode, f"{fmt_num(peak)} MiB", f"{peak / plain:.3f}x"])
    audited = statistics.median(peaks["--graphleak (audit on)"])
    verdict = "**met**" if audited <= plain * 1.05 else "**not met**"
    target = markdown_table(
        ["target", "tests", "audit on, over plain pytest", "result"],
        [
            [
                "peak RSS with the audit on: within 5% of plain pytest's",
                f"{tests:,}",
                f"{(audited / plain - 1) * 100:+.1f}%",
                verdict,
            ]
        ],
    )
    return markdown_table(["run", "peak RSS (median over rounds)", "ratio"], rows) + "\n\n" + target


def _rerun_table(
    rounds: int, offenders: int, plugins: tuple[str, ...], modes: dict[str, list[str]]
) -> str:
    """Per named test: the audit with sites off, and with one re-run for its sites."""
    per_test: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-outlive-rerun-") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (folder / "test_offending.py").write_text(OFFENDING.format(tests=offenders))
        for _ in range(rounds):
            for mode, args in modes.items():
                times, _, _ = _run_suite(folder, args, strict=False, plugins=plugins)
                per_test[mode].append(statistics.median(times))
    medians = {mode: statistics.median(values) * 1e3 for mode, values in per_test.items()}
    plain = medians["plain pytest"]
    rows = [
        [mode, f"{fmt_num(medians[mode])} ms", f"{fmt_num(medians[mode] - plain)} ms"]
        for mode in modes
    ]
    return markdown_table(
        ["run", "per named test (median of round medians)", "over plain pytest"], rows
    )


def main() -> None:
    args = parse_args(__doc__ or "")
    tests = QUICK_TESTS if args.quick else TESTS
    rounds = QUICK_ROUNDS if args.quick else ROUNDS
    plugins = QUICK_NO_DEV_PLUGINS if args.quick else ()  # a full run: the sessions as measured
    offenders = QUICK_OFFENDERS if args.quick else OFFENDERS
    # Each pytest session costs ~3 s of CPU to start (torch, the conftest's heap).
    modes = {m: a for m, a in MODES.items() if not args.quick or m in QUICK_MODES}
    rerun_modes = {m: a for m, a in RERUN_MODES.items() if not args.quick or m in QUICK_MODES}
    suite, _ = _suite_table(tests, rounds, plugins, modes)
    census = _census_table(args.quick)
    garbage_tests = QUICK_GARBAGE_TESTS if args.quick else GARBAGE_TESTS
    garbage = _garbage_table(garbage_tests, 1 if args.quick else 3, plugins)
    rerun = _rerun_table(rounds, offenders, plugins, rerun_modes)
    body = f"""
{tests:,} unmarked torch tests (forward and backward of a 16-32-1 MLP; every tenth keeps
`loss.item()` in a module list), a conftest that imports torch and holds {HEAP_OBJECTS:,}
more objects; each run a fresh `pytest` process, the three runs interleaved over {rounds}
rounds. Per test: the whole protocol (setup, call, teardown, the audit), timed by a
hookwrapper of the conftest; the median of each run, then the median over rounds. The
audited runs use `-W error::pytest_graphleak.GraphOutliveWarning`: no test is named.

{suite}

The census alone (`outlive/census.Census`, in this process, as the audit runs it:
`begin()` reads torch's autograd sequence counter, `finish()` reads it again; since the
step made graph nodes, `young()` looks at the young generations for graphs numbered in
between, and the short walk from a module's globals that hold the model looks for
tensors grown in place; when a collection of an older generation ran during the step,
`outlive/explain.explain` searches from those globals instead, counted in the last
column), around one torch step, medians:

{census}

Nothing is frozen or collected: {garbage_tests:,} tests that each leave a fixture's
value of ~20 KB in a reference cycle, peak RSS of the whole session (`ru_maxrss`):

{garbage}

What a test the audit names pays for its sites: {offenders} tests that each append their
loss to a module list (each is named), the same conftest, {rounds} rounds. With
`--graphleak-outlive-sites=rerun` each named test runs once more under the site recorder
and the line tracer (`plugin/outlive_rerun.py`); tests the audit does not name never pay it.

{rerun}

Reading: the census costs the same on every heap size because it never looks at the
old heap: its work is two readings of each library's node counter and, when the test
made graph nodes, a look at the young generations (or, after a collection of an older
one, a search of what the roots reach). The whole-suite rows
include everything else pytest does in a fresh process; on a shared machine their medians
move between runs of the same code by more than the census costs (compare plain pytest
with the plugin on and the audit off, which runs no census), so the target is judged on
the audited run against plain pytest, and the census alone is the table above.
"""
    write_results(
        "outlive", "Outlive audit: cost per unmarked test", body, out=args.out, quick=args.quick
    )


if __name__ == "__main__":
    main()
