"""The size budget (scripts/check_size.py) holds for the package and minigrad, and the
script sees what breaks it: a long function or module, a listed one that grew, a stale
exception."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_size.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_size", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_size = _load()


def test_the_package_keeps_its_size_budget() -> None:
    """No function over 80 lines, no module over 500, but the listed exceptions, none of
    them over its ceiling and none stale (each entry's reason says what would split it)."""
    assert check_size.problems(check_size.sizes()) == []
    assert all(reason for _, reason in check_size.EXCEPTIONS.values())


def test_the_package_keeps_its_total_and_its_loose_types_under_their_ceilings() -> None:
    """The package's total lines and the ``Any``/``type: ignore`` counts (package, minigrad
    and tests) stay at or below the ceilings in scripts/check_size.py."""
    assert check_size.over_ceilings(check_size.total_lines(), check_size.loose_types()) == []


def test_the_ceilings_see_a_grown_package_and_loose_types(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "import typing\nfrom typing import Any\n\n"
        "def f(x: Any) -> typing.Any:  # type: ignore[misc]\n"
        "    return x  # a comment that says Any is not counted\n"
        "s = 'type: ignore in a string is not counted'\n"
    )
    assert check_size.total_lines(tmp_path, "pkg") == 6
    loose = check_size.loose_types(tmp_path, ("pkg",))
    assert loose == {"Any": 2, "type: ignore": 1}  # the annotations, not the import
    assert check_size.over_ceilings(6, loose, 5, {"Any": 2, "type: ignore": 0}) == [
        "pytest_graphleak/: 6 lines, over its total of 5",
        "'type: ignore' written 1 times, over its ceiling of 0",
    ]


def test_mypy_strict_is_never_relaxed(tmp_path: Path) -> None:
    """No module is let off a mypy --strict check in pyproject.toml, and the script sees
    each way of letting one off (a missing import's stubs are not a check)."""
    assert check_size.mypy_relaxed() == []
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mypy]\nstrict = true\n\n[[tool.mypy.overrides]]\nmodule = ["test_a"]\n'
        "ignore_errors = true\ndisallow_untyped_defs = false\nwarn_return_any = false\n"
        'disable_error_code = ["attr-defined"]\n\n[[tool.mypy.overrides]]\n'
        'module = ["psutil"]\nignore_missing_imports = true\n\n'
        "[tool.other]\ncheck_x = false\n"  # another tool's setting
    )
    assert check_size.mypy_relaxed(tmp_path) == [
        "ignore_errors = true",
        "disallow_untyped_defs = false",
        "warn_return_any = false",
        'disable_error_code = ["attr-defined"]',
    ]


def _function(name: str, lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}():\n{body}"


def test_the_budget_sees_long_functions_and_modules(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "import functools\n\n\n@functools.cache\n"
        + _function("long", 81)
        + _function("fits", 80)
        + "class Box:\n"
        + _function("method", 90, "    ")
        + _function("outer", 5)
        + "    "
        + _function("inner", 3).replace("\n    ", "\n        ")
    )
    (package / "big.py").write_text("x = 1\n" * 501)
    (package / "small.py").write_text("x = 1\n" * 500)
    measured = check_size.sizes(tmp_path, ("pkg",))
    assert measured["pkg/a.py::long"] == 81  # from its def, not its decorator
    assert measured["pkg/a.py::fits"] == 80
    assert measured["pkg/a.py::outer.inner"] == 3
    assert check_size.problems(measured, {}) == [
        "pkg/a.py::Box.method: 90 lines, over 80",
        "pkg/a.py::long: 81 lines, over 80",
        "pkg/big.py: 501 lines, over 500",
    ]


def test_an_exception_is_a_ceiling_and_goes_when_it_fits() -> None:
    measured = {"m.py": 600, "m.py::grew": 95, "m.py::shrank": 85, "m.py::fits": 40}
    exceptions = {
        "m.py": (600, "why"),
        "m.py::grew": (90, "why"),
        "m.py::shrank": (100, "why"),
        "m.py::fits": (120, "why"),
        "m.py::gone": (99, "why"),
    }
    assert check_size.problems(measured, exceptions) == [
        "m.py::grew: 95 lines, over its ceiling of 90",
        "m.py::fits: 40 lines, within 80: remove its EXCEPTIONS entry",
        "m.py::gone: listed in EXCEPTIONS but gone: remove the entry",
    ]
    assert check_size.shrunk(measured, exceptions) == ["m.py::shrank: 85 lines, ceiling 100"]
