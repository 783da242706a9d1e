"""What the typed holder chain (``Diagnosis.links``) says, for the words.

The fix is worded from the user's line and checked against the chain: which link holds
the first tensor (``Held``), what kind of container that is, whether the tensor is a
scalar, and how the user spells the holder (``holder_text``: ``st['rows']``,
``HISTORY``, ``self.history``). All of it is read from the links' fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_graphleak.result import Link

#: The holder when the chain has no tensor that a link holds.
NONE = Link("", "")
#: The containers a put (``append``, ``add``) fills.
_SEQUENCES = ("list", "deque", "set")
#: ``functools.lru_cache`` and ``functools.cache`` wrappers (C and pure-Python builds):
#: a cache that keeps one result per distinct argument.
CACHES = frozenset({"_lru_cache_wrapper"})


def cached(links: Sequence[Link]) -> str:
    """How the user spells the ``functools`` cache the chain passes through before its
    tensor (``features``, ``self.encode``); "" when it passes through none, or the cache
    has no such spelling."""
    for at, link in enumerate(links):
        if link.kind == "tensor":
            break
        if at and link.type in CACHES:
            return holder_text(links[: at + 1], container=True)
    return ""


def described_sized(link: Link) -> bool:
    """A built-in container (or a subclass) that the chain leaves by index or member."""
    return bool(link.base) and not link.named


def sequence(link: Link) -> bool:
    """A list, deque or set (not a subclass) holds it."""
    return link.type in _SEQUENCES and described_sized(link)


def mapping(link: Link) -> bool:
    """It is held under a key (a dict, an ``OrderedDict``, a user's store), or in a list."""
    return link.edge == "key" or (link.type == "list" and described_sized(link))


def subclass(link: Link) -> bool:
    """A container a put can fill: a list, deque or set, or a user's subclass of one."""
    return described_sized(link) and link.type not in ("tuple", "frozenset", "dict")


def record(link: Link) -> bool:
    """A record of several values: a dict entry, a tuple or a list."""
    keyed = link.edge == "key" and link.type.lower().endswith("dict")
    return keyed or (link.type in ("tuple", "list") and described_sized(link))


def binds(link: Link, name: str) -> bool:
    """Is ``link`` the holder that the name (or attribute) ``name`` binds: the root
    ``local 'total'``, ``global 'mod.TOTAL'``, an attribute ``Model.total``, a cell?"""
    if link.kind == "root":
        return bool(name) and link.name == name
    return link.edge in ("attribute", "closure cell", "generator frame") and link.key == name


@dataclass(frozen=True)
class Held:
    """The links around the chain's first tensor: the one that holds it (``NONE``: the
    chain has none) and the one before (``NONE`` too), and whether it is a scalar."""

    holder: Link
    outer: Link
    scalar: bool | None


def held(links: Sequence[Link]) -> Held:
    at = next((i for i, link in enumerate(links) if i and link.kind == "tensor"), 0)
    if not at:
        return Held(NONE, NONE, None)
    shape = links[at].shape
    return Held(
        links[at - 1], links[at - 2] if at >= 2 else NONE, None if shape is None else shape == []
    )


def _accessor(link: Link) -> str:
    """``['rows']`` or ``.history``: how the user's code goes on from this link ("")."""
    if link.edge == "key" and (_quoted(link.key) or link.key.lstrip("-").isdigit()):
        return f"[{link.key}]"
    if link.edge == "attribute" and link.key.isidentifier():
        return f".{link.key}"
    return ""


def _quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]


def holder_text(links: Sequence[Link], *, container: bool = True) -> str:
    """The user's expression for what keeps the leaked tensor: ``st['rows']`` for
    ``fixture 'st' -> dict['rows'] -> list(len=48) -> Tensor``, ``HISTORY`` for
    ``global 'train.HISTORY' -> list(len=5) -> ...``, ``self.total`` for ``self ->
    Model.total -> Tensor``; "" when a link has no such spelling. ``container``: the
    container is wanted, ``cache`` of ``cache[3] -> Tensor`` (a ``list-accumulation``),
    not the entry ``state['total']`` (a running total)."""
    if not links:
        return ""
    text = links[0].name
    for at, link in enumerate(links[1:], 1):
        step = _accessor(link)
        if not text or link.kind == "tensor" or not step:
            break
        following = links[at + 1] if at + 1 < len(links) else NONE
        if container and step.startswith("[") and following.kind == "tensor":
            break  # cache[3] -> Tensor: the dict ``text`` is the holder
        text += step
    return text


def kept_object(links: Sequence[Link]) -> tuple[Link, str] | None:
    """The object a put keeps in the chain's container, when it is not the tensor
    itself, and the user's path from it to the tensor: ``(Trace, ".out")`` for ``list
    -> Trace.out -> Tensor``, ``(Rollout, ".data['obs']")``, ``(TensorDict, "")`` (a
    TensorDict: its own ``.detach()`` cuts every tensor it holds). None otherwise."""
    at = next((i for i, link in enumerate(links) if i and link.kind == "tensor"), 0)
    box = next((i for i in range(at - 1, 0, -1) if subclass(links[i])), 0)
    if not box or box + 1 >= at:
        return None
    kept = links[box + 1]
    if kept.kind == "tensordict":
        return kept, ""
    steps = [_accessor(link) for link in links[box + 1 : at]]
    if kept.kind != "object" or not all(steps) or not steps[0].startswith("."):
        return None
    return kept, "".join(steps)


def names_of(links: Sequence[Link]) -> list[Link]:
    """The links a short message names: the root and the named links after it, up to the
    first object that is described (``list(len=3)``, a tensor)."""
    named = list(links[:1])
    for link in links[1:]:
        if not link.named:
            break
        named.append(link)
    return named
