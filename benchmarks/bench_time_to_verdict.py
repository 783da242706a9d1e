"""Time to verdict: how many measured steps the verdict needs to catch a leak.

For a leak of ONE graph-carrying tensor per step, and of one every third step (torch and
minigrad), ``pytest_graphleak.check(step, steps=k)`` runs with k = 3, 4, ... measured
steps after the default warmup, each on a fresh step (k starts at
``verdict.FEWEST_STEPS``: fewer is an unmeasured check). The table gives the smallest k
from which every larger k (up to the largest tried) reports the leak, and the clean
twins' false positives over the same range. Then the catalogue (``examples/``): each
``fixed_step`` under the default settings, several times (no false positive allowed),
and each ``leaky_step`` (must be caught).

Target: a one-per-step leak is caught within 5 measured steps; no false positive.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
from _common import (
    catalogue_modules,
    markdown_table,
    parse_args,
    verdict_cell,
    write_results,
)

TARGET_STEPS = 5

#: name -> (builder of a fresh step, leaks?)
CASES: dict[str, tuple[Callable[[], Callable[[], object]], bool]] = {
    "torch, one tensor per step": (lambda: _common.leaky_torch_step(every=1)[0], True),
    "torch, one tensor every 3rd step": (lambda: _common.leaky_torch_step(every=3)[0], True),
    "torch, clean twin": (lambda: _common.leaky_torch_step(every=0)[0], False),
    "minigrad, one tensor per step": (lambda: _common.leaky_minigrad_step(every=1)[0], True),
    "minigrad, one tensor every 3rd step": (lambda: _common.leaky_minigrad_step(every=3)[0], True),
    "minigrad, clean twin": (lambda: _common.leaky_minigrad_step(every=0)[0], False),
}


def leaked(step: Callable[[], object], steps: int | None = None) -> bool:
    import pytest_graphleak

    result = pytest_graphleak.check(step, steps=steps, diagnose=False)
    if result.error:
        raise RuntimeError(f"the benchmark step raised: {result.error}")
    return result.leaked


def first_caught(outcomes: list[bool]) -> int | None:
    """Smallest k (1-based) from which every outcome is True; None if the last is not."""
    k = None
    for index in range(len(outcomes), 0, -1):
        if not outcomes[index - 1]:
            break
        k = index
    return k


def load_example(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_example_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the example {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    from pytest_graphleak.options import DEFAULT_STEPS, DEFAULT_WARMUP
    from pytest_graphleak.verdict import FEWEST_STEPS

    # Fewer than FEWEST_STEPS measured steps is an unmeasured check: no verdict to time.
    first_k = FEWEST_STEPS
    max_k = first_k + 1 if args.quick else DEFAULT_STEPS
    rows, one_per_step_ok, clean_ok = [], True, True
    for name, (build, leaks) in CASES.items():
        outcomes = [leaked(build(), k) for k in range(first_k, max_k + 1)]
        marks = "".join("L" if hit else "." for hit in outcomes)
        if leaks:
            k = first_caught(outcomes)
            k = None if k is None else k + first_k - 1
            cell = f"{k}" if k is not None else f"not caught within {max_k}"
            if "one tensor per step" in name:
                one_per_step_ok &= k is not None and k <= TARGET_STEPS
        else:
            false = sum(outcomes)
            clean_ok &= false == 0
            cell = f"{false} false positive(s)"
        rows.append([name, cell, f"`{marks}`"])
    table = markdown_table(
        [
            "step",
            "caught from k measured steps on",
            f"verdict for k = {first_k}..{max_k} (L = leak)",
        ],
        rows,
    )

    catalogue_rows = []
    repeats = 1 if args.quick else 2
    for path in [] if args.quick else catalogue_modules():
        try:
            module = load_example(path)
        except Exception as exc:  # an example needing what is missing here (e.g. no GPU)
            catalogue_rows.append([f"`{path.name}`", f"not loaded: {exc!r}"[:80], ""])
            continue
        fixed_false = sum(leaked(module.fixed_step) for _ in range(repeats))
        leaky_caught = sum(leaked(module.leaky_step) for _ in range(repeats))
        clean_ok &= fixed_false == 0
        catalogue_rows.append(
            [f"`{path.name}`", f"{leaky_caught}/{repeats}", f"{fixed_false}/{repeats}"]
        )
    catalogue = (
        markdown_table(
            ["example", "leaky_step caught", "fixed_step false positives"], catalogue_rows
        )
        if catalogue_rows
        else "(no catalogue in this run)"
    )

    targets = markdown_table(
        ["target", "result"],
        [
            [
                f"one-per-step leak caught within {TARGET_STEPS} measured steps (torch and "
                "minigrad)",
                verdict_cell(one_per_step_ok),
            ],
            [
                "no false positive on the clean twins and the catalogue's fixed steps",
                verdict_cell(clean_ok),
            ],
        ],
    )
    body = (
        f"`pytest_graphleak.check(step, steps=k)` with the default warmup ({DEFAULT_WARMUP} "
        f"steps), each k on a fresh step; the default is steps={DEFAULT_STEPS}. A leak is "
        f"'caught from k' when every k' >= k up to {max_k} reports it; k below "
        f"{first_k} is unmeasured (no verdict), so not tried.\n\n{table}\n\n"
        f"Catalogue (`examples/`), default settings, {repeats} run(s) each:\n\n{catalogue}\n\n"
        f"{targets}\n"
    )
    write_results("time_to_verdict", "Time to verdict", body, out=args.out, quick=args.quick)


if __name__ == "__main__":
    main()
