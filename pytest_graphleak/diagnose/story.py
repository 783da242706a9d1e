"""The story the numbers tell, when it is not the pattern's usual one.

Each pattern word has a usual meaning and fix (``report.text.MEANINGS``,
``result.FIXES``). When tensors pile up but no graph node grew (``losses.append(
loss.detach())``, logits kept with ``.detach().cpu()``, a metric's list state), those
would be wrong: the tensors carry no graph, and ``.detach()`` is what the user already
did. ``tell`` returns the sentence and the fix that apply instead ("" = the usual ones).
"""

from __future__ import annotations

#: Fixes for tensors kept without a graph: never ``.detach()``, which changes nothing.
NO_GRAPH_FIX = (
    "the kept tensors are already detached, so .detach() changes nothing: store plain "
    "numbers (loss.item()), bound or clear the container (collections.deque(maxlen=N), "
    "or clear it at the end of each epoch), and for metrics keep a fixed-size state "
    "(binned thresholds instead of every prediction; compute() and reset() each epoch)"
)


def tell(pattern: str, *, graph_grew: bool, tensors: bool, has_chain: bool) -> tuple[str, str]:
    """``(story, fix)`` for this diagnosis; ``("", "")`` when the usual ones are true."""
    if graph_grew or not tensors:
        return "", ""
    if pattern == "list-accumulation":
        return (
            "each step adds tensors to a container that keeps growing; the kept tensors "
            "carry no autograd graph (no graph node grew), so what grows is their data",
            NO_GRAPH_FIX,
        )
    if pattern == "memory-growth":
        where = (
            "and no container on the chain below grows"
            if has_chain
            else "and no holder that grows was found"
        )
        return (
            "tensors that carry no autograd graph stay alive every step (no graph node "
            f"grew), {where}",
            "find what keeps each step's tensors (see the notes) and let go of them: "
            "store plain numbers (loss.item()), bound or clear what collects them "
            "(collections.deque(maxlen=N), clear at the end of each epoch), join threads "
            "that hold them, keep no .numpy() views of step outputs",
        )
    return "", ""
