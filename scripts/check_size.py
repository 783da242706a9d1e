"""The size budget: no function over 80 lines and no module over 500 lines.

A function is measured from its ``def`` line to its last line (a nested function counts
in its own right and inside its parent); a module by its number of lines. The packages
measured are ``pytest_graphleak/`` and ``minigrad/``. ``EXCEPTIONS`` lists what was over
the budget when it came, with that size as a ceiling (it may shrink, never grow) and the
reason; an exception that fits the budget again must be removed. Run by
``tests/test_size_budget.py`` with the suite, or as ``python scripts/check_size.py``
(exit code 1 when over). No code golf: split a long function where it does two things.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pytest_graphleak", "minigrad")
FUNCTION_BUDGET = 80
MODULE_BUDGET = 500

#: What was over the budget when it came in: ``path`` (a module) or ``path::qualname`` (a
#: function) -> (its size then, in lines: the ceiling; why it is allowed for now).
EXCEPTIONS: dict[str, tuple[int, str]] = {
    "minigrad/ops.py": (
        774,
        "every op with its forward and backward side by side, one place each (the "
        "house rule): a split by kind of op (elementwise, reductions, shapes)",
    ),
    "minigrad/tensor.py": (507, "Tensor, TensorImpl and AutogradMeta with torch's method surface"),
}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, lines from ``def`` to the last line) of every function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, (node.end_lineno or node.lineno) - node.lineno + 1
            yield from _functions(node, f"{name}.")
        else:
            yield from _functions(node, prefix)


def sizes(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, int]:
    """Every module (``path``) and function (``path::qualname``) -> its lines."""
    found: dict[str, int] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            found[where] = len(text.splitlines())
            for name, lines in _functions(ast.parse(text)):
                key = f"{where}::{name}"  # a property's getter and setter: the longer
                found[key] = max(lines, found.get(key, 0))
    return found


def budget(key: str) -> int:
    return FUNCTION_BUDGET if "::" in key else MODULE_BUDGET


def problems(
    measured: dict[str, int], exceptions: dict[str, tuple[int, str]] = EXCEPTIONS
) -> list[str]:
    """What breaks the budget: over it with no exception, over an exception's ceiling,
    or an exception that is stale (gone, or within the budget again)."""
    found = []
    for key, lines in sorted(measured.items()):
        ceiling = exceptions[key][0] if key in exceptions else budget(key)
        if lines > ceiling:
            limit = f"its ceiling of {ceiling}" if key in exceptions else f"{ceiling}"
            found.append(f"{key}: {lines} lines, over {limit}")
    for key in sorted(exceptions):
        if key not in measured:
            found.append(f"{key}: listed in EXCEPTIONS but gone: remove the entry")
        elif measured[key] <= budget(key):
            found.append(
                f"{key}: {measured[key]} lines, within {budget(key)}: remove its EXCEPTIONS entry"
            )
    return found


def shrunk(
    measured: dict[str, int], exceptions: dict[str, tuple[int, str]] = EXCEPTIONS
) -> list[str]:
    """Exceptions now under their ceiling: the ceiling may come down to their size."""
    return [f"{key}: {measured[key]} lines, ceiling {ceiling}"
            for key, (ceiling, _) in sorted(exceptions.items())
            if budget(key) < measured.get(key, 0) < ceiling]  # fmt: skip


def main() -> int:
    measured = sizes()
    for line in shrunk(measured):
        print(f"shrunk (lower its ceiling): {line}")
    found = problems(measured)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(
            f"size budget: functions {FUNCTION_BUDGET} lines, modules {MODULE_BUDGET} "
            f"(scripts/check_size.py)",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
