"""``graphleak check`` gives every catalogue example the verdict ``pytest --graphleak`` gives it.

One subprocess checks each module's ``leaky_step``/``fixed_step`` with the default settings
and writes the JSON report: every ``leaky_step`` must leak with the module's
``EXPECTED_PATTERN`` and every ``fixed_step`` be clean. The plugin's run over the same
modules is asserted against the same constants in ``tests/test_catalogue.py``, so the
command and the plugin agree without running the plugin a second time here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from suite_helpers import JsonDoc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def catalogue() -> dict[str, str]:
    """example file (relative to the repository) -> its EXPECTED_PATTERN."""
    entries = {}
    for path in sorted(EXAMPLES.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        expected = re.search(r'^EXPECTED_PATTERN = "([a-z-]+)"', text, re.MULTILINE)
        if expected and "def leaky_step(" in text and "def fixed_step(" in text:
            if _optional_missing(text):
                continue
            entries[path.relative_to(ROOT).as_posix()] = expected.group(1)
    return entries


def _optional_missing(text: str) -> bool:
    """The example needs an optional framework (``pytest.importorskip``) not installed."""
    needed = re.findall(r'pytest\.importorskip\("([\w.]+)"\)', text)
    return any(importlib.util.find_spec(name) is None for name in needed)


def verdicts(document: JsonDoc) -> dict[str, tuple[str, str | None]]:
    """node id -> (status, pattern of its check)."""
    return {
        test["nodeid"]: (test["status"], test["checks"][0].get("pattern"))
        for test in document["tests"]
    }


@pytest.mark.slow
def test_check_gives_every_catalogue_example_its_expected_verdict(tmp_path: Path) -> None:
    examples = catalogue()
    if len(examples) < 2:
        pytest.skip("the catalogue of examples is not in this checkout")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models: threads only contend
    report = tmp_path / "check.json"
    targets = [f"{path}::{step}" for path in examples for step in ("leaky_step", "fixed_step")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", "check", "-q", "--json", str(report), *targets],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]

    by_check = verdicts(json.loads(report.read_text()))
    disagreements = []
    for path, expected in examples.items():
        wanted = {
            f"{path}::leaky_step": ("leaked", expected),
            f"{path}::fixed_step": ("clean", None),
        }
        disagreements += [
            f"{nodeid} gave {by_check.get(nodeid)}, expected {verdict}"
            for nodeid, verdict in wanted.items()
            if by_check.get(nodeid) != verdict
        ]
    assert not disagreements, "\n".join(disagreements)
    # The terminal output names each verdict too, one line per step in -q mode.
    assert proc.stdout.count("LEAKED examples/") == len(examples), proc.stdout[-3000:]
    assert proc.stdout.count("CLEAN examples/") == len(examples), proc.stdout[-3000:]
