"""``GraphLeakCallback`` for Lightning (``lightning`` or ``pytorch_lightning``).

    cb = GraphLeakCallback(warmup=3)
    trainer = L.Trainer(max_steps=30, callbacks=[cb])
    trainer.fit(model, data)        # GraphLeakError on a leak; cb.result: the CheckResult

One sample after every optimizer step (``on_train_batch_end`` when
``trainer.global_step`` moved, so gradient accumulation samples once per step). The run's
length is ``trainer.estimated_stepping_batches`` (``max_steps``, or epochs x batches /
accumulation): the check is judged, and a leak diagnosed, at the last training batch,
before ``on_train_epoch_end`` and the trainer's teardown.

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

    ``steps``: measured optimizer steps after ``warmup`` (None: every step to the end of
    the run); ``window``: judge each consecutive window of that many steps instead (long
    runs); ``rss_tolerance``, ``probes``, ``start_scan``: as for ``check()``;
    ``on_leak``: "raise" (``GraphLeakError`` out of ``fit()``) or "warn"
    (``GraphLeakWarning``, training goes on). ``.result``: the ``CheckResult``.
    """

    framework = "lightning"
    _last_global_step = 0  # trainer.global_step at the last sample

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
        self._last_global_step = trainer.global_step
        try:
            total = trainer.estimated_stepping_batches
        except Exception:  # accumulation that changes per epoch: no single length
            total = None
        length = remaining(total, trainer.global_step)
        self._run_started(
            length=length,
            roots=lambda: {"pl_module": pl_module, "trainer": trainer},
            label=type(pl_module).__name__,
        )

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        __tracebackhide__ = True
        if trainer.global_step == self._last_global_step:
            return  # accumulating gradients: no optimizer step in this batch
        self._last_global_step = trainer.global_step
        self._step_ended()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        __tracebackhide__ = True
        self._run_ended()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.close()


def _rebuild(cls: Any, state: dict[str, Any]) -> Any:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj
