"""The benchmark scripts still run: each one's ``--quick`` mode, writing to a temp dir.

The real benchmarks are not part of the test run (``benchmarks/run_all.py``); this only
keeps them from rotting as the code they measure changes. pytest-memray lives in the
benchmark-only environment, so its benchmark runs only where that environment exists.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

#: topic -> a line its table must contain
EXPECTED = {
    "sampling": "| torch probe `sample(fresh)` |",
    "overhead": "| minigrad MLP 64x128-256-10 | 19 |",
    "time_to_verdict": "| torch, one tensor per step |",
    "catalogue": "| the steps themselves (warmup + steps calls) |",
    "memray": "| `torch-one-per-step` |",
}


@pytest.fixture
def bench_module(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """Import ``benchmarks/bench_<topic>.py``; undo what importing the harness changes."""
    saved_env = {var: os.environ.get(var) for var in THREAD_VARS}
    sys.path.insert(0, str(BENCH_DIR))
    try:
        yield importlib.import_module(f"bench_{request.param}")
    finally:
        sys.path.remove(str(BENCH_DIR))
        for var, value in saved_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


@pytest.mark.slow
@pytest.mark.parametrize("bench_module", list(EXPECTED), indirect=True)
def test_quick_run_writes_its_table(bench_module: ModuleType, tmp_path: Path) -> None:
    topic = bench_module.__name__.removeprefix("bench_")
    if topic == "memray" and not bench_module.BENCH_PYTHON.exists():
        pytest.skip("benchmarks/.venv-bench (pytest-memray) not created: run_all.py --setup-only")
    out = tmp_path / f"{topic}.md"
    bench_module.main(["--quick", "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    assert "QUICK run" in text
    assert "Machine: " in text
    assert EXPECTED[topic] in text, text


def test_results_md_gathers_every_target_line(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH_DIR))
    try:
        run_all = importlib.import_module("run_all")
    finally:
        sys.path.remove(str(BENCH_DIR))
    (tmp_path / "sampling.md").write_text(
        "## Sample cost\n\n| target | measured | result |\n| --- | --- | --- |\n"
        "| sample <= 1 ms | 0.4 ms | **met** |\n", encoding="utf-8")
    (tmp_path / "soak.md").write_text("no heading, no target\n", encoding="utf-8")
    text = run_all.build_results_md(tmp_path)
    assert "| sampling | sample <= 1 ms | 0.4 ms | **met** |" in text
    assert "### Sample cost" in text  # headings move one level down
    assert "## soak" in text
    assert text.index("<!-- from results/sampling.md -->") < text.index(
        "<!-- from results/soak.md -->")
