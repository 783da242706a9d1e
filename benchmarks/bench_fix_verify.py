"""Time of a leak's diagnosis and of its fix's verification, per catalogue example.

For every example of the catalogue, in this process, one ``check(leaky_step)`` with the
default settings: the diagnosis (``pipeline.explain``: heap walk, holder chain, sites,
the words of the fix) and the verification of its fix (``pipeline.tried_fix``: each
candidate change swapped in and the step re-run warmup + steps times, judged by the same
verdict) are timed apart, with how many changes were re-run and whether one held.
Target (issue 44): a leak's diagnosis plus verification at most 0.5 s, median over the
catalogue.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    catalogue_modules,
    fmt_num,
    markdown_table,
    parse_args,
    pin_threads,
    verdict_cell,
    write_results,
)

#: The target: median over the catalogue, diagnosis plus verification, seconds.
TARGET_S = 0.5


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_fix_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an imported module is (a dataclass needs it)
    spec.loader.exec_module(module)
    return module


def measure(path: Path) -> list[object]:
    """One row: example, diagnosis s, verification s, changes re-run, verified."""
    import pytest_graphleak
    from pytest_graphleak import pipeline
    from pytest_graphleak.diagnose import fix_verify

    spent = {"explain": 0.0, "tried_fix": 0.0}
    reruns = [0]
    originals = (pipeline.explain, pipeline.tried_fix, fix_verify.try_edit)

    def timed(name: str, function: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started

        return run

    def counted(*args: Any, **kwargs: Any) -> Any:
        reruns[0] += 1
        return originals[2](*args, **kwargs)

    pipeline.explain = timed("explain", originals[0])
    pipeline.tried_fix = timed("tried_fix", originals[1])
    fix_verify.try_edit = counted
    try:
        result = pytest_graphleak.check(_load(path).leaky_step)
    finally:
        pipeline.explain, pipeline.tried_fix, fix_verify.try_edit = originals
    tried = result.diagnosis.fix_tried if result.diagnosis is not None else None
    verified = "yes" if tried is not None and tried.verified else "no"
    return [path.stem, spent["explain"], spent["tried_fix"], reruns[0], verified]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    files = catalogue_modules()
    if args.quick:
        files = [f for f in files if f.name.startswith("minigrad")][:2] or files[:2]
    if any(f.name.startswith("torch_") for f in files):
        import torch  # noqa: F401  (before the first example, as a suite would import it)
    pin_threads()
    rows = [measure(path) for path in files]
    totals = [float(row[1]) + float(row[2]) for row in rows]  # type: ignore[arg-type]
    median = statistics.median(totals)
    table = markdown_table(
        ["example", "diagnosis", "verification", "changes re-run", "verified"],
        [[row[0], f"{fmt_num(float(row[1]))} s", f"{fmt_num(float(row[2]))} s", row[3], row[4]]
         for row in rows],  # type: ignore[arg-type]
    )
    verified = sum(row[4] == "yes" for row in rows)
    targets = markdown_table(["target", "measured", "result"], [
        [f"diagnosis + verification <= {TARGET_S} s (median over the catalogue)",
         f"{fmt_num(median)} s", verdict_cell(median <= TARGET_S)],
    ])  # fmt: skip
    body = (
        f"{len(rows)} examples, one `check(leaky_step)` each (16 steps after 3 warmup); "
        f"{verified} of {len(rows)} fixes verified. Verification re-runs the step warmup + "
        "steps times per change tried, so it costs about as much as the check's own steps "
        f"per change.\n\n{table}\n\n{targets}\n"
    )
    write_results("fix_verify", "Diagnosis and fix verification per catalogue leak", body,
                  out=args.out, quick=args.quick)


if __name__ == "__main__":
    main()
