"""The benchmark scripts still run: each one's ``--quick`` mode, writing to a temp dir.

The real benchmarks are not part of the test run (``benchmarks/run_all.py``); this only
keeps them from rotting as the code they measure changes. Each script runs in its own
process, as ``run_all.py`` runs it (it fills the heap, pins threads, freezes gc).
pytest-memray lives in the benchmark-only environment, so its benchmark runs only where
that environment exists.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"

RESULTS_DIR = BENCH_DIR / "results"
#: Tables committed by scripts that are not benchmarks (``tests/soak/run_soak.py``,
#: ``scripts/memory_under_load.py``): no ``bench_`` script writes them.
NOT_COMMITTED = {"soak", "memory_under_load"}


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table in ``text``: (header cells, data rows of cells)."""
    found: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or line.startswith("| ---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            found.append((cells, []))
        elif found:
            found[-1][1].append(cells)
    return found


def _load(name: str) -> ModuleType:
    """Import a module of benchmarks/ by path, without putting benchmarks/ on sys.path."""
    spec = importlib.util.spec_from_file_location(f"_smoke_{name}", BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH_DIR))  # run_all imports _common
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH_DIR))
    return module


#: Every benchmark ``run_all.py`` runs (read at collection: one parametrized test each).
BENCHMARKS: tuple[str, ...] = _load("run_all").BENCHMARKS


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    return _load("run_all")


def test_every_benchmark_is_run_by_run_all(run_all: ModuleType) -> None:
    scripts = {path.stem.removeprefix("bench_") for path in BENCH_DIR.glob("bench_*.py")}
    assert scripts == set(run_all.BENCHMARKS)
    committed = {path.stem for path in RESULTS_DIR.glob("*.md")} - NOT_COMMITTED
    assert committed <= scripts  # no committed table is left without its script


def test_table_parser_reads_headers_rows_and_cells() -> None:
    text = "intro\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |\n\n| c |\n| --- |\n"
    assert tables(text) == [(["a", "b"], [["1", "2"], ["3", "4"]]), (["c"], [])]


@pytest.mark.slow
@pytest.mark.parametrize("topic", list(BENCHMARKS))
def test_quick_run_writes_the_tables_of_the_committed_results(
    run_all: ModuleType, topic: str, tmp_path: Path
) -> None:
    """A quick run (fewer sizes and repeats, some tables left out) writes tables of the
    committed full run: each has the columns' first header, rows for cases the full run
    has, and complete cells; where the full run judges targets, the quick run does too."""
    if topic == "memray" and not (run_all.BENCH_VENV / "bin" / "python").exists():
        pytest.skip("benchmarks/.venv-bench (pytest-memray) not created: run_all.py --setup-only")
    ok, _, why = run_all.run_benchmark(topic, quick=True, out_dir=tmp_path)
    assert ok, why
    text = (tmp_path / f"{topic}.md").read_text(encoding="utf-8")
    assert "QUICK run" in text
    committed: dict[str, set[str]] = {}
    results = RESULTS_DIR / f"{topic}.md"
    full = results.read_text(encoding="utf-8") if results.exists() else None
    for header, rows in tables(full or ""):
        committed.setdefault(header[0], set()).update(row[0] for row in rows)
    quick = tables(text)
    assert quick, f"{topic}: the quick run wrote no table"
    for header, rows in quick:
        if full is not None:  # (a benchmark whose full run is not committed yet: form only)
            assert header[0] in committed, f"{topic}: table {header} is not committed"
        assert rows, f"{topic}: table {header} has no rows"
        for row in rows:
            assert len(row) == len(header) and all(row), (header, row)
            assert "nan" not in [cell.lower() for cell in row], (header, row)
            if full is not None:
                assert row[0] in committed[header[0]], f"{topic}: row {row[0]!r} not committed"
    if full is not None and run_all.target_rows(full):
        assert run_all.target_rows(text), f"{topic}: the quick run judged no target"


def test_results_md_gathers_every_target_line(run_all: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "sampling.md").write_text(
        "## Sample cost\n\n| target | measured | result |\n| --- | --- | --- |\n"
        "| sample <= 1 ms | 0.4 ms | **met** |\n\n"
        "| step | plain | checked | overhead <= 10% |\n| --- | --- | --- | --- |\n"
        "| MLP | 1 ms | 9 ms | **not met** |\n",
        encoding="utf-8",
    )
    (tmp_path / "soak.md").write_text("no heading, no target\n", encoding="utf-8")
    text = run_all.build_results_md(tmp_path)
    assert "| sampling | sample <= 1 ms | 0.4 ms | **met** |" in text
    assert "| sampling | MLP: overhead <= 10% | 1 ms · 9 ms | **not met** |" in text
    assert "### Sample cost" in text  # headings move one level down
    assert "## soak" in text
    assert text.index("<!-- from results/sampling.md -->") < text.index(
        "<!-- from results/soak.md -->"
    )
