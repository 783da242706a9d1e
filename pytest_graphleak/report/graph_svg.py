"""The retained graph drawn by the plugin itself: the holder chain or the reference cycle
as text boxes and arrows in an inline ``<svg>``, with no system binary.

A simple grid layout, left to right then row by row: ``columns=4`` for a page (about
1000 px wide at natural size, so it fits a report at 1:1), ``columns=1`` for a phone
(a column about 300 px wide). Where the chain starts is marked ``root``; what the leak
keeps alive (the chain's last object, every object of a cycle) is marked ``leaked``.
Colours come from classes, so the page's light and dark styles both apply; the
presentation attributes are the light fallback for the SVG opened on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from html import escape

#: Characters per line of a box, lines per box (the full label is the box's tooltip).
LINE_CHARS, MAX_LINES = 26, 4
_CHAR_W, _LINE_H, _PAD = 7.7, 16, 8  # a monospace glyph is ~0.6 em of 12.5 px
_BOX_W = round(LINE_CHARS * _CHAR_W + 2 * _PAD)
_GAP_X, _GAP_Y, _MARGIN = 44, 40, 26

_FILL = {"root": "#dde8ff", "leaked": "#fde2e2", "": "#f4f4f8"}
_STROKE = {"root": "#3b5bdb", "leaked": "#c62828", "": "#888888"}


def wrap_label(label: str) -> list[str]:
    """The label in lines of at most ``LINE_CHARS``, broken after a space or a separator
    (``.``, ``(``, ``,``, ``=``, ``[``, ``/``, ``_``), never inside a name; a piece longer
    than a line alone is cut. Past ``MAX_LINES`` the last line ends with an ellipsis."""
    lines: list[str] = []
    line = ""
    for piece in _PIECES.findall(label):
        if line and len(line) + len(piece.rstrip()) > LINE_CHARS:
            lines.append(line.rstrip())
            line = ""
        while len(piece.rstrip()) > LINE_CHARS:  # one name longer than a line: cut it
            lines.append(piece[:LINE_CHARS])
            piece = piece[LINE_CHARS:]
        line += piece
    if line.strip() or not lines:
        lines.append(line.rstrip())
    if len(lines) > MAX_LINES:
        lines = [*lines[: MAX_LINES - 1], lines[MAX_LINES - 1][: LINE_CHARS - 1] + "\u2026"]
    return lines


#: A label's unbreakable pieces: each ends after a space or a separator.
_PIECES = re.compile(r"[^ .(,=\[/_]*(?:[ .(,=\[/_]+|$)")


def chain_svg(chain: Sequence[str], *, columns: int = 4) -> str:
    """The holder chain, root first: each link points to the next; the root is marked
    ``root``, the last object (what the leak keeps alive) ``leaked``."""
    kinds = [
        "root" if i == 0 else "leaked" if i == len(chain) - 1 else "" for i in range(len(chain))
    ]
    return _drawing(list(chain), kinds, columns=columns, closed=False)


def cycle_svg(cycle: Sequence[str], *, columns: int = 4) -> str:
    """The objects of a reference cycle in order, the last pointing back to the first;
    all of them are what the leak keeps (nothing outside the cycle holds them)."""
    return _drawing(list(cycle), ["leaked"] * len(cycle), columns=columns, closed=True)


def _drawing(labels: list[str], kinds: list[str], *, columns: int, closed: bool) -> str:
    if not labels:
        return ""
    columns = max(1, min(columns, len(labels)))
    wrapped = [wrap_label(label) for label in labels]
    box_h = max(len(lines) for lines in wrapped) * _LINE_H + 2 * _PAD
    rows = (len(labels) + columns - 1) // columns
    width = 2 * _MARGIN + columns * _BOX_W + (columns - 1) * _GAP_X
    loop_room = _GAP_Y if closed else 0  # the edge back to the first box runs below
    height = 2 * _MARGIN + rows * box_h + (rows - 1) * _GAP_Y + loop_room

    def corner(i: int) -> tuple[float, float]:
        row, col = divmod(i, columns)
        return _MARGIN + col * (_BOX_W + _GAP_X), _MARGIN + row * (box_h + _GAP_Y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph-drawing" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{"reference cycle" if closed else "holder chain"} of {len(labels)} objects">',
    ]
    edges = [(i, i + 1) for i in range(len(labels) - 1)]
    if closed:
        edges.append((len(labels) - 1, 0))
    for source, target in edges:
        points = _route(source, target, corner, box_h, height)
        coords = " ".join(f"{x:.0f},{y:.0f}" for x, y in points)
        parts.append(
            f'<polyline class="edge" points="{coords}" fill="none" stroke="#555555" '
            f'stroke-width="1.5"/>{_arrowhead(points[-2], points[-1])}'
        )
    for i, (lines, kind) in enumerate(zip(wrapped, kinds, strict=True)):
        x, y = corner(i)
        parts.append(
            f'<g class="node {kind}"><title>{escape(labels[i])}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{_BOX_W}" height="{box_h}" rx="6" '
            f'fill="{_FILL[kind]}" stroke="{_STROKE[kind]}" '
            f'stroke-width="{2 if kind else 1}"/>'
        )
        for n, line in enumerate(lines):
            parts.append(
                f'<text x="{x + _PAD:.0f}" y="{y + _PAD + (n + 1) * _LINE_H - 4:.0f}" '
                f'font-family="ui-monospace, monospace" font-size="12.5" fill="#1d1d24">'
                f"{escape(line)}</text>"
            )
        if kind:
            parts.append(
                f'<text class="tag" x="{x + _BOX_W - 4:.0f}" y="{y - 4:.0f}" '
                f'text-anchor="end" font-family="sans-serif" font-size="11" '
                f'fill="{_STROKE[kind]}">{kind}</text>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _route(
    source: int,
    target: int,
    corner: Callable[[int], tuple[float, float]],
    box_h: float,
    height: float,
) -> list[tuple[float, float]]:
    """The corners of one edge: straight to the right within a row; down and back to
    the left to the next row's first box; for a cycle's closing edge, down below every
    row, left along the margin and into the first box's left side."""
    sx, sy = corner(source)
    tx, ty = corner(target)
    if target == source + 1 and ty == sy:  # same row: side to side
        return [(sx + _BOX_W, sy + box_h / 2), (tx, ty + box_h / 2)]
    if target == source + 1:  # next row, under this one
        middle = sy + box_h + _GAP_Y / 2
        return [
            (sx + _BOX_W / 2, sy + box_h),
            (sx + _BOX_W / 2, middle),
            (tx + _BOX_W / 2, middle),
            (tx + _BOX_W / 2, ty),
        ]
    below = height - _MARGIN / 2 - 4
    return [
        (sx + _BOX_W / 2, sy + box_h),
        (sx + _BOX_W / 2, below),
        (_MARGIN / 2, below),
        (_MARGIN / 2, ty + box_h / 2),
        (tx, ty + box_h / 2),
    ]


def _arrowhead(before: tuple[float, float], tip: tuple[float, float]) -> str:
    """A filled triangle at ``tip`` pointing along the segment from ``before`` (edges run
    horizontally or vertically, so the direction is one of four)."""
    dx, dy = tip[0] - before[0], tip[1] - before[1]
    length = max(abs(dx) + abs(dy), 1e-9)
    ux, uy = dx / length, dy / length
    size, half = 9.0, 4.5
    back = (tip[0] - ux * size, tip[1] - uy * size)
    corners = [
        tip,
        (back[0] - uy * half, back[1] + ux * half),
        (back[0] + uy * half, back[1] - ux * half),
    ]
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in corners)
    return f'<polygon class="arrowhead" points="{coords}" fill="#555555"/>'
