"""Cycles through autograd's C++ objects in real framework loops, caught by the callbacks
inside the loop: a custom Function keeping its output as ``ctx.out`` (freed only by the
collector) and a hook on a ``grad_fn`` whose bound method holds the object that holds the
tensor (never freed). Lightning and the transformers Trainer from tiny configs; each
failure is ``cycle`` with the link named, the user's creating line and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphleak import GraphLeakError
from pytest_graphleak.result import CheckResult

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*", "ignore::UserWarning:lightning")


class Clip(torch.autograd.Function):
    if TYPE_CHECKING:  # torch's Function.apply is untyped; this one takes and gives a tensor

        @classmethod
        def apply(cls, x: torch.Tensor) -> torch.Tensor: ...

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        out = torch.tanh(x)
        ctx.out = out  # the leak: the output's grad_fn is this ctx
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * (1 - ctx.out**2)


class Stats:
    """Keeps a batch mean and logs its gradient from a hook on the mean's grad_fn."""

    def __init__(self, features: torch.Tensor) -> None:
        self.seen = 0
        self.mean = features.mean()
        assert self.mean.grad_fn is not None
        self.mean.grad_fn.register_hook(self._on_grad)

    def _on_grad(self, *grads: object) -> None:
        self.seen += 1


def leaky(leak: str, features: torch.Tensor) -> torch.Tensor:
    """The features after the chosen leak (the same tensor values)."""
    if leak == "ctx":
        return Clip.apply(features)
    if leak == "hook":
        return features + 0 * Stats(features).mean
    return features


def _check(text: str, leak: str) -> None:
    assert "leaks: cycle" in text, text
    if leak == "ctx":
        assert "ClipBackward (ctx).out" in text and "ctx.save_for_backward(out)" in text, text
        assert "return Clip.apply(features)" in text, text
    else:
        assert ".post_hooks" in text and "bound method Stats._on_grad" in text, text
        assert "weakref" in text and "self.mean = features.mean()" in text, text
    assert "test_cpp_cycles_in_loops.py" in text


@pytest.mark.parametrize("leak", ["ctx", "hook"])
def test_lightning_callback_draws_the_cycle(leak: str, recorded: list[CheckResult]) -> None:
    if TYPE_CHECKING:
        import lightning as L
    else:
        L = pytest.importorskip("lightning")
    from torch.utils.data import DataLoader, TensorDataset

    from pytest_graphleak.integrations.lightning import GraphLeakCallback

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(6, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(leaky(leak, self.net(x)), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(160, 6, generator=gen), torch.randn(160, 1, generator=gen))
    cb = GraphLeakCallback(warmup=3)
    assert isinstance(cb, L.Callback)  # made one by GraphLeakCallback.__new__
    trainer = L.Trainer(
        max_steps=30,
        callbacks=[cb],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with pytest.raises(GraphLeakError) as info:
        trainer.fit(Model(), DataLoader(data, batch_size=4))
    _check(str(info.value), leak)
    assert cb.result is not None and cb.result.pattern == "cycle"


@pytest.mark.parametrize("leak", ["ctx", "hook"])
def test_transformers_callback_draws_the_cycle(
    leak: str, tmp_path: Path, recorded: list[CheckResult]
) -> None:
    if TYPE_CHECKING:
        import transformers
    else:
        transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from pytest_graphleak.integrations.transformers import GraphLeakCallback

    class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __len__(self) -> int:
            return 400

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            gen = torch.Generator().manual_seed(i)
            return {
                "input_ids": torch.randint(0, 50, (8,), generator=gen),
                "labels": torch.tensor(i % 2),
            }

    class LeakyTrainer(transformers.Trainer):
        def compute_loss(
            self,
            model: torch.nn.Module,
            inputs: dict[str, object],
            return_outputs: bool = False,
            num_items_in_batch: torch.Tensor | int | None = None,
        ) -> torch.Tensor | tuple[torch.Tensor, object]:
            outputs = model(input_ids=inputs["input_ids"])
            logits = leaky(leak, outputs.logits)
            labels = inputs["labels"]
            assert isinstance(labels, torch.Tensor)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            return (loss, outputs) if return_outputs else loss

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
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    cb = GraphLeakCallback(warmup=3)
    trainer = LeakyTrainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=Tokens(),
        callbacks=[cb],
    )
    with pytest.raises(GraphLeakError) as info:
        trainer.train()
    _check(str(info.value), leak)
