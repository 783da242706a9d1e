"""Graphviz DOT text for a retained graph, and its rendering to inline SVG.

The diagnosis usually draws the retained graph itself (``Diagnosis.dot``); when it
did not, ``diagnosis_dot`` builds a small drawing from the culprit chain and the
cycle. ``render_svg`` runs Graphviz's ``dot`` when it is on PATH; callers show the
DOT text instead when it returns None.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

_NODE_STYLE = 'node [shape=box, style="rounded,filled", fillcolor="#f4f4f8", fontname="Helvetica"]'


def quote(label: str) -> str:
    """A DOT double-quoted string: backslashes, quotes and newlines escaped."""
    text = label.replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return f'"{text}"'


def chain_to_dot(chain: Sequence[str], *, name: str = "chain") -> str:
    """The reference chain from a known root to a leaked object, root first."""
    lines = [f"digraph {quote(name)} {{", "  rankdir=LR;", f"  {_NODE_STYLE};"]
    for i, label in enumerate(chain):  # the root blue, the leaked object red
        colour = "#dde8ff" if i == 0 else "#ffd9d9" if i == len(chain) - 1 else ""
        extra = f', fillcolor="{colour}"' if colour else ""
        lines.append(f"  n{i} [label={quote(label)}{extra}];")
    lines.extend(f"  n{i} -> n{i + 1};" for i in range(len(chain) - 1))
    lines.append("}")
    return "\n".join(lines) + "\n"


def cycle_to_dot(cycle: Sequence[str], *, name: str = "cycle") -> str:
    """The objects of a reference cycle in order; the last one points back to the first."""
    lines = [f"digraph {quote(name)} {{", f"  {_NODE_STYLE};"]
    lines.extend(f"  n{i} [label={quote(label)}];" for i, label in enumerate(cycle))
    lines.extend(f"  n{i} -> n{(i + 1) % len(cycle)};" for i in range(len(cycle)))
    lines.append("}")
    return "\n".join(lines) + "\n"


def diagnosis_dot(diagnosis: Mapping[str, Any] | None) -> str:
    """The DOT text to draw for one diagnosis (as in ``CheckResult.to_dict()``):
    its own drawing, else the cycle, else the chain; ``""`` when there is nothing."""
    if not diagnosis:
        return ""
    if diagnosis.get("dot"):
        return str(diagnosis["dot"])
    if diagnosis.get("cycle"):
        return cycle_to_dot([str(x) for x in diagnosis["cycle"]])
    if diagnosis.get("chain"):
        return chain_to_dot([str(x) for x in diagnosis["chain"]])
    return ""


def render_svg(dot_text: str) -> str | None:
    """``dot -Tsvg`` of ``dot_text`` as an inline ``<svg>`` element, or None when
    Graphviz is missing, fails, times out (10 s), or its output is not a plain drawing."""
    exe = shutil.which("dot")
    if exe is None or not dot_text.strip():
        return None
    try:
        done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode("utf-8"),
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return _inline_svg(done.stdout.decode("utf-8", errors="replace"))


_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_TEXT_NODE = re.compile(r">[^<]*<")
_EVENT_ATTR = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
_UNSAFE_TAGS = ("<script", "javascript:", "<foreignobject", "<iframe", "<image")


def _inline_svg(svg: str) -> str | None:
    """Strip the XML prolog, doctype and comments so the drawing can sit inside HTML;
    refuse anything that could run code or load a resource when the page opens."""
    start = svg.find("<svg")
    if start < 0:
        return None
    body = _COMMENT.sub("", svg[start:]).strip()
    # Graphviz escapes label text, so tags and attributes come only from the DOT
    # attributes themselves; label text (between tags) is left out of the check.
    markup = _TEXT_NODE.sub("><", body).lower()
    if any(tag in markup for tag in _UNSAFE_TAGS) or _EVENT_ATTR.search(markup):
        return None
    return body
