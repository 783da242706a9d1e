"""The user's source, read with ``ast`` for the words: one stored line and its parts.

``Line`` is one parsed line with what the typed holder chain says about it
(``chain.held``); ``statement_text`` reads a statement written over several lines
whole; the helpers tell a detached or copied expression (``cut``, ``uncut``), a join
(``join_call``) and write an expression detached (``detached``). Nothing here reads an
object.
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Callable, Iterator, Sequence

from pytest_graphleak.result import CreationSite, Link
from pytest_graphleak.words import chain

#: Calls that join a sequence of arrays into a new one (``torch.cat([q, x])``).
JOINS = frozenset(
    {
        "cat",
        "concat",
        "concatenate",
        "stack",
        "hstack",
        "vstack",
        "row_stack",
        "column_stack",
        "dstack",
    }
)
#: Calls whose result carries no graph: what they are given is stored already cut off.
CUTS = frozenset({"detach", "item", "tolist", "numpy", "float", "int", "bool"})
#: Calls that only detach, move or copy a tensor (``out.detach().cpu()``).
COPIES = frozenset(
    {"detach", "cpu", "cuda", "clone", "to", "float", "double", "half", "contiguous"}
)

#: Expressions ``.detach()`` can follow without parentheses.
PRIMARY = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)


class Line:
    """One parsed source line, the text of its parts, and what the holder chain says
    (``chain.held``): the link that holds the first tensor (None: no chain to compare
    with) and whether that tensor is a scalar (None: not known)."""

    def __init__(self, text: str, links: Sequence[Link] | None) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.holder: Link | None = None
        self.outer = chain.NONE
        self.scalar: bool | None = None
        self.links = links
        if links is not None:
            found = chain.held(links)
            self.holder, self.outer, self.scalar = found.holder, found.outer, found.scalar

    def puts_into(self) -> bool:
        """Is the chain's tensor right in the container a put (``append``, ``add``,
        ``extend``) fills? A list, deque or set, or a user's subclass of one
        (``Rows(len=3)``) that no other container holds: a namedtuple record kept in a
        list has the list outside it, and a tuple has no ``append``."""
        if self.holds(chain.sequence):
            return True
        holder = self.holder or chain.NONE
        return chain.subclass(holder) and not chain.described_sized(self.outer)

    def holds(self, kind: Callable[[Link], bool]) -> bool:
        """Does the chain's tensor sit right in a container of this kind (or no chain)?"""
        return self.holder is None or kind(self.holder)

    def names(self, target: ast.expr) -> bool:
        """Is the chain's tensor held by the name ``target`` binds (or no chain)?"""
        link = self.holder
        if link is None:
            return True
        if isinstance(target, ast.Subscript):  # state["total"]: dict['total']
            key = target.slice
            return (
                isinstance(key, ast.Constant) and link.edge == "key" and link.key == repr(key.value)
            )
        last = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        return chain.binds(link, last)  # self.total, local 'total', global 'module.TOTAL'

    def of(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def replaced(self, statement: ast.stmt, node: ast.AST, new: str) -> str:
        """The statement's text with ``node``'s text replaced by ``new`` (one line)."""
        whole = self.of(statement)
        start = offset(self.text, node) - offset(self.text, statement)
        return whole[:start] + new + whole[start + len(self.of(node)) :]


def offset(text: str, node: ast.AST) -> int:
    return len(text.encode()[: getattr(node, "col_offset", 0)].decode(errors="ignore"))


def first_statement(site: CreationSite) -> str:
    """The text of the statement at ``site`` (read whole when it spans lines)."""
    return statement_text(site.filename, site.lineno) or site.line


def statement_text(filename: str, lineno: int) -> str:
    """The simple statement of ``filename`` that spans line ``lineno`` when it spans more
    lines than that one, on one line: ``kept.append(`` / ``out`` / ``)`` is read as
    ``kept.append(out)`` (``ast.unparse``). "" when the statement is on its one line (its
    text as written is used), or the file cannot be read or parsed."""
    lines = linecache.getlines(filename)
    if not 0 < lineno <= len(lines):
        return ""
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return ""
    spanning = [
        node
        for node in simple_statements(tree)
        if node.lineno <= lineno <= (node.end_lineno or node.lineno)
    ]
    if not spanning:
        return ""
    innermost = min(spanning, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)
    return "" if innermost.end_lineno == innermost.lineno else ast.unparse(innermost)


def uncut(node: ast.expr) -> ast.expr:
    """``logits`` of ``logits.detach().cpu()``: the expression before the calls that
    only copy or detach it."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in COPIES
    ):
        node = node.func.value
    return node


def simple_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """The line's simple statements: ``if ok: kept.append(x)`` gives the append."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
            yield node


def cut(node: ast.AST) -> bool:
    """``x.detach()``, ``x.item()``, ``float(x)``, ``x.detach().cpu()``: no graph left."""
    while isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in CUTS:
            return True
        if not isinstance(func, ast.Attribute):  # f(x.detach()) may make a new graph
            return False
        node = func.value
    return False


def primary(line: Line, node: ast.expr) -> str:
    text = line.of(node)
    return text if isinstance(node, PRIMARY) else f"({text})"


def detached(line: Line, node: ast.expr) -> str:
    return f"{primary(line, node)}.detach()"


def target_texts(line: Line, target: ast.expr) -> list[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [line.of(item) for item in target.elts if not isinstance(item, ast.Starred)]
    return [line.of(target)]


def mentions(line: Line, value: ast.expr, name: str) -> bool:
    return any(
        isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and line.of(node) == name
        for node in ast.walk(value)
    )


def join_call(value: ast.expr) -> list[ast.expr] | None:
    """The arrays joined by ``torch.cat([a, b])`` (also sliced: ``torch.cat(...)[-n:]``)."""
    while isinstance(value, ast.Subscript):
        value = value.value
    if not isinstance(value, ast.Call) or not value.args:
        return None
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = value.args[0]
    if name in JOINS and isinstance(first, (ast.List, ast.Tuple)):
        return list(first.elts)
    return None
