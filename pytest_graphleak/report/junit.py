"""JUnit XML properties of a checked test (plain data in, name/value pairs out)."""

from __future__ import annotations

from pytest_graphleak.report.json_doc import CheckedTest, metric_summary


def junit_properties(test: CheckedTest) -> list[tuple[str, str]]:
    """JUnit XML properties of one test: status, pattern and every metric's growth per
    step (``graphleak.<metric>.per_step``). With several checks in one test, each
    check's names get its 1-based index: ``graphleak.2.<metric>.per_step``."""
    properties = [("graphleak.status", test.status)]
    several = len(test.checks) > 1
    for index, check in enumerate(test.checks, start=1):
        prefix = f"graphleak.{index}" if several else "graphleak"
        if several:
            properties.append((f"{prefix}.name", str(check["name"])))
        if check.get("kind", "step") != "step":  # the outlive audit's row
            properties.append((f"{prefix}.kind", str(check["kind"])))
        properties.append((f"{prefix}.leaked", "true" if check.get("leaked") else "false"))
        if check.get("pattern"):
            properties.append((f"{prefix}.pattern", str(check["pattern"])))
        for metric, info in metric_summary(check).items():
            if info["per_step"] is not None:
                properties.append((f"{prefix}.{metric}.per_step", f"{info['per_step']:.6g}"))
    return properties
