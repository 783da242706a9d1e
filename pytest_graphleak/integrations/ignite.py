"""``GraphLeakHandler`` for pytorch-ignite engines.

    handler = GraphLeakHandler(warmup=3)
    handler.attach(trainer)         # an ignite Engine
    trainer.run(data, max_epochs=3) # GraphLeakError on a leak; handler.result

One sample after every iteration (``Events.ITERATION_COMPLETED``: one training batch,
whatever number of optimizer steps the update function makes). Without ``steps=`` the
check is judged at warmup + the session's steps, inside the loop, then window after
window to the end of the run (see ``loop``), so a leak is diagnosed while the holder is
alive, before ``EPOCH_COMPLETED`` / ``COMPLETED`` handlers run; the run's length
(``state.max_iters`` or ``epoch_length * max_epochs``) ends the check at its last full
window (a tail shorter than a window gets no verdict of its own), and each
``EPOCH_COMPLETED`` is a reset point that growth is judged across. The diagnosis
starts its chains from the engine and the closure of its update function (``model``,
``optimizer``, ... as named there).

No ``EXCEPTION_RAISED`` handler is added (one would change how ignite re-raises): when
``run()`` raises, the check is closed (gc state restored) at the end of the pytest test,
when the next check starts, or by ``handler.close()``.
"""

from __future__ import annotations

from ignite.engine import Engine, Events

from pytest_graphleak.integrations.base import FrameworkCheck, remaining


class GraphLeakHandler(FrameworkCheck):
    """Checks an ignite Engine's run for graph leaks; ``attach(engine)`` to use it.
    Keywords: ``steps``, ``warmup``, ``window``, ``rss_tolerance``, ``probes``,
    ``start_scan``, ``on_leak`` ("raise" or "warn")."""

    framework = "ignite"

    def attach(self, engine: Engine) -> GraphLeakHandler:
        if not isinstance(engine, Engine):
            raise TypeError(
                f"GraphLeakHandler.attach(engine): expected an ignite Engine, "
                f"got {type(engine).__name__}"
            )
        engine.add_event_handler(Events.STARTED, self._started)
        # ignite calls a handler that takes no arguments without the engine
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._step_ended)
        engine.add_event_handler(Events.EPOCH_COMPLETED, self._epoch_ended)
        engine.add_event_handler(Events.COMPLETED, self._run_ended)
        return self

    def _started(self, engine: Engine) -> None:
        state = engine.state
        epochs = (state.epoch_length or 0) * (state.max_epochs or 0)  # 0: not known
        total = getattr(state, "max_iters", None) or epochs
        function = getattr(engine, "_process_function", None)
        label = getattr(function, "__name__", type(function).__name__)

        def roots() -> dict[str, object]:
            found: dict[str, object] = {"engine": engine}
            names = getattr(getattr(function, "__code__", None), "co_freevars", ())
            for name, cell in zip(
                names, getattr(function, "__closure__", None) or (), strict=False
            ):
                try:
                    found[f"closure '{name}' of {label}"] = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
            return found

        self._run_started(length=remaining(total, state.iteration), roots=roots, label=label)
