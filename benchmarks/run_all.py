"""Run every benchmark and regenerate ``benchmarks/RESULTS.md``.

    .venv/bin/python benchmarks/run_all.py            # all benchmarks, then RESULTS.md
    .venv/bin/python benchmarks/run_all.py --only sampling overhead
    .venv/bin/python benchmarks/run_all.py --setup-only   # just the benchmark venv
    .venv/bin/python benchmarks/run_all.py --report-only  # RESULTS.md from results/*.md

Each ``bench_<topic>.py`` runs in its own process (so one's heap cannot slow another)
and writes ``results/<topic>.md``; ``RESULTS.md`` is rebuilt from every table in
``results/`` (including tables committed by scripts that are not benchmarks, such as the
soak run), with the target lines of all tables gathered at the top.

pytest-memray is measured in a separate environment, ``benchmarks/.venv-bench``
(created here when missing): it is not a dependency of the project.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BENCH_DIR, REPO_ROOT, RESULTS_DIR, fmt_num, machine_description

#: Run order: ours first (cheapest first), then the ones other modules own.
BENCHMARKS = (
    "sampling",
    "overhead",
    "start",
    "time_to_verdict",
    "catalogue",
    "memray",
    "minigrad",
    "diagnose",
    "window",
    "tools",
    "session_rows",
    "outlive",
    "audit_heavy",
    "inert",
    "fix_verify",
)
BENCH_VENV = BENCH_DIR / ".venv-bench"
#: Pinned so the comparison is reproducible; torch pinned as everywhere in the project.
BENCH_REQUIREMENTS = (
    "torch==2.13.0",
    "pytest-memray==1.11.0",
    "objgraph==3.7.0",
    "numpy",
    "psutil",
    "pytest",
)
PER_BENCHMARK_TIMEOUT_S = 480


def ensure_bench_venv(python: str = sys.executable) -> Path:
    """Create ``benchmarks/.venv-bench`` with pytest-memray and this project, if missing."""
    bench_python = BENCH_VENV / "bin" / "python"
    marker = BENCH_VENV / ".graphleak-bench-ready"
    if marker.exists() and bench_python.exists():
        return bench_python
    print(f"run_all: creating {BENCH_VENV} (torch, pytest-memray, this project)...", flush=True)
    subprocess.run([python, "-m", "venv", str(BENCH_VENV)], check=True)
    pip = [str(bench_python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *BENCH_REQUIREMENTS], check=True)
    subprocess.run([*pip, "--no-deps", "-e", str(REPO_ROOT)], check=True)
    marker.write_text("ok\n", encoding="utf-8")
    return bench_python


def run_benchmark(topic: str, *, quick: bool, out_dir: Path | None) -> tuple[bool, float, str]:
    script = BENCH_DIR / f"bench_{topic}.py"
    if not script.exists():
        return False, 0.0, f"{script.name} does not exist (yet)"
    cmd = [sys.executable, str(script)]
    if quick:
        cmd.append("--quick")
    if out_dir is not None:
        cmd += ["--out", str(out_dir / f"{topic}.md")]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=PER_BENCHMARK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - start, f"timed out after {PER_BENCHMARK_TIMEOUT_S} s"
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-2000:]
        return False, elapsed, f"exit {proc.returncode}:\n{tail}"
    return True, elapsed, ""


def target_rows(text: str) -> list[tuple[str, str, str]]:
    """(what, measured, result) for every table row that says **met** / **not met**.

    ``what`` is the row's first cell, with its table's last column header when that header
    names the criterion (a column called "target" or "result" does not).
    """
    rows = []
    header: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            header = cells
        elif cells[-1] in ("**met**", "**not met**"):
            criterion = header[-1] if header else ""
            what = (
                cells[0]
                if criterion in ("target", "result", "verdict", "")
                else (f"{cells[0]}: {criterion}")
            )
            rows.append((what, " · ".join(cells[1:-1]), cells[-1]))
    return rows


def build_results_md(results_dir: Path = RESULTS_DIR) -> str:
    """RESULTS.md: targets at a glance, then every results/*.md in run order."""
    tables = sorted(results_dir.glob("*.md"))
    order = {topic: i for i, topic in enumerate(BENCHMARKS)}
    tables.sort(key=lambda p: (order.get(p.stem, len(order)), p.stem))
    glance = [
        f"| {path.stem} | {what} | {measured} | {result} |"
        for path in tables
        for what, measured, result in target_rows(path.read_text(encoding="utf-8"))
    ]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# Benchmark results",
        "",
        "Generated by `.venv/bin/python benchmarks/run_all.py` from the tables in "
        f"`benchmarks/results/` ({stamp}). Each section names the machine and the command "
        "that produced it; how to read them: [benchmarks/README.md](README.md).",
        "",
        f"This run's machine: {machine_description()}",
        "",
        "## Targets at a glance",
        "",
        "| table | target | measured | result |",
        "| --- | --- | --- | --- |",
        *glance,
        "",
    ]
    for path in tables:
        text = path.read_text(encoding="utf-8").strip()
        # every table becomes a section of its own, one heading level down
        text = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.MULTILINE)
        if not text.startswith("#"):
            text = f"## {path.stem}\n\n{text}"
        parts += [f"<!-- from results/{path.name} -->", text, ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        nargs="+",
        choices=BENCHMARKS,
        metavar="TOPIC",
        help=f"run only these ({', '.join(BENCHMARKS)})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every benchmark in its quick mode; tables go to --out-dir only",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="write the tables here instead of benchmarks/results/",
    )
    parser.add_argument("--setup-only", action="store_true", help="only create the bench venv")
    parser.add_argument(
        "--report-only", action="store_true", help="only rebuild RESULTS.md from results/*.md"
    )
    args = parser.parse_args(argv)

    if args.report_only:
        (BENCH_DIR / "RESULTS.md").write_text(build_results_md(), encoding="utf-8")
        return 0
    topics = args.only or BENCHMARKS
    if "memray" in topics or args.setup_only:
        ensure_bench_venv()
    if args.setup_only:
        return 0

    failures = []
    started = time.perf_counter()
    for topic in topics:
        print(f"run_all: {topic} ...", flush=True)
        ok, seconds, why = run_benchmark(topic, quick=args.quick, out_dir=args.out_dir)
        print(
            f"run_all: {topic}: {'ok' if ok else 'FAILED'} in {fmt_num(seconds)} s"
            + (f"\n{why}" if why else ""),
            flush=True,
        )
        if not ok:
            failures.append(topic)
    print(
        f"run_all: {len(topics) - len(failures)}/{len(topics)} benchmarks ran in "
        f"{fmt_num(time.perf_counter() - started)} s",
        flush=True,
    )
    if args.out_dir is None and not args.quick:
        (BENCH_DIR / "RESULTS.md").write_text(build_results_md(), encoding="utf-8")
        print(f"run_all: wrote {BENCH_DIR / 'RESULTS.md'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
