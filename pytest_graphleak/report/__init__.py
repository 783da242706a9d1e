"""Renderings of a CheckResult: the failure text here; JSON, HTML, SVG and DOT in the
sibling modules (``json_doc``, ``html``, ``svg``, ``dot``)."""

from __future__ import annotations

from pytest_graphleak.report.scale import sparkline
from pytest_graphleak.report.text import render_text

__all__ = ["render_text", "sparkline"]
