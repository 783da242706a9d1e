"""GraphLeakCallback on real transformers Trainer runs (a tiny BERT built from a config,
nothing downloaded): a clean run passes, the usual leaks fail inside the loop."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_graphleak import GraphLeakError
from pytest_graphleak.result import CheckResult

if TYPE_CHECKING:
    import torch
    import transformers
else:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from pytest_graphleak.integrations.transformers import GraphLeakCallback


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(i)
        return {
            "input_ids": torch.randint(0, 50, (8,), generator=gen),
            "labels": torch.tensor(i % 2),
        }


class MyTrainer(transformers.Trainer):
    """A Trainer subclass as users write them; ``leak`` picks one of the usual leaks."""

    leak = ""
    step_losses: list[torch.Tensor]
    cached_logits: list[torch.Tensor]
    running: torch.Tensor

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, object],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, object]:
        loss, outputs = super().compute_loss(
            model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
        )
        if self.leak == "list":
            self.step_losses.append(loss)
        elif self.leak == "total":
            self.running = self.running + loss
        elif self.leak == "outputs":
            self.cached_logits.append(outputs.logits)
        return (loss, outputs) if return_outputs else loss


def train(
    tmp_path: Path,
    callback: transformers.TrainerCallback,
    *,
    leak: str = "",
    size: int = 400,
    gradient_accumulation_steps: int = 1,
) -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=24,
        per_device_train_batch_size=4,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        lr_scheduler_type="linear",
        warmup_steps=2,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    trainer = MyTrainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=Tokens(size),
        callbacks=[callback],
    )
    trainer.leak = leak
    trainer.step_losses, trainer.cached_logits = [], []
    trainer.running = torch.zeros(())
    trainer.train()


def test_a_clean_run_with_the_usual_features_passes(
    tmp_path: Path, recorded: list[CheckResult]
) -> None:
    cb = GraphLeakCallback(warmup=3)
    assert isinstance(cb, transformers.TrainerCallback) and cb.result is None
    # 16 samples, batches of 4, 2 per optimizer step: a new epoch every 2 steps.
    train(tmp_path, cb, size=16, gradient_accumulation_steps=2)
    assert cb.result is not None
    assert not cb.result.leaked, cb.result.verdict.reason
    # One step per batch: 24 optimizer steps are 48 batches, in windows of 16 after the
    # first warmup + 16; the 13 left are shorter than a window: a tail with no verdict of
    # its own (it may lie inside the run's last epoch).
    assert [(r.steps, r.leaked) for r in cb.results] == [(16, False), (16, False)]
    assert recorded == cb.results and gc.isenabled()


def test_losses_kept_by_a_trainer_subclass_name_the_trainer(
    tmp_path: Path, recorded: list[CheckResult]
) -> None:
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        train(tmp_path, cb, leak="list")
    text = str(info.value)
    assert "list-accumulation" in text
    assert "held by: trainer -> MyTrainer.step_losses -> list(len=19) -> Tensor(" in text
    stored_at = [line for line in text.splitlines() if "stored at: " in line]
    assert stored_at and "self.step_losses.append(loss)" in stored_at[0], text
    assert "test_transformers.py" in text and "in compute_loss: " in text
    assert recorded[-1].leaked and gc.isenabled()


def test_a_running_loss_total_fails_as_retained_grad_fn(
    tmp_path: Path, recorded: list[CheckResult]
) -> None:
    cb = GraphLeakCallback(warmup=3, steps=10)
    with pytest.raises(GraphLeakError) as info:
        train(tmp_path, cb, leak="total")
    text = str(info.value)
    assert "retained-grad-fn" in text
    assert "held by: trainer -> MyTrainer.running -> Tensor(shape=(), grad_fn=AddBackward0)" in text


def test_cached_logits_fail_as_list_accumulation(
    tmp_path: Path, recorded: list[CheckResult]
) -> None:
    cb = GraphLeakCallback(warmup=3)
    with pytest.raises(GraphLeakError) as info:
        train(tmp_path, cb, leak="outputs")
    text = str(info.value)
    assert "list-accumulation" in text
    assert (
        "held by: trainer -> MyTrainer.cached_logits -> list(len=19) -> Tensor(shape=(4, 2)" in text
    )
