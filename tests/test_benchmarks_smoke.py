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

#: topic -> a line its quick table must contain
EXPECTED = {
    "sampling": "| torch probe `sample(fresh)` |",
    "overhead": "| minigrad MLP 64x128-256-10 | 19 |",
    "start": "| 1M objects in a global of the test module |",
    "time_to_verdict": "| torch, one tensor per step |",
    "catalogue": "| the steps themselves (warmup + steps calls) |",
    "memray": "| `torch-one-per-step` |",
    "minigrad": "Machine: ",
    "diagnose": "Machine: ",
    "window": "| step time, plain run (median of steps) |",
    "tools": "| `minigrad_ray_loss_sum:leaky` | **flags** (retained-grad-fn;",
}


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


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    return _load("run_all")


def test_every_benchmark_is_run_by_run_all(run_all: ModuleType) -> None:
    scripts = {path.stem.removeprefix("bench_") for path in BENCH_DIR.glob("bench_*.py")}
    assert scripts <= set(run_all.BENCHMARKS)
    assert set(EXPECTED) == set(run_all.BENCHMARKS)


@pytest.mark.slow
@pytest.mark.parametrize("topic", list(EXPECTED))
def test_quick_run_writes_its_table(run_all: ModuleType, topic: str, tmp_path: Path) -> None:
    if topic == "memray" and not (run_all.BENCH_VENV / "bin" / "python").exists():
        pytest.skip("benchmarks/.venv-bench (pytest-memray) not created: run_all.py --setup-only")
    if not (BENCH_DIR / f"bench_{topic}.py").exists():
        pytest.skip(f"bench_{topic}.py not written yet")
    ok, _, why = run_all.run_benchmark(topic, quick=True, out_dir=tmp_path)
    assert ok, why
    text = (tmp_path / f"{topic}.md").read_text(encoding="utf-8")
    assert "QUICK run" in text
    assert EXPECTED[topic] in text, text


def test_results_md_gathers_every_target_line(run_all: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "sampling.md").write_text(
        "## Sample cost\n\n| target | measured | result |\n| --- | --- | --- |\n"
        "| sample <= 1 ms | 0.4 ms | **met** |\n\n"
        "| step | plain | checked | overhead <= 10% |\n| --- | --- | --- | --- |\n"
        "| MLP | 1 ms | 9 ms | **not met** |\n", encoding="utf-8")
    (tmp_path / "soak.md").write_text("no heading, no target\n", encoding="utf-8")
    text = run_all.build_results_md(tmp_path)
    assert "| sampling | sample <= 1 ms | 0.4 ms | **met** |" in text
    assert "| sampling | MLP: overhead <= 10% | 1 ms · 9 ms | **not met** |" in text
    assert "### Sample cost" in text  # headings move one level down
    assert "## soak" in text
    assert text.index("<!-- from results/sampling.md -->") < text.index(
        "<!-- from results/soak.md -->")
