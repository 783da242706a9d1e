"""A candidate fix as an edit of the user's source text: some lines of one statement
replaced, in memory only.

The same edit is what the verification compiles (``fix_swap``), what the fix line shows
(``Edit.shown``) and what ``graphleak fix`` writes as a unified diff (``unified_diff``),
so what was verified is exactly what is printed and applied.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import tokenize
from dataclasses import dataclass

#: Lines of context around a hunk in ``unified_diff`` (git's default).
CONTEXT = 3


#: Methods that put their argument into the container they are called on.
STORES = frozenset(
    {
        "append",
        "appendleft",
        "add",
        "insert",
        "put",
        "put_nowait",
        "push",
        "extend",
        "extendleft",
        "setdefault",
        "add_",
        "copy_",
    }
)


def plain(node: ast.expr) -> bool:
    """A name or an attribute: evaluated more than once without side effects."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


@dataclass(frozen=True)
class Edit:
    """Lines ``first``..``last`` (1-based, inclusive) of ``filename`` replaced by ``new``
    (each with its indentation, no line ending)."""

    filename: str
    first: int
    last: int
    new: tuple[str, ...]
    #: The change as the fix line shows it: the new statement on one line
    #: (``losses.append(loss.item())``, ``with torch.no_grad(): self.total = ...``).
    shown: str
    #: What the change does (``fix_candidates.KINDS``): "numbers" (keeps plain numbers),
    #: "detach", "rebuild", "total", "no_grad" (these four only cut graphs), "reset",
    #: "cache_clear" (these two empty what holds them).
    kind: str = "detach"

    @property
    def added(self) -> int:
        """How many more lines the file has after the edit (negative: fewer)."""
        return len(self.new) - (self.last - self.first + 1)


@dataclass(frozen=True)
class Source:
    """A user file as it was read: its text, lines (no endings) and content hash."""

    filename: str
    text: str
    lines: tuple[str, ...]
    tree: ast.Module
    sha256: str


def read_source(filename: str) -> Source | None:
    """The file as it is now (its encoding as Python reads it), parsed; None when it
    cannot be read or parsed (a pseudo-file, a file changed into invalid Python)."""
    try:
        with open(filename, "rb") as handle:
            raw = handle.read()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
        tree = ast.parse(text, filename)
    except (OSError, SyntaxError, ValueError, LookupError):
        return None
    return Source(filename, text, tuple(text.splitlines()), tree, sha256_of(raw))


def sha256_of(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def changed_lines(source: Source, edit: Edit) -> list[str]:
    """The file's lines with ``edit`` applied."""
    lines = list(source.lines)
    lines[edit.first - 1 : edit.last] = edit.new
    return lines


def unified_diff(source: Source, edit: Edit, name: str) -> str:
    """``edit`` as a unified diff of the file called ``name`` (its path relative to the
    rootdir): ``a/name`` and ``b/name``, one hunk with ``CONTEXT`` lines around it."""
    old = [line + "\n" for line in source.lines]
    new = [line + "\n" for line in changed_lines(source, edit)]
    return "".join(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}", n=CONTEXT))


def char_col(line: str, col: int) -> int:
    """The character index of the UTF-8 byte offset ``col`` in ``line`` (ast columns
    count bytes)."""
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def replace_node(source: Source, statement: ast.stmt, node: ast.expr, text: str) -> tuple[str, ...]:
    """The lines of ``statement`` with ``node``'s text replaced by ``text``."""
    assert statement.end_lineno is not None and node.end_lineno is not None
    lines = list(source.lines[statement.lineno - 1 : statement.end_lineno])
    first, last = node.lineno - statement.lineno, node.end_lineno - statement.lineno
    start = char_col(lines[first], node.col_offset)
    end = char_col(lines[last], node.end_col_offset or 0)
    head, tail = lines[first][:start], lines[last][end:]
    lines[first : last + 1] = [head + text + tail]
    return tuple(lines)


def node_text(source: Source, node: ast.AST) -> str:
    """The source text of ``node`` (its lines joined as they are)."""
    return ast.get_source_segment(source.text, node) or ""


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def statement_at(tree: ast.Module, lineno: int) -> ast.stmt | None:
    """The innermost simple statement (not a compound one: no ``if``, ``for``, ``with``,
    ``def``) whose lines hold ``lineno``."""
    found: ast.stmt | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.end_lineno is None:
            continue
        holds = node.lineno <= lineno <= node.end_lineno and not _compound(node)
        if holds and (found is None or node.lineno >= found.lineno):
            found = node
    return found


def _compound(node: ast.stmt) -> bool:
    return hasattr(node, "body")


def one_line(lines: tuple[str, ...] | list[str]) -> str:
    """Lines of code shown on one line: stripped, their comments left out, joined by a
    space."""
    return " ".join(code for code in map(_code_of, lines) if code)


def _code_of(line: str) -> str:
    """``line`` stripped of its indentation and its trailing comment (a ``#`` inside a
    string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return line.strip()  # a line of a longer statement: an open bracket
    comment = next((tok for tok in tokens if tok.type == tokenize.COMMENT), None)
    text = line.strip()
    return text[: comment.start[1]].rstrip() if comment is not None else text
