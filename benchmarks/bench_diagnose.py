"""Cost of ``diagnose()`` on catalogue leaks vs heap size (10k, 100k, 1M extra objects).

The diagnosis runs only after a leak verdict, and must finish within a few seconds on a
heap of 1M objects. For each heap size the same process holds the extra objects
(``fill_heap``) and, for each catalogue leak (one or two per pattern, both backends):

- ``diagnose(verdict, step=leaky_step, roots=...)`` — the whole diagnosis: five more
  steps with creation-site recording, the leaked-object search, the chain BFS, the cycle
  search, the container-growth step; median of a few calls;
- the same with the 1M-object filler reachable from a root (``fixture 'dataset'``),
  the worst case for the chain search, which its budget caps;
- one step of the example alone, and a full ``gc.collect()`` at that heap size, for
  scale (a diagnosis that collected the whole heap would pay that at least once).

Target: every diagnosis <= 3 s on the 1M heap.

Then every example of the catalogue, on the benchmark process's own heap: the verdict
``check(leaky_step, diagnose=False)`` gives, and ``diagnose()`` with it (the watch step
that finds the ``stored at:`` line included); median of a few calls, and whether the
pattern, the culprit and the ``stored at:`` line came out right.
Target: every catalogue example diagnosed in <= 0.5 s.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: F401  (imported so the torch backend is active)
from _common import (
    HEAP_SIZES,
    REPO_ROOT,
    Stats,
    catalogue_modules,
    fill_heap,
    fmt_num,
    load_note,
    load_now,
    markdown_table,
    parse_args,
    pin_threads,
    time_calls,
    tracked_object_count,
    verdict_cell,
    write_results,
)

from pytest_graphleak import check
from pytest_graphleak.diagnose import diagnose
from pytest_graphleak.probes import METRICS
from pytest_graphleak.result import Growth, Verdict

#: One or two catalogue leaks per pattern, both backends.
CASES = (
    "torch_tntorch_history",
    "torch_hf_tr_loss",
    "torch_hook_closure",
    "torch_checkpoint_closure",
    "minigrad_seed_transformer",
    "minigrad_tinyai_bptt",
    "minigrad_micrograd_closure",
    "torch_hf_eval_preds_concat",
)
#: A quick run's leaks, both tables: one per backend, neither making a torch optimizer
#: (the first one imports torch._dynamo, seconds) nor importing a framework.
QUICK_CASES = ("torch_hf_eval_preds_concat", "minigrad_micrograd_closure")
TARGET_S = 3.0
#: Every catalogue example, diagnosed on the process's own heap.
CATALOGUE_TARGET_S = 0.5


def _load(stem: str) -> ModuleType:
    path = REPO_ROOT / "examples" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(f"bench_catalogue_{stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _verdict(module: ModuleType) -> Verdict:
    """What the plugin's verdict would say: graph nodes grew, or only bytes did."""
    backend = "minigrad" if module.__name__.startswith("bench_catalogue_minigrad") else "torch"
    metric = "storage_bytes" if module.EXPECTED_PATTERN == "memory-growth" else "nodes"
    metric = f"{backend}.{metric}"
    return Verdict(True, [Growth(metric, 10, 40, 2)], reason="benchmark")


class _DiagnosisCall:
    """One diagnosis of a catalogue leak; remembers whether the pattern came out right."""

    def __init__(self, module: ModuleType, roots: dict[str, object]) -> None:
        self.module = module
        self.roots = roots
        self.verdict = _verdict(module)
        self.right: list[bool] = []

    def __call__(self) -> None:
        result = diagnose(
            self.verdict, metrics=METRICS, step=self.module.leaky_step, roots=self.roots
        )
        named = self.module.CULPRIT in " ".join(result.chain + result.cycle)
        self.right.append(result.pattern == self.module.EXPECTED_PATTERN and named)

    def verdict_text(self) -> str:
        return "yes" if all(self.right) else f"{sum(self.right)}/{len(self.right)}"


class _ExampleCall:
    """The diagnosis of one catalogue example with the verdict its own numbers give."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.verdict = check(module.leaky_step, diagnose=False).verdict
        self.right: list[bool] = []

    def __call__(self) -> None:
        result = diagnose(self.verdict, metrics=METRICS, step=self.module.leaky_step, roots={})
        named = self.module.CULPRIT in " ".join(result.chain + result.cycle)
        wanted = getattr(self.module, "STORED_AT", None)
        stored = wanted is None or any(wanted in site.line for site in result.stored_at)
        self.right.append(result.pattern == self.module.EXPECTED_PATTERN and named and stored)


def _catalogue_table(repeat: int, only: tuple[str, ...] | None = None) -> tuple[str, float]:
    rows = []
    worst = 0.0
    for path in catalogue_modules():
        if not path.name.startswith(("torch_", "minigrad_")):
            continue
        if only is not None and path.stem not in only:
            continue
        try:
            module = _load(path.stem)
        except BaseException as exc:  # an optional framework is missing: skipped
            rows.append([path.stem, "", f"not run: {type(exc).__name__}", "", ""])
            continue
        call = _ExampleCall(module)
        timing = time_calls(call, repeat=repeat)
        worst = max(worst, timing.median)
        verdict = "yes" if all(call.right) else f"{sum(call.right)}/{len(call.right)}"
        met = timing.median <= CATALOGUE_TARGET_S
        rows.append(
            [path.stem, module.EXPECTED_PATTERN, timing.fmt("s"), verdict, verdict_cell(met)]
        )
    table = markdown_table(
        [
            "example",
            "pattern",
            "diagnose()",
            "right pattern + culprit + stored at",
            f"<= {fmt_num(CATALOGUE_TARGET_S)} s",
        ],
        rows,
    )
    return table, worst


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    pin_threads()
    repeat = 1 if args.quick else 5
    load_before = load_now()
    sizes = HEAP_SIZES[:1] if args.quick else HEAP_SIZES
    cases = QUICK_CASES if args.quick else CASES
    catalogue_table, catalogue_worst = _catalogue_table(repeat, QUICK_CASES if args.quick else None)
    modules = {stem: _load(stem) for stem in cases}
    for module in modules.values():
        for _ in range(3):  # past first use, as after the plugin's warmup
            module.leaky_step()

    rows = []
    worst: dict[int, float] = {}
    for size in sizes:
        filler = fill_heap(size)
        gc.collect()
        heap = tracked_object_count()
        collect = time_calls(gc.collect, repeat=min(3, repeat))  # 3 (1 in a quick run)
        for stem, module in modules.items():
            step = time_calls(module.leaky_step, repeat=repeat)
            plain_call = _DiagnosisCall(module, {})
            reachable_call = _DiagnosisCall(module, {"fixture 'dataset'": filler})
            plain = time_calls(plain_call, repeat=repeat)
            reachable = time_calls(reachable_call, repeat=repeat)
            worst[size] = max(worst.get(size, 0.0), plain.median, reachable.median)
            rows.append(
                [
                    f"{size:,}",
                    f"{heap:,}",
                    stem,
                    module.EXPECTED_PATTERN,
                    step.fmt("ms"),
                    plain.fmt("s"),
                    plain_call.verdict_text(),
                    reachable.fmt("s"),
                    reachable_call.verdict_text(),
                    Stats.of([collect.median]).fmt("s"),
                ]
            )
        del filler
        gc.collect()

    table = markdown_table(
        [
            "extra objects",
            "tracked objects",
            "leak",
            "pattern",
            "one step",
            "diagnose()",
            "right pattern + culprit",
            "diagnose(), filler reachable from a root",
            "right pattern + culprit (reachable)",
            "one full gc.collect()",
        ],
        rows,
    )
    load_after = load_now()
    biggest = sizes[-1]
    met = worst[biggest] <= TARGET_S
    body = (
        f"{table}\n\n"
        f"Target: every diagnosis <= {fmt_num(TARGET_S)} s on the {biggest:,}-object heap: "
        f"worst {fmt_num(worst[biggest])} s, {verdict_cell(met)}.\n\n"
        "The diagnosis freezes the heap (``gc.freeze()``) instead of collecting it, so its "
        "own gc work is proportional to the objects the extra steps create, not to the "
        "heap; the chain search reads up to 10k references from the roots, then climbs "
        "from the leaked objects through ``gc.get_referrers`` (one heap scan a level), "
        "then walks what the roots reach, within 300k objects, 25k per root (budgets "
        "counted in work, never seconds). Medians with interquartile range over "
        f"{repeat} calls; torch pinned to one thread.\n\n"
        "### Every catalogue example\n\n"
        "On the benchmark process's own heap, with the verdict of "
        "``check(leaky_step, diagnose=False)``:\n\n"
        f"{catalogue_table}\n\n"
        f"Target: every catalogue example diagnosed in <= {fmt_num(CATALOGUE_TARGET_S)} s: "
        f"worst {fmt_num(catalogue_worst)} s, "
        f"{verdict_cell(catalogue_worst <= CATALOGUE_TARGET_S)}.\n\n"
        f"{load_note(load_before, load_after)}\n"
    )
    write_results("diagnose", "diagnose(): cost vs heap size", body, out=args.out, quick=args.quick)


if __name__ == "__main__":
    main()
