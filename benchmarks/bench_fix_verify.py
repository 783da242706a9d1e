"""Time of a leak's diagnosis and of its fix's verification, per catalogue example.

For every example of the catalogue, in this process, one ``check(leaky_step)`` with the
default settings: the diagnosis (``pipeline.explain``: heap walk, holder chain, sites,
the words of the fix) and the verification of its fix (``pipeline.tried_fix``: each
candidate change swapped in and the step re-run warmup + steps times, judged by the same
verdict) are timed apart, with how many changes were re-run and whether one held.
Target (issue 44): a leak's diagnosis plus verification at most 0.5 s, median over the
catalogue.

Then the share of leaks whose ``stored at:`` or ``created at:`` line (for a cycle, also
its hook or closure line) is in the user's code that get a verified fix, on the
catalogue and on a held-out-like set: the round-5 repros (``--repros DIR``, default
``/work/shared/repros/round5``, skipped where it is missing and with ``--quick``), each
folder's test files copied to a temporary directory and run as a new user would, with
``pytest --graphleak --graphleak-outlive-sites=rerun``, read from the JSON report:
marker checks, the fixture, loops and callbacks, and the outlive audit's findings.
Target (issue 44): at least 90%.
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
#: The target: share of the leaks whose line is in user code that get a verified fix.
TARGET_VERIFIED = 0.9
REPROS = Path("/work/shared/repros/round5")


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_fix_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an imported module is (a dataclass needs it)
    spec.loader.exec_module(module)
    return module


def measure(path: Path) -> tuple[str, float, float, int, str, str, str]:
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
    where = _line_kind(result.diagnosis)
    why = "" if verified == "yes" or tried is None else tried.why_not or ""
    return (path.stem, spent["explain"], spent["tried_fix"], reruns[0], verified, where, why)


def _line_kind(diagnosis: Any) -> str:
    """Where the leak's lines are (issue 44's measure: a leak whose ``stored at:`` or
    ``created at:`` line is in the user's code; a cycle's hook or closure line counts
    too): "user", "library" (lines, none the user's), or "none" found."""
    from pytest_graphleak.diagnose.fix_hooks import pack_hooks
    from pytest_graphleak.heap.usercode import is_user_file

    if diagnosis is None:
        return "none"
    files = [s.filename for s in [*diagnosis.stored_at, *diagnosis.sites, *diagnosis.change_at]]
    files += [filename for _, filename, _ in pack_hooks(diagnosis.cycle)]
    if any(is_user_file(filename) for filename in files):
        return "user"
    return "library" if files else "none"


def repro_rows(folder: Path) -> list[list[str]]:
    """One row per leak of the repros under ``folder``: repro, test and check, where the
    line is, verified, why not."""
    import json
    import shutil
    import subprocess
    import tempfile

    from pytest_graphleak.result import CheckResult

    rows: list[list[str]] = []
    for repro in sorted(p for p in folder.iterdir() if p.is_dir()):
        with tempfile.TemporaryDirectory() as tmp:
            for test_file in sorted(repro.glob("*.py")):
                shutil.copy(test_file, tmp)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "--graphleak",
                    "--graphleak-outlive-sites=rerun",
                    "--graphleak-report=out.json",
                    "-q",
                    "-p",
                    "no:randomly",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "no:xdist",
                ],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            report = Path(tmp) / "out.json"
            document = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
            for test in document.get("tests", []):
                for check in test.get("checks", []):
                    result = CheckResult.from_dict(check)
                    if not result.leaked:
                        continue
                    diagnosis = result.diagnosis
                    tried = diagnosis.fix_tried if diagnosis is not None else None
                    verified = tried is not None and tried.verified
                    why = "-" if verified or tried is None else tried.why_not or "-"
                    rows.append(
                        [
                            repro.name,
                            result.name,
                            _line_kind(diagnosis),
                            "yes" if verified else "no",
                            why,
                        ]
                    )
    return rows


def _share(rows: list[list[str]], where: int, verified: int) -> tuple[int, int]:
    """(verified, total) among the rows whose line is in user code."""
    user = [row for row in rows if row[where] == "user"]
    return sum(row[verified] == "yes" for row in user), len(user)


def main(argv: list[str] | None = None) -> None:
    repros = REPROS
    if argv is None:
        argv = sys.argv[1:]
    if "--repros" in argv:  # parse_args knows --quick and --out only
        at = argv.index("--repros")
        repros = Path(argv[at + 1])
        argv = [*argv[:at], *argv[at + 2 :]]
    args = parse_args(__doc__.splitlines()[0], argv)
    files = catalogue_modules()
    if args.quick:
        files = [f for f in files if f.name.startswith("minigrad")][:2] or files[:2]
    if any(f.name.startswith("torch_") for f in files):
        import torch  # noqa: F401  (before the first example, as a suite would import it)
    pin_threads()
    rows = [measure(path) for path in files]
    totals = [row[1] + row[2] for row in rows]
    median = statistics.median(totals)
    table = markdown_table(
        ["example", "diagnosis", "verification", "changes re-run", "verified", "line"],
        [
            [
                row[0],
                f"{fmt_num(float(row[1]))} s",
                f"{fmt_num(float(row[2]))} s",
                row[3],
                row[4],
                row[5],
            ]
            for row in rows
        ],
    )
    verified = sum(row[4] == "yes" for row in rows)
    ran = repros.is_dir() and not args.quick
    held_rows = repro_rows(repros) if ran else []
    caught, user = _share(rows, 5, 4)  # type: ignore[arg-type]
    held, held_user = _share(held_rows, 2, 3)
    both, both_user = caught + held, user + held_user
    share = both / both_user if both_user else 0.0
    targets = markdown_table(
        ["target", "measured", "result"],
        [
            [
                f"diagnosis + verification <= {TARGET_S} s (median over the catalogue)",
                f"{fmt_num(median)} s",
                verdict_cell(median <= TARGET_S),
            ],
            [
                f"leaks whose line is in user code with a verified fix >= {TARGET_VERIFIED:.0%}",
                f"{both} of {both_user} ({share:.0%}; "
                f"catalogue{' and round-5 repros' if ran else ''})",
                verdict_cell(share >= TARGET_VERIFIED),
            ],
        ],
    )
    missed = [[row[0], row[6]] for row in rows if row[5] == "user" and row[4] != "yes"]
    held_table = markdown_table(["repro", "check", "line", "verified", "why not"], held_rows)
    body = (
        f"{len(rows)} examples, one `check(leaky_step)` each (16 steps after 3 warmup); "
        f"{verified} of {len(rows)} fixes verified. Verification re-runs the step warmup + "
        "steps times per change tried, so it costs about as much as the check's own steps "
        f"per change.\n\n{table}\n\n"
        f"Catalogue leaks whose line is in user code: {user}; with a verified fix: {caught}."
        + (
            " The others, and why:\n\n"
            f"{markdown_table(['example', 'why not verified'], missed)}\n\n"
            if missed
            else "\n\n"
        )
        + f"Round-5 repros (`{repros}`, each folder's test files run with `pytest --graphleak "
        "--graphleak-outlive-sites=rerun`): "
        + (
            f"{len(held_rows)} leaks, {held_user} with their line in user code, {held} of "
            f"those with a verified fix.\n\n{held_table}\n\n"
            if ran
            else "not run.\n\n"
        )
        + f"{targets}\n"
    )
    write_results(
        "fix_verify",
        "Diagnosis and fix verification per catalogue leak",
        body,
        out=args.out,
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
