"""minigrad's bundle: its probe, its diagnosis backend, its usage counter and census hook.

minigrad numbers its graph nodes process-wide (``Node.sequence_nr``, the count of nodes
created so far, ``mg.stats()["Node"]["created"]``), and counts the tensors it has made
(``["TensorImpl"]["created"]``): exact evidence that a step used it. It records where
each tensor and node was made while ``mg.record_creation_sites(True)`` is on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pytest_graphleak.heap.edge import Edge
from pytest_graphleak.probes.autograd.bundle import NODE, TENSOR, AutogradBundle, Backend
from pytest_graphleak.probes.minigrad_probe import MinigradProbe


class MinigradBackend(Backend):
    name = "minigrad"
    #: A non-leaf tensor's hooks live on its node's ``pre_hooks``.
    tensor_hook_tables = frozenset({(TENSOR, "hooks"), (NODE, "pre_hooks")})

    def __init__(self, mg: Any) -> None:
        super().__init__()
        self.mg = mg

    def _kind_of_type(self, tp: type, obj: object) -> str | None:
        if issubclass(tp, self.mg.Tensor):
            return TENSOR
        if issubclass(tp, self.mg.Node):
            return NODE
        return None

    def creation_site(self, obj: Any) -> tuple[str, int] | None:
        try:
            site: tuple[str, int] | None = self.mg.creation_site(obj)
            return site
        except Exception:
            return None

    def sequence_nr(self, node: Any) -> int | None:
        number = getattr(node, "sequence_nr", None)
        return number if isinstance(number, int) else None

    def _tensor_edges(self, t: Any) -> Iterator[tuple[Edge, object]]:
        # The handle's internals (TensorImpl, AutogradMeta) are shown as the public
        # attributes they stand for: grad_fn, grad, hooks.
        meta = t._meta
        if meta is not None:
            if meta.grad_fn is not None:
                yield Edge("grad_fn"), meta.grad_fn
            if meta.grad is not None:
                yield Edge("attr", "grad"), meta.grad
            if meta.hooks:
                yield Edge("attr", "hooks"), meta.hooks

    def ctx_attribute(self, node: Any, key: str) -> str | None:
        """A custom Function's ctx attributes are labelled ``ctx.<name>`` on its node."""
        return key.removeprefix("ctx.") if key.startswith("ctx.") else None

    def _node_edges(self, node: Any) -> Iterator[tuple[Edge, object]]:
        if node.pre_hooks:
            yield Edge("attr", "pre_hooks"), node.pre_hooks
        saved = node.saved
        if isinstance(saved, self.mg.FunctionCtx):  # a custom Function's ctx: user attributes
            for key, value in list(vars(saved).items()):
                if key != "saved_tensors":
                    yield Edge("attr", f"ctx.{key}"), value


def _backend(mg: Any) -> Backend | None:
    return MinigradBackend(mg) if hasattr(mg, "Tensor") and hasattr(mg, "Node") else None


def _node_counter(mg: Any, end: bool) -> int | None:
    stats = getattr(mg, "stats", None)
    return int(stats()["Node"]["created"]) if callable(stats) else None


def _made(mg: Any) -> int | None:
    return int(mg.stats()["TensorImpl"]["created"])


def _record_sites(mg: Any, on: bool) -> bool | None:
    switch = getattr(mg, "record_creation_sites", None)
    return bool(switch(on)) if callable(switch) else None


BUNDLE = AutogradBundle(
    name="minigrad",
    probe=MinigradProbe,
    backend=_backend,
    node_counter=_node_counter,
    packages=("minigrad",),
    made=_made,
    record_sites=_record_sites,
)
