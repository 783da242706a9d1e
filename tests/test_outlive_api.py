"""The outlive audit's package (``pytest_graphleak.outlive``) needs no pytest: a census and
an explanation run in a plain process, and name the holder of a graph the code kept; so
does an ``Audit`` of a test (``AuditedTest``) and a fixture (``FixtureDef``)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphleak" / "outlive"

SCRIPT = """
import json, sys, types
from pytest_graphleak.outlive import Census, Holder
from pytest_graphleak.outlive.explain import explain
import minigrad as mg

module = types.ModuleType("user_mod")
module.CACHE = []
census = Census()
census.begin()
module.CACHE.append(mg.Tensor([1.0], requires_grad=True) * 2)
made = census.finish()
found = explain(census, [Holder("global 'user_mod.CACHE'", "user_mod.CACHE", module.CACHE)],
                nodeid="run", backends=census.backends)
chains = [result.diagnosis.chain for result in found.results]
found.release()
print(json.dumps({"made": made, "chains": chains, "pytest": "pytest" in sys.modules}))
"""


def test_a_census_and_its_explanation_run_without_pytest() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["made"] and not found["pytest"]
    assert [chain[0] for chain in found["chains"]] == ["global 'user_mod.CACHE'"]


def test_no_module_of_the_package_imports_pytest() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            assert not any(n.split(".")[0] in ("pytest", "_pytest") for n in names), path


#: An ``Audit`` told of a test as an ``outlive.AuditedTest`` and of a fixture as any object
#: with a ``FixtureDef``'s fields: a session fixture's graph is the fixture's while it
#: lives, and named at its teardown when a global of the user's still keeps it.
AUDIT_SCRIPT = """
import json, sys, types
from dataclasses import dataclass
from typing import Any
from pytest_graphleak.outlive import Audit, AuditedTest
import minigrad as mg


@dataclass
class Fixture:  # an outlive.FixtureDef, no pytest
    argname: str
    scope: str
    cached_result: Any


def main() -> None:
    module = types.ModuleType("user_mod")
    module.KEPT = []
    state = {"losses": []}
    fixture = Fixture("state", "session", (state, None, None))
    test = AuditedTest("test_x.py::test_x", module=module, fixtures={"state": fixture})
    audit = Audit()
    census = audit.census()  # a test that leaves nothing alive: no diagnosis imported
    (mg.Tensor([1.0], requires_grad=True) * 2).sum()
    quiet = audit.audit(test, census) == [] and "pytest_graphleak.diagnose" not in sys.modules
    census = audit.census()
    module.KEPT.append(mg.Tensor([1.0], requires_grad=True) * 2)
    state["losses"].append(mg.Tensor([2.0], requires_grad=True) * 3)
    found = [r.diagnosis.chain[0] for r in audit.audit(test, census)]
    module.LATER = state["losses"]  # handed on to a global before the fixture is torn down
    fixture.cached_result = None
    later = [(r.diagnosis.chain[0], r.name) for r in audit.judge_pending(test)]
    print(json.dumps({"found": found, "later": later, "pytest": "pytest" in sys.modules,
                      "quiet": quiet}))


main()
"""


def test_an_audit_of_a_test_and_a_fixture_runs_without_pytest() -> None:
    run = subprocess.run(
        [sys.executable, "-c", AUDIT_SCRIPT],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert not found["pytest"]
    # the diagnosis is imported only when a root reaches a graph (outlive/found)
    assert found["quiet"]
    assert found["found"] == ["global 'user_mod.KEPT'"]  # the fixture's graph: deferred
    assert found["later"] == [["global 'user_mod.LATER'", "test_x.py::test_x::outlive"]]
