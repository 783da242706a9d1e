"""The story the numbers tell, when it is not the pattern's usual one.

Each pattern word has a usual meaning and fix (``patterns.TABLE``). When tensors pile up
but no graph node grew (``losses.append(loss.detach())``, logits kept with
``.detach().cpu()``, a metric's list state), those would be wrong: the tensors carry no
graph, and ``.detach()`` is what the user already did. ``tell`` returns the sentence and
the fix that apply instead ("" = the usual ones): the table's no-graph variant.
"""

from __future__ import annotations

from pytest_graphleak.patterns import BY_WORD


def tell(pattern: str, *, graph_grew: bool, tensors: bool, has_chain: bool) -> tuple[str, str]:
    """``(story, fix)`` for this diagnosis; ``("", "")`` when the usual ones are true."""
    facts = BY_WORD.get(pattern)
    if graph_grew or not tensors or facts is None or not facts.no_graph_meaning:
        return "", ""
    story = facts.no_graph_meaning
    if pattern == "memory-growth":  # what the diagnosis found about a holder
        where = (
            "and no container on the chain below grows"
            if has_chain
            else "and no holder that grows was found"
        )
        story = f"{story}, {where}"
    return story, facts.no_graph_fix
