"""Shared helpers for the benchmark scripts: timing, heap filling, machine facts, tables.

Every ``bench_<topic>.py`` measures its cases side by side in one run, reports medians
with the interquartile range, and writes a markdown table to ``results/<topic>.md`` that
names the machine it came from. ``--quick`` runs a few iterations only (the smoke test
uses it so the scripts cannot rot); quick results are never written over the committed
tables unless ``--out`` says where.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# One BLAS/OpenMP thread, set before numpy or torch is imported (see ``pin_threads``);
# inherited by the pytest subprocesses the benchmarks start.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
REPO_ROOT = BENCH_DIR.parent

#: Extra live Python objects put on the heap, as a large framework and model would.
HEAP_SIZES = (10_000, 100_000, 1_000_000)


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Stats:
    """Robust summary of repeated timings, in seconds."""

    median: float
    q1: float
    q3: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        if not samples:
            raise ValueError("Stats.of: no samples to summarise")
        ordered = sorted(samples)
        if len(ordered) == 1:
            return cls(ordered[0], ordered[0], ordered[0], 1)
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        return cls(statistics.median(ordered), q1, q3, len(ordered))

    def fmt(self, unit: str = "ms") -> str:
        """``median (IQR)`` in the given unit, e.g. ``0.123 ms (±0.004)``."""
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        return f"{fmt_num(self.median * scale)} {unit} (IQR {fmt_num(self.iqr * scale)})"


def fmt_num(value: float) -> str:
    """Three significant digits, without scientific notation for everyday sizes."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2g}"


def time_calls(
    fn: Callable[[], object],
    *,
    repeat: int,
    number: int = 1,
    setup: Callable[[], object] | None = None,
) -> Stats:
    """Median over ``repeat`` runs of the time of ONE call (each run times ``number`` calls).

    ``setup`` runs before each timed run, outside the timing (e.g. to put the heap back
    into the state the measured call expects).
    """
    if repeat < 1 or number < 1:
        raise ValueError(f"time_calls: repeat={repeat} and number={number} must be >= 1")
    samples = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return Stats.of(samples)


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("inf")


# --------------------------------------------------------------------------- heap


class _Filler:
    """One gc-tracked object of the filler, like a small framework object with a dict."""

    __slots__ = ("payload",)

    def __init__(self, payload: object) -> None:
        self.payload = payload


def fill_heap(n_objects: int) -> list[object]:
    """Return a list holding ``n_objects`` extra live, gc-tracked Python objects.

    A mix of lists, dicts with non-atomic values and ``__slots__`` instances, because
    CPython stops tracking tuples and dicts that hold only atomic values and we want every
    filler object to be visited by ``gc.get_objects()`` and by a collection, as the
    objects of a real framework and model are. Keep the list alive for as long as the
    heap should stay big; drop it and ``gc.collect()`` to shrink the heap again.
    """
    if n_objects < 0:
        raise ValueError(f"fill_heap: n_objects={n_objects} must be >= 0")
    holder: list[object] = []
    shared: list[int] = []
    for i in range(n_objects):
        kind = i % 3
        if kind == 0:
            holder.append([i])
        elif kind == 1:
            holder.append({"ref": shared})
        else:
            holder.append(_Filler(shared))
    return holder


def tracked_object_count() -> int:
    """Number of objects the cyclic GC tracks right now (frozen ones included)."""
    return len(gc.get_objects()) + gc.get_freeze_count()


# --------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> str:
    try:
        import psutil

        return f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    except Exception:  # psutil missing or unsupported platform: say so, do not fail
        return "unknown"


def _version(module: str) -> str:
    """The installed version, read from package metadata (importing torch takes seconds)."""
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_description() -> str:
    """One markdown line naming the machine and software the numbers came from."""
    cores = os.cpu_count() or 0
    try:  # other processes share the cores: say how busy the machine was
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return (
        f"{_cpu_model()}, {cores} cores{load}, {_memory_gib()} RAM; "
        f"{platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, torch {_version('torch')}, "
        f"numpy {_version('numpy')}, pytest {_version('pytest')}"
    )


# --------------------------------------------------------------------------- tables


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table; every cell is rendered with ``str``."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    for row in rows:
        cells = [str(cell).replace("|", "\\|") for cell in row]
        if len(cells) != len(headers):
            raise ValueError(
                f"markdown_table: row {cells!r} has {len(cells)} cells, expected {len(headers)}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict_cell(met: bool) -> str:
    return "**met**" if met else "**not met**"


def load_now() -> str:
    """The load averages over 1, 5 and 15 minutes, as ``uptime`` prints them."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def load_note(before: str, after: str) -> str:
    """A results note: the machine's load when the runs began and ended."""
    return (
        f"Machine load (load averages over 1, 5 and 15 minutes, as `uptime` prints them) "
        f"when the runs began: {before}; when they ended: {after}. Other processes "
        "share the machine: on a loaded one wall-clock times move with the load, CPU "
        "times (a thread's own) much less."
    )


def write_results(
    topic: str, title: str, body: str, *, out: Path | None, quick: bool
) -> Path | None:
    """Write ``body`` under a heading with the machine and command; print it as well.

    The committed table is ``results/<topic>.md``; a ``--quick`` run writes only where
    ``--out`` says (so a smoke run never replaces the real numbers).
    """
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = " (QUICK run: few iterations, numbers are not meaningful)" if quick else ""
    text = (
        f"## {title}\n\n"
        f"Machine: {machine_description()}  \n"
        f"Command: `.venv/bin/python benchmarks/bench_{topic}.py`; measured {stamp}{mode}\n\n"
        f"{body.strip()}\n"
    )
    print(text)
    target = out if out is not None else (None if quick else RESULTS_DIR / f"{topic}.md")
    if target is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def profile_top(
    run: Callable[[], object], rows: int, pattern: str | None = None, calls: int = 1
) -> str:
    """cProfile of ``calls`` calls of ``run()``: the stats header and the first ``rows`` rows
    by own time (only functions matching the regex ``pattern``, if given), repo-relative."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        run()
    profiler.disable()
    out = io.StringIO()
    restrictions = (pattern, rows) if pattern else (rows,)
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(*restrictions)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    table = lines[start : start + rows + 1]  # the header line, then the rows
    return "\n".join(line.replace(str(REPO_ROOT) + "/", "") for line in table)


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few iterations only (smoke test); results are not written unless --out is given",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the markdown table (default: benchmarks/results/<topic>.md)",
    )
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- steps
# Training steps shared by the benchmarks. Each builder returns a zero-argument step
# that owns its model and optimizer (made once, outside the timing), like a test body
# whose fixtures are set up once.


def pin_threads() -> None:
    """One compute thread for torch (and numpy's BLAS where we can say so).

    On a small shared machine a second intra-op thread that spins while another process
    holds the core makes a 1 ms step take 20 ms; one thread keeps the numbers stable
    and the comparison (plain vs checked) fair, since both sides run the same step.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def torch_mlp_step(batch: int = 64, sizes: Sequence[int] = (128, 256, 10)) -> Callable[[], float]:
    """One SGD step of a small torch MLP on a fixed random batch.

    The update is written out instead of using ``torch.optim``: the first optimizer made
    in a process imports ``torch._dynamo`` (seconds), which would dominate a quick run.
    """
    import torch

    pin_threads()
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    params = list(model.parameters())
    x = torch.randn(batch, sizes[0])
    y = torch.randint(0, sizes[-1], (batch,))

    def step() -> float:
        for p in params:
            p.grad = None
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                assert p.grad is not None
                p.add_(p.grad, alpha=-0.01)
        return loss.item()

    return step


def torch_transformer_step(
    batch: int = 8, seq: int = 32, d_model: int = 64, heads: int = 4, vocab: int = 100
) -> Callable[[], float]:
    """One Adam step of a one-layer torch transformer language model."""
    import torch

    pin_threads()
    torch.manual_seed(0)

    class TinyLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, d_model)
            self.block = torch.nn.TransformerEncoderLayer(
                d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True
            )
            self.head = torch.nn.Linear(d_model, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.head(self.block(self.embed(tokens)))
            return logits

    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, vocab, (batch, seq + 1))

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)
        )
        loss.backward()
        opt.step()
        return loss.item()

    return step


def minigrad_mlp_step(
    batch: int = 64, sizes: Sequence[int] = (128, 256, 10)
) -> Callable[[], float]:
    """The same MLP step as ``torch_mlp_step``, on minigrad (mean squared error loss)."""
    import numpy as np

    import minigrad as mg

    rng = np.random.default_rng(0)
    layers: list[mg.nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [mg.nn.Linear(fan_in, fan_out), mg.nn.ReLU()]
    model = mg.nn.Sequential(*layers[:-1])
    opt = mg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = mg.Tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    target = mg.Tensor(rng.standard_normal((batch, sizes[-1])).astype(np.float32))

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        return float(loss.item())

    return step


def leaky_torch_step(every: int = 1) -> tuple[Callable[[], float], list[object]]:
    """A tiny torch step that keeps ONE graph-carrying loss every ``every`` calls.

    Returns the step and the list that leaks (so a caller can clear it between runs).
    ``every=0`` gives the clean twin (``loss.item()`` kept instead).
    """
    import torch

    pin_threads()
    return _step_keeping_losses(torch.randn(8, 8, requires_grad=True), torch.randn(4, 8), every)


def leaky_minigrad_step(every: int = 1) -> tuple[Callable[[], float], list[object]]:
    """The minigrad twin of ``leaky_torch_step``."""
    import numpy as np

    import minigrad as mg

    rng = np.random.default_rng(0)
    weight = mg.Tensor(rng.standard_normal((8, 8)), requires_grad=True)
    return _step_keeping_losses(weight, mg.Tensor(rng.standard_normal((4, 8))), every)


def _step_keeping_losses(
    weight: Any, x: Any, every: int
) -> tuple[Callable[[], float], list[object]]:
    """The step both backends share (their tensors have the same methods)."""
    kept: list[object] = []
    calls = [0]

    def step() -> float:
        calls[0] += 1
        loss = (x @ weight).tanh().sum()
        loss.backward()
        weight.grad = None
        if every and calls[0] % every == 0:
            kept.append(loss)
        return float(loss.item())

    return step, kept


# --------------------------------------------------------------------------- pytest runs

#: Written into a generated test directory: records each test's call-phase duration (the
#: test body under whatever plugin wraps it, without fixture setup) in a JSON file.
DURATIONS_CONFTEST = """
import json, os

_DURATIONS = {}
_OUTCOMES = {}


def pytest_runtest_logreport(report):
    if report.when == "call":
        _DURATIONS[report.nodeid] = report.duration
        _OUTCOMES[report.nodeid] = report.outcome
    elif report.failed and report.nodeid not in _OUTCOMES:
        _OUTCOMES[report.nodeid] = "error"


def pytest_sessionfinish(session):
    import gc

    path = os.environ.get("BENCH_DURATIONS_JSON")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"durations": _DURATIONS, "outcomes": _OUTCOMES,
                       "heap": len(gc.get_objects())}, fh)
"""


#: Plugins of the development environment that a benchmark session does not need; the
#: hypothesis plugin alone adds a second or more to every pytest start.
NO_DEV_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:xdist")
#: The other plugins of the development environment (pytest-trio imports trio and
#: hypothesis): 0.7 s of CPU per pytest start. Left out of quick runs only, so that a full
#: run keeps measuring the sessions its committed tables measured.
QUICK_NO_DEV_PLUGINS = (
    *NO_DEV_PLUGINS,
    "-p",
    "no:trio",
    "-p",
    "no:anyio",
    "-p",
    "no:rerunfailures",
    "-p",
    "no:timeout",
)


def no_dev_plugins(quick: bool) -> tuple[str, ...]:
    """The ``-p no:...`` arguments of a benchmark's pytest session."""
    return QUICK_NO_DEV_PLUGINS if quick else NO_DEV_PLUGINS


@dataclass
class PytestRun:
    wall_s: float
    durations: dict[str, float]  # node id -> call-phase seconds
    outcomes: dict[str, str]  # node id -> "passed" | "failed" | "skipped" | "error"
    output: str
    returncode: int
    heap: int = 0  # gc-tracked objects in the pytest process at the end of the session


def run_pytest(
    python: str | Path,
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> PytestRun:
    """Run pytest in a subprocess in ``cwd`` (which holds ``DURATIONS_CONFTEST`` as conftest.py).

    The wall time includes interpreter start, imports and collection, as a user sees it.
    """
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "durations.json"
        run_env = dict(os.environ if env is None else env)
        run_env["BENCH_DURATIONS_JSON"] = str(record)
        run_env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        start = time.perf_counter()
        proc = subprocess.run(
            [str(python), "-m", "pytest", *args],
            cwd=cwd,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        wall = time.perf_counter() - start
        data = (
            json.loads(record.read_text(encoding="utf-8"))
            if record.exists()
            else {"durations": {}, "outcomes": {}}
        )
    return PytestRun(
        wall,
        data["durations"],
        data["outcomes"],
        proc.stdout + proc.stderr,
        proc.returncode,
        data.get("heap", 0),
    )


# --------------------------------------------------------------------------- catalogue


def catalogue_modules() -> list[Path]:
    """The example modules with a zero-argument ``leaky_step`` and ``fixed_step``.

    Found by reading the source (not importing it), so a benchmark can hand the paths to
    a subprocess without paying for their imports here.
    """
    found = []
    for path in sorted((REPO_ROOT / "examples").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "def leaky_step(" in text and "def fixed_step(" in text:
            found.append(path)
    return found
