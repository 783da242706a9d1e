"""The fix, worded for the line that stores the leak (the ``stored at:`` line).

The pattern's usual fix (``patterns.FIXES``) names ``loss`` because it cannot know the
user's names. When the ``stored at:`` line is known, ``stored_fix`` parses it (``ast``)
and, for the shapes it knows, says what to change on that line with the user's own
expressions::

    preds.append(out)           -> store out.detach() (or out.item() for a scalar) ...
    total += loss               -> total += loss.item() (or loss.detach() ...)
    cache[key] = emb            -> cache[key] = emb.detach()
    q = torch.cat([q, feats])   -> torch.cat([q, feats.detach()])
    self.m = 0.9 * self.m + x   -> self.m = (0.9 * self.m + x).detach()
    h = self.rnn(x, h)          -> h = h.detach() once per step
    meter.sum.add_(loss)        -> meter.sum.add_(loss.detach())

Any other line (a call into a function, a line cut off inside a multi-line statement, an
expression that is detached already) gives "": the usual fix stays. Nothing here reads
an object; the words come from the line's own text only, so no name is invented.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from pytest_graphleak.result import CreationSite

#: Methods that put their (last) argument into the container they are called on.
_PUTS = frozenset({"append", "appendleft", "add", "insert", "put", "put_nowait", "push"})
#: Calls that join a sequence of arrays into a new one (``torch.cat([q, x])``).
_JOINS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "row_stack",
                    "column_stack", "dstack"})  # fmt: skip
#: Calls whose result carries no graph: what they are given is stored already cut off.
_CUTS = frozenset({"detach", "item", "tolist", "numpy", "float", "int", "bool"})
#: The augmented assignments a running value is kept with (``total += loss``).
_OPERATORS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
                                             ast.Div: "/"}  # fmt: skip
#: Expressions ``.detach()`` can follow without parentheses.
_PRIMARY = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)
#: Only the patterns whose holder a line stores have a ``stored at:`` line.
STORING = ("list-accumulation", "retained-grad-fn")


class _Line:
    """One parsed source line and the text of its parts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)

    def of(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def replaced(self, statement: ast.stmt, node: ast.AST, new: str) -> str:
        """The statement's text with ``node``'s text replaced by ``new`` (one line)."""
        whole = self.of(statement)
        start = _offset(self.text, node) - _offset(self.text, statement)
        return whole[:start] + new + whole[start + len(self.of(node)) :]


def _offset(text: str, node: ast.AST) -> int:
    return len(text.encode()[: getattr(node, "col_offset", 0)].decode(errors="ignore"))


def fix_for_stored(pattern: str, stored: Sequence[CreationSite]) -> str:
    """The fix worded for the first (most frequent) ``stored at:`` line; "" for none."""
    return stored_fix(pattern, stored[0].line) if stored else ""


def stored_fix(pattern: str, line: str) -> str:
    """The fix worded for the stored line ``line``; "" when its shape is not one known
    here (or ``pattern`` is not one a line stores), so the usual fix applies."""
    if pattern not in STORING:
        return ""
    try:
        parsed = _Line(line.strip())
    except (SyntaxError, ValueError):  # cut off inside a statement, or not Python
        return ""
    found = {_fix(parsed, statement) for statement in _simple_statements(parsed.tree)} - {""}
    return found.pop() if len(found) == 1 else ""


def _simple_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """The line's simple statements: ``if ok: kept.append(x)`` gives the append."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
            yield node


def _fix(line: _Line, statement: ast.stmt) -> str:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _call_fix(line, statement, statement.value)
    if isinstance(statement, ast.AugAssign):
        return _augmented_fix(line, statement)
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) == 1:
            return _assign_fix(line, statement, targets[0], statement.value)
    return ""


def _call_fix(line: _Line, statement: ast.stmt, call: ast.Call) -> str:
    """``kept.append(x)``, ``kept.extend([x])``, ``total.add_(x)``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not call.args or call.keywords:
        return ""
    holder = line.of(func.value)
    if func.attr in _PUTS:
        return _store(line, statement, call.args[-1], holder)
    if func.attr == "extend" and isinstance(call.args[0], (ast.List, ast.Tuple)):
        items = call.args[0].elts
        return _store(line, statement, items[0], holder) if len(items) == 1 else ""
    if func.attr.endswith("_") and not func.attr.startswith("_"):  # in place: add_, lerp_
        value = call.args[0]
        if _cut(value) or isinstance(value, ast.Constant):
            return ""
        detached = line.replaced(statement, value, _detached(line, value))
        return (
            f"update {holder} with {_detached(line, value)} so that it keeps no graph: "
            f"{detached} (or make the update under no_grad())"
        )
    return ""


def _augmented_fix(line: _Line, statement: ast.AugAssign) -> str:
    """``total += loss`` and ``outputs += [out]``."""
    target, value = line.of(statement.target), statement.value
    if isinstance(value, (ast.List, ast.Tuple)):
        return _store(line, statement, value.elts[0], target) if len(value.elts) == 1 else ""
    if _cut(value) or isinstance(value, ast.Constant):
        return ""
    op = _OPERATORS.get(type(statement.op))
    if op is None:
        return ""
    primary = _primary(line, value)
    return (
        f"cut the graph that {target} keeps: {target} {op}= {primary}.item() for a scalar "
        f"(or {primary}.detach() to keep a tensor) instead of {target} {op}= {line.of(value)}"
    )


def _assign_fix(line: _Line, statement: ast.stmt, target: ast.expr, value: ast.expr) -> str:
    """``cache[k] = x``, ``q = torch.cat([q, x])``, ``m = 0.9 * m + x``, ``h = rnn(x, h)``."""
    names = _target_texts(line, target)
    if not any(_mentions(line, value, name) for name in names):  # a fresh value each step
        if isinstance(target, ast.Subscript):  # cache[key] = x: the holder is cache
            return _store(line, statement, value, line.of(target.value))
        if isinstance(target, ast.Attribute):
            return _store(line, statement, value, line.of(target))
        return ""
    joined = _join_call(value)
    if joined is not None:  # q = torch.cat([q, x])[-n:]
        added = [item for item in joined if not any(line.of(item) == name for name in names)]
        if len(added) == 1 and not _cut(added[0]) and not isinstance(added[0], ast.Constant):
            item = added[0]
            detached = line.replaced(statement, item, _detached(line, item))
            return (
                f"join {_detached(line, item)} instead of {line.of(item)}, so that "
                f"{' and '.join(names)} keeps no graph: {detached}"
            )
        return ""
    calls = [node for node in ast.walk(value) if isinstance(node, ast.Call)]
    passed = {line.of(arg) for call in calls for arg in call.args if line.of(arg) in names}
    if len(passed) == 1:  # h = rnn(x, h), h = cell(x, h) + h: a state carried over
        # Not on this line: it may run several times a step (backprop through them).
        state = passed.pop()
        return (
            f"detach {state} once per step ({state} = {state}.detach() at the start "
            "or end of each step: truncated backprop through time), so that it "
            "carries no graph from one step to the next"
        )
    if passed:
        return ""
    if isinstance(value, (ast.BinOp, ast.UnaryOp)) and len(names) == 1:  # a running value
        detached = line.replaced(statement, value, f"({line.of(value)}).detach()")
        return f"cut the graph that {names[0]} keeps: {detached} (or compute it under no_grad())"
    return ""


def _store(line: _Line, statement: ast.stmt, value: ast.expr, holder: str) -> str:
    """Put ``value`` into ``holder`` without its graph."""
    if _cut(value) or isinstance(value, ast.Constant):
        return ""
    if isinstance(value, (ast.List, ast.Tuple, ast.Dict, ast.Set)):
        return (
            f"store {line.of(value)} in {holder} with its graph-carrying tensors detached "
            "(.detach(), or .item() for a scalar)"
        )
    text, primary = line.of(value), _primary(line, value)
    detached = line.replaced(statement, value, f"{primary}.detach()")
    return (
        f"store {primary}.detach() (or {primary}.item() for a scalar) instead of {text}, "
        f"so that {holder} keeps no graph: {detached}"
    )


def _cut(node: ast.AST) -> bool:
    """``x.detach()``, ``x.item()``, ``float(x)``, ``x.detach().cpu()``: no graph left."""
    while isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in _CUTS:
            return True
        if not isinstance(func, ast.Attribute):  # f(x.detach()) may make a new graph
            return False
        node = func.value
    return False


def _primary(line: _Line, node: ast.expr) -> str:
    text = line.of(node)
    return text if isinstance(node, _PRIMARY) else f"({text})"


def _detached(line: _Line, node: ast.expr) -> str:
    return f"{_primary(line, node)}.detach()"


def _target_texts(line: _Line, target: ast.expr) -> list[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [line.of(item) for item in target.elts if not isinstance(item, ast.Starred)]
    return [line.of(target)]


def _mentions(line: _Line, value: ast.expr, name: str) -> bool:
    return any(
        isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and line.of(node) == name
        for node in ast.walk(value)
    )


def _join_call(value: ast.expr) -> list[ast.expr] | None:
    """The arrays joined by ``torch.cat([a, b])`` (also sliced: ``torch.cat(...)[-n:]``)."""
    while isinstance(value, ast.Subscript):
        value = value.value
    if not isinstance(value, ast.Call) or not value.args:
        return None
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = value.args[0]
    if name in _JOINS and isinstance(first, (ast.List, ast.Tuple)):
        return list(first.elts)
    return None
