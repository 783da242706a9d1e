"""The changes a careful engineer would try for one leak, built from its facts, each an
edit of one statement in the user's file (``fix_source.Edit``), most likely first.

From the line to change (the ``stored at:`` line, else the first ``created at:`` line in
user code):

- the stored expression with ``.item()`` (a 0-dim tensor) or ``.detach()``;
- a stored list, tuple or dict: each tensor detached, written on the elements (a list
  literal's items, or a comprehension over the container), never a method call on the
  container;
- an object that carries graph-carrying tensors (a distribution's ``loc`` and
  ``scale``): rebuilt from its detached tensors;
- a running total (``total = total + loss``, ``buf = torch.cat([buf, out])``): its new
  value detached;
- the statement under ``no_grad()`` (torch's, or minigrad's where the code is
  minigrad's), and so the line that made the value;
- an accumulating library object called on the line: its own ``reset()`` after it;
- a container whose tensors a later backward runs through (gradient accumulation over
  ``pending[-4:]``): its ``clear()`` right after that backward, tried first;
- an ``functools.lru_cache`` on the chain: ``cache_clear()`` after the step's call.

Verification (``fix_verify``) tries them in this order and keeps the first that holds,
except where the facts say which will not: a value stored into a container that grew
while the steps were watched piles up as detached tensors too, so plain numbers come
first there; a running total (``total += loss``) already carries the old steps' graph
by the time it is tried, so its new value detached comes first.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from pytest_graphleak.diagnose.fix_after import (
    cache_clears,
    cache_name,
    clear_after_backward,
    resets,
)
from pytest_graphleak.diagnose.fix_source import (
    STORES,
    Edit,
    Source,
    char_col,
    indent_of,
    node_text,
    one_line,
    plain,
    replace_node,
    statement_at,
)
from pytest_graphleak.result import Link

#: Methods that take many values at once: their argument is an iterable of tensors.
MANY = frozenset({"extend", "extendleft"})
#: At most this many candidates are tried per leak (each costs a re-run).
MAX_CANDIDATES = 8
#: Kinds of change (``Edit.kind``) that only cut graphs: what they keep still takes
#: memory, so none can stop a growth of memory alone (``fix_verify`` skips them then).
CUTS_GRAPHS = frozenset({"detach", "rebuild", "total", "no_grad"})


def candidates(
    source: Source,
    lineno: int,
    links: Sequence[Link],
    *,
    no_grad: str | None,
    made_at: int | None = None,
) -> list[Edit]:
    """The edits to try for the statement at ``lineno`` (see the module docstring).
    ``no_grad``: the expression that turns gradients off in that file
    (``torch.no_grad()``, ``mg.no_grad()``; None: none is imported there); ``made_at``:
    the line that made the leaked value, in the same file."""
    statement = statement_at(source.tree, lineno)
    if statement is None:
        return []
    found: list[Edit] = []
    scalar = _scalar(links)
    # What one entry is matters where the line puts an entry in (an append, d[k] = v),
    # not where it rebuilds a value from the old one (a running total).
    rebuilt = isinstance(statement, (ast.Assign, ast.AnnAssign)) and _rebuilds(statement)
    element = None if rebuilt or isinstance(statement, ast.AugAssign) else _element(links)
    if _passes_on(statement):
        element = None  # what the callee stores is its own (a mock's call record), not x
    for node in _stored(statement):
        for text, kind in _rewrites(
            source, node, scalar=scalar, element=element, many=_many(statement)
        ):
            new = replace_node(source, statement, node, text)
            found.append(_edit(source, statement, new, kind))
        if isinstance(statement, ast.AugAssign) and node is statement.value:
            found.append(_total_detached(source, statement))
    found.extend(resets(source, statement))
    deferred = clear_after_backward(source, statement)
    found.extend(deferred)
    if no_grad is not None and _computes(statement):
        found.append(_under(source, statement, no_grad))
    made = statement_at(source.tree, made_at) if made_at is not None else None
    if no_grad is not None and made is not None and made is not statement and _computes(made):
        found.append(_under(source, made, no_grad))
    cached = cache_name(links)
    if cached:
        found.extend(cache_clears(source, cached, statement))
    unique: dict[tuple[int, int, tuple[str, ...]], Edit] = {}
    for edit in found:
        unique.setdefault((edit.first, edit.last, edit.new), edit)
    # A cache on the chain keeps what it returned whatever the line does with it: its
    # cache_clear() first (the line's own changes break the backward through it).
    first = "reset" if deferred else "cache_clear" if cached else _likeliest(statement, links)
    ordered = sorted(unique.values(), key=lambda edit: edit.kind != first)  # stable
    return ordered[:MAX_CANDIDATES]


def _likeliest(statement: ast.stmt, links: Sequence[Link]) -> str:
    """The kind of change to try first, where the facts say the usual first will not
    hold: "total" for ``total += x`` (the total carries the graph already), "numbers"
    where the value goes into a container seen to grow (detached tensors pile up)."""
    if isinstance(statement, ast.AugAssign):
        return "total"
    if any(link.kind == "container" and link.grew > 0 for link in links):
        return "numbers"
    return ""


def _stored(statement: ast.stmt) -> list[ast.expr]:
    """The expressions whose value the statement keeps, the likeliest first."""
    if isinstance(statement, ast.AugAssign):  # total += loss
        return [statement.value]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        value = statement.value
        parts = _parts(value) if _rebuilds(statement) else []
        return [value, *parts]  # the new value whole, then the step's part of it
    if isinstance(statement, ast.Return) and statement.value is not None:
        return [statement.value]
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        args = [
            arg
            for arg in [*call.args, *(k.value for k in call.keywords)]
            if not isinstance(arg, (ast.Constant, ast.Starred))
        ]
        if isinstance(call.func, ast.Attribute) and call.func.attr in STORES:
            return args[-1:] + args[:-1]
        return args
    return []


def _rebuilds(statement: ast.Assign | ast.AnnAssign) -> bool:
    """``x = f(x, y)``: the new value is made from the old one (a running total)."""
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    dumped = {_dump(target) for target in targets}
    value = statement.value
    return value is not None and any(
        _dump(node) in dumped
        for node in ast.walk(value)
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript))
    )


def _dump(node: ast.AST) -> str:
    """``node`` as text without its load/store context: a target and a read compare."""
    return ast.dump(node, annotate_fields=False).replace("Store()", "").replace("Load()", "")


def _parts(value: ast.expr) -> list[ast.expr]:
    """The names that a rebuilt value adds each step (``out`` of ``torch.cat([buf,
    out])``), not a module, an object whose attribute is read or a function called."""
    skip: set[int] = set()
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute):
            skip.add(id(node.value))
        elif isinstance(node, ast.Call):
            skip.add(id(node.func))
    names: list[ast.expr] = [
        node
        for node in ast.walk(value)
        if isinstance(node, ast.Name) and id(node) not in skip and node is not value
    ]
    return names[:3]


def _many(statement: ast.stmt) -> bool:
    call = statement.value if isinstance(statement, ast.Expr) else None
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in MANY
    )


def _rewrites(
    source: Source, node: ast.expr, *, scalar: bool, element: Link | None, many: bool
) -> list[tuple[str, str]]:
    """``node`` rewritten so that what it stores carries no graph, each with its kind
    (``Edit.kind``)."""
    text = node_text(source, node)
    if not text or "\n" in text:
        return []
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        if not node.elts:
            return []
        return [
            (
                _literal(
                    node, [_atom(node_text(source, elt)) + f".{method}()" for elt in node.elts]
                ),
                kind,
            )
            for method, kind in _ITEMS
        ]
    if isinstance(node, ast.Dict):
        keys = [key for key in node.keys if key is not None]
        if len(keys) != len(node.keys):  # a ** unpacking
            return []
        pairs = [
            (node_text(source, k), _atom(node_text(source, v)))
            for k, v in zip(keys, node.values, strict=True)
        ]
        return [
            ("{" + ", ".join(f"{k}: {v}.{method}()" for k, v in pairs) + "}", kind)
            for method, kind in _ITEMS
        ]
    if isinstance(node, ast.Constant) or _detached(node):
        return []
    if isinstance(node, ast.Call) and element is not None and element.kind == "object":
        built = [(_built(source, node, method), kind) for method, kind in _ITEMS]
        return [(text, kind) for text, kind in built if text]
    atom = _atom(text)
    if many or (element is not None and element.kind == "container"):
        base = element.base if element is not None else "list"
        return [(_each(atom, base, "detach"), "detach"), (_each(atom, base, "tolist"), "numbers")]
    found = [(f"{atom}.item()", "numbers")] if scalar else []
    found.append((f"{atom}.detach()", "detach"))
    if not scalar and element is not None and element.kind == "tensor":
        found.append((f"{atom}.tolist()", "numbers"))  # where even a detached tensor piles up
    if element is not None and element.kind == "object" and element.carriers and plain(node):
        detached = ", ".join(f"{atom}.{name}.detach()" for name in element.carriers)
        found.append((f"type({atom})({detached})", "rebuild"))
    return found


def _built(source: Source, call: ast.Call, method: str) -> str:
    """An object made on the line (``StepOutput(loss, logits, hidden)``) from each of its
    arguments detached or as numbers (``method``), written on the arguments, since every
    one may carry the graph; "" when the call has none to change or unpacks some."""
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(
        keyword.arg is None for keyword in call.keywords
    ):
        return ""

    def one(arg: ast.expr) -> str:
        text = node_text(source, arg)
        kept = isinstance(arg, (ast.Constant, ast.Lambda)) or _detached(arg)
        return text if kept else f"{_atom(text)}.{method}()"

    parts = [one(arg) for arg in call.args]
    parts += [f"{keyword.arg}={one(keyword.value)}" for keyword in call.keywords]
    changed = [part for part in parts if part.endswith(f".{method}()")]
    return f"{node_text(source, call.func)}({', '.join(parts)})" if changed else ""


#: A literal's items detached, or as numbers (``tolist()``: a 0-dim tensor's is its number).
_ITEMS = (("detach", "detach"), ("tolist", "numbers"))


def _passes_on(statement: ast.stmt) -> bool:
    """``f(x)`` or ``obj.method(x)`` that is not a put into a container (``append``,
    ``add``, ...): the callee decides what it keeps of ``x``."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return False
    return not (isinstance(call.func, ast.Attribute) and call.func.attr in STORES)


def _detached(node: ast.expr) -> bool:
    """``x.detach()``, ``x.item()``: already keeps no graph."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("detach", "item", "tolist")
    )


def _total_detached(source: Source, statement: ast.AugAssign) -> Edit:
    """``total += loss`` as ``total = (total + loss).detach()``: the new total keeps no
    graph, also when the old one already carries one (in place, it would stay chained)."""
    target = node_text(source, statement.target)
    value = node_text(source, statement.value)
    op = _OPERATORS.get(type(statement.op), "+")
    assert statement.end_lineno is not None
    old = source.lines[statement.lineno - 1]
    text = f"{target} = ({target} {op} {_atom(value)}).detach()"
    head = old[: char_col(old, statement.col_offset)]
    tail = source.lines[statement.end_lineno - 1][
        char_col(source.lines[statement.end_lineno - 1], statement.end_col_offset or 0) :
    ]
    return _edit(source, statement, (head + text + tail,), "total")


_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def _each(atom: str, base: str, method: str) -> str:
    """Each tensor of a container detached (or as numbers: ``tolist``), written on its
    elements."""
    if base == "dict":
        return f"{{k: v.{method}() for k, v in {atom}.items()}}"
    if base == "tuple":
        return f"tuple(t.{method}() for t in {atom})"
    return f"[t.{method}() for t in {atom}]"


def _literal(node: ast.List | ast.Tuple | ast.Set, items: list[str]) -> str:
    if isinstance(node, ast.List):
        return "[" + ", ".join(items) + "]"
    if isinstance(node, ast.Set):
        return "{" + ", ".join(items) + "}"
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _atom(text: str) -> str:
    """``text`` as the operand of an attribute access: parenthesized unless it is a
    name, an attribute, a subscript or a call already."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    plain = isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
    return text if plain else f"({text})"


def _scalar(links: Sequence[Link]) -> bool:
    """The kept tensor at the chain's end is 0-dim (a loss): ``.item()`` keeps its value."""
    last = next((link for link in reversed(links) if link.kind == "tensor"), None)
    return last is not None and last.shape == []


def _element(links: Sequence[Link]) -> Link | None:
    """What one entry of the growing container on the chain is (another container, an
    object carrying tensors, a tensor): the container seen to grow, else the last one
    that can; None without such a container."""
    growing = [at for at, link in enumerate(links[:-1]) if link.kind == "container" and link.grows]
    seen = [at for at in growing if links[at].grew]
    if not growing:
        return None
    return links[(seen or growing)[-1] + 1]


def _computes(statement: ast.stmt) -> bool:
    """The statement computes a value (a call, an operator), not only moves one."""
    value = getattr(statement, "value", None)
    if not isinstance(value, ast.expr) or isinstance(statement, ast.Return):
        return False
    return any(isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)) for node in ast.walk(value))


def _edit(source: Source, statement: ast.stmt, new: tuple[str, ...], kind: str) -> Edit:
    assert statement.end_lineno is not None
    return Edit(source.filename, statement.lineno, statement.end_lineno, new, one_line(new), kind)


def _under(source: Source, statement: ast.stmt, no_grad: str) -> Edit:
    """``with torch.no_grad():`` and the statement indented under it."""
    assert statement.end_lineno is not None
    old = source.lines[statement.lineno - 1 : statement.end_lineno]
    pad = indent_of(old[0])
    new = (f"{pad}with {no_grad}:", *(f"    {line}" if line.strip() else line for line in old))
    shown = f"with {no_grad}: {one_line(old)}"
    return Edit(source.filename, statement.lineno, statement.end_lineno, new, shown, "no_grad")
