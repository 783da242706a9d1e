"""Wall time of ``pytest --graphleak`` over the project's catalogue, and where it goes.

The catalogue is every ``examples/*.py`` with ``leaky_step``/``fixed_step`` and the
marked tests ``test_leaky``/``test_fixed``. Four pytest sessions over the same files, in
subprocesses, medians over rounds:

- ``plain``: without ``--graphleak`` (each marked test body runs once);
- ``loop``: without ``--graphleak``, a benchmark plugin calls each marked body
  warmup + steps times in a plain loop: the steps themselves;
- ``measure``: ``--graphleak --graphleak-no-diagnose``: steps + sampling + verdict;
- ``full``: ``--graphleak``: the above + diagnosis of each leak.

Split of the full run: pytest itself (start, imports, collection, fixtures) = wall of
``full`` minus its test bodies; steps = bodies of ``loop``; measuring = bodies of
``measure`` minus ``loop``; diagnosis = bodies of ``full`` minus ``measure``.
Target: the steps dominate the measuring (sampling, gc work, verdict).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DURATIONS_CONFTEST,
    REPO_ROOT,
    Stats,
    catalogue_modules,
    fmt_num,
    markdown_table,
    no_dev_plugins,
    parse_args,
    profile_top,
    run_pytest,
    verdict_cell,
    write_results,
)

#: A pytest plugin (loaded with -p) that records call durations and, in loop mode,
#: calls each marked body warmup + steps times itself, as the marker would.
LOOP_PLUGIN = (
    DURATIONS_CONFTEST
    + """

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("no_graph_growth")
    if os.environ.get("BENCH_LOOP") != "1" or marker is None:
        return None
    from pytest_graphleak.options import DEFAULT_STEPS, DEFAULT_WARMUP

    calls = marker.kwargs.get("steps", DEFAULT_STEPS) + marker.kwargs.get("warmup", DEFAULT_WARMUP)
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    for _ in range(calls):
        pyfuncitem.obj(**kwargs)
    return True
"""
)


def profile_checks(files: list[Path]) -> str:
    """cProfile of ``check(fixed_step)`` for every example, in this process."""
    import importlib.util

    import pytest_graphleak

    steps = []
    for path in files:
        spec = importlib.util.spec_from_file_location(f"bench_example_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        steps.append(module.fixed_step)

    def run() -> None:
        for step in steps:
            pytest_graphleak.check(step, diagnose=False)

    return profile_top(run, 10, "pytest_graphleak|built-in method gc")


MODES = {
    "plain": [],
    "loop": [],
    "measure": ["--graphleak", "--graphleak-no-diagnose"],
    "full": ["--graphleak"],
}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    files = catalogue_modules()
    if not files:
        raise SystemExit("bench_catalogue: no example with leaky_step/fixed_step in examples/")
    modes = dict(MODES)
    if args.quick:  # one small example, the two sessions the smoke test needs
        files = [f for f in files if f.name.startswith("minigrad")][:1] or files[:1]
        modes = {"loop": MODES["loop"], "full": MODES["full"]}
    rounds = 1 if args.quick else 2

    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    bodies: dict[str, list[float]] = {mode: [] for mode in modes}
    outcomes: dict[str, dict[str, str]] = {}
    heap = 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench_catalogue_plugin.py").write_text(LOOP_PLUGIN, encoding="utf-8")
        pythonpath = os.pathsep.join([tmp, str(REPO_ROOT)])
        for _ in range(rounds):
            for mode, extra in modes.items():
                env = dict(
                    os.environ, PYTHONPATH=pythonpath, BENCH_LOOP="1" if mode == "loop" else "0"
                )
                run = run_pytest(
                    sys.executable,
                    [
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        *no_dev_plugins(args.quick),
                        "-p",
                        "bench_catalogue_plugin",
                        *extra,
                        *[str(f.relative_to(REPO_ROOT)) for f in files],
                    ],
                    cwd=REPO_ROOT,
                    env=env,
                )
                if not run.durations:
                    raise SystemExit(
                        f"bench_catalogue: the {mode} run recorded nothing:\n{run.output[-3000:]}"
                    )
                walls[mode].append(run.wall_s)
                bodies[mode].append(sum(run.durations.values()))
                outcomes[mode] = run.outcomes
                heap = max(heap, run.heap)

    wall = {mode: Stats.of(values).median for mode, values in walls.items()}
    body = {mode: Stats.of(values).median for mode, values in bodies.items()}
    measure = body.get("measure", body["full"])
    parts = {
        "pytest itself (start, imports, collection, fixtures)": wall["full"] - body["full"],
        "the steps themselves (warmup + steps calls)": body["loop"],
        "measuring (check start, samples, gc, verdict)": measure - body["loop"],
        "diagnosis of the leaks (extra steps included)": body["full"] - measure,
    }
    total = sum(parts.values())
    split = markdown_table(
        ["part of the `--graphleak` run", "seconds", "share"],
        [
            [name, fmt_num(seconds), f"{fmt_num(100 * seconds / total)}%"]
            for name, seconds in parts.items()
        ]
        + [["total: wall of the `--graphleak` run", fmt_num(total), "100%"]],
    )
    walls_table = markdown_table(
        ["session", "wall (median, IQR)", "test bodies"],
        [[mode, Stats.of(walls[mode]).fmt("s"), f"{fmt_num(body[mode])} s"] for mode in modes],
    )
    full = outcomes["full"]
    wrong = sorted(
        node
        for node, outcome in full.items()
        if (node.endswith("test_leaky") and outcome != "failed")
        or (node.endswith("test_fixed") and outcome != "passed")
    )
    leaky_failed = sum(1 for n, o in full.items() if n.endswith("test_leaky") and o == "failed")
    fixed_passed = sum(1 for n, o in full.items() if n.endswith("test_fixed") and o == "passed")
    steps_dominate = (
        parts["the steps themselves (warmup + steps calls)"]
        >= parts["measuring (check start, samples, gc, verdict)"]
    )
    targets = markdown_table(
        ["target", "measured", "result"],
        [
            [
                "the steps dominate the measuring",
                f"steps {fmt_num(parts['the steps themselves (warmup + steps calls)'])} s vs "
                f"measuring {fmt_num(parts['measuring (check start, samples, gc, verdict)'])} s",
                verdict_cell(steps_dominate),
            ],
            [
                "every test_leaky fails and every test_fixed passes",
                f"{leaky_failed} leaky failed, {fixed_passed} fixed passed of {len(files)} each"
                + (f"; wrong: {', '.join(wrong)}" if wrong else ""),
                verdict_cell(not wrong),
            ],
        ],
    )
    checks = 2 * len(files)
    per_check = parts["measuring (check start, samples, gc, verdict)"] / checks
    body_text = (
        f"{len(files)} example modules ({checks} marked tests), {rounds} round(s); "
        f"files: {', '.join(f'`{f.name}`' for f in files)}. The pytest process holds "
        f"{heap:,} gc-tracked objects at the end of the session.\n\n{walls_table}\n\n"
        f"Split of the `--graphleak` run:\n\n{split}\n\n{targets}\n\n"
        f"Measuring costs {fmt_num(per_check * 1e3)} ms per checked test here. Profile of "
        "the checks of every example's clean twin in one process (`check(fixed_step)`, "
        "cProfile, the plugin's functions and gc calls by own time):\n\n"
        f"```\n{'(skipped in a quick run)' if args.quick else profile_checks(files)}\n```\n"
    )
    write_results(
        "catalogue",
        "pytest --graphleak over the catalogue",
        body_text,
        out=args.out,
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
