"""A built-in toy text and character-level batching for the tiny transformer.

The text is written for this project (no download, no licence question); it is small
and repetitive enough for a two-layer transformer to lower its loss within a few
hundred steps.
"""

from __future__ import annotations

import numpy as np

TEXT = """\
the engine kept every graph alive, and the memory grew a little with every step.
a loss was kept in a list, and the list kept the graph, and the graph kept the tensors.
the fix was small: keep the number, not the tensor. call item, or detach the loss.
then the counters stayed flat: the same tensors alive at every step, and the same nodes.
created kept rising, as it should, but alive did not, and the memory stayed where it was.
a hidden state that is never detached keeps the whole history of the sequence.
cut the graph behind it, and the history is gone, and the step is the same size again.
a hook that holds its own tensor makes a cycle, and only the collector can free it.
hold the tensor weakly, or remove the hook, and the cycle is gone.
train the model, count the tensors, and see that nothing grows but the step number.
"""


class CharVocab:
    """Characters of a text <-> integer ids."""

    def __init__(self, text: str) -> None:
        if not text:
            raise ValueError("CharVocab: the text is empty")
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        try:
            return np.array([self.index[c] for c in text], dtype=np.int64)
        except KeyError as exc:
            raise ValueError(
                f"CharVocab.encode: character {exc.args[0]!r} not in vocabulary"
            ) from exc

    def decode(self, ids: np.ndarray) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def batches(
    ids: np.ndarray, block_size: int, batch_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One random batch of ``(inputs, targets)``, each ``(batch_size, block_size)``;
    targets are the inputs shifted by one character."""
    if len(ids) <= block_size:
        raise ValueError(
            f"batches: text of {len(ids)} ids is not longer than block_size {block_size}"
        )
    starts = rng.integers(0, len(ids) - block_size, size=batch_size)
    window = starts[:, None] + np.arange(block_size + 1)
    chunk = ids[window]
    return chunk[:, :-1], chunk[:, 1:]
