"""``graphleak check`` agrees with ``pytest --graphleak`` on every catalogue example.

Two subprocesses over the whole catalogue, with the same (default) settings: the plugin
runs each module's ``test_leaky``/``test_fixed``, the command checks each module's
``leaky_step``/``fixed_step``; both write the JSON report, and the verdicts and
patterns must match each other and the module's ``EXPECTED_PATTERN``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def catalogue() -> dict[str, str]:
    """example file (relative to the repository) -> its EXPECTED_PATTERN."""
    entries = {}
    for path in sorted(EXAMPLES.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        expected = re.search(r'^EXPECTED_PATTERN = "([a-z-]+)"', text, re.MULTILINE)
        if expected and "def leaky_step(" in text and "def fixed_step(" in text:
            entries[path.relative_to(ROOT).as_posix()] = expected.group(1)
    return entries


def verdicts(document: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """node id -> (status, pattern of its check)."""
    return {
        test["nodeid"]: (test["status"], test["checks"][0].get("pattern"))
        for test in document["tests"]
    }


@pytest.mark.slow
def test_check_agrees_with_the_plugin_on_every_catalogue_example(tmp_path: Path) -> None:
    examples = catalogue()
    if len(examples) < 2:
        pytest.skip("the catalogue of examples is not in this checkout")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models: threads only contend
    plugin_json, check_json = tmp_path / "plugin.json", tmp_path / "check.json"
    targets = [f"{path}::{step}" for path in examples for step in ("leaky_step", "fixed_step")]
    commands = {
        "plugin": [sys.executable, "-m", "pytest", "--graphleak", "-p", "no:cacheprovider", "-q",
                   f"--graphleak-report={plugin_json}", "--rootdir", str(ROOT), *examples],
        "check": [sys.executable, "-m", "pytest_graphleak", "check", "-q",
                  "--json", str(check_json), *targets],
    }  # fmt: skip
    # Side by side: each is one process, most of it waiting on its own steps.
    running = {
        name: subprocess.Popen(command, cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for name, command in commands.items()
    }  # fmt: skip
    outputs = {}
    try:
        for name, proc in running.items():
            outputs[name] = proc.communicate(timeout=600)[0]
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert running["plugin"].returncode == 1, outputs["plugin"][-3000:]
    assert running["check"].returncode == 1, outputs["check"][-3000:]

    by_plugin = verdicts(json.loads(plugin_json.read_text()))
    by_check = verdicts(json.loads(check_json.read_text()))
    disagreements = []
    for path, expected in examples.items():
        rows = {
            "plugin test_leaky": by_plugin.get(f"{path}::test_leaky"),
            "check leaky_step": by_check.get(f"{path}::leaky_step"),
            "plugin test_fixed": by_plugin.get(f"{path}::test_fixed"),
            "check fixed_step": by_check.get(f"{path}::fixed_step"),
        }
        wanted = {
            "plugin test_leaky": ("leaked", expected),
            "check leaky_step": ("leaked", expected),
            "plugin test_fixed": ("clean", None),
            "check fixed_step": ("clean", None),
        }
        disagreements += [f"{path}: {who} gave {rows[who]}, expected {wanted[who]}"
                          for who in rows if rows[who] != wanted[who]]  # fmt: skip
    assert not disagreements, "\n".join(disagreements)
    # The terminal output names each verdict too, one line per step in -q mode.
    assert outputs["check"].count("LEAK  examples/") == len(examples)
    assert outputs["check"].count("CLEAN examples/") == len(examples)
