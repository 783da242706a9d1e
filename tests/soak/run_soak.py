"""Soak: does the plugin ever cry wolf, or ever miss a leak?

Two parts, both written to ``benchmarks/results/soak.md``:

1. **Catalogue runs.** ``pytest --graphleak examples/...`` again and again, each run with
   its own seed for the test order (``-p soak_shuffle --soak-seed=N``), every other run
   with ``-n 2`` (pytest-xdist). Each run is scored from its JUnit XML: every
   ``test_leaky`` must fail with a pattern word, every ``test_fixed`` must pass.
2. **Pressure runs.** In one process, the clean steps (``fixed_step``) of the catalogue
   are checked with ``pytest_graphleak.check`` while other threads churn the allocator
   (large temporary numpy arrays, many medium ones, Python containers): the RSS rule must
   not trip. The leaky steps are checked under the same pressure and must still be caught.

Every catalogue run audits every test for graphs that outlive it, in fail mode
(``--outlive``): a graph the audit names on any test is a problem of that run.

Not part of the default test run (no ``test_`` prefix). Run it alone:

    .venv/bin/python tests/soak/run_soak.py                  # 50 runs + pressure
    .venv/bin/python tests/soak/run_soak.py --runs 4 --pressure-rounds 1   # quick look

The table is rewritten after every run, so a soak stopped early still leaves its rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from catalogue import REPO, Score, catalogue_files, expected_pattern, run_catalogue  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "soak.md"
SETTLE_S = 3.0  # pressure runs this long before the first check
LOGS = Path(tempfile.gettempdir()) / "graphleak-soak-logs"


@dataclass
class CatalogueRow:
    run: int
    seed: int
    mode: str
    score: Score


@dataclass(frozen=True)
class Pressure:
    """How hard the other threads churn memory, and the RSS tolerance the checks use."""

    name: str
    threads: int
    pool: int  # most medium arrays (64 KB-4 MB, touched) a thread holds at once
    big_mb: int  # largest temporary array, MB (touched, then freed)
    rss_tolerance: str | None = None  # None: the plugin's default

    def describe(self) -> str:
        tolerance = self.rss_tolerance or "default (1MiB/step)"
        return (
            f"{self.threads} threads, temporaries up to {self.big_mb} MB, up to {self.pool} "
            f"live medium arrays per thread; RSS tolerance {tolerance}"
        )


LEVELS = {
    # a data loader: a few batches in flight, temporary decode buffers
    "moderate": Pressure("moderate", threads=2, pool=6, big_mb=12),
    # far more than a loader: hundreds of MB swinging between two samples
    "heavy": Pressure("heavy", threads=3, pool=40, big_mb=96),
    # the same, with the tolerance a user of such a process would set
    "heavy@16MiB": Pressure("heavy@16MiB", threads=3, pool=40, big_mb=96, rss_tolerance="16MiB"),
}


@dataclass
class PressureRow:
    level: str
    example: str
    clean_checks: int = 0
    false_positives: int = 0
    leaky_checks: int = 0
    caught: int = 0
    max_rss_growth_mb: float = 0.0  # largest end-start RSS of a clean check
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- catalogue runs


def catalogue_run(
    run: int,
    seed: int,
    xdist: bool,
    files: Sequence[Path],
    workdir: Path,
    outlive: str = "fail",
) -> CatalogueRow:
    # The outlive audit in fail mode: a graph named on any test is an error, so a false
    # alarm of the audit shows as a problem of the run.
    args = ["-p", "soak_shuffle", f"--soak-seed={seed}", f"--graphleak-outlive={outlive}"]
    if xdist:
        args += ["-n", "2"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    xml = workdir / f"run{run}.xml"
    score, output = run_catalogue(files, xml, extra_args=args, env=env)
    if not score.ok:
        (workdir / f"run{run}.log").write_text(output, encoding="utf-8")
        score.other.append(f"log: {workdir / f'run{run}.log'}")
    return CatalogueRow(run, seed, "-n 2" if xdist else "serial", score)


# ---------------------------------------------------------------- pressure runs


@contextmanager
def allocator_pressure(level: Pressure, seed: int = 0) -> Iterator[None]:
    """Other threads allocating and freeing memory the whole time, as a data loader would.

    Large temporary arrays (mmap'ed and returned to the OS), medium arrays (64 KB-4 MB,
    from the heap: fragmentation and arena growth) and plain Python containers (cyclic GC
    generations fill up in the middle of a step). None of it is a tensor.
    """
    import numpy as np

    stop = threading.Event()

    def churn(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        pool: list[object] = []
        while not stop.is_set():
            kind = rng.random()
            if kind < 0.3:
                big = np.ones(rng.randint(1, level.big_mb) * (1 << 17), dtype=np.float64)
                big *= 2.0
                del big
            elif kind < 0.8:  # touched, so it really is resident
                pool.append(np.ones(rng.randint(8_000, 500_000), dtype=np.float64))
            else:
                pool.append([{"i": i, "s": str(i)} for i in range(rng.randint(100, 5000))])
            if len(pool) > rng.randint(1, level.pool):
                del pool[: rng.randint(1, len(pool))]
            time.sleep(0.0005)

    workers = [threading.Thread(target=churn, args=(i,), daemon=True) for i in range(level.threads)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def load_example(path: Path) -> ModuleType:
    name = f"soak_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def pressure_runs(
    files: Sequence[Path], rounds: int, level: Pressure, settle_s: float | None = None
) -> list[PressureRow]:
    """Check every clean and leaky step ``rounds`` times under one long-running pressure.

    The pressure starts ``settle_s`` seconds before the first check, so the checks see a
    data loader in its steady state (its own ramp-up is not what we measure).
    """
    from pytest_graphleak import check

    rows = [PressureRow(level.name, path.stem) for path in files]
    modules: dict[str, ModuleType] = {}
    for path, row in zip(files, rows, strict=True):
        try:
            modules[path.stem] = load_example(path)
        except Exception as exc:  # an example that cannot load is a row, not a crash
            row.notes.append(f"import failed: {type(exc).__name__}: {exc}")
    with allocator_pressure(level, seed=0):
        time.sleep(SETTLE_S if settle_s is None else settle_s)
        for round_index in range(rounds):
            for path, row in zip(files, rows, strict=True):
                module = modules.get(path.stem)
                if module is None:
                    continue
                for kind in ("fixed", "leaky"):
                    step = getattr(module, f"{kind}_step", None)
                    if step is None:
                        continue
                    try:
                        result = check(
                            step,
                            name=f"{path.stem}.{kind}_step#{round_index}",
                            rss_tolerance=level.rss_tolerance,
                        )
                    except Exception as exc:
                        row.notes.append(f"{kind} step raised: {type(exc).__name__}: {exc}")
                        continue
                    if kind == "fixed":
                        row.clean_checks += 1
                        rss = result.series.get("process.rss_bytes") or [0.0]
                        measured = rss[result.warmup :] or rss
                        growth = (measured[-1] - measured[0]) / 2**20
                        row.max_rss_growth_mb = max(row.max_rss_growth_mb, growth)
                        if result.leaked:
                            row.false_positives += 1
                            mib = " ".join(f"{v / 2**20:.0f}" for v in rss)
                            malloc = result.series.get("process.malloc_bytes") or []
                            heap = " ".join(f"{v / 2**20:.0f}" for v in malloc)
                            row.notes.append(
                                f"false positive: {result.verdict.reason}; RSS MiB: {mib}"
                                + (f"; malloc MiB: {heap}" if heap else "")
                            )
                    else:
                        row.leaky_checks += 1
                        row.caught += int(result.leaked)
    return rows


# ---------------------------------------------------------------- the table


def machine() -> str:
    import numpy

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        ram = f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        ram = "RAM unknown"
    import pytest

    parts = [
        f"{cpu}, {os.cpu_count()} cores, {ram}",
        f"Python {platform.python_version()}, pytest {pytest.__version__}, "
        f"numpy {numpy.__version__}",
    ]
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
    except ImportError:
        parts.append("torch not installed")
    return "; ".join(parts)


def render(
    args: argparse.Namespace,
    files: Sequence[Path],
    rows: Sequence[CatalogueRow],
    pressure: Sequence[PressureRow] | None,
    started: str,
    finished: bool,
) -> str:
    total_leaky = sum(r.score.leaky for r in rows)
    total_caught = sum(r.score.caught for r in rows)
    total_fp = sum(r.score.false_positives for r in rows)
    total_clean = sum(r.score.clean for r in rows)
    right = sum(r.score.right_pattern for r in rows)
    lines = [
        "# Soak: false positives and misses over repeated, shuffled runs",
        "",
        "Generated by `tests/soak/run_soak.py` (not part of the default test run).",
        "",
        f"- Machine: {machine()}",
        f"- Started: {started}; {'finished' if finished else 'STILL RUNNING / stopped early'}",
        f"- Command: `{' '.join(['.venv/bin/python tests/soak/run_soak.py', *args.argv])}`",
        f"- Catalogue: {len(files)} example modules "
        f"({', '.join(sorted({p.stem.split('_', 1)[0] for p in files}))}): "
        + ", ".join(f"`{p.stem}` ({expected_pattern(p)})" for p in files),
        f"- Runs done: {len(rows)} of {args.runs} requested; order shuffled with a new seed "
        "each run (`-p soak_shuffle --soak-seed=N`), every other run with `-n 2`.",
        "",
        "## Totals",
        "",
        "| runs | leaky tests run | caught | right pattern word | clean tests run "
        "| false positives | other problems |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(rows)} | {total_leaky} | {total_caught} "
        f"({100 * total_caught / max(total_leaky, 1):.0f}%) | {right} | {total_clean} | {total_fp} "
        f"| {sum(len(r.score.other) for r in rows)} |",
        "",
        "## Every run",
        "",
        "| run | seed | mode | leaky caught | right pattern | clean passed | false positives "
        "| seconds | problems |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        s = r.score
        problems = "; ".join(s.other) if s.other else "none"
        lines.append(
            f"| {r.run} | {r.seed} | {r.mode} | {s.caught}/{s.leaky} | {s.right_pattern}/{s.leaky} "
            f"| {s.clean - s.false_positives}/{s.clean} | {s.false_positives} "
            f"| {s.duration_s:.1f} | {problems} |"
        )
    if pressure is not None:
        lines += [
            "",
            "## Clean steps under memory pressure",
            "",
            "`pytest_graphleak.check(step)` with the default steps/warmup on every `fixed_step` "
            "and `leaky_step` of the catalogue, while other threads allocate and free touched "
            "numpy arrays (large temporaries, a pool of medium arrays) and Python containers. "
            f"The pressure runs {SETTLE_S:.0f} s before the first check (a loader in its steady "
            f"state); {args.pressure_rounds} round(s) per step. Levels:",
            "",
            *(
                f"- **{lv.name}**: {lv.describe()}"
                for lv in LEVELS.values()
                if lv.name in {p.level for p in pressure}
            ),
            "",
            "| level | clean checks | false positives | largest RSS change over a clean "
            "check (MB) | leaky checks | caught |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for level in dict.fromkeys(p.level for p in pressure):
            rows_of = [p for p in pressure if p.level == level]
            lines.append(
                f"| {level} | {sum(p.clean_checks for p in rows_of)} "
                f"| {sum(p.false_positives for p in rows_of)} "
                f"| {max((p.max_rss_growth_mb for p in rows_of), default=0):.1f} "
                f"| {sum(p.leaky_checks for p in rows_of)} | {sum(p.caught for p in rows_of)} |"
            )
        notes = [f"- {p.level} / `{p.example}`: {n}" for p in pressure for n in p.notes]
        lines += ["", "Per-check notes (false positives with their RSS series, errors):", ""]
        lines += notes or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="catalogue runs (default 50)")
    parser.add_argument("--first-seed", type=int, default=1, help="seed of the first run")
    parser.add_argument(
        "--xdist",
        choices=("alternate", "always", "never"),
        default="alternate",
        help="which runs use -n 2 (default: every other run)",
    )
    parser.add_argument(
        "--backends", default="minigrad,torch", help="comma-separated: minigrad,torch"
    )
    parser.add_argument("--pressure-rounds", type=int, default=3, help="0 skips pressure runs")
    parser.add_argument(
        "--levels", default=",".join(LEVELS), help=f"pressure levels among {', '.join(LEVELS)}"
    )
    parser.add_argument(
        "--outlive",
        choices=("fail", "warn", "off"),
        default="fail",
        help="the outlive audit of every test (default fail: any graph it names is an error)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    files = catalogue_files(backends)
    if not files:
        print(f"no catalogue modules for {backends} in examples/", file=sys.stderr)
        return 2
    started = dt.datetime.now().isoformat(timespec="seconds")
    unknown = set(filter(None, (n.strip() for n in args.levels.split(",")))) - set(LEVELS)
    if unknown:
        parser.error(f"unknown pressure level(s) {sorted(unknown)}; choose from {list(LEVELS)}")
    rows: list[CatalogueRow] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # pressure first: it is short, and the long catalogue runs may be stopped early
    pressure = None
    if args.pressure_rounds > 0:
        pressure = []
        for name in filter(None, (n.strip() for n in args.levels.split(","))):
            pressure += pressure_runs(files, args.pressure_rounds, LEVELS[name])
            args.out.write_text(
                render(args, files, rows, pressure, started, False), encoding="utf-8"
            )
    with tempfile.TemporaryDirectory(prefix="graphleak-soak-") as tmp:
        workdir = Path(tmp)
        for i in range(args.runs):
            seed = args.first_seed + i
            xdist = args.xdist == "always" or (args.xdist == "alternate" and i % 2 == 1)
            row = catalogue_run(i + 1, seed, xdist, files, workdir, args.outlive)
            rows.append(row)
            s = row.score
            print(
                f"run {row.run:2d} seed {seed} {row.mode:6s}: caught {s.caught}/{s.leaky}, "
                f"false positives {s.false_positives}/{s.clean}, {s.duration_s:.0f} s"
                + (f"  PROBLEMS: {s.other}" if s.other else ""),
                flush=True,
            )
            args.out.write_text(
                render(args, files, rows, pressure, started, False), encoding="utf-8"
            )
            if s.other and any(o.startswith("log:") for o in s.other):
                # keep the log of a bad run after the temporary directory is gone
                log = workdir / f"run{row.run}.log"
                if log.exists():
                    keep = LOGS / f"soak-run{row.run}.log"
                    keep.parent.mkdir(exist_ok=True)
                    keep.write_text(log.read_text(encoding="utf-8"), encoding="utf-8")
                    s.other[-1] = f"log: {keep}"
    args.out.write_text(render(args, files, rows, pressure, started, True), encoding="utf-8")
    print(f"table written to {args.out}")
    bad = any(not r.score.ok for r in rows) or any(
        p.false_positives or p.caught < p.leaky_checks
        for p in pressure or []
        if p.level == "moderate"  # the acceptance level; heavier ones are reported
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
