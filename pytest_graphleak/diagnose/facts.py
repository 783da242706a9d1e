"""The one fact builder: a holder chain as typed links (``result.Link``), and its labels.

Every diagnosis that finds a chain (the step check, a running loop, the heap as it is,
the outlive audit) sets it on its ``Diagnosis`` with ``set_chain``: ``links`` are the
facts (the root's kind and name, each object's kind, type, length or shape, and how the
chain leaves it), ``chain`` their rendering (``render.render_chain``). The pattern
(``classify.pattern_of``) and the words (``words/``) read the links, never the labels.
"""

from __future__ import annotations

from typing import Any

from pytest_graphleak.diagnose.backends import NODE, TENSOR
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.render import render_chain
from pytest_graphleak.diagnose.search import Path
from pytest_graphleak.heap.containers import SIZED, growable, length, tensordict_like
from pytest_graphleak.heap.edge import Edge, short_repr
from pytest_graphleak.heap.graphwalk import grad_fn_of
from pytest_graphleak.result import Diagnosis, Link

#: The roots whose label carries the user's name for them: ``fixture 'st'``,
#: ``global 'mod.HISTORY'`` (the roots' own format, made in ``roots`` and the audit).
NAMED_ROOTS = ("fixture", "local", "closure", "global")
#: Names for the edge kinds (``edges.Edge.kind``), as the words say them.
_EDGE_WORDS = {
    "attr": "attribute",
    "key": "key",
    "index": "index",
    "closure": "closure cell",
    "local": "generator frame",
    "member": "member",
    "grad_fn": "graph",
    "next": "graph",
    "value": "context value",
    "ref": "reference",
}
#: Attributes through which a tensor or node keeps its hooks.
_HOOKS = frozenset({"_backward_hooks", "hooks", "pre_hooks", "_forward_hooks"})


def set_chain(diagnosis: Diagnosis, path: Path | None, walker: ObjectEdges) -> None:
    """Give ``diagnosis`` the chain of ``path``: its typed links and their labels."""
    diagnosis.chain, diagnosis.links = chain_of(path, walker)


def chain_of(path: Path | None, walker: ObjectEdges) -> tuple[list[str], list[Link]]:
    """The labels and the typed links of ``path`` as it is now (lengths change as the
    steps run: the chain is read when it is found)."""
    if path is None:
        return [], []
    return render_chain(path, walker), links_of(path, walker)


def links_of(path: Path, walker: ObjectEdges) -> list[Link]:
    """The typed links of ``path``: the root, then one per object."""
    links = [root_link(path.root_label)]
    for i, obj in enumerate(path.objects):
        out = path.edges[i] if i < len(path.edges) else None
        links.append(_link(obj, out, walker))
    return links


def cycle_links_of(path: Path, walker: ObjectEdges) -> list[Link]:
    """The typed links of a cycle's ``path``: one per object (no root), each with the
    edge the cycle leaves it by."""
    return [
        _link(obj, path.edges[i] if i < len(path.edges) else None, walker)
        for i, obj in enumerate(path.objects)
    ]


def root_link(label: str) -> Link:
    """The root of a chain from its label (``fixture 'st'``, ``self``, ``global 'm.H'``):
    its kind, and the user's name for it when the label names one."""
    if label == "self":
        return Link("root", "self", name="self")
    kind, _, rest = label.partition(" ")
    quoted = rest.split("'")
    name = ""
    if kind in NAMED_ROOTS and rest.startswith("'") and len(quoted) >= 3:
        name = quoted[1].rpartition(".")[2]  # global 'train.HISTORY': HISTORY
    return Link("root", kind, name=name if name.isidentifier() else "")


def _link(obj: Any, out: Edge | None, walker: ObjectEdges) -> Link:
    found = walker.backend_of(obj)
    edge, key = _edge(obj, out, found)
    kind_name = type(obj).__name__
    if found is not None and found[1] == TENSOR:
        return Link(
            "tensor",
            kind_name,
            edge=edge,
            key=key,
            shape=_shape(obj),
            graph=grad_fn_of(obj) is not None,
        )
    if found is not None and found[1] == NODE:
        return Link("node", kind_name, edge=edge, key=key)
    base = next((b.__name__ for b in SIZED if isinstance(obj, b)), "")
    size = length(obj)
    kind = "container" if base or size is not None else "object"
    if tensordict_like(obj):  # its own .detach() cuts every tensor it holds
        kind = "tensordict"
    carriers = _carriers(obj, walker) if kind == "object" else []
    return Link(
        kind,
        kind_name,
        edge=edge,
        key=key,
        base=base,
        length=size,
        grows=growable(obj),
        carriers=carriers,
    )


def _carriers(obj: Any, walker: ObjectEdges) -> list[str]:
    """The attributes of ``obj`` (its own ``__dict__``, read without running its code)
    that hold a tensor carrying a graph: a kept distribution's ``loc`` and ``scale``."""
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return []
    if not isinstance(attributes, dict):
        return []
    found = []
    for name, value in list(attributes.items())[:64]:
        held = walker.backend_of(value)
        if (
            isinstance(name, str)
            and held is not None
            and held[1] == TENSOR
            and grad_fn_of(value) is not None
        ):
            found.append(name)
    return found


def _edge(obj: Any, out: Edge | None, found: Any) -> tuple[str, str]:
    if out is None:
        return "", ""
    word = _EDGE_WORDS.get(out.kind, out.kind)
    key = short_repr(out.key) if out.kind == "key" else "" if out.key is None else str(out.key)
    if out.kind == "attr" and type(obj).__name__ == "cell":
        return "closure cell", key
    if out.kind == "attr" and key.startswith("ctx."):  # a custom Function's ctx (minigrad)
        return "ctx attribute", key.removeprefix("ctx.")
    node = found is not None and found[1] == NODE
    is_ctx = getattr(found[0], "is_ctx", None) if node else None
    if out.kind == "attr" and callable(is_ctx) and is_ctx(obj):
        return "ctx attribute", key  # torch's node of a custom Function is its ctx
    if out.kind == "attr" and (key in _HOOKS or (found is not None and "hook" in key)):
        return "hook", key
    return word, key


def _shape(tensor: Any) -> list[int] | None:
    try:
        return [int(n) for n in tensor.shape]
    except Exception:
        return None
