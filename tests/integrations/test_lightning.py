"""GraphLeakCallback on real Lightning runs: a clean run with the usual features passes,
the usual leaks fail inside the loop with the right pattern and holder."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

from pytest_graphleak import GraphLeakError, GraphLeakWarning, UnmeasuredError
from pytest_graphleak.result import CheckResult

if TYPE_CHECKING:
    import lightning as L
    import torch
    from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
else:
    torch = pytest.importorskip("torch")
    L = pytest.importorskip("lightning")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*", "ignore::UserWarning:lightning")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from pytest_graphleak.integrations.lightning import GraphLeakCallback  # noqa: E402

#: A batch of the DataLoaders here: inputs and targets.
Batch = tuple["torch.Tensor", "torch.Tensor"]


class Regressor(L.LightningModule):
    """A tiny model; ``leak`` picks one of the leaks users report."""

    def __init__(self, leak: str = "") -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.leak = leak
        self.step_losses: list[object] = []
        self.training_step_outputs: list[dict[str, object]] = []
        self.total = torch.zeros(())
        self.all_preds = torch.zeros(0, 1)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        preds = self.net(x)
        loss = torch.nn.functional.mse_loss(preds, y)
        self.log("train_loss", loss, on_step=True, prog_bar=False)
        if self.leak == "list":
            self.step_losses.append(loss)
        elif self.leak == "total":
            self.total = self.total + loss
        elif self.leak == "outputs":
            self.training_step_outputs.append({"loss": loss, "preds": preds})
        elif self.leak == "cat":  # detached: only the bytes grow
            self.all_preds = torch.cat([self.all_preds, preds.detach()])
        return loss

    def on_train_epoch_end(self) -> None:  # the teardown that hides leaks from track()
        self.step_losses.clear()
        self.training_step_outputs.clear()

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def loader(batches: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(4 * batches, 8, generator=gen), torch.randn(4 * batches, 1, generator=gen)
    )
    return DataLoader(data, batch_size=4)


def fit(
    model: L.LightningModule,
    callback: GraphLeakCallback,
    *,
    batches: int,
    max_steps: int = 30,
    accumulate_grad_batches: int = 1,
    limit_val_batches: int | None = None,
    fast_dev_run: bool = False,
) -> None:
    assert isinstance(callback, L.Callback)  # made one by GraphLeakCallback.__new__
    trainer = L.Trainer(
        max_steps=max_steps,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        accumulate_grad_batches=accumulate_grad_batches,
        limit_val_batches=limit_val_batches,
        fast_dev_run=fast_dev_run,
    )
    validation = loader(2) if limit_val_batches is not None else None
    trainer.fit(model, loader(batches), val_dataloaders=validation)


def test_a_clean_run_with_the_usual_features_passes(recorded: list[CheckResult]) -> None:
    cb = GraphLeakCallback(warmup=3)
    assert isinstance(cb, L.Callback) and cb.result is None
    # 8 batches per epoch, 2 per optimizer step: an epoch ends (with a validation run)
    # every 4 steps, inside the measured window.
    fit(Regressor(), cb, batches=8, accumulate_grad_batches=2, limit_val_batches=2)
    assert cb.result is not None
    assert not cb.result.leaked, cb.result.verdict.reason
    # One step per batch (60 batches for 30 optimizer steps), in windows of 16 after the
    # first warmup + 16; the 9 batches left when the run ends are shorter than a window:
    # a tail with no verdict of its own (it may lie inside the run's last epoch).
    windows = [(r.steps, r.leaked) for r in cb.results]
    assert windows == [(16, False), (16, False), (16, False)]
    assert recorded == cb.results
    assert gc.isenabled()


def test_a_kept_list_fails_inside_the_loop_naming_the_holder_and_the_line(
    recorded: list[CheckResult],
) -> None:
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        fit(Regressor("list"), cb, batches=40)
    text = str(info.value)
    assert "list-accumulation" in text
    assert "held by: pl_module -> Regressor.step_losses -> list(len=19) -> Tensor(" in text
    assert "created at: " in text and "test_lightning.py" in text
    assert "loss = torch.nn.functional.mse_loss(preds, y)" in text
    assert "stored at: " in text and "self.step_losses.append(loss)  (once per step)" in text
    assert cb.result is info.value.result or cb.result == info.value.result
    assert recorded and recorded[-1].leaked and gc.isenabled()


def test_a_running_tensor_total_fails_as_retained_grad_fn(recorded: list[CheckResult]) -> None:
    cb = GraphLeakCallback(warmup=3, steps=12)
    with pytest.raises(GraphLeakError) as info:
        fit(Regressor("total"), cb, batches=40)
    text = str(info.value)
    assert "retained-grad-fn" in text
    assert "held by: pl_module -> Regressor.total -> Tensor(shape=(), grad_fn=AddBackward0)" in text
    assert cb.result is not None and cb.result.steps == 12


def test_outputs_cached_until_epoch_end_fail_before_the_epoch_ends(
    recorded: list[CheckResult],
) -> None:
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        fit(Regressor("outputs"), cb, batches=40)
    text = str(info.value)
    assert "list-accumulation" in text
    assert "held by: pl_module -> Regressor.training_step_outputs -> list(len=19) -> dict[" in text


def test_warn_lets_training_go_on_and_window_mode_judges_each_window(
    recorded: list[CheckResult],
) -> None:
    cb = GraphLeakCallback(warmup=2, window=9, on_leak="warn")
    with pytest.warns(GraphLeakWarning, match="list-accumulation"):
        fit(Regressor("list"), cb, batches=40, max_steps=29)
    assert [r.leaked for r in cb.results] == [True, True, True]
    assert [r.steps for r in cb.results] == [9, 9, 9]
    assert recorded == cb.results


def test_window_mode_sampled_every_third_batch_still_catches_and_names_the_holder(
    recorded: list[CheckResult],
) -> None:
    cb = GraphLeakCallback(warmup=2, window=12, sample_every=3, on_leak="warn")
    with pytest.warns(GraphLeakWarning, match="list-accumulation") as caught:
        fit(Regressor("list"), cb, batches=40, max_steps=26)
    assert [(r.leaked, r.sample_every) for r in cb.results] == [(True, 3), (True, 3)]
    leaks = [str(w.message) for w in caught if issubclass(w.category, GraphLeakWarning)]
    assert "held by: pl_module -> Regressor." in leaks[0]
    assert recorded == cb.results


def test_window_mode_names_a_buffer_rebuilt_by_torch_cat_and_its_line(
    recorded: list[CheckResult],
) -> None:
    cb = GraphLeakCallback(warmup=2, window=12, on_leak="warn")
    with pytest.warns(GraphLeakWarning, match="memory-growth") as caught:
        fit(Regressor("cat"), cb, batches=40, max_steps=20)
    leak = next(str(w.message) for w in caught if issubclass(w.category, GraphLeakWarning))
    assert "held by: pl_module -> Regressor.all_preds -> Tensor(shape=(" in leak
    line = "self.all_preds = torch.cat([self.all_preds, preds.detach()])"
    assert leak.count(line) == 2, leak  # created at and stored at
    assert (
        "fix (not verified): self.all_preds is rebuilt bigger every step (torch.cat of itself"
    ) in leak
    assert recorded == cb.results


class Centered(torch.nn.Module):
    """A layer that keeps a running mean of its input in ``forward`` (Lightning calls it
    through the LightningModule), without ``no_grad()``: the leak."""

    def __init__(self) -> None:
        super().__init__()
        self.running_mean = torch.zeros(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = 0.1
        self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)
        return x - self.running_mean.detach()


class Pooled(Regressor):
    """``leak``: "running_mean" (a submodule's forward) or "pool" (a list filled by a
    Lightning hook with what ``training_step`` made)."""

    def __init__(self, leak: str) -> None:
        super().__init__(leak)
        if leak == "running_mean":
            self.net.insert(1, Centered())
        self.pool: list[object] = []
        self.last_preds: object = None

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.last_preds = preds = self.net(x)
        return torch.nn.functional.mse_loss(preds, y)

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        if self.leak == "pool":
            self.pool.append(self.last_preds)


@pytest.mark.parametrize(
    ("leak", "holder", "stored"),
    [
        (
            "running_mean",
            "held by: pl_module -> Pooled.net -> Sequential.1 -> Centered.running_mean -> Tensor(",
            "self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)",
        ),
        (
            "pool",
            "held by: pl_module -> Pooled.pool -> list(len=19) -> Tensor(",
            "self.pool.append(self.last_preds)",
        ),
    ],
)
def test_a_leak_stored_in_forward_or_in_a_hook_names_the_storing_line(
    leak: str, holder: str, stored: str, recorded: list[CheckResult]
) -> None:
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        fit(Pooled(leak), cb, batches=40)
    text = str(info.value)
    assert holder in text, text
    stored_at = [line for line in text.splitlines() if "stored at: " in line]
    assert stored_at and "test_lightning.py" in stored_at[0] and stored in stored_at[0], text
    assert "created at: " in text and "judged after" not in text


class TwoOptimizers(L.LightningModule):
    """A GAN-shaped module: manual optimization, two optimizer steps per batch (global_step
    moves by 2), and the discriminator's losses kept in a list."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.g = torch.nn.Linear(8, 8)
        self.d = torch.nn.Linear(8, 1)
        self.d_losses: list[object] = []

    def training_step(self, batch: Batch, batch_idx: int) -> None:
        x, _ = batch
        optimizers = self.optimizers()
        assert isinstance(optimizers, list)  # one per configure_optimizers entry
        opt_g, opt_d = optimizers
        d_loss = self.d(self.g(x).detach()).mean() - self.d(x).mean()
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        g_loss = -self.d(self.g(x)).mean()
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.d_losses.append(d_loss)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return [
            torch.optim.SGD(self.g.parameters(), lr=0.01),
            torch.optim.SGD(self.d.parameters(), lr=0.01),
        ]


def test_manual_optimization_with_two_optimizers_is_judged_per_batch_inside_the_loop(
    recorded: list[CheckResult],
) -> None:
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        fit(TwoOptimizers(), cb, batches=40, max_steps=60)
    text = str(info.value)
    assert "held by: pl_module -> TwoOptimizers.d_losses -> list(len=19) -> Tensor(" in text
    assert "d_loss = self.d(self.g(x).detach()).mean() - self.d(x).mean()" in text
    stored_at = [line for line in text.splitlines() if "stored at: " in line]
    assert stored_at and "self.d_losses.append(d_loss)" in stored_at[0], text
    assert "judged after" not in text and cb.result is not None and cb.result.steps == 16


def test_both_lightning_installs_accept_the_callback() -> None:
    pl = pytest.importorskip("pytorch_lightning")
    cb = GraphLeakCallback(warmup=2)
    assert isinstance(cb, pl.Callback) and isinstance(cb, L.Callback)
    assert isinstance(cb, GraphLeakCallback)
    with pytest.raises(ValueError, match=r"GraphLeakCallback\(\) \(lightning\): warmup must be"):
        GraphLeakCallback(warmup=-1)
    with pytest.raises(ValueError, match="on_leak must be 'raise' or 'warn'"):
        GraphLeakCallback(on_leak="ignore")


def test_fast_dev_run_gets_no_verdict_saying_one_step(recorded: list[CheckResult]) -> None:
    """One batch is too short to judge: unmeasured under pytest (it was a ValueError at
    the run's start reading "the loop runs 1 steps"); on_leak="warn" lets training end."""
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(
        UnmeasuredError,
        match=r"not measured, so no verdict: the loop is too "
        r"short: it ran 1 step; a verdict needs at least 6 \(warmup=3",
    ):
        fit(Regressor(leak="list"), cb, batches=4, fast_dev_run=True)
    assert [r.status for r in recorded] == ["unmeasured"] and gc.isenabled()
    cb = GraphLeakCallback(warmup=3, on_leak="warn")
    with pytest.warns(GraphLeakWarning, match=r"it ran 1 step; a verdict needs at least 6"):
        fit(Regressor(), cb, batches=4, fast_dev_run=True)
    assert cb.result is not None and cb.result.status == "unmeasured"
    assert not cb.result.leaked and cb.result.steps == 0
