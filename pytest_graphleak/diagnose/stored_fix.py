"""The fix, worded for the line that stores the leak (the ``stored at:`` line).

The pattern's usual fix (``patterns.FIXES``) names no variable: it cannot know the
user's names. When the ``stored at:`` line is known, ``stored_fix`` parses it (``ast``)
and, for the shapes it knows, says what to change on that line with the user's own
expressions::

    preds.append(out)           -> store out.detach() (or out.item() for a scalar) ...
    rows.extend(out.unbind(0))  -> rows.extend(out.detach().unbind(0))
    total += loss               -> total += loss.item() (or loss.detach() ...)
    cache[key] = emb            -> cache[key] = emb.detach()
    q = torch.cat([q, feats])   -> torch.cat([q, feats.detach()])
    self.m = 0.9 * self.m + x   -> self.m = (0.9 * self.m + x).detach()
    h = self.rnn(x, h)          -> h = h.detach() once per step
    meter.sum.add_(loss)        -> meter.sum.add_(loss.detach())

Before any of these, ``deferred_fix`` reads the function that has the line: when a later
line of it runs a backward through the container the line puts into
(``torch.stack(pending[-4:]).mean().backward()``), ``.item()`` would break that
backward, and the fix is to clear the container after it. Without a line of a known
shape, ``usual_fix`` words the pattern's fix with the holder that the chain names
(``st['rows']``, ``HISTORY``), or leaves the table's sentence.

A statement written over several lines is read whole from its file (``statement_text``).
The holder chain (``Diagnosis.chain``) must agree with the line's shape, and picks
``.item()`` for a scalar. Any other line (a call into a function, an expression that is
detached already) gives "": the usual fix stays. Nothing here reads an object; the words
come from the source text and the chain's labels only, so no name is invented.
"""

from __future__ import annotations

import ast
import linecache
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pytest_graphleak.result import CreationSite, Diagnosis

#: Methods that put their (last) argument into the container they are called on.
_PUTS = frozenset({"append", "appendleft", "add", "insert", "put", "put_nowait", "push"})
#: Calls that join a sequence of arrays into a new one (``torch.cat([q, x])``).
_JOINS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "row_stack",
                    "column_stack", "dstack"})  # fmt: skip
#: Calls whose result carries no graph: what they are given is stored already cut off.
_CUTS = frozenset({"detach", "item", "tolist", "numpy", "float", "int", "bool"})
#: Calls that only detach, move or copy a tensor (``out.detach().cpu()``).
_COPIES = frozenset({"detach", "cpu", "cuda", "clone", "to", "float", "double", "half",
                     "contiguous"})  # fmt: skip
#: The augmented assignments a running value is kept with (``total += loss``).
_OPERATORS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
                                             ast.Div: "/"}  # fmt: skip
#: Expressions ``.detach()`` can follow without parentheses.
_PRIMARY = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)
#: Only the patterns whose holder a line stores have a ``stored at:`` line.
STORING = ("list-accumulation", "retained-grad-fn")
#: The pattern whose fix is worded from the line that rebuilds a growing array.
GROWING = "memory-growth"
#: A tensor's link in the holder chain (``render.describe``): ``Tensor(shape=(), ...``.
_TENSOR_LINK = re.compile(r"^\w+\(shape=(\([^)]*\))")
#: The chain's link that holds the tensor, for ``kept.append(x)`` / ``cache[k] = x``.
_SEQUENCE_LINK = re.compile(r"^(list|deque|set)\(len=")
#: A key edge (``dict['k']``, ``OrderedDict[3]``, a user's ``Store['k']``) is a mapping's.
_MAPPING_LINK = re.compile(r"^(\w+\[|list\(len=)")
#: A user's subclass of a sequence (``Rows(len=3)``); tuples are told apart by
#: ``_Line.puts_into``.
_SUBCLASS_LINK = re.compile(r"^(?!(?:tuple|frozenset|dict)\()\w+\(len=")
#: A record of several values put into a container (``{"loss": loss, "out": out}``).
_RECORD_LINK = re.compile(r"^(\w*[dD]ict\[|tuple\(len=|list\(len=)")
#: An object kept in a container whose attribute holds the tensor: ``Trace.out``.
_OBJECT_LINK = re.compile(r"^(\w+)\.([A-Za-z_]\w*)$")
#: Calls that split a tensor into the tensors ``extend`` puts (``out.unbind(0)``).
_SPLITS = frozenset({"unbind", "split", "chunk", "tensor_split", "unflatten"})
#: A chain's root that names the user's variable: ``fixture 'st'``, ``global 'mod.H'``.
_ROOT_NAME = re.compile(r"^(?:fixture|local|closure|global) '(?:[\w.]*\.)?(\w+)'")
#: A chain link left through a key or an attribute: ``dict['rows']``, ``Trainer.history``.
_NAMED_LINK = re.compile(r"^[\w.]*?(\[(?:'[^']*'|\"[^\"]*\"|-?\d+)\]|\.[A-Za-z_]\w*)$")


class _Line:
    """One parsed source line, the text of its parts, and what the holder chain says:
    the link that holds the first tensor (None: no chain to compare with) and whether
    that tensor is a scalar (None: not known)."""

    def __init__(self, text: str, chain: Sequence[str] | None) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.holder_link: str | None = None
        self.outer_link = ""
        self.scalar: bool | None = None
        if chain is not None:
            found = [(i, m) for i, link in enumerate(chain) if (m := _TENSOR_LINK.match(link))]
            at, shape = found[0] if found else (0, None)
            self.holder_link = chain[at - 1] if at else ""  # "": no tensor held by a link
            #: the link before it: ``list(len=24)`` of ``list(len=24) -> dict['loss']``
            self.outer_link = chain[at - 2] if at >= 2 else ""
            if shape is not None:
                self.scalar = shape.group(1) == "()"

    def puts_into(self) -> bool:
        """Is the chain's tensor right in the container a put (``append``, ``add``,
        ``extend``) fills? A list, deque or set, or a user's subclass of one
        (``Rows(len=3)``) that no other container holds: a namedtuple record kept in a
        list has the list outside it, and a tuple has no ``append``."""
        if self.holds(_SEQUENCE_LINK):
            return True
        link = self.holder_link or ""
        return bool(_SUBCLASS_LINK.match(link)) and "(len=" not in self.outer_link

    def holds(self, pattern: re.Pattern[str]) -> bool:
        """Does the chain's tensor sit right in a container of this kind (or no chain)?"""
        return self.holder_link is None or bool(pattern.match(self.holder_link))

    def names(self, target: ast.expr) -> bool:
        """Is the chain's tensor held by the name ``target`` binds (or no chain)?"""
        link = self.holder_link
        if link is None:
            return True
        if isinstance(target, ast.Subscript):  # state["total"]: dict['total']
            key = target.slice
            return isinstance(key, ast.Constant) and link.endswith(f"[{key.value!r}]")
        last = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        # self.total, local 'total', global 'module.TOTAL'
        return bool(last) and link.endswith((f".{last}", f"'{last}'", f".{last}'"))

    def of(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def replaced(self, statement: ast.stmt, node: ast.AST, new: str) -> str:
        """The statement's text with ``node``'s text replaced by ``new`` (one line)."""
        whole = self.of(statement)
        start = _offset(self.text, node) - _offset(self.text, statement)
        return whole[:start] + new + whole[start + len(self.of(node)) :]


def _offset(text: str, node: ast.AST) -> int:
    return len(text.encode()[: getattr(node, "col_offset", 0)].decode(errors="ignore"))


def reword_fix(diagnosis: Diagnosis) -> None:
    """Word ``diagnosis.fix`` for its first ``stored at:`` line once that line is known:
    the one rule for a step check, a loop's next step and the outlive audit's re-run.
    The fix stays when the line's shape is not one known here (or a cycle's: no line)."""
    if diagnosis.pattern == GROWING:  # the line that rebuilds the buffer, stored or made
        lines = diagnosis.stored_at or diagnosis.sites
        diagnosis.fix = (growth_fix(_statement(lines[0])) if lines else "") or diagnosis.fix
        return
    worded = fix_for_stored(diagnosis.pattern, diagnosis.stored_at, diagnosis.chain,
                            graph=not diagnosis.kept_without_graph)  # fmt: skip
    diagnosis.fix = worded or diagnosis.fix or usual_fix(diagnosis.pattern, diagnosis.chain)


def chain_holder(chain: Sequence[str], *, container: bool = True) -> str:
    """The user's expression for what keeps the leaked tensor, read from the holder
    chain: ``st['rows']`` for ``fixture 'st' -> dict['rows'] -> list(len=48) -> Tensor``,
    ``HISTORY`` for ``global 'train.HISTORY' -> list(len=5) -> ...``, ``self.total`` for
    ``self -> Model.total -> Tensor``; "" when a link has no such spelling.
    ``container``: the container is wanted, ``cache`` of ``cache[3] -> Tensor`` (a
    ``list-accumulation``), not the entry ``state['total']`` (a running total)."""
    if not chain:
        return ""
    root = _ROOT_NAME.match(chain[0])
    text = "self" if chain[0] == "self" else root.group(1) if root else ""
    for at, link in enumerate(chain[1:], 1):
        if not text or _TENSOR_LINK.match(link):
            break
        named = _NAMED_LINK.match(link)
        if named is None:  # list(len=48): the container ``text`` leads to holds it
            break
        following = chain[at + 1] if at + 1 < len(chain) else ""
        if container and named.group(1).startswith("[") and _TENSOR_LINK.match(following):
            break  # cache[3] -> Tensor: the dict ``text`` is the holder
        text += named.group(1)
    return text


def usual_fix(pattern: str, chain: Sequence[str]) -> str:
    """The pattern's usual fix with the holder from the chain in it, when it has one ("":
    the table's wording, which names no variable, stays)."""
    holder = chain_holder(chain, container=pattern == "list-accumulation")
    if not holder:
        return ""
    if pattern == "list-accumulation":
        return (
            f"store plain numbers (.item()) or detached tensors (.detach()) in {holder}, "
            "not graph-carrying tensors"
        )
    if pattern == "retained-grad-fn":
        return (
            f"cut the graph that {holder} keeps, each step: update it with .item() or "
            ".detach() values, detach it once per step if it is carried state (or "
            "unchain_backward()), or update it under no_grad()"
        )
    return ""


def _statement(site: CreationSite) -> str:
    return statement_text(site.filename, site.lineno) or site.line


def growth_fix(line: str) -> str:
    """The memory-growth fix worded for a line that rebuilds a kept array one step's
    output bigger (``preds = torch.cat([preds, out])``, also ``out if preds is None else
    torch.cat(...)``); "" for any other line (the pattern's usual fix stays)."""
    try:
        tree = ast.parse(line.strip())
    except (SyntaxError, ValueError):
        return ""
    found = {_growth_fix(line.strip(), node) for node in _simple_statements(tree)} - {""}
    return found.pop() if len(found) == 1 else ""


def _growth_fix(text: str, statement: ast.stmt) -> str:
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return ""
    of = _Line(text, None).of
    target, value = of(statement.targets[0]), statement.value
    if isinstance(value, ast.IfExp):  # out if preds is None else torch.cat((preds, out))
        value = value.orelse
    joined = _join_call(value)
    if joined is None or not any(of(item) == target for item in joined):
        return ""
    added = [item for item in joined if of(item) != target]
    if len(added) != 1:
        return ""
    join = of(value.func) if isinstance(value, ast.Call) else "the join"
    return (
        f"{target} is rebuilt bigger every step ({join} of itself and {of(added[0])}), so "
        f"it keeps every step's output: update running metrics (counts, sums) from "
        f"{of(_uncut(added[0]))} step by step instead, or bound {target} (keep its last "
        "rows) and reset it once its result is used (at the end of each epoch)"
    )


def fix_for_stored(
    pattern: str, stored: Sequence[CreationSite], chain: Sequence[str], *, graph: bool = True
) -> str:
    """The fix worded for the first (most frequent) ``stored at:`` line; "" for none.
    ``graph=False``: the kept tensors carry no graph (``story.tell``'s no-graph fix)."""
    if not stored:
        return ""
    line = statement_text(stored[0].filename, stored[0].lineno) or stored[0].line
    if not graph:
        return kept_fix(pattern, line, chain)
    return deferred_fix(pattern, stored[0], line, chain) or stored_fix(pattern, line, chain)


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
        for node in _simple_statements(tree)
        if node.lineno <= lineno <= (node.end_lineno or node.lineno)
    ]
    if not spanning:
        return ""
    innermost = min(spanning, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)
    return "" if innermost.end_lineno == innermost.lineno else ast.unparse(innermost)


def kept_fix(pattern: str, line: str, chain: Sequence[str] | None = None) -> str:
    """The no-graph fix (``patterns``' ``no_graph_fix``) worded for the line that puts
    already detached tensors into a container: that container is the one to bound or
    clear. "" when the line is not such a put (the table's wording stays)."""
    parsed = _parsed(line, chain) if pattern == "list-accumulation" else None
    found = _distinct(parsed, _put)
    if parsed is None or len(found) != 1:
        return ""
    holder, value = found.pop()
    base = _uncut(value)
    number = ""
    if parsed.puts_into() and isinstance(base, _PRIMARY) and parsed.scalar is not False:
        item = f"{parsed.of(base)}.item()"
        number = (
            f"store {item} instead, or " if parsed.scalar else f"store {item} for a scalar, or "
        )
    return (
        f"the kept tensors are already detached, so .detach() changes nothing: {number}bound "
        f"or clear {holder} (collections.deque(maxlen=N), or {holder}.clear() at the end of "
        "each epoch), and for metrics keep a fixed-size state (binned thresholds instead of "
        "every prediction; compute() and reset() each epoch)"
    )


def _put(line: _Line, statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(holder, value)`` of a line that puts ``value`` into the container ``holder``,
    where the chain shows the tensor in that container (or in a record put there)."""
    holder: ast.expr | None = None
    value: ast.expr | None = None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call, func = statement.value, statement.value.func
        if isinstance(func, ast.Attribute) and func.attr in _PUTS and call.args:
            holder, value = func.value, call.args[-1]
    elif isinstance(statement, ast.AugAssign) and isinstance(statement.value, ast.List):
        if len(statement.value.elts) == 1:
            holder, value = statement.target, statement.value.elts[0]
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, ast.Subscript) and line.holds(_MAPPING_LINK):
            return line.of(target.value), statement.value
    if holder is None or value is None:
        return None
    in_record = _SEQUENCE_LINK.match(line.outer_link) and line.holds(_RECORD_LINK)
    return (line.of(holder), value) if line.puts_into() or in_record else None


def _uncut(node: ast.expr) -> ast.expr:
    """``logits`` of ``logits.detach().cpu()``: the expression before the calls that
    only copy or detach it."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _COPIES
    ):
        node = node.func.value
    return node


def stored_fix(pattern: str, line: str, chain: Sequence[str] | None = None) -> str:
    """The fix worded for the stored line ``line``; "" when its shape is not one known
    here, when the holder ``chain`` (``Diagnosis.chain``) shows the tensor kept otherwise
    than the line's shape says (``kept.append(pair)`` of a tuple), or when ``pattern`` is
    not one a line stores: the usual fix applies then."""
    found = _distinct(_parsed(line, chain) if pattern in STORING else None, _fix)
    return found.pop() if len(found) == 1 else ""


def _parsed(line: str, chain: Sequence[str] | None) -> _Line | None:
    """The stored line parsed; None when it is cut off inside a statement, or not Python."""
    try:
        return _Line(line.strip(), chain)
    except (SyntaxError, ValueError):
        return None


def _distinct(parsed: _Line | None, read: Callable[[_Line, ast.stmt], Any]) -> set[Any]:
    """What ``read`` finds in each simple statement of the line, empty answers left out."""
    if parsed is None:
        return set()
    return {read(parsed, statement) for statement in _simple_statements(parsed.tree)} - {None, ""}


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
    if func.attr in _PUTS and line.puts_into():
        return _store(line, statement, call.args[-1], holder)
    if func.attr in _PUTS and _SEQUENCE_LINK.match(line.outer_link):  # kept.append(record)
        value = call.args[-1]
        carrier = _OBJECT_LINK.match(line.holder_link or "")
        if not _cut(value) and carrier is not None:  # traces.append(tr): Trace.out
            return _object_fix(line, value, holder, carrier.group(1), carrier.group(2))
        if _cut(value) or not line.holds(_RECORD_LINK):
            return ""
        return (
            f"store {line.of(value)} in {holder} with its graph-carrying tensors detached "
            "(.detach(), or .item() for a scalar)"
        )
    if func.attr == "extend" and isinstance(call.args[0], (ast.List, ast.Tuple)):
        items = call.args[0].elts
        one = len(items) == 1 and line.puts_into()
        return _store(line, statement, items[0], holder) if one else ""
    if func.attr == "extend" and line.puts_into():  # extend(out.unbind(0))
        return _split_fix(line, statement, call.args[0], holder)
    if func.attr.endswith("_") and not func.attr.startswith("_"):  # in place: add_, lerp_
        value = call.args[0]
        if _cut(value) or isinstance(value, ast.Constant) or not line.names(func.value):
            return ""
        detached = line.replaced(statement, value, _detached(line, value))
        return (
            f"update {holder} with {_detached(line, value)} so that it keeps no graph: "
            f"{detached} (or make the update under no_grad())"
        )
    return ""


def _object_fix(line: _Line, value: ast.expr, holder: str, kind: str, attr: str) -> str:
    """``traces.append(tr)`` where the chain shows ``Trace.out -> Tensor``: the kept
    object is not a tensor, one of its attributes carries the graph."""
    cut = ".item()" if line.scalar else ".detach()"
    which = " (or .item() for a scalar)" if line.scalar is None else ""
    if isinstance(value, _PRIMARY) and not isinstance(value, ast.Call):
        kept = f"{line.of(value)}.{attr}"
        return (
            f"{holder} keeps each {kind} with the graph that its .{attr} carries: keep "
            f"{kept}{cut}{which} instead of {line.of(value)}, or detach {kept} before it "
            "is stored"
        )
    return (
        f"{holder} keeps each {kind} with the graph that its .{attr} carries: build it "
        "from detached tensors (.detach()), or keep only detached tensors taken from it"
    )


def _split_fix(line: _Line, statement: ast.stmt, value: ast.expr, holder: str) -> str:
    """``rows.extend(out.unbind(0))``: split the detached tensor instead."""
    func = value.func if isinstance(value, ast.Call) else None
    if not isinstance(func, ast.Attribute) or func.attr not in _SPLITS or _cut(func.value):
        return ""
    base = _detached(line, func.value)
    split = base + line.of(value)[len(line.of(func.value)) :]  # the base comes first
    fixed = line.replaced(statement, func.value, base)
    return f"store {split} instead of {line.of(value)}, so that {holder} keeps no graph: {fixed}"


def _augmented_fix(line: _Line, statement: ast.AugAssign) -> str:
    """``total += loss`` and ``outputs += [out]``."""
    target, value = line.of(statement.target), statement.value
    if isinstance(value, (ast.List, ast.Tuple)):
        one = len(value.elts) == 1 and line.holds(_SEQUENCE_LINK)
        return _store(line, statement, value.elts[0], target) if one else ""
    op = _OPERATORS.get(type(statement.op))
    if _cut(value) or isinstance(value, ast.Constant) or op is None:
        return ""
    if not line.names(statement.target):
        return ""
    primary, was = _primary(line, value), f"instead of {target} {op}= {line.of(value)}"
    if line.scalar:
        return f"cut the graph that {target} keeps: {target} {op}= {primary}.item() {was}"
    if line.scalar is False:
        return f"cut the graph that {target} keeps: {target} {op}= {primary}.detach() {was}"
    return (
        f"cut the graph that {target} keeps: {target} {op}= {primary}.item() for a scalar "
        f"(or {primary}.detach() to keep a tensor) {was}"
    )


def _assign_fix(line: _Line, statement: ast.stmt, target: ast.expr, value: ast.expr) -> str:
    """``cache[k] = x``, ``q = torch.cat([q, x])``, ``m = 0.9 * m + x``, ``h = rnn(x, h)``."""
    names = _target_texts(line, target)
    if not any(_mentions(line, value, name) for name in names):  # a fresh value each step
        if isinstance(target, ast.Subscript) and line.holds(_MAPPING_LINK):  # cache[k] = x
            return _store(line, statement, value, line.of(target.value))
        if isinstance(target, ast.Attribute) and line.names(target):
            return _store(line, statement, value, line.of(target))
        return ""
    if isinstance(target, (ast.Tuple, ast.List)):
        names = [
            line.of(item) for item in target.elts if line.of(item) in names and line.names(item)
        ]
    elif not line.names(target):
        names = []
    if not names:  # the chain's tensor is not the one this line binds
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
            "or end of each step), so that it carries no graph from one step to the "
            "next; if nothing backpropagates through it, compute it under no_grad()"
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
    cut = f"{primary}.item()" if line.scalar else f"{primary}.detach()"
    which = f" (or {primary}.item() for a scalar)" if line.scalar is None else ""
    which = " (a plain number)" if line.scalar else which
    return (
        f"store {cut}{which} instead of {text}, so that {holder} keeps no graph: "
        f"{line.replaced(statement, value, cut)}"
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


def deferred_fix(pattern: str, site: CreationSite, line: str, chain: Sequence[str]) -> str:
    """The fix for a container whose tensors a later backward uses (every 4th step:
    ``torch.stack(pending[-4:]).mean().backward()``): ``.item()`` or ``.detach()`` would
    break that backward, so the fix is to clear the container after it. "" when the
    stored line is not a put into a container, or no later line of its function feeds
    the container to a backward."""
    parsed = _parsed(line, chain) if pattern == "list-accumulation" else None
    found = _distinct(parsed, _put)
    if len(found) != 1:
        found = _distinct(parsed, _extended)
    if len(found) != 1:
        return ""
    holder = found.pop()[0]
    later = _backward_after(site, holder)
    if later is None:
        return ""
    lineno, text, sliced = later
    bound = "" if sliced else ", or bound it with collections.deque(maxlen=N)"
    return (
        f"the tensors in {holder} are used with their graphs by a later backward (line "
        f"{lineno}: {text}), so .item() or .detach() here would break it: clear {holder} "
        f"right after that backward ({holder}.clear()), so that it keeps only what the next "
        f"backward needs{bound}"
    )


def _extended(line: _Line, statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(holder, value)`` of ``holder.extend(value)`` into a sequence on the chain."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func, args = statement.value.func, statement.value.args
        if isinstance(func, ast.Attribute) and func.attr == "extend" and len(args) == 1:
            return (line.of(func.value), args[0]) if line.puts_into() else None
    return None


def _backward_after(site: CreationSite, holder: str) -> tuple[int, str, bool] | None:
    """``(line number, text, sliced)`` of a statement that runs after ``site`` in its
    function (or module) and runs a backward through what ``holder`` keeps: ``holder``
    (or a name made from it) in the tensor a ``.backward()`` is called on, or in the
    arguments of ``backward(...)`` / ``grad(...)``. A statement earlier in the loop that
    has the stored line runs after it too, in the next turn. ``sliced``: the code reads
    ``holder[a:b]`` (a deque would not do). None when there is none."""
    source = "".join(linecache.getlines(site.filename))
    try:
        tree = ast.parse(source)
        wanted = ast.unparse(ast.parse(holder, mode="eval").body)
    except (SyntaxError, ValueError):
        return None
    scope = _innermost(tree, site.lineno, (ast.FunctionDef, ast.AsyncFunctionDef)) or tree
    loop = _innermost(scope, site.lineno, (ast.For, ast.AsyncFor, ast.While))
    statements = sorted(
        (node for node in ast.walk(scope) if isinstance(node, ast.stmt) and node is not scope),
        key=lambda node: (node.lineno, node.col_offset),
    )
    sliced = any(
        isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)
        and ast.unparse(node.value) == wanted
        for node in ast.walk(scope)
    )  # fmt: skip
    end = (loop.end_lineno or loop.lineno) if loop is not None else 0
    after = [node for node in statements if node.lineno > site.lineno]
    turn = [node for node in after if node.lineno <= end]  # the rest of this turn
    if loop is not None:  # then the next turn, up to the stored line
        turn += [node for node in statements if loop.lineno < node.lineno < site.lineno]
    made = {wanted}  # holder, and names bound from it after the stored line
    for statement in turn + [node for node in after if node.lineno > end]:
        if _backward_in(statement, made):
            text = ast.get_source_segment(source, statement) or ast.unparse(statement)
            return statement.lineno, " ".join(text.split()), sliced
    return None


def _innermost(tree: ast.AST, lineno: int, kinds: tuple[type[ast.AST], ...]) -> Any:
    """The innermost node of ``kinds`` in ``tree`` whose lines hold ``lineno`` (None)."""
    found: list[Any] = [node for node in ast.walk(tree)
                        if isinstance(node, kinds) and node is not tree]  # fmt: skip
    found = [node for node in found if node.lineno <= lineno <= (node.end_lineno or node.lineno)]
    return max(found, key=lambda node: node.lineno, default=None)


def _backward_in(statement: ast.stmt, made: set[str]) -> bool:
    """Does this (simple) statement run a backward through ``made``? Names it binds from
    ``made`` are added to it (``total = sum(pending)``, ``for x in pending:``)."""
    if isinstance(statement, (ast.For, ast.AsyncFor)) and _uses(statement.iter, made):
        made.update(_names(statement.target))  # for x in pending: x.backward()
    if isinstance(statement, _COMPOUND):  # its body's statements are walked one by one
        return False
    if any(isinstance(node, ast.Call) and _runs_backward(node, made)
           for node in ast.walk(statement)):  # fmt: skip
        return True
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = statement.value
        if value is not None and _uses(value, made):
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]  # fmt: skip
            for target in targets:
                made.update(_names(target))
    return False


#: Statements whose body holds statements of their own (walked one by one).
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
             ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)  # fmt: skip


#: Calls whose result carries no graph of what they are given (``n = len(pending)``).
_NO_GRAPH_OUT = _CUTS | {"len", "str", "repr", "print", "format", "isinstance", "id"}


def _uses(node: ast.AST, made: set[str]) -> bool:
    """Does ``node`` read a tensor of ``made`` in a way that keeps its graph? A read
    inside ``len(...)``, ``.item()``, ``.detach()``... does not count."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in _NO_GRAPH_OUT:
            return False
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and ast.unparse(node) in made:
        return True
    return any(_uses(child, made) for child in ast.iter_child_nodes(node))


def _names(target: ast.expr) -> set[str]:
    return {ast.unparse(node) for node in ast.walk(target) if isinstance(node, ast.Name)}


def _runs_backward(call: ast.Call, made: set[str]) -> bool:
    """``<made>.backward()``, ``torch.autograd.backward(<made>)``, ``autograd.grad(...)``."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "backward" and isinstance(func, ast.Attribute) and _uses(func.value, made):
        return True
    return name in ("backward", "grad") and any(_uses(arg, made) for arg in call.args)
