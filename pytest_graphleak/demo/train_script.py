"""The training script of ``graphleak demo``: the part a user writes, mistakes included.

It runs unchanged on minigrad and on PyTorch (both have ``loss.backward()``,
``optimizer.zero_grad()``, ``optimizer.step()``, ``loss.item()``). ``graphleak demo``
loads this file as user code (``load_training_script``), under its own module name and
file name, because the diagnosis never points into the plugin's own package and this
is the code whose lines it must name.

``record(phase)`` is called at four points of each step so the log can show RSS
before the forward pass, after it, after backward and after the optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Trainer:
    """A model, its optimizer and its data; each ``step_*`` method is one training step."""

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        loss_fn: Callable[[Any, Any], Any],
        next_batch: Callable[[], tuple[Any, Any]],
        record: Callable[[str], None],
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.next_batch = next_batch
        self.record = record
        self.losses: list[Any] = []  # the loss history, for a plot at the end
        self.running_loss: Any = None  # a smoothed loss, for a progress bar

    def step_keeps_losses(self) -> float:
        x, y = self.next_batch()
        self.record("pre")
        loss = self.loss_fn(self.model(x), y)
        self.record("fwd")
        self.optimizer.zero_grad()
        loss.backward()
        self.record("bwd")
        self.optimizer.step()
        self.record("opt")
        self.losses.append(loss)  # LEAK: the list keeps every step's loss with its graph
        return float(loss.item())

    def step_retains_graph(self) -> float:
        x, y = self.next_batch()
        self.record("pre")
        loss = self.loss_fn(self.model(x), y)
        self.record("fwd")
        self.optimizer.zero_grad()
        loss.backward(retain_graph=True)  # LEAK: backward leaves the whole graph in place ...
        self.record("bwd")
        self.optimizer.step()
        self.record("opt")
        if self.running_loss is None:
            self.running_loss = loss
        else:  # ... and this tensor chains every step's graph to the next one
            self.running_loss = 0.9 * self.running_loss + 0.1 * loss
        return float(loss.item())

    def step_fixed(self) -> float:
        x, y = self.next_batch()
        self.record("pre")
        loss = self.loss_fn(self.model(x), y)
        self.record("fwd")
        self.optimizer.zero_grad()
        loss.backward()  # frees the graph as it goes
        self.record("bwd")
        self.optimizer.step()
        self.record("opt")
        value: float = loss.item()  # FIX: keep the number, not the tensor
        self.losses.append(value)
        self.running_loss = (
            value if self.running_loss is None else (0.9 * self.running_loss + 0.1 * value)
        )
        return value
