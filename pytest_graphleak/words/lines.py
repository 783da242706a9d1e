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
    h = h + [loss]              -> h = h + [loss.item()]
    h = self.rnn(x, h)          -> h = h.detach() once per step
    meter.sum.add_(loss)        -> meter.sum.add_(loss.detach())

Before any of these, ``deferred_fix`` reads the function that has the line: when a later
line of it runs a backward through the container the line puts into
(``torch.stack(pending[-4:]).mean().backward()``), ``.item()`` would break that
backward, and the fix is to clear the container after it (``backward``).

A statement written over several lines is read whole from its file (``statement_text``).
The typed holder chain (``Diagnosis.links``, read by ``chain``) must agree with the
line's shape, and picks ``.item()`` for a scalar; a kept object that is not a tensor gets
the path from it to the tensor (``tr.out``), a TensorDict its own ``.detach()``. Any
other line (a call into a function, an expression that is detached already) gives "":
``fix.choose_fix`` then words the pattern's fix with the chain's holder. Nothing here
reads an object; the words come from the source text and the chain's typed links only,
so no name is invented.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

from pytest_graphleak.patterns import LIST_ACCUMULATION, MEMORY_GROWTH, RETAINED_GRAD_FN
from pytest_graphleak.result import CreationSite, Link
from pytest_graphleak.words import chain
from pytest_graphleak.words import source as src
from pytest_graphleak.words.backward import backward_after
from pytest_graphleak.words.source import PRIMARY, Line

#: Methods that put their (last) argument into the container they are called on.
_PUTS = frozenset({"append", "appendleft", "add", "insert", "put", "put_nowait", "push"})
#: The augmented assignments a running value is kept with (``total += loss``).
_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
}
#: Only the patterns whose holder a line stores have a ``stored at:`` line.
STORING = (LIST_ACCUMULATION, RETAINED_GRAD_FN)
#: The pattern whose fix is worded from the line that rebuilds a growing array.
GROWING = MEMORY_GROWTH
#: Calls that split a tensor into the tensors ``extend`` puts (``out.unbind(0)``).
_SPLITS = frozenset({"unbind", "split", "chunk", "tensor_split", "unflatten"})


def growth_fix(line: str) -> str:
    """The memory-growth fix worded for a line that rebuilds a kept array one step's
    output bigger (``preds = torch.cat([preds, out])``, also ``out if preds is None else
    torch.cat(...)``); "" for any other line (the pattern's usual fix stays)."""
    try:
        tree = ast.parse(line.strip())
    except (SyntaxError, ValueError):
        return ""
    found = {_growth_fix(line.strip(), node) for node in src.simple_statements(tree)} - {""}
    return found.pop() if len(found) == 1 else ""


def _growth_fix(text: str, statement: ast.stmt) -> str:
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return ""
    of = Line(text, None).of
    target, value = of(statement.targets[0]), statement.value
    if isinstance(value, ast.IfExp):  # out if preds is None else torch.cat((preds, out))
        value = value.orelse
    joined = src.join_call(value)
    if joined is None or not any(of(item) == target for item in joined):
        return ""
    added = [item for item in joined if of(item) != target]
    if len(added) != 1:
        return ""
    join = of(value.func) if isinstance(value, ast.Call) else "the join"
    return (
        f"{target} is rebuilt bigger every step ({join} of itself and {of(added[0])}), so "
        f"it keeps every step's output: update running metrics (counts, sums) from "
        f"{of(src.uncut(added[0]))} step by step instead, or bound {target} (keep its last "
        "rows) and reset it once its result is used (at the end of each epoch)"
    )


def fix_for_stored(
    pattern: str, stored: Sequence[CreationSite], links: Sequence[Link], *, graph: bool = True
) -> str:
    """The fix worded for the first (most frequent) ``stored at:`` line; "" for none.
    ``graph=False``: the kept tensors carry no graph (``story.tell``'s no-graph fix)."""
    if not stored:
        return ""
    line = src.statement_text(stored[0].filename, stored[0].lineno) or stored[0].line
    if not graph:
        return kept_fix(pattern, line, links)
    return deferred_fix(pattern, stored[0], line, links) or stored_fix(pattern, line, links)


def kept_fix(pattern: str, line: str, links: Sequence[Link] | None = None) -> str:
    """The no-graph fix (``patterns``' ``no_graph_fix``) worded for the line that puts
    already detached tensors into a container: that container is the one to bound or
    clear. "" when the line is not such a put (the table's wording stays)."""
    parsed = _parsed(line, links) if pattern == LIST_ACCUMULATION else None
    found = _distinct(parsed, _put)
    if parsed is None or len(found) != 1:
        return ""
    holder, value = found.pop()
    base = src.uncut(value)
    number = ""
    if parsed.puts_into() and isinstance(base, PRIMARY) and parsed.scalar is not False:
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


def _put(line: Line, statement: ast.stmt) -> tuple[str, ast.expr] | None:
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
        if isinstance(target, ast.Subscript) and line.holds(chain.mapping):
            return line.of(target.value), statement.value
    if holder is None or value is None:
        return None
    in_record = chain.sequence(line.outer) and line.holds(chain.record)
    return (line.of(holder), value) if line.puts_into() or in_record else None


def stored_fix(pattern: str, line: str, links: Sequence[Link] | None = None) -> str:
    """The fix worded for the stored line ``line``; "" when its shape is not one known
    here, when the holder ``chain`` (``Diagnosis.chain``) shows the tensor kept otherwise
    than the line's shape says (``kept.append(pair)`` of a tuple), or when ``pattern`` is
    not one a line stores: the usual fix applies then."""
    found = _distinct(_parsed(line, links) if pattern in STORING else None, _fix)
    return found.pop() if len(found) == 1 else ""


def _parsed(line: str, links: Sequence[Link] | None) -> Line | None:
    """The stored line parsed; None when it is cut off inside a statement, or not Python."""
    try:
        return Line(line.strip(), links)
    except (SyntaxError, ValueError):
        return None


def _distinct(parsed: Line | None, read: Callable[[Line, ast.stmt], Any]) -> set[Any]:
    """What ``read`` finds in each simple statement of the line, empty answers left out."""
    if parsed is None:
        return set()
    found = {read(parsed, statement) for statement in src.simple_statements(parsed.tree)}
    return found - {None, ""}


def _fix(line: Line, statement: ast.stmt) -> str:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return _call_fix(line, statement, statement.value)
    if isinstance(statement, ast.AugAssign):
        return _augmented_fix(line, statement)
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) == 1:
            return _assign_fix(line, statement, targets[0], statement.value)
    return ""


def _call_fix(line: Line, statement: ast.stmt, call: ast.Call) -> str:
    """``kept.append(x)``, ``kept.extend([x])``, ``total.add_(x)``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not call.args or call.keywords:
        return ""
    holder = line.of(func.value)
    if func.attr in _PUTS and line.puts_into():
        return _store(line, statement, call.args[-1], holder)
    kept = chain.kept_object(line.links) if func.attr in _PUTS and line.links else None
    if kept is not None and not src.cut(call.args[-1]):  # traces.append(tr): Trace.out
        return _object_fix(line, statement, call.args[-1], holder, kept)
    if func.attr in _PUTS and chain.sequence(line.outer):  # kept.append(record)
        value = call.args[-1]
        if src.cut(value) or not line.holds(chain.record):
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
        if src.cut(value) or isinstance(value, ast.Constant) or not line.names(func.value):
            return ""
        detached = line.replaced(statement, value, src.detached(line, value))
        return (
            f"update {holder} with {src.detached(line, value)} so that it keeps no graph: "
            f"{detached} (or make the update under no_grad())"
        )
    return ""


def _object_fix(
    line: Line, statement: ast.stmt, value: ast.expr, holder: str, kept: tuple[Link, str]
) -> str:
    """``traces.append(tr)`` where the chain shows ``Trace.out -> Tensor``: the kept
    object is not a tensor, one of its attributes carries the graph; a TensorDict is
    detached whole."""
    link, path = kept
    if link.kind == "tensordict" and not isinstance(value, ast.Constant):
        cut = src.detached(line, value)
        return (
            f"store {cut} instead of {line.of(value)} ({link.type}.detach() detaches every "
            f"tensor it holds), so that {holder} keeps no graph: "
            f"{line.replaced(statement, value, cut)}"
        )
    cut = ".item()" if line.scalar else ".detach()"
    which = " (or .item() for a scalar)" if line.scalar is None else ""
    every = [f".{name}" for name in link.carriers]
    named = isinstance(value, PRIMARY) and not isinstance(value, ast.Call)
    if named and len(every) > 1 and path in every:
        # loc and scale: detaching the one on the chain would leave the others' graphs
        detached = " and ".join(f"{line.of(value)}{name}{cut}" for name in every)
        return (
            f"{holder} keeps each {link.type} with the graphs that its {_listed(every)} "
            f"carry: keep {detached}{which} instead of {line.of(value)}, or build the "
            f"{link.type} from detached tensors before it is stored"
        )
    if isinstance(value, PRIMARY) and not isinstance(value, ast.Call):
        taken = f"{line.of(value)}{path}"
        return (
            f"{holder} keeps each {link.type} with the graph that its {path} carries: keep "
            f"{taken}{cut}{which} instead of {line.of(value)}, or detach {taken} before it "
            "is stored"
        )
    return (
        f"{holder} keeps each {link.type} with the graph that its {path} carries: build it "
        "from detached tensors (.detach()), or keep only detached tensors taken from it"
    )


def _listed(names: list[str]) -> str:
    """``.loc and .scale``, ``.a, .b and .c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _split_fix(line: Line, statement: ast.stmt, value: ast.expr, holder: str) -> str:
    """``rows.extend(out.unbind(0))``: split the detached tensor instead."""
    func = value.func if isinstance(value, ast.Call) else None
    if not isinstance(func, ast.Attribute) or func.attr not in _SPLITS or src.cut(func.value):
        return ""
    base = src.detached(line, func.value)
    split = base + line.of(value)[len(line.of(func.value)) :]  # the base comes first
    fixed = line.replaced(statement, func.value, base)
    return f"store {split} instead of {line.of(value)}, so that {holder} keeps no graph: {fixed}"


def _augmented_fix(line: Line, statement: ast.AugAssign) -> str:
    """``total += loss`` and ``outputs += [out]``."""
    target, value = line.of(statement.target), statement.value
    if isinstance(value, (ast.List, ast.Tuple)):
        one = len(value.elts) == 1 and line.holds(chain.sequence)
        return _store(line, statement, value.elts[0], target) if one else ""
    op = _OPERATORS.get(type(statement.op))
    if src.cut(value) or isinstance(value, ast.Constant) or op is None:
        return ""
    if not line.names(statement.target):
        return ""
    primary, was = src.primary(line, value), f"instead of {target} {op}= {line.of(value)}"
    if line.scalar:
        return f"cut the graph that {target} keeps: {target} {op}= {primary}.item() {was}"
    if line.scalar is False:
        return f"cut the graph that {target} keeps: {target} {op}= {primary}.detach() {was}"
    return (
        f"cut the graph that {target} keeps: {target} {op}= {primary}.item() for a scalar "
        f"(or {primary}.detach() to keep a tensor) {was}"
    )


def _assign_fix(line: Line, statement: ast.stmt, target: ast.expr, value: ast.expr) -> str:
    """``cache[k] = x``, ``q = torch.cat([q, x])``, ``m = 0.9 * m + x``, ``h = rnn(x, h)``."""
    names = src.target_texts(line, target)
    if not any(src.mentions(line, value, name) for name in names):  # a fresh value each step
        if isinstance(target, ast.Subscript) and line.holds(chain.mapping):  # cache[k] = x
            return _store(line, statement, value, line.of(target.value))
        if isinstance(target, ast.Attribute) and line.names(target):
            return _store(line, statement, value, line.of(target))
        return ""
    added = _concatenated(line, value, names)
    if added is not None:  # h = h + [loss]: a new, longer list each step
        one = len(added) == 1 and line.holds(chain.sequence)
        return _store(line, statement, added[0], names[0]) if one else ""
    if isinstance(target, (ast.Tuple, ast.List)):
        names = [
            line.of(item) for item in target.elts if line.of(item) in names and line.names(item)
        ]
    elif not line.names(target):
        names = []
    if not names:  # the chain's tensor is not the one this line binds
        return ""
    joined = src.join_call(value)
    if joined is not None:  # q = torch.cat([q, x])[-n:]
        added = [item for item in joined if not any(line.of(item) == name for name in names)]
        if len(added) == 1 and not src.cut(added[0]) and not isinstance(added[0], ast.Constant):
            item = added[0]
            detached = line.replaced(statement, item, src.detached(line, item))
            return (
                f"join {src.detached(line, item)} instead of {line.of(item)}, so that "
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


def _concatenated(line: Line, value: ast.expr, names: list[str]) -> list[ast.expr] | None:
    """The new entries ``[loss]`` of ``h + [loss]`` (or ``[loss] + h``, a tuple too) where
    ``h`` is a name the line binds; None for any other value (never a running value to
    detach: a list has no ``.detach()``)."""
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, ast.Add):
        return None
    for kept, new in ((value.left, value.right), (value.right, value.left)):
        if line.of(kept) in names and isinstance(new, (ast.List, ast.Tuple)):
            return list(new.elts)
    return None


def _store(line: Line, statement: ast.stmt, value: ast.expr, holder: str) -> str:
    """Put ``value`` into ``holder`` without its graph."""
    if src.cut(value) or isinstance(value, ast.Constant):
        return ""
    if isinstance(value, (ast.List, ast.Tuple, ast.Dict, ast.Set)):
        return (
            f"store {line.of(value)} in {holder} with its graph-carrying tensors detached "
            "(.detach(), or .item() for a scalar)"
        )
    text, primary = line.of(value), src.primary(line, value)
    cut = f"{primary}.item()" if line.scalar else f"{primary}.detach()"
    which = f" (or {primary}.item() for a scalar)" if line.scalar is None else ""
    which = " (a plain number)" if line.scalar else which
    return (
        f"store {cut}{which} instead of {text}, so that {holder} keeps no graph: "
        f"{line.replaced(statement, value, cut)}"
    )


def deferred_fix(pattern: str, site: CreationSite, line: str, links: Sequence[Link]) -> str:
    """The fix for a container whose tensors a later backward uses (every 4th step:
    ``torch.stack(pending[-4:]).mean().backward()``): ``.item()`` or ``.detach()`` would
    break that backward, so the fix is to clear the container after it. "" when the
    stored line is not a put into a container, or no later line of its function feeds
    the container to a backward."""
    parsed = _parsed(line, links) if pattern == LIST_ACCUMULATION else None
    found = _distinct(parsed, _put)
    if len(found) != 1:
        found = _distinct(parsed, _extended)
    if len(found) != 1:
        return ""
    holder = found.pop()[0]
    later = backward_after(site, holder)
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


def _extended(line: Line, statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(holder, value)`` of ``holder.extend(value)`` into a sequence on the chain."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func, args = statement.value.func, statement.value.args
        if isinstance(func, ast.Attribute) and func.attr == "extend" and len(args) == 1:
            return (line.of(func.value), args[0]) if line.puts_into() else None
    return None
