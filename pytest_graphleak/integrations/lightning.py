"""``GraphLeakCallback`` for Lightning (``lightning`` or ``pytorch_lightning``).

    cb = GraphLeakCallback(warmup=3)
    trainer = L.Trainer(max_steps=30, callbacks=[cb])
    trainer.fit(model, data)        # GraphLeakError on a leak; cb.result: the CheckResult

One sample per training batch (``on_train_batch_end``): a batch that accumulates
gradients is one step, and so is one that runs several optimizers (manual optimization,
where ``trainer.global_step`` moves once per ``optimizer.step()``). Without ``steps=`` the
check is judged at warmup + the session's steps, inside the loop, then window after
window to the end of the run (see ``loop``), so a leak is diagnosed while the holder is
alive, before ``on_train_epoch_end`` and the trainer's teardown. The run's length in
batches (known when one batch is one optimizer step, or from ``max_epochs`` x the
batches of an epoch) ends the check at its last full window (a tail shorter than a
window gets no verdict of its own), and each ``on_train_epoch_end`` is a reset point
that growth is judged across.

Both installs work: the callback is an instance of the ``Callback`` class of every
Lightning flavour already imported when it is made (``lightning.pytorch`` and/or
``pytorch_lightning``; if neither is, ``lightning`` is imported, else
``pytorch_lightning``).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any

from pytest_graphleak.integrations.base import FrameworkCheck, remaining

_FLAVOURS = ("lightning.pytorch", "pytorch_lightning")


def _callback_bases() -> tuple[type, ...]:
    imported = [sys.modules[name] for name in _FLAVOURS if name in sys.modules]
    if not imported:
        for name in _FLAVOURS:
            with contextlib.suppress(ImportError):
                imported = [importlib.import_module(name)]
                break
    if not imported:
        raise ImportError(
            "GraphLeakCallback needs Lightning: pip install lightning (or pytorch-lightning)"
        )
    return tuple(module.Callback for module in imported)


_CONCRETE: dict[tuple[type, tuple[type, ...]], type] = {}


class GraphLeakCallback(FrameworkCheck):
    """A Lightning Callback that fails ``trainer.fit()`` when training leaks graphs.

    ``steps``: measured training batches after ``warmup``, judged once (None: every batch
    to the end of the run, judged window after window); ``window``: judge each
    consecutive window of that many batches instead (long runs); ``rss_tolerance``,
    ``probes``, ``start_scan``: as for ``check()``; ``on_leak``: "raise"
    (``GraphLeakError`` out of ``fit()``) or "warn" (``GraphLeakWarning``, training goes
    on). ``.result``: the ``CheckResult``.
    """

    framework = "lightning"

    def __new__(cls, *args: Any, **kwargs: Any) -> GraphLeakCallback:
        bases = _callback_bases()
        concrete = _CONCRETE.get((cls, bases))
        if concrete is None:
            # One class per (callback class, imported flavours): an instance of each
            # flavour's Callback, whichever Trainer the user runs.
            names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
            concrete = type(cls.__name__, (cls, *bases), names)
            _CONCRETE[(cls, bases)] = concrete
        return super().__new__(concrete)

    def __reduce__(self) -> Any:  # the concrete class is made at run time: pickle the public one
        return (_rebuild, (type(self).__mro__[1], self.__dict__))

    # -- Lightning hooks -------------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._run_started(
            length=_batches_left(trainer, pl_module),
            roots=lambda: {"pl_module": pl_module, "trainer": trainer},
            label=type(pl_module).__name__,
        )

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        __tracebackhide__ = True
        check = self._check  # not through _step_ended: one frame less on every step
        if check is not None:
            check.after_step()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_ended()  # the module's own on_train_epoch_end may reset its lists next

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        __tracebackhide__ = True
        self._run_ended()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.close()


def _batches_left(trainer: Any, pl_module: Any) -> float | None:
    """Training batches left in the run (None: not known). ``max_steps`` and
    ``estimated_stepping_batches`` count optimizer steps: batches only when every batch
    makes exactly one (automatic optimization, no accumulation)."""
    with contextlib.suppress(Exception):  # a trainer without these: the length is not known
        one_step_per_batch = (
            getattr(pl_module, "automatic_optimization", True)
            and trainer.accumulate_grad_batches == 1
        )
        if one_step_per_batch:
            return remaining(trainer.estimated_stepping_batches, trainer.global_step)
        per_epoch = trainer.num_training_batches
        if trainer.max_steps in (None, -1) and trainer.max_epochs not in (None, -1):
            return remaining(per_epoch * trainer.max_epochs, per_epoch * trainer.current_epoch)
    return None


def _rebuild(cls: Any, state: dict[str, Any]) -> Any:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj
