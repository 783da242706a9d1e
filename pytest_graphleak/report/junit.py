"""JUnit XML properties of a checked test (the typed read model in, name/value pairs out)."""

from __future__ import annotations

from pytest_graphleak.report.model import TestRow, metric_rows


def junit_properties(test: TestRow) -> list[tuple[str, str]]:
    """JUnit XML properties of one test: status, pattern and every metric's growth per
    step (``graphleak.<metric>.per_step``). With several checks in one test, each
    check's names get its 1-based index: ``graphleak.2.<metric>.per_step``."""
    properties: list[tuple[str, str]] = [("graphleak.status", test.status)]
    several = len(test.checks) > 1
    for index, check in enumerate(test.checks, start=1):
        prefix = f"graphleak.{index}" if several else "graphleak"
        if several:
            properties.append((f"{prefix}.name", check.name))
        if check.kind != "step":  # the outlive audit's row
            properties.append((f"{prefix}.kind", check.kind))
        properties.append((f"{prefix}.leaked", "true" if check.leaked else "false"))
        if check.pattern:
            properties.append((f"{prefix}.pattern", check.pattern))
        for row in metric_rows(check):
            if row.per_step is not None:
                properties.append((f"{prefix}.{row.name}.per_step", f"{row.per_step:.6g}"))
    return properties
