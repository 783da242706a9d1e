"""GraphLeakHandler on real ignite runs: a clean run with the usual handlers passes, the
usual leaks fail inside the run with the right pattern and holder."""

from __future__ import annotations

import gc
import logging

import pytest

from pytest_graphleak import GraphLeakError
from pytest_graphleak.result import CheckResult

torch = pytest.importorskip("torch")
ignite_engine = pytest.importorskip("ignite.engine")
from ignite.engine import Engine, Events  # noqa: E402
from ignite.handlers import LRScheduler  # noqa: E402
from ignite.metrics import RunningAverage  # noqa: E402

from pytest_graphleak.integrations.ignite import GraphLeakHandler  # noqa: E402


def make_engine(leak: str = "", accumulate: int = 1) -> tuple[Engine, dict[str, object]]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state: dict[str, object] = {
        "history": [],
        "total": torch.zeros(()),
        "outputs": [],
        "cache": {},
        "queue": torch.zeros(0, 1),
    }

    def update(engine: Engine, batch: tuple[object, object]) -> float:
        x, y = batch
        preds = model(x)
        loss = torch.nn.functional.mse_loss(preds, y)
        (loss / accumulate).backward()
        if engine.state.iteration % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
        if leak == "list":
            state["history"].append(loss)  # type: ignore[attr-defined]
        elif leak == "total":
            state["total"] = state["total"] + loss
        elif leak == "outputs":
            state["outputs"].append({"loss": loss, "preds": preds})  # type: ignore[attr-defined]
        elif leak == "cache":
            state["cache"][engine.state.iteration] = preds  # type: ignore[index]
        elif leak == "queue":
            state["queue"] = torch.cat([preds, state["queue"]])[:16]
        value: float = loss.item()
        return value

    engine = Engine(update)
    engine.logger.setLevel(logging.CRITICAL)
    RunningAverage(output_transform=lambda out: out).attach(engine, "avg_loss")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5)
    engine.add_event_handler(Events.ITERATION_COMPLETED, LRScheduler(scheduler))

    @engine.on(Events.EPOCH_COMPLETED)
    def clear_epoch_outputs(engine: Engine) -> None:
        state["outputs"].clear()  # type: ignore[attr-defined]

    return engine, state


def batches(count: int) -> list[tuple[object, object]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)) for _ in range(count)
    ]


def run(
    leak: str,
    handler: GraphLeakHandler,
    *,
    epoch: int = 40,
    accumulate: int = 1,
    max_epochs: int | None = None,
    max_iters: int | None = None,
) -> None:
    engine, _ = make_engine(leak, accumulate=accumulate)
    handler.attach(engine)
    engine.run(batches(epoch), max_epochs=max_epochs, max_iters=max_iters)


def test_a_clean_run_with_the_usual_handlers_passes(recorded: list[CheckResult]) -> None:
    handler = GraphLeakHandler(warmup=3)
    run("", handler, epoch=6, max_epochs=5, accumulate=2)  # epoch ends inside the window
    assert handler.result is not None
    assert not handler.result.leaked, handler.result.verdict.reason
    # 30 steps: the 11 after the first window of warmup + 16 are shorter than a window, a
    # tail with no verdict of its own (it may lie inside the run's last epoch).
    assert [(r.steps, r.leaked) for r in handler.results] == [(16, False)]
    assert recorded == handler.results and gc.isenabled()


HELD = "held by: closure 'state' of update -> "


@pytest.mark.parametrize(
    ("leak", "pattern", "holder", "stored"),
    [
        (
            "list",
            "list-accumulation",
            HELD + "dict['history'] -> list(len=19) -> Tensor(",
            'state["history"].append(loss)',
        ),
        (
            "total",
            "retained-grad-fn",
            HELD + "dict['total'] -> Tensor(shape=(), grad_fn=AddBackward0)",
            'state["total"] = state["total"] + loss',
        ),
        (
            "outputs",
            "list-accumulation",
            HELD + "dict['outputs'] -> list(len=19) -> dict[",
            'state["outputs"].append({"loss": loss, "preds": preds})',
        ),
        (
            "cache",
            "list-accumulation",
            HELD + "dict['cache'] -> dict[",
            'state["cache"][engine.state.iteration] = preds',
        ),
        (
            "queue",
            "retained-grad-fn",
            HELD + "dict['queue'] -> Tensor(shape=(16, 1), grad_fn=SliceBackward0)",
            'state["queue"] = torch.cat([preds, state["queue"]])[:16]',
        ),
    ],
)
def test_the_usual_leaks_fail_inside_the_run(
    leak: str, pattern: str, holder: str, stored: str, recorded: list[CheckResult]
) -> None:
    handler = GraphLeakHandler(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        run(leak, handler, epoch=40, max_iters=30)
    text = str(info.value).split("\n", 1)[1]  # the first line names the test, holder included
    assert pattern in text and holder in text, text
    assert "test_ignite.py" in text and "in update: " in text
    stored_at = [line for line in text.splitlines() if "stored at: " in line]
    assert stored_at and "test_ignite.py" in stored_at[0] and stored in stored_at[0], text
    assert recorded[-1].leaked and gc.isenabled()


def test_attach_refuses_what_is_not_an_engine() -> None:
    with pytest.raises(TypeError, match="expected an ignite Engine, got function"):
        GraphLeakHandler().attach(lambda: None)  # type: ignore[arg-type]
