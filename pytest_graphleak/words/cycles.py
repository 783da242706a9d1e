"""The words of a reference cycle: the note that says which link of it the user wrote, and
the fix for that link (``diagnose.cycles`` finds the cycle and reads its links; this
module words what it found, from names and flags only)."""

from __future__ import annotations

import ast

CHECKPOINT = (
    "the cycle runs through the ctx of a reentrant torch.utils.checkpoint, which keeps "
    "run_function (and what its closure captures) until the graph is freed"
)
#: Where a hook on a tensor is registered (``hook_story``'s ``where``).
TENSOR_HOOK = "the tensor with register_hook()"

Told = tuple[list[str], str]  # (notes, fix): "" for the pattern's usual fix
UNHOOK = "{}; then {}.remove() after {}"  # the hook's line, its handle, the line after


def node_hook(node: str, call: str) -> str:
    """Where a hook on a graph node is registered: ``MulBackward0 with grad_fn.register_hook()``."""
    return f"{node} with grad_fn.{call}()"


def _freed(collectable: bool) -> str:
    return "freed only by gc.collect()" if collectable else "never freed"


def ctx_story(
    fn: str, attr: str, held: str, *, collectable: bool, grad_fn_is_ctx: bool, issue: str
) -> Told:
    """A custom autograd Function ``fn`` whose forward stored ``held`` (a type name; ""
    for a tensor) as ``ctx.<attr>``; ``grad_fn_is_ctx``: the library's ctx is the
    output's grad_fn itself (torch's), explained at ``issue`` ("" none)."""
    what = "a tensor" if not held else f"a {held} that leads back to its output"
    link = "is that ctx itself" if grad_fn_is_ctx else "keeps that ctx"
    cited = f" ({issue})" if issue else ""
    note = (
        f"the cycle runs through the ctx of the custom autograd Function {fn}: its forward "
        f"stored {what} as ctx.{attr}, and the output's grad_fn {link}, so each call's "
        f"output and graph are {_freed(collectable)}{cited}"
    )
    if grad_fn_is_ctx and not held:
        fix = (
            f"in {fn}.forward, save the tensor with ctx.save_for_backward({attr}) instead of "
            f"ctx.{attr} = {attr}, and read it back with ctx.saved_tensors in backward; keep "
            f"only non-tensor values as ctx attributes{cited}"
        )
    else:
        fix = (
            f"in {fn}.forward, keep on ctx only what backward needs (arrays through "
            "ctx.save_for_backward(...), plain numbers), not an object that holds the "
            f"Function's output: drop ctx.{attr}, or hold it with weakref.ref"
        )
    return [note], fix


def library_ctx_story(
    fn: str,
    library: str,
    attr: str,
    owner: str,
    name: str,
    *,
    collectable: bool,
    stored: tuple[str, str, str] | None,
) -> Told:
    """A library's Function ``fn`` keeps on ``ctx.<attr>`` the user's ``owner``, whose
    ``.<name>`` holds the Function's output; ``stored``: ``(where, target, value)`` of the
    user's line that stores it, None when it was not found."""
    note = (
        f"the cycle runs through the ctx of the custom autograd Function {fn} of {library}: "
        f"its forward keeps ctx.{attr}, which leads to your {owner}, whose .{name} holds "
        f"the Function's output; the output's grad_fn is that ctx, so each call's output "
        f"and graph are {_freed(collectable)}. The library's code is not yours to change: "
        f"the link to break is your {owner}.{name}"
    )
    if stored is None:
        fix = (
            f"keep a detached tensor in {owner}.{name} (.detach()), or drop it once used, so "
            f"that it does not lead back to the graph of {fn}"
        )
        return [note], fix
    where, target, value = stored
    fix = (
        f"store {owner}.{name} without its graph: {target} = {_detached(value)} ({where}); "
        f"the ctx of {fn} keeps your {owner} (ctx.{attr}), so an output kept on it with its "
        "graph leads back to that ctx and closes the cycle"
    )
    return [note], fix


def _detached(value: str) -> str:
    """``value.detach()``, parenthesised unless ``value`` is a name, attribute, item or
    call."""
    try:
        simple = isinstance(
            ast.parse(value, mode="eval").body, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)
        )
    except SyntaxError:
        simple = False
    return f"{value}.detach()" if simple else f"({value}).detach()"


def hook_story(where: str, method: tuple[str, str] | None, *, held_by: str) -> Told:
    """A hook registered on ``where`` that refers back to its tensor: a bound method
    (``method``: its owner's type and its qualified name) or a closure (None);
    ``held_by``: the library that holds the hook outside Python's collector ("" none)."""
    if method is not None:
        owner, name = method
        note = (
            f"the cycle runs through a hook registered on {where}: the bound method {name} "
            f"holds its {owner}, which holds the tensor"
        )
        fix = (
            f"let the hook hold its {owner} weakly (register a function that calls "
            "weakref.WeakMethod(self._on_grad)() or looks self up through weakref.ref), "
            "remove the hook with the handle that register_hook returns once it has run, or "
            f"keep the tensor on the {owner} detached (self.x = y.detach()) when it needs no "
            "graph"
        )
    else:
        note = (
            f"the cycle runs through a hook registered on {where} whose closure refers "
            "back to its own tensor"
        )
        fix = (
            "capture tensor.detach() (or a weakref.ref) in the hook instead of the tensor, "
            "or remove the hook with the handle that register_hook returns once it has run"
        )
    if held_by:  # the collector cannot see the link
        note += f"; {held_by} holds the hook from C++, so not even gc.collect() frees it"
    return [note], fix


def pack_hook_story(desc: str, node: str, hook: str) -> tuple[list[str], str]:
    """A tensor (``desc``) kept by its own grad_fn ``node`` through the saved-tensor pack
    hook ``hook`` (its name and place): the cycle's lines and the note."""
    where = f"pack hook {hook}"
    cycle = [
        f"{desc}.grad_fn",
        f"{node}._saved_result (packed by saved-tensor {where})",
        f"{desc} (the same object: the cycle closes)",
    ]
    note = (
        f"held from C++ by its own grad_fn {node}: the saved-tensor {where} returned the "
        "tensor itself, so the saved output refers back to its grad_fn; detach it in the "
        "pack hook"
    )
    return cycle, note
