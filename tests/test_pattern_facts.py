"""The pattern decided from typed facts: the chain's facts read from its links.

``classify.facts_of`` is the one place a diagnosis builds its ``Facts`` and sets
``has_chain``, ``container_grew`` and ``kept_in_container``: from ``Diagnosis.links``, where a
container the steps were seen growing says so (``Link.grew``), and a collection that
holds the kept object for one of its entries is told by the edge that leaves it
(index, key, member). The step check, the loop, the heap diagnosis and the outlive
audit all go through it (issues 34, 46).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from pytest_graphleak.diagnose.classify import facts_of, pattern_of
from pytest_graphleak.result import Link, Verdict

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphleak"
LEAK = Verdict(True, [], "retained-grad-fn")
ROOT = Link("root", "fixture", name="st")
TENSOR = Link("tensor", "Tensor", graph=True)


def pattern(links: list[Link], *, kept_counts: bool = False, **counts: Any) -> str:
    return pattern_of(LEAK, facts_of(links, kept_counts=kept_counts, **counts))


def test_no_links_is_no_chain() -> None:
    facts = facts_of([], leaked_count=2)
    assert (facts.has_chain, facts.container_grew, facts.kept_in_container) == (False,) * 3
    assert facts.leaked_count == 2


def test_a_container_seen_growing_is_list_accumulation_whatever_its_type() -> None:
    for container in (
        Link("container", "deque", edge="index", base="deque", grew=1),
        Link("container", "Rows", edge="key", base="dict", grew=2),
        Link("object", "History", edge="attribute", key="rows", grew=1),
        Link("tensordict", "TensorDict", edge="key", grew=1),
    ):
        assert pattern([ROOT, container, TENSOR]) == "list-accumulation", container
    # The same chain, nothing seen growing: a graph kept, not piling up.
    still = Link("container", "list", edge="index", base="list", length=40)
    assert pattern([ROOT, still, TENSOR], leaked_count=3) == "retained-grad-fn"


def test_kept_once_in_a_collection_counts_only_where_no_steps_were_watched() -> None:
    entry = [ROOT, Link("container", "list", edge="index", base="list"), TENSOR]
    array = [ROOT, Link("object", "ndarray", edge="index"), TENSOR]  # a numpy object array
    attribute = [ROOT, Link("object", "Model", edge="attribute", key="out"), TENSOR]
    assert pattern(entry, kept_counts=True, leaked_count=1) == "list-accumulation"
    assert pattern(array, kept_counts=True, leaked_count=1) == "list-accumulation"
    assert pattern(attribute, kept_counts=True, leaked_count=1) == "retained-grad-fn"
    assert pattern(entry, kept_counts=False, leaked_count=1) == "retained-grad-fn"
    # The root's own edge is not an entry of a collection the chain passed through.
    assert not facts_of(
        [Link("root", "global", edge="key"), TENSOR], kept_counts=True
    ).kept_in_container


def _facts_built(path: Path) -> list[str]:
    """Where ``path`` calls ``Facts(...)`` outside ``facts_of``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "facts_of":
            allowed.update(id(inner) for inner in ast.walk(node))
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "Facts"
        and id(node) not in allowed
    ]


def test_every_diagnosis_path_builds_its_facts_with_facts_of() -> None:
    """The step check, the loop, the heap and the outlive audit all read the chain's
    facts from the links, in one function (``facts_of``), so no path words its
    evidence differently."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _facts_built(path)]
    assert found == []


def test_a_step_checks_growing_list_says_so_on_its_link() -> None:
    torch = pytest.importorskip("torch")
    from pytest_graphleak.diagnose import diagnose
    from pytest_graphleak.probes import METRICS
    from pytest_graphleak.result import Growth

    model = torch.nn.Linear(3, 1)
    state: dict[str, Any] = {"losses": []}

    def step() -> None:
        state["losses"].append(model(torch.ones(2, 3)).mean())

    for _ in range(3):
        step()
    verdict = Verdict(True, [Growth("torch.tensors", 3.0, 9.0, 1.0)], "list-accumulation")
    d = diagnose(verdict, metrics=METRICS, step=step, roots={"fixture 'state'": state})
    assert d.pattern == "list-accumulation"
    assert [(link.type, link.grew) for link in d.links[1:3]] == [("dict", 0), ("list", 1)]


def test_the_audit_knows_a_step_checks_holder_by_its_root_link() -> None:
    """The audit does not repeat a holder its test's own step check named: the same root
    kind and name, read from the typed root link, never from the printed label."""
    from pytest_graphleak.outlive import root_of
    from pytest_graphleak.result import CheckResult, Diagnosis

    def result(label: str, root: Link) -> CheckResult:
        diagnosis = Diagnosis(
            "list-accumulation",
            chain=[label, "list(len=3)"],
            links=[root, Link("container", "list", edge="index")],
        )
        return CheckResult("t", 1, 1, {}, {}, LEAK, diagnosis)

    step = result("global 'losses'", Link("root", "global", name="losses"))
    audit = result("global 'tests.test_x.losses'", Link("root", "global", name="losses"))
    assert root_of(step) == root_of(audit) == "global losses"
    assert root_of(audit, raw=True) == "global 'tests.test_x.losses'"
    other = result("global 'losses'", Link("root", "global", name="others"))
    assert root_of(other) != root_of(step)  # the link decides, not the label
    unnamed = result("unknown root", Link("root", "unknown"))
    assert root_of(unnamed) == "unknown root"
