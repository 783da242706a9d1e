"""pytest-memray's ``limit_leaks`` next to ``--graphleak`` on the same leaky and clean steps.

Runs in the benchmark-only environment ``benchmarks/.venv-bench`` (pytest-memray is not
a dependency of the project; ``run_all.py`` creates that environment when it is missing).
Each step is called WARMUP times outside the measurement, then STEPS times measured:

- memray: the STEPS calls in one test body under ``@pytest.mark.limit_leaks("1 B")``, so
  memray lists every leaked location; we read the largest location and the total from its
  report and say which limit would separate the leaky step from its clean twin;
- graphleak: the test body is one step under ``@pytest.mark.no_graph_growth(steps=STEPS,
  warmup=WARMUP)`` with ``--graphleak``;
- plain: the STEPS calls with neither plugin (the cost baseline).

What is compared: does each tool fail the leaky step and pass the clean twin, and what
does the test body cost (call-phase duration, medians over rounds).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    DURATIONS_CONFTEST,
    NO_DEV_PLUGINS,
    REPO_ROOT,
    Stats,
    catalogue_modules,
    fmt_num,
    markdown_table,
    parse_args,
    ratio,
    run_pytest,
    write_results,
)

BENCH_VENV = BENCH_DIR / ".venv-bench"
BENCH_PYTHON = BENCH_VENV / "bin" / "python"
#: The limit a user might pick without tuning: a few KiB per allocation site.
USER_LIMIT_BYTES = 4096

TEST_MODULE = """
import importlib.util
import os
import sys

import pytest

sys.path.insert(0, {bench_dir!r})
import _common

MODE = os.environ["BENCH_MODE"]
STEPS = int(os.environ["BENCH_STEPS"])
WARMUP = int(os.environ["BENCH_WARMUP"])
CATALOGUE = {catalogue!r}


def _example(path, name):
    spec = importlib.util.spec_from_file_location("example_" + os.path.basename(path)[:-3], path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return getattr(module, name)


def _make(case):
    if case == "torch-one-per-step":
        return _common.leaky_torch_step(every=1)[0]
    if case == "torch-one-every-3rd":
        return _common.leaky_torch_step(every=3)[0]
    if case == "torch-clean-twin":
        return _common.leaky_torch_step(every=0)[0]
    stem, kind = case.rsplit(":", 1)
    return _example(CATALOGUE[stem], kind + "_step")


CASES = ["torch-one-per-step", "torch-one-every-3rd", "torch-clean-twin"] + [
    stem + ":" + kind for stem in CATALOGUE for kind in ("leaky", "fixed")
]


@pytest.fixture
def step(request):
    fn = _make(request.param)
    if MODE != "graphleak":  # graphleak runs its own warmup inside the marker
        for _ in range(WARMUP):
            fn()
    return fn


if MODE == "memray":
    mark = pytest.mark.limit_leaks("1 B")
elif MODE == "graphleak":
    mark = pytest.mark.no_graph_growth(steps=STEPS, warmup=WARMUP)
else:
    mark = lambda f: f


@pytest.mark.parametrize("step", CASES, indirect=True)
@mark
def test_case(step):
    if MODE == "graphleak":
        step()
    else:
        for _ in range(STEPS):
            step()
"""

_SIZE = re.compile(r"^\s*- ([\d.]+)(B|KiB|MiB|GiB) allocated here:", re.MULTILINE)
_HEADER = re.compile(r"^_{3,} (test_case\[.*?\]) _{3,}$", re.MULTILINE)
_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def memray_leaks(output: str) -> dict[str, list[int]]:
    """Test name -> leaked bytes per location, read from pytest-memray's failure sections."""
    leaks: dict[str, list[int]] = {}
    headers = list(_HEADER.finditer(output))
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(output)
        section = output[header.end() : end]
        sizes = [int(float(num) * _UNITS[unit]) for num, unit in _SIZE.findall(section)]
        if sizes:
            leaks[header.group(1)] = sizes
    return leaks


def _outcome(outcome: str | None) -> str:
    return {"failed": "fail", "passed": "pass", None: "not run"}.get(outcome, str(outcome))


def ensure_bench_venv() -> Path:
    if not BENCH_PYTHON.exists():
        raise SystemExit(
            f"bench_memray: {BENCH_PYTHON} is missing; create it with "
            f"`.venv/bin/python benchmarks/run_all.py --setup-only` (see benchmarks/README.md)"
        )
    return BENCH_PYTHON


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    python = ensure_bench_venv()
    steps, warmup, rounds = (6, 2, 1) if args.quick else (20, 3, 2)
    catalogue = {} if args.quick else {p.stem: str(p) for p in catalogue_modules()}

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "conftest.py").write_text(DURATIONS_CONFTEST, encoding="utf-8")
        (work / "test_cases.py").write_text(
            TEST_MODULE.format(bench_dir=str(BENCH_DIR), catalogue=catalogue), encoding="utf-8"
        )
        base_env = dict(
            os.environ, BENCH_STEPS=str(steps), BENCH_WARMUP=str(warmup), PYTHONPATH=str(REPO_ROOT)
        )
        modes: dict[str, list[str]] = {
            "plain": ["-p", "no:memray", "-p", "no:graphleak"],
            # pytest-memray's docs advise the system allocator for limit_leaks.
            "memray": ["--memray", "-p", "no:graphleak"],
            "graphleak": ["--graphleak", "-p", "no:memray"],
        }
        common = ["-q", "-p", "no:cacheprovider", *NO_DEV_PLUGINS, "-rA", "test_cases.py"]
        if args.quick:  # one leaky step and its clean twin, memray only
            common += ["-k", "one-per-step or clean-twin"]
            modes = {"memray": modes["memray"]}
        durations: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
        outcomes: dict[str, dict[str, str]] = {}
        leaks: dict[str, list[int]] = {}
        walls: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(rounds):
            for mode, extra in modes.items():
                env = dict(base_env, BENCH_MODE=mode)
                if mode == "memray":
                    env["PYTHONMALLOC"] = "malloc"
                run = run_pytest(python, [*extra, *common], cwd=work, env=env)
                if not run.durations:
                    raise SystemExit(
                        f"bench_memray: the {mode} run recorded nothing:\n{run.output[-3000:]}"
                    )
                walls[mode].append(run.wall_s)
                for node, seconds in run.durations.items():
                    durations[mode].setdefault(node, []).append(seconds)
                outcomes[mode] = run.outcomes
                if mode == "memray":
                    leaks = memray_leaks(run.output)

    rows = []
    tally = {"memray": [0, 0, 0, 0], "graphleak": [0, 0, 0, 0]}  # caught, leaky, FP, clean
    for node in sorted(durations["memray"]):
        case = node.split("[", 1)[1].rstrip("]")
        test_name = node.split("::", 1)[1]
        plain = Stats.of(durations.get("plain", {}).get(node, [float("nan")])).median
        memray = Stats.of(durations["memray"].get(node, [float("nan")])).median
        graph = Stats.of(durations.get("graphleak", {}).get(node, [float("nan")])).median
        sizes = leaks.get(test_name, [])
        is_leaky = not (case.endswith(":fixed") or case.endswith("clean-twin"))
        verdicts = {
            "memray": max(sizes, default=0) > USER_LIMIT_BYTES,
            "graphleak": outcomes.get("graphleak", {}).get(node) == "failed",
        }
        for tool, failed in verdicts.items():
            tally[tool][0 if is_leaky else 2] += failed
            tally[tool][1 if is_leaky else 3] += 1
        rows.append(
            [
                f"`{case}`",
                f"{fmt_num(max(sizes) / 1024) if sizes else 0} / {fmt_num(sum(sizes) / 1024)}",
                "fail" if max(sizes, default=0) > USER_LIMIT_BYTES else "pass",
                _outcome(outcomes.get("graphleak", {}).get(node)),
                # The quick run (smoke test) runs memray only: the other cells say so.
                f"{fmt_num(plain * 1e3)}" if "plain" in modes else "n/a",
                f"{fmt_num(memray * 1e3)} ({fmt_num(ratio(memray, plain))}x)"
                if "plain" in modes
                else f"{fmt_num(memray * 1e3)}",
                f"{fmt_num(graph * 1e3)} ({fmt_num(ratio(graph, plain))}x)"
                if "graphleak" in modes
                else "n/a",
            ]
        )
    table = markdown_table(
        [
            "step",
            "memray leaked KiB: largest site / total",
            f"memray at {USER_LIMIT_BYTES // 1024} KiB/site",
            "--graphleak",
            f"plain ms ({steps} calls)",
            f"memray ms ({steps} calls)",
            f"graphleak ms ({warmup}+{steps} calls)",
        ],
        rows,
    )
    summary = markdown_table(
        ["tool", "leaky steps failed", "clean steps failed (false positives)"],
        [
            [
                f'pytest-memray `limit_leaks("{USER_LIMIT_BYTES // 1024} KiB")`'
                if tool == "memray"
                else "pytest-graphleak `--graphleak`",
                f"{c}/{n}",
                f"{fp}/{m}",
            ]
            for tool, (c, n, fp, m) in tally.items()
            if tool in durations
        ],
    )
    wall_rows = [[mode, Stats.of(values).fmt("s")] for mode, values in walls.items()]
    body = (
        f"{steps} measured calls of each step after {warmup} warm-up calls; medians over "
        f"{rounds} round(s). `memray leaked` is what pytest-memray's `limit_leaks` reported "
        "still allocated at the end of the test body (its limit is per allocation site, so "
        "it fails a test when ONE site leaked more than the limit). `--graphleak` is the "
        "outcome of the same step under `@pytest.mark.no_graph_growth` (no threshold to "
        "choose). Times are the test body's call phase (graphleak: includes diagnosis of a "
        "leak).\n\n"
        f"{table}\n\n{summary}\n\nWhole session wall time (interpreter start, imports, collection "
        f"included):\n\n{markdown_table(['mode', 'wall'], wall_rows)}\n\n"
        "Reading: memray sees bytes, not graphs: the clean twin also leaves a few cached "
        "allocations behind, and the leaky step's largest site grows with the number of "
        "steps, so the separating limit depends on the step, the tensor sizes and the step "
        "count; a one-every-3rd leak leaks a third as much per site. It names the allocating "
        "line, not the pattern or the reference that keeps the graph alive.\n"
    )
    write_results(
        "memray", "pytest-memray limit_leaks vs --graphleak", body, out=args.out, quick=args.quick
    )


if __name__ == "__main__":
    main()
