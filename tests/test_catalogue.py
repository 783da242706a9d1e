"""The leak catalogue (examples/): every leak is diagnosed right, every fixed twin is clean.

- ``diagnose`` on each ``leaky_step`` gives ``EXPECTED_PATTERN``, a chain or cycle that
  names ``CULPRIT``, and a creation site in the example file;
- ``pytest_graphleak.check`` passes each ``fixed_step``;
- one ``pytest --graphleak`` subprocess over the whole catalogue fails every
  ``test_leaky`` with the right failure text and passes every ``test_fixed``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

import pytest_graphleak
from pytest_graphleak.diagnose import diagnose
from pytest_graphleak.probes import METRICS
from pytest_graphleak.result import PATTERNS, Growth, Verdict

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CATALOGUE = sorted(p for p in EXAMPLES.glob("*.py") if p.name.startswith(("torch_", "minigrad_")))
_SOURCE = re.compile(r"^[\w.-]+/[\w.-]+(#\d+)?")


def load(path: Path) -> ModuleType:
    name = f"graphleak_catalogue_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_catalogue_has_at_least_twelve_leaks_in_both_backends() -> None:
    names = [p.name for p in CATALOGUE]
    assert len(names) >= 12
    assert sum(n.startswith("torch_") for n in names) >= 5
    assert sum(n.startswith("minigrad_") for n in names) >= 5
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in names:
        assert f"`{name}`" in readme, f"{name} is missing from examples/README.md"


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_module_follows_the_catalogue_convention(path: Path) -> None:
    module = load(path)
    assert module.EXPECTED_PATTERN in PATTERNS
    assert _SOURCE.match(module.SOURCE) or module.SOURCE.startswith("seed"), module.SOURCE
    assert module.SOURCE.split(" ")[0] in (module.__doc__ or ""), "name the report"
    assert isinstance(module.CULPRIT, str) and module.CULPRIT
    for name in ("leaky_step", "fixed_step", "test_leaky", "test_fixed"):
        assert callable(getattr(module, name)), name
    for name in ("test_leaky", "test_fixed"):
        marks = [m.name for m in getattr(getattr(module, name), "pytestmark", [])]
        assert "no_graph_growth" in marks, f"{name} is not marked no_graph_growth"


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_leak_is_diagnosed(path: Path) -> None:
    module = load(path)
    for _ in range(3):  # past first-use setup, as after the plugin's warmup
        module.leaky_step()
    backend = "minigrad" if path.name.startswith("minigrad_") else "torch"
    # what the plugin's verdict says of it: graph nodes grew, or only bytes did
    metric = "process.rss_bytes" if module.EXPECTED_PATTERN == "memory-growth" else "nodes"
    metric = metric if "." in metric else f"{backend}.{metric}"
    verdict = Verdict(True, [Growth(metric, 10.0, 40.0, 2.0)], reason="test")
    diagnosis = diagnose(verdict, metrics=METRICS, step=module.leaky_step, roots={})
    explained = " -> ".join(diagnosis.chain + diagnosis.cycle)
    assert diagnosis.pattern == module.EXPECTED_PATTERN, diagnosis.notes
    assert module.CULPRIT in explained, explained
    files = {Path(site.filename).resolve() for site in diagnosis.sites}
    assert path.resolve() in files, diagnosis.sites
    assert all(site.line for site in diagnosis.sites)


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_fixed_twin_is_clean(path: Path) -> None:
    module = load(path)
    result = pytest_graphleak.check(module.fixed_step)
    assert result.error is None, result.error
    assert not result.leaked, result.verdict.reason


@pytest.mark.slow
def test_plugin_reports_the_whole_catalogue(pytester: pytest.Pytester) -> None:
    """One subprocess run: every leaky test fails with its pattern, culprit and site."""
    modules = {path: load(path) for path in CATALOGUE}
    result = pytester.runpytest_subprocess(
        "--graphleak", "-p", "no:cacheprovider", "-q", *[str(p) for p in CATALOGUE]
    )
    text = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == len(CATALOGUE), text[-3000:]
    assert outcomes.get("passed") == len(CATALOGUE), text[-3000:]
    for path, module in modules.items():
        nodeid = path.relative_to(EXAMPLES.parent).as_posix()
        header = f"{nodeid}::test_leaky leaks: {module.EXPECTED_PATTERN}"
        section = next((s for s in text.split("graphleak: ") if s.startswith(header)), "")
        assert section, f"no leak report for {path.name}"
        assert module.CULPRIT in section, section
        assert f"created at: {path}:" in section, section
