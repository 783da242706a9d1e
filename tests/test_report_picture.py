"""The README's and the docs home's picture of the HTML report (``docs/images/report.png``)
shows what a fresh run renders today: ``scripts/report_picture.py`` made it and wrote the
fingerprint of the page it screenshotted; a renderer, style or wording change since
makes this test fail until the script is run again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "scripts_report_picture", ROOT / "scripts" / "report_picture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_report_picture_matches_a_fresh_run(tmp_path: Path) -> None:
    script = _script()
    assert script.PICTURE.is_file() and script.PICTURE.stat().st_size < 300 * 1024
    _, fresh = script.fresh(tmp_path.resolve())
    assert fresh == script.committed(), (
        "docs/images/report.png is stale: run `python scripts/report_picture.py` (needs "
        "chromium) and commit the picture and docs/images/report.sha256"
    )
