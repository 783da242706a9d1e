"""objgraph, tracemalloc and ``--graphleak`` side by side on the catalogue's steps.

Each leaky step of ``examples/`` and its fixed twin is checked by each tool the way its
documentation suggests, with a fresh copy of the example module per tool (so no tool
sees another's state). Every tool gets WARMUP unmeasured calls, then STEPS measured ones:

- graphleak: ``pytest_graphleak.check(step, steps=STEPS, warmup=WARMUP)``: its verdict;
- objgraph: ``objgraph.growth()`` after warmup (the baseline) and after the steps; it
  "flags" when some type grew by at least one object per step (no threshold is built
  in: that is the reading a user would make of its table);
- tracemalloc: tracing on for the measured steps, then the allocations still alive
  grouped by line (``Snapshot.statistics("lineno")``); it "flags" when one line keeps
  more than 4 KiB, the per-site limit the pytest-memray benchmark uses.

torch's memory snapshots (``torch.cuda.memory._record_memory_history``) record CUDA
allocations only: on a machine without a GPU they have nothing to record, and the table
says so. objgraph is a benchmark-only dependency (the ``bench`` extra; run_all.py's
benchmark environment has it); without it its column reads "not installed".
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    REPO_ROOT,
    catalogue_modules,
    fmt_num,
    markdown_table,
    parse_args,
    pin_threads,
    write_results,
)

STEPS, WARMUP = 16, 3
#: A quick run's example: each tool's code is the same for every example, and this one
#: makes no torch optimizer (the first one imports torch._dynamo, seconds).
QUICK_EXAMPLES = ("torch_hf_eval_preds_concat",)
SITE_LIMIT_BYTES = 4096

try:
    import objgraph
except ImportError:  # a benchmark-only dependency
    objgraph = None


def _load(path: Path, copy: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}_{copy}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def by_graphleak(step: Callable[[], object]) -> tuple[bool, str]:
    from pytest_graphleak import check

    result = check(step, steps=STEPS, warmup=WARMUP)
    return result.leaked, result.pattern or ""


def by_objgraph(step: Callable[[], object]) -> tuple[bool, str]:
    for _ in range(WARMUP):
        step()
    objgraph.growth(limit=None)  # the baseline: every type's count now
    for _ in range(STEPS):
        step()
    grown = objgraph.growth(limit=None) or []
    steady = [(name, delta) for name, _count, delta in grown if delta >= STEPS]
    shown = ", ".join(f"{name} +{delta}" for name, delta in steady[:2])
    return bool(steady), shown


def by_tracemalloc(step: Callable[[], object]) -> tuple[bool, str]:
    for _ in range(WARMUP):
        step()
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(STEPS):
            step()
        gc.collect()
        stats = tracemalloc.take_snapshot().statistics("lineno")
    finally:
        tracemalloc.stop()
    largest = max((s.size for s in stats), default=0)
    return largest > SITE_LIMIT_BYTES, f"{largest / 1024:.1f} KiB"


TOOLS: dict[str, Callable[[Callable[[], object]], tuple[bool, str]]] = {
    "graphleak": by_graphleak,
    "objgraph": by_objgraph,
    "tracemalloc": by_tracemalloc,
}


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0])
    modules = catalogue_modules()
    if args.quick:
        modules = [m for m in modules if m.stem in QUICK_EXAMPLES]
    import torch  # noqa: F401  (the torch examples need it; pinned threads below)

    pin_threads()
    rows = []
    caught = {tool: [0, 0] for tool in TOOLS}  # tool -> [leaky flagged, fixed flagged]
    skipped = []
    for path in list(modules):
        try:  # an example that needs a framework this environment lacks skips itself
            _load(path, "probe")
        except pytest.skip.Exception as why:
            skipped.append(f"`{path.stem}` ({why})")
            modules.remove(path)
    for path in modules:
        for kind in ("leaky", "fixed"):
            cells = [f"`{path.stem}:{kind}`"]
            for tool, run in TOOLS.items():
                if tool == "objgraph" and objgraph is None:
                    cells.append("not installed")
                    continue
                module = _load(path, f"{tool}_{kind}")
                step = getattr(module, f"{kind}_step")
                started = time.perf_counter()
                flagged, detail = run(step)
                ms = (time.perf_counter() - started) * 1000
                caught[tool][kind == "fixed"] += flagged
                word = "**flags**" if flagged else "passes"
                cells.append(
                    f"{word} ({detail}; {fmt_num(ms)} ms)"
                    if detail
                    else f"{word} ({fmt_num(ms)} ms)"
                )
                del module, step
                gc.collect()
            rows.append(cells)
    pairs = len(modules)
    summary = [
        [tool, f"{c[0]}/{pairs}", f"{c[1]}/{pairs}"]
        for tool, c in caught.items()
        if not (tool == "objgraph" and objgraph is None)
    ]
    summary.append(["torch memory snapshots", "n/a: CUDA only, no GPU here", "n/a"])
    body = (
        f"{STEPS} measured calls of each step after {WARMUP} warmup calls; each tool runs on a "
        "fresh copy of the example module. A cell says whether the tool flags the step, what "
        "it saw (graphleak: the pattern; objgraph: the types that grew by at least one object "
        f"per step; tracemalloc: the line keeping the most bytes, flagged above "
        f"{SITE_LIMIT_BYTES // 1024} KiB) and how long the {WARMUP}+{STEPS} calls took with the "
        "tool (graphleak: with the diagnosis of a leak).\n\n"
        + markdown_table(["step", *TOOLS], rows)
        + "\n\n"
        + markdown_table(["tool", "leaky steps flagged", "fixed twins flagged"], summary)
        + "\n\nReading: objgraph counts Python objects by type after a full collection. It sees "
        "a container that keeps tensors (`Tensor +16`) and minigrad's graph nodes (Python "
        "objects), but not a torch graph that grows behind one tensor (`total += loss`: torch's "
        "graph nodes are not Python objects), memory that grows inside one tensor, or objects "
        "that only the cyclic GC frees (its own `gc.collect()` frees them first). tracemalloc "
        "sees only what Python's allocator hands out, by line: torch allocates tensor storage "
        "itself, so a leaked tensor shows as a few hundred bytes of Python object, and whether "
        "a line crosses a per-line limit depends on the step (the clean seed transformer "
        "crosses 4 KiB). Neither names the pattern or the reference that holds the graph.\n"
    )
    if skipped:
        body += f"\nNot measured (a dependency this environment lacks): {', '.join(skipped)}.\n"
    write_results(
        "tools",
        "objgraph and tracemalloc next to --graphleak",
        body,
        out=args.out,
        quick=args.quick,
    )


if __name__ == "__main__":
    bench_python = BENCH_DIR / ".venv-bench" / "bin" / "python"
    if objgraph is None and bench_python.exists() and Path(sys.executable) != bench_python:
        # run_all.py's benchmark environment has objgraph: measure there.
        os.execv(str(bench_python), [str(bench_python), *sys.argv])
    sys.path.insert(0, str(REPO_ROOT))
    main()
