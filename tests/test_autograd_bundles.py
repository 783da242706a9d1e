"""An autograd library is one bundle module plus one line in ``probes/autograd.BUNDLES``.

The proof adds a third library, ``toygrad`` (a toy autograd defined here), to a copy of
the package: its bundle module goes into ``probes/autograd/``, and its line (with its
import) into the registry; nothing else changes. In a subprocess on that copy, a check
catches a step whose list of toy tensors grows, names the holder, and passes a clean
step; the marker's outlive audit tells the toy graphs a test leaves behind. The
probe roster, coverage, the census and the diagnosis read the bundle; none was edited.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_graphleak.probes.autograd import BUNDLES, loaded

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphleak"

#: The toy library: tensors whose product carries a graph node, counted alive and made.
TOYGRAD = """
STATS = {"Tensor": {"alive": 0, "created": 0}, "Node": {"alive": 0, "created": 0}}


class Node:
    def __init__(self, *inputs):
        self.next_functions = tuple((t.grad_fn, 0) for t in inputs)
        self.sequence_nr = STATS["Node"]["created"]
        STATS["Node"]["created"] += 1
        STATS["Node"]["alive"] += 1

    def __del__(self):
        STATS["Node"]["alive"] -= 1


class Tensor:
    def __init__(self, value, grad_fn=None, requires_grad=False):
        self.value, self.grad_fn, self.requires_grad, self.shape = value, grad_fn, requires_grad, ()
        STATS["Tensor"]["created"] += 1
        STATS["Tensor"]["alive"] += 1

    def __del__(self):
        STATS["Tensor"]["alive"] -= 1

    def __mul__(self, other):
        return Tensor(self.value * other.value, grad_fn=Node(self, other))
"""

#: The bundle module: everything the plugin needs to know of toygrad.
BUNDLE_MODULE = '''"""toygrad's bundle."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any

from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.metrics import OBJECTS, Metric
from pytest_graphleak.probes.autograd.bundle import NODE, TENSOR, AutogradBundle, Backend
from pytest_graphleak.probes.base import ProbeBase

TENSORS = Metric("toygrad.tensors", OBJECTS, "tensors")
NODES = Metric("toygrad.nodes", OBJECTS, "nodes")


class ToyProbe(ProbeBase):
    name = "toygrad"
    absent = "toygrad is not imported"
    metrics = (TENSORS, NODES)

    def available(self) -> bool:
        return "toygrad" in sys.modules

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        stats = sys.modules["toygrad"].STATS
        return {TENSORS.name: stats["Tensor"]["alive"], NODES.name: stats["Node"]["alive"]}

    def collectable(self, fresh: Sequence[object]) -> int:
        stats = sys.modules["toygrad"].STATS
        return int(stats["Tensor"]["alive"] + stats["Node"]["alive"])


class ToyBackend(Backend):
    name = "toygrad"

    def __init__(self, toy: Any) -> None:
        super().__init__()
        self.toy = toy

    def _kind_of_type(self, tp: type, obj: object) -> str | None:
        if issubclass(tp, self.toy.Tensor):
            return TENSOR
        return NODE if issubclass(tp, self.toy.Node) else None

    def sequence_nr(self, node: Any) -> int | None:
        return node.sequence_nr

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        if t.grad_fn is not None:
            yield Edge("grad_fn"), t.grad_fn

    def _node_edges(self, node: Any) -> Iterator[tuple[Edge, object]]:
        return iter(())


BUNDLE = AutogradBundle(
    name="toygrad",
    probe=ToyProbe,
    backend=ToyBackend,
    node_counter=lambda toy, end: toy.STATS["Node"]["created"],
    packages=("toygrad",),
    made=lambda toy: toy.STATS["Tensor"]["created"],
)
'''

#: What runs on the copy: a check of a leaking step and of a clean one.
CHECKS = """
import json, sys
import pytest_graphleak, toygrad
from pytest_graphleak import check
from pytest_graphleak.probes import PROBE_NAMES

assert pytest_graphleak.__file__.startswith(sys.argv[1]), pytest_graphleak.__file__
kept = []


def leaky():
    kept.append(toygrad.Tensor(2.0, requires_grad=True) * toygrad.Tensor(3.0))


def clean():
    toygrad.Tensor(2.0, requires_grad=True) * toygrad.Tensor(3.0)


bad, good = check(leaky), check(clean)
print(json.dumps({
    "names": list(PROBE_NAMES),
    "bad": [bad.leaked, bad.unmeasured, sorted(g.metric for g in bad.verdict.growths),
            bad.diagnosis.chain if bad.diagnosis else None],
    "good": [good.leaked, good.unmeasured, sorted(good.series)],
    "torch": "torch" in sys.modules,
}))
"""

#: A test the outlive audit looks at: it keeps a toy graph in a module global.
OUTLIVING = """
import toygrad

KEPT = []


def test_keeps_a_graph():
    KEPT.append(toygrad.Tensor(2.0, requires_grad=True) * toygrad.Tensor(3.0))


def test_keeps_nothing():
    toygrad.Tensor(2.0, requires_grad=True) * toygrad.Tensor(3.0)
"""


#: A second toy library, shaped like torch: its graph nodes refuse weak references (as
#: torch's C++ nodes do: what a step made is told by the nodes' numbers), and a hook
#: registered on a node is kept where only the library can read it (torch keeps node
#: hooks in C++). Its bundle says so through the backend's hooks; nothing else changes.
CGRAD = (
    TOYGRAD.replace(
        "class Node:\n",
        'class Node:\n    __slots__ = ("next_functions", "sequence_nr", "_hooks")  # as a C++ '
        "node\n\n",
    )
    .replace(
        '        STATS["Node"]["created"] += 1\n',
        '        STATS["Node"]["created"] += 1\n        self._hooks = []\n',
    )
    .replace(
        '    def __del__(self):\n        STATS["Node"]',
        "    def register_hook(self, fn):\n        self._hooks.append(fn)\n\n"
        '    def __del__(self):\n        STATS["Node"]',
    )
)

#: cgrad's bundle: toygrad's, plus what makes it torch-shaped (numbered nodes, hooks read
#: only inside ``reading_hooks``).
CGRAD_BUNDLE = (
    BUNDLE_MODULE.replace("toygrad", "cgrad")
    .replace("Toy", "C")
    .replace(
        'class CBackend(Backend):\n    name = "cgrad"\n',
        """class CBackend(Backend):
    name = "cgrad"
    node_hook_tables = {"hooks": "register_hook"}
    reading = False

    def node_number_now(self):
        return self.toy.STATS["Node"]["created"]

    @contextlib.contextmanager
    def reading_hooks(self):
        self.reading = True
        try:
            yield None
        finally:
            self.reading = False
""",
    )
    .replace(
        "        return iter(())",
        """        if self.reading and node._hooks:
            yield Edge("attr", "hooks"), node._hooks""",
    )
    .replace("import sys\n", "import contextlib\nimport sys\n", 1)
)

#: What runs on the copy with cgrad: graph nodes kept without their tensors (found by
#: number), and a hook on a node whose closure holds the node's tensor (found by reading
#: the hooks the library keeps).
CGRAD_CHECKS = """
import json, sys
import pytest_graphleak, cgrad
from pytest_graphleak import check

assert pytest_graphleak.__file__.startswith(sys.argv[1]), pytest_graphleak.__file__
nodes = []


def keeps_nodes():
    nodes.append((cgrad.Tensor(2.0, requires_grad=True) * cgrad.Tensor(3.0)).grad_fn)


def hooked():
    out = cgrad.Tensor(2.0, requires_grad=True) * cgrad.Tensor(3.0)
    out.grad_fn.register_hook(lambda grad: out)


kept, cycle = check(keeps_nodes), check(hooked)
print(json.dumps({
    "kept": [kept.leaked, kept.diagnosis.pattern, kept.diagnosis.chain],
    "cycle": [cycle.leaked, cycle.diagnosis.pattern, cycle.diagnosis.cycle,
              cycle.diagnosis.notes],
}))
"""


def _with_toygrad(
    root: Path, name: str = "toygrad", library: str = TOYGRAD, bundle: str = BUNDLE_MODULE
) -> Path:
    """A copy of the package with the toy library's bundle registered, and the library
    beside it."""
    copy = root / "pytest_graphleak"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (root / f"{name}.py").write_text(library, encoding="utf-8")
    (copy / "probes" / "autograd" / f"{name}_bundle.py").write_text(bundle, "utf-8")
    registry = copy / "probes" / "autograd" / "__init__.py"
    before = registry.read_text(encoding="utf-8").splitlines(keepends=True)
    after = []
    for line in before:
        after.append(line)
        if line.startswith("from pytest_graphleak.probes.autograd.torch_bundle import"):
            module = line.split()[1].replace("torch", name)
            after.append(f"from {module} import BUNDLE as TOY\n")
        if line == "    TORCH,\n":
            after.append("    TOY,\n")
    assert len(after) == len(before) + 2  # the registration: one line, and its import
    registry.write_text("".join(after), encoding="utf-8")
    return copy


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_third_library_is_one_bundle_module_and_one_line(tmp_path: Path) -> None:
    _with_toygrad(tmp_path)
    run = _run(tmp_path, "-c", CHECKS, str(tmp_path))
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["names"][:3] == ["minigrad", "torch", "toygrad"]  # the roster has it
    leaked, unmeasured, grown, chain = found["bad"]
    assert leaked and not unmeasured
    assert grown == ["toygrad.nodes", "toygrad.tensors"]
    assert chain and "kept" in chain[0], chain  # the diagnosis walked the toy's objects
    leaked, unmeasured, measured = found["good"]
    assert not leaked and not unmeasured
    assert {"toygrad.nodes", "toygrad.tensors", "gc.cyclic_garbage"} <= set(measured)
    assert not found["torch"]  # nothing imported torch on the way


def test_a_torch_shaped_library_is_one_bundle_module_and_one_line(tmp_path: Path) -> None:
    """What the diagnosis once asked of torch by name (nodes told by number, hooks kept
    outside Python) it now asks of the bundle: a torch-shaped toy gets both."""
    _with_toygrad(tmp_path, "cgrad", CGRAD, CGRAD_BUNDLE)
    run = _run(tmp_path, "-c", CGRAD_CHECKS, str(tmp_path))
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    leaked, pattern, chain = found["kept"]
    # The nodes refuse weak references: only their numbers tell the steps' from older ones.
    assert leaked and pattern == "list-accumulation", found["kept"]
    assert chain and "nodes" in chain[0] and "Node" in chain[-1], chain
    leaked, pattern, cycle, notes = found["cycle"]
    assert leaked and pattern == "cycle", found["cycle"]
    assert any(".hooks" in link for link in cycle), cycle  # read through reading_hooks
    assert any(
        "hook registered on Node with grad_fn.register_hook() whose closure" in note
        for note in notes
    ), notes


def test_the_outlive_audit_counts_a_third_library(tmp_path: Path) -> None:
    _with_toygrad(tmp_path)
    (tmp_path / "test_outliving.py").write_text(OUTLIVING, encoding="utf-8")
    run = _run(
        tmp_path,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "--graphleak",
        "--graphleak-outlive=fail",
        "test_outliving.py",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "test_keeps_a_graph" in run.stdout and "KEPT" in run.stdout
    assert "2 passed, 1 error" in run.stdout


def test_the_registry_lists_each_library_once_and_imports_none() -> None:
    names = [bundle.name for bundle in BUNDLES]
    assert names == ["minigrad", "torch"] and len(set(names)) == len(names)
    for bundle in BUNDLES:
        assert bundle.packages and bundle.name in bundle.packages
    assert [bundle.name for bundle, _ in loaded()] == [
        name for name in names if name in sys.modules
    ]


@pytest.mark.parametrize("name", ["minigrad", "torch"])
def test_a_stub_module_of_the_same_name_has_no_backend(name: str) -> None:
    bundle = next(bundle for bundle in BUNDLES if bundle.name == name)
    assert bundle.backend(object()) is None


def test_the_diagnosis_names_no_library() -> None:
    """What the diagnosis asks of torch or minigrad it asks of their bundles' backends
    (issue 46): no module of ``diagnose/`` names a library, its backend class or its
    bundle module."""
    import ast

    libraries = {bundle.name for bundle in BUNDLES}
    found = []
    for path in sorted((PACKAGE / "diagnose").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = ""
            if isinstance(node, ast.Constant) and node.value in libraries:
                named = str(node.value)
            elif isinstance(node, ast.Name) and node.id.endswith("Backend") and node.id[:-7]:
                named = node.id
            elif isinstance(node, ast.ImportFrom) and any(
                f"{lib}_" in (node.module or "") for lib in libraries
            ):
                named = str(node.module)
            if named and isinstance(node, (ast.expr, ast.stmt)):
                found.append(f"{path.name}:{node.lineno} {named}")
    assert found == []
