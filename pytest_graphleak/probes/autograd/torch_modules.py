"""What torch's ``nn.Module`` holds, for the diagnosis's walk (``TorchBackend``'s
``member_tables`` and ``recomputed_members``): its parameters, buffers and submodules
are its members, and an attribute one of its forward pre-hooks sets anew before each
forward (weight norm, spectral norm, pruning) is no leak."""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator
from typing import Any

from pytest_graphleak.heap.graphwalk import grad_fn_of

#: The attribute tables of an ``nn.Module`` whose entries are its members.
MODULE_TABLES = ("_parameters", "_buffers", "_modules")

#: Graph nodes a recomputed attribute's graph may have (spectral_norm's has 6).
_RECOMPUTED_MAX_NODES = 32


def recomputed_attributes(module: Any) -> set[str]:
    """Attributes of a torch module that one of its forward pre-hooks sets anew before each
    forward: the hook names the attribute (``WeightNorm.name``, ``SpectralNorm.name``,
    prune's ``_tensor_name``, or a str in a hook function's closure) and the tensor there
    carries a small graph that reaches only the module's own parameters
    (``weight = g * v / |v|``, ``weight_orig / sigma``, ``weight_orig * weight_mask``).
    That graph is the layer's weight, bounded and replaced at each forward: never a leak,
    and no chain passes through it."""
    attrs = module.__dict__
    hooks = attrs.get("_forward_pre_hooks")
    if not hooks:
        return set()
    names: set[str] = set()
    with contextlib.suppress(Exception):  # an exotic hook: nothing recognised
        for hook in list(hooks.values()):
            names.update(_strings_of(hook))
    names.intersection_update(attrs)
    if not names:
        return names
    params = attrs.get("_parameters") or {}
    own = {id(p) for p in params.values() if p is not None}
    return {name for name in names if _graph_of_parameters(attrs[name], own)}


def _strings_of(hook: Any) -> Iterator[str]:
    """The strings a hook carries: an object's attributes, a function's closure cells and
    defaults, a partial's arguments."""
    if isinstance(hook, types.MethodType):
        hook = hook.__self__
    if isinstance(hook, functools.partial):
        values: list[Any] = [*hook.args, *hook.keywords.values()]
    elif isinstance(hook, types.FunctionType):
        values = [*(hook.__defaults__ or ())]
        for cell in hook.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                values.append(cell.cell_contents)
    else:
        attrs = getattr(hook, "__dict__", None)
        values = list(attrs.values()) if isinstance(attrs, dict) else []
    yield from (value for value in values if type(value) is str)


def _graph_of_parameters(tensor: Any, own: set[int]) -> bool:
    """``tensor``'s graph is small and its leaves are among ``own`` (ids of parameters)."""
    grad_fn = grad_fn_of(tensor)
    if grad_fn is None or not hasattr(grad_fn, "next_functions"):
        return False
    seen = {id(grad_fn)}
    queue = [grad_fn]
    leaves = 0
    try:
        while queue:
            node = queue.pop()
            variable = getattr(node, "variable", None)
            if variable is not None:  # AccumulateGrad: a leaf of the graph
                if id(variable) not in own:
                    return False
                leaves += 1
            for child, _ in node.next_functions:
                if child is not None and id(child) not in seen:
                    seen.add(id(child))
                    if len(seen) > _RECOMPUTED_MAX_NODES:
                        return False
                    queue.append(child)
        return leaves > 0
    except Exception:  # a node that refuses reads: not recognised
        return False
    finally:
        queue.clear()
