"""What the outlive audit costs on suites whose tests build autograd graphs: the
distribution per test, and the whole suite against plain pytest.

Two suites, each run as fresh ``pytest`` processes, plain and with ``--graphleak``
(the audit on, its default ``warn``), interleaved over rounds:

* **synthetic** (generated into a temp dir, not committed): 600 torch tests that build
  graphs; some keep them in a library's cache (a package under a ``site-packages``
  folder: not the user's), some in a library ``lru_cache``, some leave them in reference
  cycles or in test doubles (a ``Mock`` made in the test) that the collector frees
  later; the module keeps a model registry, an ``lru_cache`` of detached tensors, a
  ``Mock`` that records detached losses, and parametrized input tensors, as a real test
  module does. None of it is reachable from a root of the user's with a graph: the run
  fails if the audit reports anything. It is run twice: as it is, and with a dataset of
  a million objects in a module global (``DATASET``), which the audit's cost per test
  must not follow (it climbs from what a test left alive to its holders: ``outlive/climb``).
* **torchmetrics** (public): its own regression unit tests that compute gradients
  (``tests/unittests/regression -k differentiability``), from a checkout of the
  version installed here. Skipped, and said so, when it is not set up (see
  ``benchmarks/README.md``, "The public suite").

Per test, a plugin given with ``-p`` times the audit's own calls (``Audit.census``,
``audit``, ``judge_pending``, ``fixture_finalised``) and notes whether the test got a
finding: p50, p95, p99 and max over the tests of one run (the median round). Per suite:
whole-process wall time (median of the rounds, paired ratio), peak RSS of the pytest
process, and whether every test's outcome is the same with and without the audit.

    .venv/bin/python benchmarks/bench_audit_heavy.py [--quick] [--out PATH]
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
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    REPO_ROOT,
    fmt_num,
    load_note,
    load_now,
    markdown_table,
    no_dev_plugins,
    parse_args,
    write_results,
)

TESTS = 600
#: Items of the module-level dataset of the second synthetic suite (a list of
#: ``[i, {"label": i}]``: a million objects the collector tracks, reachable from a root).
STATIC = 1_000_000
QUICK_TESTS = 120
ROUNDS = 3
QUICK_ROUNDS = 1
#: Targets (issue 43): per test, and the whole suite against plain pytest.
P50_MS, P99_MS, SLOWEST_MS, SUITE_RATIO = 0.5, 10.0, 50.0, 1.05
#: The public suite: a torchmetrics checkout's tests folder and the packages its tests
#: import (scipy, scikit-learn, cachier...), installed in a folder named site-packages so
#: that they count as libraries. Overridden by the environment.
PUBLIC = Path(
    os.environ.get("GRAPHLEAK_BENCH_TORCHMETRICS", BENCH_DIR / ".public" / "torchmetrics" / "tests")
)
PUBLIC_SITE = Path(
    os.environ.get("GRAPHLEAK_BENCH_TORCHMETRICS_SITE", BENCH_DIR / ".public" / "site-packages")
)
PUBLIC_ARGS = ["unittests/regression", "-k", "differentiability"]
MODES = {"plain pytest": [], "--graphleak": ["--graphleak"]}

TIMER = '''
"""Times the outlive audit's calls per test (the benchmark's plugin, given with -p)."""
import json, os, resource, time
import pytest

TIMES, CPU, FOUND, OUTCOMES = {}, {}, {}, {}
_current = [None]


def _timed(cls, name):
    original = getattr(cls, name)

    def timed(*args, **kwargs):
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            result = original(*args, **kwargs)
        finally:
            nodeid = _current[0]
            if nodeid is not None:
                TIMES[nodeid] = TIMES.get(nodeid, 0.0) + time.perf_counter() - start
                CPU[nodeid] = CPU.get(nodeid, 0.0) + time.thread_time() - cpu
        if isinstance(result, list) and result and _current[0] is not None:
            FOUND[_current[0]] = True
        return result

    setattr(cls, name, timed)


def pytest_configure(config):
    if config.getoption("graphleak", False):
        from pytest_graphleak.outlive.audit import Audit
        for name in ("census", "audit", "judge_pending", "fixture_finalised", "judged"):
            _timed(Audit, name)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    try:
        yield
    finally:
        _current[0] = None


def pytest_runtest_logreport(report):
    if report.failed or report.when == "call" or (report.skipped and report.when == "setup"):
        OUTCOMES[report.nodeid] = report.outcome if report.when == "call" else (
            "skipped" if report.skipped else f"{report.when} failed")


def pytest_sessionfinish(session):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with open(os.environ["GRAPHLEAK_BENCH_TIMES"], "w") as out:
        json.dump({"times": TIMES, "cpu": CPU, "found": FOUND, "outcomes": OUTCOMES,
                   "peak_kib": peak}, out)
'''

LIBRARY = '''
"""A library's caches (this folder is named site-packages: not the user's code)."""
import functools
import torch

_CACHE = {}


def transform(x):
    """Keeps its last outputs, graphs included, as some libraries' caches do."""
    out = (x * 2).tanh()
    _CACHE[len(_CACHE) % 8] = out
    return out


@functools.lru_cache(maxsize=16)
def basis(n):
    weight = torch.ones(4, requires_grad=True)
    return weight * n  # a graph kept by the library's lru_cache
'''

CONFTEST = """
import torch
torch.set_num_threads(1)
"""

SUITE = """
import functools
from unittest import mock

import pytest
import torch

import fakelib

MODELS = {{}}  # a module registry
for _name in ("mlp", "wide"):
    MODELS[_name] = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                        torch.nn.Linear(32, 1))
LOSSES = []
RECORDER = mock.Mock()  # a module-level test double that records detached losses
INPUTS = [torch.randn(8, 16) for _ in range(20)]  # parametrized data, as suites have
DATASET = [[_i, {{"label": _i}}] for _i in range({static})]  # a module-level dataset


@functools.lru_cache(maxsize=32)
def detached_basis(n):
    return torch.randn(4, n)


class Node:
    def __init__(self, value):
        self.me = self  # a reference cycle: the collector frees it later
        self.value = value


def _step(i):
    model = MODELS["mlp" if i % 2 else "wide"]
    loss = model(INPUTS[i % len(INPUTS)]).pow(2).mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss


@pytest.mark.parametrize("i", range({tests}))
def test_step(i):
    kind = i % 8
    loss = _step(i)
    if kind == 1:
        LOSSES.append(loss.item())
    elif kind == 2:
        fakelib.transform(torch.randn(4, requires_grad=True)).sum().backward()
    elif kind == 3:
        assert fakelib.basis(i % 32).sum().item() >= 0
    elif kind == 4:
        Node(MODELS["mlp"](INPUTS[0]).sum())  # a graph left in cyclic garbage
    elif kind == 5:
        callback = mock.Mock()
        callback.on_batch_end(y_pred=MODELS["mlp"](INPUTS[1]))  # a function-scoped mock
    elif kind == 6:
        RECORDER.on_step(loss.detach())
        detached_basis(i % 16)
    assert loss.item() >= 0
"""


@dataclass
class Round:
    wall_s: float
    peak_kib: int
    times: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    found: dict[str, bool] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)


def _run(
    cwd: Path, args: list[str], pythonpath: list[Path], plugins: tuple[str, ...], strict: bool
) -> Round:
    """One pytest process: its wall time, and what the timer plugin wrote."""
    with tempfile.TemporaryDirectory(prefix="bench-audit-run-") as tmp:
        times = Path(tmp) / "times.json"
        (Path(tmp) / "graphleak_bench_timer.py").write_text(TIMER, encoding="utf-8")
        path = [tmp, *map(str, pythonpath), str(REPO_ROOT)]
        env = {
            **os.environ,
            "GRAPHLEAK_BENCH_TIMES": str(times),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(path),
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
            "-p",
            "graphleak_bench_timer",
            *strictly,
            *args,
        ]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode not in (0, 1) or not times.exists():
            raise SystemExit(
                f"pytest {' '.join(args)} exited {done.returncode}:\n"
                f"{(done.stdout + done.stderr)[-3000:]}"
            )
        if strict and done.returncode != 0:
            raise SystemExit(f"the synthetic suite failed or was reported:\n{done.stdout[-3000:]}")
        data = json.loads(times.read_text(encoding="utf-8"))
    return Round(
        wall, data["peak_kib"], data["times"], data["cpu"], data["found"], data["outcomes"]
    )


def _suite(
    cwd: Path,
    args: list[str],
    pythonpath: list[Path],
    rounds: int,
    plugins: tuple[str, ...],
    strict: bool,
) -> dict[str, list[Round]]:
    runs: dict[str, list[Round]] = {mode: [] for mode in MODES}
    for _ in range(rounds):  # interleaved: the machine's load moves both alike
        for mode, extra in MODES.items():
            runs[mode].append(_run(cwd, [*extra, *args], pythonpath, plugins, strict))
    return runs


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rows(name: str, runs: dict[str, list[Round]]) -> tuple[list[list[str]], list[str]]:
    """(the distribution rows, wall and CPU time, and the whole-suite row) of one suite."""
    audited = runs["--graphleak"]
    plain = runs["plain pytest"]
    # the distribution of the round whose wall time is the median
    middle = sorted(audited, key=lambda r: r.wall_s)[len(audited) // 2]
    findings = sum(1 for found in middle.found.values() if found)
    spreads = []
    for clock, times in (("wall", middle.times), ("CPU", middle.cpu)):
        quiet = [t * 1e3 for nodeid, t in times.items() if not middle.found.get(nodeid)]
        p50, p95, p99 = (_quantile(quiet, q) for q in (0.5, 0.95, 0.99))
        slowest = max(quiet, default=0.0)
        met = p50 <= P50_MS and p99 <= P99_MS and slowest <= SLOWEST_MS
        spreads.append(
            [
                f"{name} ({clock} time)",
                f"{len(times):,}",
                f"{findings}",
                f"{fmt_num(p50)} ms",
                f"{fmt_num(p95)} ms",
                f"{fmt_num(p99)} ms",
                f"{fmt_num(slowest)} ms",
                f"{fmt_num(sum(times.values()))} s",
                verdict(met),
            ]
        )
    wall_plain = statistics.median(r.wall_s for r in plain)
    wall_audit = statistics.median(r.wall_s for r in audited)
    paired = statistics.median(a.wall_s / p.wall_s for a, p in zip(audited, plain, strict=True))
    rss = statistics.median(a.peak_kib / p.peak_kib for a, p in zip(audited, plain, strict=True))
    same = all(a.outcomes == p.outcomes for a, p in zip(audited, plain, strict=True))
    suite = [
        name,
        f"{len(plain)}",
        f"{fmt_num(wall_plain)} s",
        f"{fmt_num(wall_audit)} s",
        f"{paired:.3f}x",
        f"{rss:.3f}x",
        "yes" if same else "**no**",
        verdict(paired <= SUITE_RATIO and rss <= 1.05 and same),
    ]
    return spreads, suite


def verdict(met: bool) -> str:
    return "**met**" if met else "**not met**"


def _synthetic(
    tests: int, rounds: int, plugins: tuple[str, ...], static: int = 0
) -> dict[str, list[Round]]:
    with tempfile.TemporaryDirectory(prefix="bench-audit-heavy-") as tmp:
        folder = Path(tmp) / "suite"
        library = Path(tmp) / "site-packages" / "fakelib"
        library.mkdir(parents=True)
        folder.mkdir()
        (library / "__init__.py").write_text(textwrap.dedent(LIBRARY), encoding="utf-8")
        (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST), encoding="utf-8")
        (folder / "test_heavy.py").write_text(
            SUITE.format(tests=tests, static=static), encoding="utf-8"
        )
        return _suite(folder, [str(folder)], [library.parent], rounds, plugins, strict=True)


def public_suite_missing() -> str:
    """Why the public suite is not run here ("" when it can be)."""
    try:
        import torchmetrics  # noqa: F401
    except ImportError:
        return "torchmetrics is not installed"
    if not (PUBLIC / "unittests" / "regression").is_dir():
        return f"no torchmetrics checkout at {PUBLIC}"
    if not PUBLIC_SITE.is_dir():
        return f"no folder {PUBLIC_SITE} with its tests' packages (scipy, scikit-learn, cachier)"
    return ""


def main() -> None:
    args = parse_args(__doc__ or "")
    rounds = QUICK_ROUNDS if args.quick else ROUNDS
    plugins = no_dev_plugins(args.quick)
    tests = QUICK_TESTS if args.quick else TESTS
    load_before = load_now()
    suites = {"synthetic graph-heavy suite": _synthetic(tests, rounds, plugins)}
    if not args.quick:  # a quick run (the test suite's smoke test) keeps to one suite
        big = "the same, a big dataset in a module global"
        suites[big] = _synthetic(tests, rounds, plugins, STATIC)
    missing = public_suite_missing()
    if not missing and not args.quick:  # a quick run leaves the 30 s collection out
        suites["torchmetrics regression, -k differentiability"] = _suite(
            PUBLIC, PUBLIC_ARGS, [PUBLIC_SITE], rounds, plugins, strict=False
        )
    spreads, wholes = [], []
    for name, runs in suites.items():
        spread, whole = _rows(name, runs)
        spreads.extend(spread)
        wholes.append(whole)
    load_after = load_now()
    why = "a quick run leaves it out" if args.quick else missing
    note = (
        ""
        if not why
        else f'\n\nThe public suite was not run: {why} (benchmarks/README.md, "The public suite").'
    )
    note += (
        f'\n\nThe big dataset: a list of {STATIC:,} `[i, {{"label": i}}]` in the test '
        "module (as many objects the collector tracks, all reachable from a root)"
        + ("; a quick run leaves that suite out." if args.quick else ".")
    )
    body = (
        "Per test: the audit's own calls, over the tests without a finding (the round of "
        "median wall time): wall-clock time, and the CPU time of the thread that runs them "
        "(what the audit itself spends, whatever else the machine runs)."
        "\n\n"
        + markdown_table(
            [
                "suite",
                "tests audited",
                "with a finding",
                "p50",
                "p95",
                "p99",
                "max",
                "audit total",
                f"p50 <= {P50_MS:g} ms, p99 <= {P99_MS:g} ms, max <= {SLOWEST_MS:g} ms",
            ],
            spreads,
        )
        + "\n\nWhole suite: fresh pytest processes, plain and --graphleak interleaved; "
        "wall time median of the rounds; ratios are medians of the paired rounds' ratios."
        "\n\n"
        + markdown_table(
            [
                "suite",
                "rounds",
                "plain pytest",
                "--graphleak",
                "time ratio",
                "peak RSS ratio",
                "same outcomes",
                f"time <= {SUITE_RATIO:g}x, RSS <= 1.05x, same outcomes",
            ],
            wholes,
        )
        + note
        + "\n\n"
        + load_note(load_before, load_after)
    )
    write_results(
        "audit_heavy", "The audit on graph-heavy suites", body, out=args.out, quick=args.quick
    )


if __name__ == "__main__":
    main()
