"""``GraphLeakCallback`` for the transformers ``Trainer``.

    cb = GraphLeakCallback(warmup=3)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[cb])
    trainer.train()                 # GraphLeakError on a leak; cb.result: the CheckResult

One sample per training batch (``on_substep_end`` for a batch that accumulates
gradients, ``on_step_end`` for the one that ends with the optimizer step). Without
``steps=`` the check is judged at warmup + the session's steps, inside the loop, then
window after window to the end of the run (see ``loop``), so a leak is diagnosed while
the holder is alive, before ``on_train_end``; the run's length in batches
(``state.max_steps`` x ``gradient_accumulation_steps``, an upper bound) ends the check
at its last full window (a tail shorter than a window gets no verdict of its own), and
each ``on_epoch_end`` is a reset point that growth is judged across. The diagnosis starts its chains
from the Trainer (found on the call stack of ``on_train_begin``: callbacks are not given
it), the model, the optimizer and the LR scheduler.

transformers has no exception hook for callbacks: when ``train()`` raises, the check is
closed (gc state restored) at the end of the pytest test, when the next check starts, or
by ``cb.close()``.
"""

from __future__ import annotations

import sys
from typing import Any

import transformers

from pytest_graphleak.integrations.base import FrameworkCheck, remaining


class GraphLeakCallback(FrameworkCheck, transformers.TrainerCallback):
    """A transformers TrainerCallback that fails ``trainer.train()`` when training leaks
    graphs. Keywords as for the Lightning callback: ``steps``, ``warmup``, ``window``,
    ``rss_tolerance``, ``probes``, ``start_scan``, ``on_leak`` ("raise" or "warn")."""

    framework = "transformers"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = _calling_trainer()
        model = kwargs.get("model")
        held = {
            "trainer": trainer,
            "model": model,
            "optimizer": kwargs.get("optimizer"),
            "lr_scheduler": kwargs.get("lr_scheduler"),
        }
        roots = {label: value for label, value in held.items() if value is not None}
        label = type(trainer).__name__ if trainer is not None else type(model).__name__
        left = remaining(state.max_steps, state.global_step)
        batches = left * max(1, int(args.gradient_accumulation_steps or 1)) if left else None
        self._run_started(length=batches, roots=lambda: roots, label=label)

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        check = self._check  # a batch that accumulated gradients: one step too
        if check is not None:
            check.after_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        # The check's own call, not through _step_ended: one frame less on every step
        # (~1 us of a window-mode step between samples, where that is all it costs).
        check = self._check
        if check is not None:
            check.after_step()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._epoch_ended()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        self._run_ended()


def _calling_trainer(depth: int = 12) -> Any:
    """The ``Trainer`` whose training loop called this callback (a ``self`` up the stack)."""
    frame: Any = sys._getframe(1)
    try:
        for _ in range(depth):
            frame = frame.f_back
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, transformers.Trainer):
                return candidate
        return None
    finally:
        del frame
