"""Run the leak catalogue (``examples/``) under pytest and score what the plugin said.

Shared by the soak (``run_soak.py``) and the compatibility matrix
(``tests/compat/run_compat.py``). Scoring reads a JUnit XML file, which every pytest
version writes the same way and which pytest-xdist merges on the controller, so the
score does not depend on any report format of our own.

An example module follows the catalogue convention: ``test_leaky*`` tests must fail with
a leak report (one of the pattern words), ``test_fixed*`` tests must pass, and the module
constant ``EXPECTED_PATTERN`` names the pattern the leaky test should get.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_graphleak.patterns import PATTERNS

PATTERN_WORDS = PATTERNS
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@dataclass
class Outcome:
    """What happened to one catalogue test in one run."""

    nodeid: str
    expected_leak: bool
    expected_pattern: str | None
    status: str  # "passed" | "failed" | "error" | "skipped"
    message: str = ""

    @property
    def reported_pattern(self) -> str | None:
        for word in PATTERN_WORDS:
            if word in self.message:
                return word
        return None


@dataclass
class Score:
    """One run of the catalogue, scored."""

    leaky: int = 0
    caught: int = 0
    right_pattern: int = 0
    clean: int = 0
    false_positives: int = 0
    # failed or errored for a reason other than a leak report, or skipped, or missing
    other: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.leaky > 0
            and self.caught == self.leaky
            and self.false_positives == 0
            and not self.other
        )


def catalogue_files(backends: Iterable[str] = ("minigrad", "torch")) -> list[Path]:
    """The example modules that follow the catalogue convention, for the given backends."""
    files = []
    for path in sorted(EXAMPLES.glob("*.py")):
        if not any(path.name.startswith(f"{backend}_") for backend in backends):
            continue
        names = _top_level_names(path)
        if any(n.startswith("test_leaky") for n in names) and any(
            n.startswith("test_fixed") for n in names
        ):
            files.append(path)
    return files


def expected_pattern(path: Path) -> str | None:
    """The module's ``EXPECTED_PATTERN`` constant, read without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id == "EXPECTED_PATTERN" for t in node.targets)
        ):
            value = node.value.value
            return value if isinstance(value, str) else None
    return None


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def read_junit(xml_path: Path, files: Sequence[Path]) -> list[Outcome]:
    """One Outcome per catalogue test found in a JUnit XML report."""
    patterns = {path.stem: expected_pattern(path) for path in files}
    # keyed by test: with pytest-rerunfailures a test has one <testcase> per attempt, and
    # the last one is its final outcome
    outcomes: dict[str, Outcome] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        name = case.get("name", "")
        if module not in patterns or not name.startswith(("test_leaky", "test_fixed")):
            continue
        status, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                status = {"failure": "failed"}.get(tag, tag)
                message = (child.get("message") or "") + "\n" + (child.text or "")
                break
        outcomes[f"{module}::{name}"] = Outcome(
            nodeid=f"{module}::{name}",
            expected_leak=name.startswith("test_leaky"),
            expected_pattern=patterns[module],
            status=status,
            message=message,
        )
    return list(outcomes.values())


def score(outcomes: Sequence[Outcome], files: Sequence[Path]) -> Score:
    result = Score()
    seen_modules = {o.nodeid.split("::")[0] for o in outcomes}
    for path in files:
        if path.stem not in seen_modules:
            result.other.append(f"{path.name}: no test result at all")
    for outcome in outcomes:
        reported = outcome.reported_pattern
        if outcome.expected_leak:
            result.leaky += 1
            if outcome.status == "failed" and reported is not None:
                result.caught += 1
                if reported == outcome.expected_pattern:
                    result.right_pattern += 1
            else:
                result.other.append(f"MISSED {outcome.nodeid}: {outcome.status}")
        else:
            result.clean += 1
            if outcome.status == "failed" and reported is not None:
                result.false_positives += 1
                result.other.append(f"FALSE POSITIVE {outcome.nodeid}: {reported}")
            elif outcome.status != "passed":
                first = outcome.message.strip().splitlines()[:1]
                result.other.append(f"{outcome.status.upper()} {outcome.nodeid}: {first}")
    return result


def run_catalogue(
    files: Sequence[Path],
    xml_path: Path,
    extra_args: Sequence[str] = (),
    python: str = sys.executable,
    timeout_s: float = 900,
    env: dict[str, str] | None = None,
) -> tuple[Score, str]:
    """Run ``pytest --graphleak`` over ``files``; return the score and pytest's output."""
    cmd = [
        python,
        "-m",
        "pytest",
        "--graphleak",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml_path}",
        "-o",
        "junit_family=xunit2",
        *extra_args,
        *map(str, files),
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    elapsed = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    if not xml_path.exists():
        result = Score(other=[f"pytest wrote no JUnit XML (exit {proc.returncode})"])
    else:
        result = score(read_junit(xml_path, files), files)
    result.duration_s = elapsed
    result.exit_code = proc.returncode
    return result, output
