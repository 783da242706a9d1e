"""How often a 1 MiB/step numpy leak is caught inside a loaded pytest session.

Issue 42.6: in whole-suite runs of this project a numpy buffer kept every step passed as
clean once in 13 runs: on a C heap fragmented by the tests before it, one ``mallinfo2()``
call cost 0.8 ms, the process probe left ``process.malloc_bytes`` out, and RSS alone
(which the freed pages of earlier tests hide) judged it. The whole suite takes minutes a
run, so this builds a session that reproduces the conditions in seconds and runs it
``--runs`` times:

- ``--fragmenting`` tests (300 by default) that leave the C heap as a long suite's tests
  leave it: each makes ``--blocks`` malloc'd blocks of mixed sizes and keeps every other
  one (free blocks that cannot coalesce: ``mallinfo2()`` walks them), frees an 8 MiB
  temporary (glibc then serves 1 MiB from the heap, not from fresh mmaps) and 24 MiB it
  made in the heap (resident pages a later buffer lands in, unseen by RSS);
- one marked test that keeps a 1 MiB numpy array every step (``np.ones``, so its pages
  are touched), placed among the last, so it runs on a fragmented heap;
- ``-n 2`` (pytest-xdist), ``--graphleak``, and ``--burners`` processes spinning on the
  CPU beside the session (1 by default: the machine is shared).

Each run's JSON report says whether the leak was caught, with which pattern, and
whether malloc's bytes were sampled (the probe's note says when not). The table goes to
``benchmarks/results/memory_under_load.md`` (``--out`` to write elsewhere).

    .venv/bin/python scripts/memory_under_load.py                 # 20 runs
    .venv/bin/python scripts/memory_under_load.py --runs 3 --out /tmp/t.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "memory_under_load.md"

FRAGMENTING = """
import random

KEPT = []


def test_fragment_{n}():
    rng = random.Random({n})
    made = [bytes(rng.randrange(600, 4000)) for _ in range({blocks})]
    KEPT.extend(made[::2])  # every other block stays: the freed ones cannot coalesce
    # An 8 MiB temporary (mmapped, freed: glibc raises its mmap threshold above 1 MiB,
    # as a suite's big temporaries do), then 24 MiB of 1 MiB blocks from the heap, freed
    # below a block kept: resident pages that a later 1 MiB array lands in unseen by RSS.
    del made
    big = bytes(8 << 20)
    del big
    scratch = [bytes(1 << 20) for _ in range(24)]
    KEPT.append(bytes(1000))
    del scratch
"""

LEAK = '''
import os
import time

import numpy as np
import pytest

from pytest_graphleak.probes.process_probe import mallinfo2

KEPT = []


@pytest.fixture(autouse=True)
def _heap_cost():
    """What one mallinfo2() call costs on this worker's heap now (the cheapest of 5)."""
    read = mallinfo2()
    if read is not None:
        cost = min(_timed(read) for _ in range(5))
        with open(os.environ["MEMORY_UNDER_LOAD_COST"], "w") as out:
            out.write(f"{cost * 1e3:.2f}")


def _timed(read):
    started = time.perf_counter()
    read()
    return time.perf_counter() - started


@pytest.mark.no_graph_growth
def test_numpy_leak_1mib_a_step():
    KEPT.append(np.ones(1 << 17))  # 1 MiB, its pages touched
'''


def _burn(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def make_project(where: Path, fragmenting: int, blocks: int) -> None:
    # The leak's module sorts among the last: xdist hands the tests out in that order.
    for n in range(fragmenting):
        (where / f"test_a{n:03d}.py").write_text(FRAGMENTING.format(n=n, blocks=blocks))
    (where / "test_z_leak.py").write_text(LEAK, encoding="utf-8")
    for n in range(fragmenting, fragmenting + 10):  # a few after it, as in a real suite
        (where / f"test_zz{n:03d}.py").write_text(FRAGMENTING.format(n=n, blocks=blocks))


def one_run(python: str, where: Path, report: Path) -> dict[str, object]:
    cost_file = report.with_suffix(".cost")
    started = time.perf_counter()
    proc = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "--graphleak",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--graphleak-report={report}",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=900,
        env={
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",
            "MEMORY_UNDER_LOAD_COST": str(cost_file),
        },
    )
    wall = time.perf_counter() - started
    doc = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    test = next((t for t in doc.get("tests", []) if "numpy_leak" in t.get("nodeid", "")), None)
    checks = test.get("checks", []) if test is not None else []
    if not checks:
        return {
            "status": "no result",
            "pattern": "",
            "malloc": "?",
            "cost": "?",
            "note": proc.stdout[-300:].replace("\n", " "),
            "wall": wall,
        }
    check = checks[0]
    malloc = check.get("series", {}).get("process.malloc_bytes") or []
    return {
        "status": "caught" if check.get("leaked") else "missed",
        "pattern": check.get("pattern") or "",
        # sampled through the measured steps (a NaN, null in JSON, once left out)
        "malloc": "yes" if malloc and None not in malloc else "no",
        "note": " ".join(n for n in check.get("notes", []) if "malloc" in n),
        "wall": wall,
        "cost": cost_file.read_text() if cost_file.exists() else "?",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--fragmenting", type=int, default=300)
    parser.add_argument(
        "--blocks",
        type=int,
        default=600,
        help="malloc'd blocks each fragmenting test makes (keeps half)",
    )
    parser.add_argument("--burners", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, object]] = []
    # Stopped (SIGTERM): leave through ``finally``, which stops the burners.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    stop = multiprocessing.Event()
    burners = [
        multiprocessing.Process(target=_burn, args=(stop,), daemon=True)
        for _ in range(args.burners)
    ]
    for burner in burners:
        burner.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(tmp)
            make_project(where, args.fragmenting, args.blocks)
            for run in range(1, args.runs + 1):
                report = where / f"report-{run}.json"
                row = one_run(sys.executable, where, report)
                rows.append(row)
                print(
                    f"run {run}: {row['status']} {row['pattern']} malloc={row['malloc']} "
                    f"mallinfo2 {row['cost']} ms "
                    f"{row['wall']:.1f} s {str(row['note'])[:160]}",
                    flush=True,
                )
                write(rows, args)  # after every run: a run stopped early keeps its table
    finally:
        stop.set()
        for burner in burners:
            burner.join(timeout=5)
    return 0


def write(rows: list[dict[str, object]], args: argparse.Namespace) -> None:
    caught = sum(1 for row in rows if row["status"] == "caught")
    sampled = sum(1 for row in rows if row["malloc"] == "yes")
    try:
        load = f"{os.getloadavg()[0]:.1f}"
    except OSError:
        load = "?"
    lines = [
        "# Memory growth under load: a 1 MiB/step numpy leak in a loaded pytest session",
        "",
        f"Generated by `scripts/memory_under_load.py --runs {args.runs} --fragmenting "
        f"{args.fragmenting} --burners {args.burners}` on "
        f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} ({os.cpu_count()} cores, "
        f"load average {load} at the end).",
        "",
        f"Each run: `pytest -n 2 --graphleak` over {args.fragmenting + 10} tests that "
        "fragment the C heap and one marked test that keeps a 1 MiB numpy array a step, "
        f"with {args.burners} CPU burner(s) beside it.",
        "",
        f"Runs done: {len(rows)} of {args.runs} requested.",
        "",
        "| runs | caught | malloc's bytes sampled |",
        "| ---: | ---: | ---: |",
        f"| {len(rows)} | {caught} of {len(rows)} | {sampled} of {len(rows)} |",
        "",
        "| run | verdict | pattern | malloc sampled | one mallinfo2() call, ms | session s "
        "| probe's note |",
        "| ---: | --- | --- | --- | ---: | ---: | --- |",
    ]
    for n, row in enumerate(rows, 1):
        note = str(row["note"]).replace("|", "\\|") or "-"
        lines.append(
            f"| {n} | {row['status']} | {row['pattern'] or '-'} | {row['malloc']} | "
            f"{row['cost']} | {row['wall']:.1f} | {note} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"caught {caught} of {len(rows)}; malloc sampled in {sampled}; written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
