"""Per-step overhead: the same training step in a plain loop vs under the marker.

One pytest session (``--graphleak``) in a subprocess holds, for each step (a small torch
MLP, a tiny torch transformer, a minigrad MLP) and each round, two tests run back to back
with the same, already warm, step object:

- ``checked``: the body is ONE step under ``@pytest.mark.no_graph_growth`` with the
  plugin's default ``steps``/``warmup``: the plugin calls it warmup + steps times and
  measures after each call;
- ``plain``: an unmarked test that calls the step as many times in a loop.

The per-step cost is each test's call-phase duration divided by the number of calls; the
overhead is checked - plain. Target: checked <= 1.10 x plain + 0.5 ms per step.

A second, in-process part profiles ``pytest_graphleak.check`` on the MLP step and splits
its time into the step itself, gc work and the probes (cProfile, top functions).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    DURATIONS_CONFTEST,
    REPO_ROOT,
    Stats,
    fmt_num,
    markdown_table,
    parse_args,
    run_pytest,
    verdict_cell,
    write_results,
)

STEPS = {
    "torch MLP 64x128-256-10": "torch_mlp_step",
    "torch transformer (1 layer, d=64, seq 32, batch 8)": "torch_transformer_step",
    "minigrad MLP 64x128-256-10": "minigrad_mlp_step",
}

TEST_MODULE = '''
import os
import sys

import pytest

sys.path.insert(0, {bench_dir!r})
import _common

ROUNDS = int(os.environ["BENCH_ROUNDS"])
BUILDERS = {builders!r}
_STEPS = {{}}
_CALLS = {{}}


def _step(name):
    if name not in _STEPS:
        fn = getattr(_common, BUILDERS[name])()
        for _ in range(3):
            fn()
        _STEPS[name] = fn
    return _STEPS[name]


PARAMS = []
for name in BUILDERS:
    for r in range(ROUNDS):
        PARAMS.append(pytest.param(name, "checked", id=f"{{name}}-{{r}}-checked",
                                   marks=pytest.mark.no_graph_growth))
        PARAMS.append(pytest.param(name, "plain", id=f"{{name}}-{{r}}-plain"))


@pytest.fixture
def step(request):
    return _step(request.param)


@pytest.mark.parametrize(("name", "mode"), PARAMS)
def test_step(name, mode, record_property):
    fn = _step(name)
    if mode == "checked":
        # The plugin calls this body warmup + steps times: count them for the plain twin.
        _CALLS[name] = _CALLS.get(name, 0) + 1
        fn()
    else:
        calls = _CALLS.pop(name)
        for _ in range(calls):
            fn()
        record_property("calls", calls)
        print(f"CALLS {{name}} {{calls}}")
'''


def _available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def profile_check(quick: bool) -> str:
    """cProfile of ``pytest_graphleak.check`` on the torch MLP step: top costs."""
    import _common

    import pytest_graphleak

    step = _common.torch_mlp_step()
    for _ in range(3):
        step()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(1 if quick else 10):
        pytest_graphleak.check(step)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(12)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[start:start + 13])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    rounds = 1 if args.quick else 7
    builders = {name: fn for name, fn in STEPS.items()
                if _available("minigrad.nn") or not fn.startswith("minigrad")}
    if args.quick:  # the transformer is the slowest to build and run
        builders = {k: v for k, v in builders.items() if "transformer" not in k}

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "conftest.py").write_text(DURATIONS_CONFTEST, encoding="utf-8")
        (work / "test_overhead.py").write_text(
            TEST_MODULE.format(bench_dir=str(BENCH_DIR), builders=builders), encoding="utf-8"
        )
        env = dict(os.environ, BENCH_ROUNDS=str(rounds), PYTHONPATH=str(REPO_ROOT))
        run = run_pytest(sys.executable,
                         ["-q", "-s", "-p", "no:cacheprovider", "--graphleak", "test_overhead.py"],
                         cwd=work, env=env)
    if run.returncode != 0:
        raise SystemExit(f"bench_overhead: the pytest session failed:\n{run.output[-4000:]}")
    calls = {}
    for line in run.output.splitlines():
        if line.startswith("CALLS "):
            name, count = line[len("CALLS "):].rsplit(" ", 1)
            calls[name] = int(count)

    rows = []
    all_met = True
    for name in builders:
        n = calls[name]
        per_call = {mode: [d / n for node, d in run.durations.items()
                           if f"[{name}-" in node and node.endswith(f"-{mode}]")]
                    for mode in ("plain", "checked")}
        plain, checked = Stats.of(per_call["plain"]), Stats.of(per_call["checked"])
        overhead = checked.median - plain.median
        budget = 0.10 * plain.median + 0.5e-3
        met = overhead <= budget
        all_met &= met
        rows.append([
            name, n, plain.fmt("ms"), checked.fmt("ms"),
            f"{fmt_num(overhead * 1e3)} ms ({fmt_num(100 * overhead / plain.median)}%)",
            f"{fmt_num(budget * 1e3)} ms", verdict_cell(met),
        ])
    table = markdown_table(
        ["step", "calls per test", "plain loop, per step", "under the marker, per step",
         "overhead per step", "budget (10% + 0.5 ms)", "target"], rows)
    body = (
        "Both columns are call-phase durations of tests in ONE `pytest --graphleak` session "
        f"(medians over {rounds} interleaved rounds, IQR in brackets), divided by the number "
        "of step calls; the marker uses the plugin's default steps and warmup, and its cost "
        "includes the per-check setup (gc collect + freeze, the probes' start scan) spread "
        f"over those calls.\n\n{table}\n\n"
        f"Overall: {verdict_cell(all_met)}.\n\n"
        "Profile of `pytest_graphleak.check(torch MLP step)` (cProfile, sorted by own time; "
        "the step's own torch calls show up as `backward`, `linear`, optimizer functions):\n\n"
        f"```\n{profile_check(args.quick)}\n```\n"
    )
    write_results("overhead", "Per-step overhead of the marker", body,
                  out=args.out, quick=args.quick)


if __name__ == "__main__":
    main()
