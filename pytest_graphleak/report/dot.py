"""Graphviz DOT text for a retained graph, and its rendering to inline SVG.

The diagnosis records the retained graph as plain data (``Diagnosis.drawing``, a
``drawing.Drawing``: typed nodes and edges, no DOT syntax); ``drawing_dot`` writes it
as DOT, the JSON document's ``dot`` and the HTML page's. When there is no drawing,
``diagnosis_dot`` builds a small one from the culprit chain and the cycle.
``render_svg`` runs Graphviz's ``dot`` when it is on PATH; callers show the DOT text
instead when it returns None.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

from pytest_graphleak.drawing import Drawing, DrawingNode
from pytest_graphleak.result import Diagnosis

#: How a drawing's root and its leaked graph nodes stand out (the HTML legend says so).
_DRAWN_STYLE = {
    "root": ', style=filled, fillcolor="#dde8ff"',
    "node": ', style=filled, fillcolor="#fde2e2", color="#c62828", penwidth=1.5',
}
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


def drawing_dot(drawing: Drawing) -> str:
    """The DOT text of a diagnosis' drawing: left to right, monospace boxes, each node
    declared where an edge first reaches it; a graph edge dashed."""
    lines = ["digraph graphleak {", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
    names = _node_names(drawing.nodes)
    declared: set[int] = set()

    def declare(index: int) -> str:
        if index not in declared:
            declared.add(index)
            node = drawing.nodes[index]
            lines.append(
                f"  {names[index]} [label={quote(node.label)}{_DRAWN_STYLE.get(node.kind, '')}];"
            )
        return names[index]

    for edge in drawing.edges:
        source, target = declare(edge.source), declare(edge.target)
        style = (
            " [style=dashed]"
            if edge.kind == "graph"
            else ""
            if edge.kind == "root"
            else f" [label={quote(edge.label or ' ')}]"
        )
        lines.append(f"  {source} -> {target}{style};")
    for index in range(len(drawing.nodes)):  # a node no edge reaches
        declare(index)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_names(nodes: Sequence[DrawingNode]) -> list[str]:
    """``r0`` for the root, ``n0``, ``n1``, ... for the others, in order."""
    names, counts = [], {"r": 0, "n": 0}
    for node in nodes:
        prefix = "r" if node.kind == "root" else "n"
        names.append(f"{prefix}{counts[prefix]}")
        counts[prefix] += 1
    return names


def diagnosis_dot(diagnosis: Diagnosis | None) -> str:
    """The DOT text to draw for one diagnosis: its own drawing, else the cycle, else
    the chain; ``""`` when there is nothing."""
    if diagnosis is None:
        return ""
    if diagnosis.drawing is not None:
        return drawing_dot(diagnosis.drawing)
    if diagnosis.cycle:
        return cycle_to_dot(diagnosis.cycle)
    if diagnosis.chain:
        return chain_to_dot(diagnosis.chain)
    return ""


def render_svg(dot_text: str) -> str | None:
    """``dot -Tsvg`` of ``dot_text`` as an inline ``<svg>`` element, or None when
    Graphviz is missing, fails, times out (10 s), or its output is not a plain drawing."""
    exe = shutil.which("dot")
    if exe is None or not dot_text.strip():
        return None
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=10,
            check=False,
        )
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
