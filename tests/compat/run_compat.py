"""Compatibility matrix: Python 3.10-3.13 x pytest 7 / 8 / newest, with other plugins loaded.

For each combination this builds a virtual environment (outside the work tree), installs
the project (a real, non-editable install, so the ``pytest11`` entry point is what loads
the plugin), pytest-xdist, pytest-randomly, pytest-timeout and pytest-rerunfailures, and
torch 2.13.0 (CPU) only for Python 3.11, where the local wheel exists (any other torch
would be several GB of CUDA downloads); the other interpreters run the minigrad-only path.

Then it runs, with every plugin active at once:
1. ``pytest --markers`` must list ``no_graph_growth`` (the entry point loaded);
2. the catalogue (``examples/``, torch modules only where torch is installed) under
   ``--graphleak -n 2 -p randomly --timeout=300 --reruns=1``: every leaky test caught with
   a pattern word, every fixed twin passing (scored by ``tests/soak/catalogue.py``);
3. a subset of the project's own tests (``--tests``; ``--tests tests`` for the whole suite).

Usage (from the repository root, any Python):

    python3 tests/compat/run_compat.py                       # the whole matrix
    python3 tests/compat/run_compat.py --pythons 3.11 --pytest 7
    python3 tests/compat/run_compat.py --venv-root /tmp/compat --out tests/compat/results.md

The table goes to ``--out`` (default ``tests/compat/results.md``); docs/COMPATIBILITY.md
explains it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "soak"))

from catalogue import catalogue_files, run_catalogue  # noqa: E402

PYTEST_SPECS = {"7": "pytest>=7.0,<8", "8": "pytest>=8.0,<9", "newest": "pytest"}
PLUGINS = ["pytest-xdist", "pytest-randomly", "pytest-timeout", "pytest-rerunfailures"]
BASE = ["numpy", "psutil", "hypothesis", "jsonschema"]
TORCH_PYTHONS = {"3.11": "torch==2.13.0"}  # the local CPU wheel; nothing else is pinned
DEFAULT_TESTS = [
    "tests/test_bad_input.py",
    "tests/test_gc_state.py",
    "tests/test_verdict_properties.py",
    "tests/test_self_leak.py",
    "tests/test_reach.py",
]
DEFAULT_VENV_ROOT = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-graphleak-compat"
)


@dataclass
class Combo:
    python: str  # "3.11"
    pytest: str  # "7" | "8" | "newest"
    interpreter: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)  # step -> "ok" | "FAIL: ..." | "skipped"
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"py{self.python}-pytest{self.pytest}"


def find_interpreter(version: str) -> str | None:
    """The newest pyenv build of Python ``version``, else a working ``python3.X`` on PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    builds = sorted(glob.glob(str(root / "versions" / f"{version}.*" / "bin" / "python")))
    candidates = [*reversed(builds), shutil.which(f"python{version}")]
    for candidate in filter(None, candidates):
        # a pyenv shim exists on PATH even when that version is not selected: ask it
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == str(
            tuple(int(p) for p in version.split("."))
        ):
            return candidate
    return None


def sh(
    cmd: list[str],
    log: Path,
    timeout: float = 1800,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=env,
    )
    out = proc.stdout + proc.stderr
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n{out}\n[exit {proc.returncode}]\n")
    return proc.returncode, out


def last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "(no output)"


def build(combo: Combo, venv: Path, log: Path, fresh: bool) -> bool:
    if fresh and venv.exists():
        shutil.rmtree(venv)
    py = venv / "bin" / "python"
    if not py.exists():
        code, out = sh([combo.interpreter or "", "-m", "venv", str(venv)], log)
        if code:
            combo.steps["venv"] = f"FAIL: {last_line(out)}"
            return False
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    wanted = [*BASE, PYTEST_SPECS[combo.pytest], *PLUGINS]
    if combo.python in TORCH_PYTHONS:
        wanted.append(TORCH_PYTHONS[combo.python])
    code, out = sh([*pip, *wanted], log)
    if code:
        combo.steps["install deps"] = f"FAIL: {last_line(out)}"
        return False
    # a real install (not editable) of the working tree: the entry point is what loads us
    code, out = sh([*pip, "--no-deps", "--force-reinstall", str(REPO)], log)
    if code:
        combo.steps["install project"] = f"FAIL: {last_line(out)}"
        return False
    code, out = sh(
        [
            str(py),
            "-c",
            "import importlib.metadata as m, sys\n"
            "print(sys.version.split()[0])\n"
            "for n in ['pytest', 'numpy', 'pytest-xdist', 'pytest-randomly', 'pytest-timeout',"
            " 'pytest-rerunfailures', 'hypothesis', 'torch']:\n"
            "    try: print(n, m.version(n))\n"
            "    except m.PackageNotFoundError: pass\n",
        ],
        log,
    )
    lines = out.strip().splitlines()
    combo.versions["python"] = lines[0] if lines else "?"
    for line in lines[1:]:
        name, _, version = line.partition(" ")
        combo.versions[name] = version
    combo.steps["install"] = "ok"
    return True


def run_steps(combo: Combo, venv: Path, log: Path, tests: list[str], workdir: Path) -> None:
    py = str(venv / "bin" / "python")
    # The repo root is the rootdir (examples, tests, ini), but the code under test should be
    # the INSTALLED package: PYTHONSAFEPATH keeps the cwd off sys.path on 3.11+ (on 3.10 the
    # cwd copy is imported, the same source; the entry point still comes from the install).
    env = dict(os.environ, PYTHONSAFEPATH="1")
    env.pop("PYTHONPATH", None)

    code, out = sh([py, "-m", "pytest", "--markers"], log, cwd=REPO, env=env)
    ok = code == 0 and "no_graph_growth" in out
    combo.steps["--markers"] = "ok" if ok else f"FAIL: {last_line(out)}"

    backends = ["minigrad", "torch"] if "torch" in combo.versions else ["minigrad"]
    files = catalogue_files(backends)
    if not files:
        combo.steps["catalogue"] = "skipped: no catalogue modules in examples/"
    else:
        extra = ["-n", "2", "-p", "randomly", "--timeout=300", "--reruns=1"]
        score, output = run_catalogue(
            files, workdir / f"{combo.name}.xml", extra_args=extra, python=py, env=env
        )
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"\n$ catalogue {extra}\n{output}\n")
        summary = (
            f"caught {score.caught}/{score.leaky}, false positives "
            f"{score.false_positives}/{score.clean} ({', '.join(backends)})"
        )
        combo.steps["catalogue"] = (
            f"ok: {summary}" if score.ok else f"FAIL: {summary}; {score.other[:3]}"
        )

    present = [t for t in tests if (REPO / t.split("::")[0]).exists()]
    if not present:
        combo.steps["tests"] = "skipped: none of the test files exist yet"
        return
    code, out = sh(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *present],
        log,
        cwd=REPO,
        env=env,
    )
    summary = next(
        (ln.strip("= ") for ln in reversed(out.splitlines()) if re.search(r"passed|failed", ln)),
        last_line(out),
    )
    combo.steps["tests"] = ("ok: " if code == 0 else "FAIL: ") + summary


def render(combos: list[Combo], args: argparse.Namespace) -> str:
    lines = [
        "# Compatibility matrix (generated by tests/compat/run_compat.py)",
        "",
        f"- Run: {dt.datetime.now().isoformat(timespec='seconds')} on {os.uname().sysname} "
        f"{os.uname().machine}, {os.cpu_count()} cores",
        f"- Command: `python3 tests/compat/run_compat.py {' '.join(args.argv)}`",
        f"- Tests subset: {', '.join(args.tests)}",
        "",
        "| python | pytest | torch | plugins | install | --markers | catalogue | tests | seconds |",
        "|---|---|---|---|---|---|---|---|---:|",
    ]
    for c in combos:
        v = c.versions
        plugins = ", ".join(f"{n.removeprefix('pytest-')} {v[n]}" for n in PLUGINS if n in v)
        lines.append(
            f"| {v.get('python', c.python)} | {v.get('pytest', c.pytest)} "
            f"| {v.get('torch', 'not installed')} | {plugins} "
            f"| {c.steps.get('install', next(iter(c.steps.values()), ''))} "
            f"| {c.steps.get('--markers', '')} | {c.steps.get('catalogue', '')} "
            f"| {c.steps.get('tests', '')} | {c.seconds:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythons", default="3.10,3.11,3.12,3.13")
    parser.add_argument("--pytest", default="7,8,newest", help="any of 7, 8, newest")
    parser.add_argument(
        "--combos",
        default="",
        help="explicit PYTHON:PYTEST pairs, e.g. 3.11:7,3.13:newest (overrides the product "
        "of --pythons and --pytest)",
    )
    parser.add_argument("--venv-root", type=Path, default=DEFAULT_VENV_ROOT)
    parser.add_argument("--fresh", action="store_true", help="delete and rebuild each venv")
    parser.add_argument(
        "--tests", nargs="*", default=DEFAULT_TESTS, help="test paths to run in each venv"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results.md")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.venv_root.mkdir(parents=True, exist_ok=True)
    if args.combos:
        pairs = [tuple(pair.strip().split(":", 1)) for pair in args.combos.split(",")]
    else:
        pairs = [(p, v) for p in args.pythons.split(",") for v in args.pytest.split(",")]
    for pair in pairs:
        if len(pair) != 2 or pair[1].strip() not in PYTEST_SPECS:
            parser.error(f"bad combination {':'.join(pair)!r}; expected PYTHON:{{7,8,newest}}")
    combos: list[Combo] = []
    for python, pytest_version in pairs:
        combo = Combo(python.strip(), pytest_version.strip())
        combos.append(combo)
        combo.interpreter = find_interpreter(combo.python)
        start = time.perf_counter()
        log = args.venv_root / f"{combo.name}.log"
        log.write_text("", encoding="utf-8")
        if combo.interpreter is None:
            combo.steps["install"] = f"skipped: no python{combo.python} found"
        elif build(combo, args.venv_root / combo.name, log, args.fresh):
            run_steps(combo, args.venv_root / combo.name, log, args.tests, args.venv_root)
        combo.seconds = time.perf_counter() - start
        print(f"{combo.name}: {combo.steps}  ({combo.seconds:.0f} s, log {log})", flush=True)
        args.out.write_text(render(combos, args), encoding="utf-8")
    failed = [c for c in combos if any(s.startswith("FAIL") for s in c.steps.values())]
    print(f"table written to {args.out}; {len(failed)} of {len(combos)} combinations failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
