"""Models learn: a tiny char transformer and a truncated-BPTT RNN lower their loss on the
built-in text; SGD (momentum) and Adam follow torch's updates exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import minigrad as mg
from minigrad import functional as F
from minigrad.data import TEXT, CharVocab, batches


def test_char_transformer_loss_falls() -> None:
    rng = np.random.default_rng(0)
    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    model = mg.nn.TinyTransformer(
        vocab.size, d_model=32, n_heads=4, n_layers=1, block_size=16, rng=rng
    )
    opt = mg.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(120):
        x, y = batches(ids, 16, 16, rng)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert first > np.log(vocab.size) - 0.5  # starts near chance
    assert last < first - 1.0, (first, last)


def test_rnn_truncated_bptt_loss_falls() -> None:
    rng = np.random.default_rng(1)
    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    cell = mg.nn.RNNCell(vocab.size, 32, rng=rng)
    head = mg.nn.Linear(32, vocab.size, rng=rng)
    opt = mg.optim.Adam([*cell.parameters(), *head.parameters()], lr=1e-2)
    emb = np.eye(vocab.size, dtype=np.float32)
    batch, chunk_len = 8, 10
    starts = rng.integers(0, len(ids) - 400, size=batch)
    h = None
    losses = []
    for chunk in range(40):  # the hidden state runs on through 40 consecutive chunks
        pos = starts + chunk * chunk_len
        step_losses = []
        for t in range(chunk_len):
            h = cell(mg.Tensor(emb[ids[pos + t]]), h)
            step_losses.append(F.cross_entropy(head(h), ids[pos + t + 1]))
        loss = mg.stack(step_losses).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert h is not None
        h.unchain_backward()  # truncate: the next chunk starts from a leaf
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses


def _torch_and_minigrad_runs(make_opts: Any, steps: int = 10) -> tuple[list[np.ndarray], list[Any]]:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((4, 3))
    b0 = rng.standard_normal(3)
    x = rng.standard_normal((6, 4))
    y = rng.standard_normal((6, 3))
    mw, mb = mg.Tensor(w0.copy(), requires_grad=True), mg.Tensor(b0.copy(), requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    tb = torch.tensor(b0, requires_grad=True)
    m_opt, t_opt = make_opts([mw, mb], [tw, tb])
    for _ in range(steps):
        loss = F.mse_loss((mg.Tensor(x) @ mw + mb).tanh(), y)
        m_opt.zero_grad()
        loss.backward()
        m_opt.step()
        t_loss = torch.nn.functional.mse_loss(
            (torch.from_numpy(x) @ tw + tb).tanh(), torch.from_numpy(y)
        )
        t_opt.zero_grad()
        t_loss.backward()
        t_opt.step()
        assert loss.item() == pytest.approx(t_loss.item(), rel=1e-9)
    return [mw.numpy(), mb.numpy()], [tw.detach().numpy(), tb.detach().numpy()]


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("SGD", {"lr": 0.1}),
        ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
        ("SGD", {"lr": 0.1, "momentum": 0.5, "dampening": 0.3}),
        ("Adam", {"lr": 0.05}),
        ("Adam", {"lr": 0.05, "betas": (0.8, 0.99), "weight_decay": 0.1}),
    ],
)
def test_optimizer_matches_torch(name: str, kwargs: dict[str, Any]) -> None:
    def make(mparams: list[mg.Tensor], tparams: list[Any]) -> tuple[Any, Any]:
        import torch

        return getattr(mg.optim, name)(mparams, **kwargs), getattr(torch.optim, name)(
            tparams, **kwargs
        )

    mine, theirs = _torch_and_minigrad_runs(make)
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_zero_grad_set_to_none_false_keeps_zero_arrays() -> None:
    w = mg.Tensor(np.ones(2), requires_grad=True)
    opt = mg.optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and w.grad.numpy().tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None
    opt.step()  # a parameter without grad is skipped
    assert w.numpy().tolist() == [1.0, 1.0]


def test_demo_runs_and_shows_leak_then_flat(capsys: pytest.CaptureFixture[str]) -> None:
    from minigrad import demo

    assert demo.main(["--steps", "12", "--every", "4"]) == 0
    out = capsys.readouterr().out
    assert (
        "Step    4 | Loss" in out
        and "| alive TensorImpl=" in out
        and "| created TensorImpl=" in out
    )
    assert "=== leaky:" in out and "(LEAK: grows every step)" in out
    assert "=== fixed:" in out and "(flat)" in out
