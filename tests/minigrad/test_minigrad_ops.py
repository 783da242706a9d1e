"""Every op's gradient against central finite differences, and against torch when installed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import minigrad as mg
from minigrad import functional as F
from minigrad import ops


@dataclass
class Case:
    name: str
    fn: Callable[..., mg.Tensor]  # minigrad
    shapes: tuple[tuple[int, ...], ...]
    torch_fn: Callable[..., Any] | None = None
    positive: bool = False  # inputs drawn from (0.5, 2) instead of N(0, 1)


IDX = np.array([2, 0, 2])
MASK = np.array([True, False, True, True])
TARGETS = np.array([1, 0, 3])
TOKENS = np.array([[0, 2], [2, 1]])
CASES = [
    Case("add", lambda a, b: a + b, ((3, 4), (3, 4)), lambda a, b: a + b),
    Case("add_broadcast", lambda a, b: a + b, ((3, 4), (4,)), lambda a, b: a + b),
    Case("add_broadcast_keepdim", lambda a, b: a + b, ((2, 3, 4), (2, 1, 4)), lambda a, b: a + b),
    Case("radd_scalar", lambda a: 2.5 + a, ((3,),), lambda a: 2.5 + a),
    Case("sub", lambda a, b: a - b, ((3, 4), (1, 4)), lambda a, b: a - b),
    Case("rsub_scalar", lambda a: 1.0 - a, ((3,),), lambda a: 1.0 - a),
    Case("mul", lambda a, b: a * b, ((3, 4), (3, 1)), lambda a, b: a * b),
    Case("mul_self", lambda a: a * a, ((5,),), lambda a: a * a),
    Case("div", lambda a, b: a / b, ((3, 4), (4,)), lambda a, b: a / b, positive=True),
    Case("rdiv_scalar", lambda a: 2.0 / a, ((3,),), lambda a: 2.0 / a, positive=True),
    Case("pow_scalar", lambda a: a**3, ((3, 2),), lambda a: a**3),
    Case("pow_tensor", lambda a, b: a**b, ((3,), (3,)), lambda a, b: a**b, positive=True),
    Case("rpow", lambda a: 2.0**a, ((3,),), lambda a: 2.0**a),
    Case("neg", lambda a: -a, ((3,),), lambda a: -a),
    Case("matmul", lambda a, b: a @ b, ((3, 4), (4, 2)), lambda a, b: a @ b),
    Case("matmul_batched", lambda a, b: a @ b, ((2, 3, 4), (2, 4, 5)), lambda a, b: a @ b),
    Case("matmul_bcast", lambda a, b: a @ b, ((2, 3, 4), (4, 5)), lambda a, b: a @ b),
    Case("matmul_vec_mat", lambda a, b: a @ b, ((4,), (4, 3)), lambda a, b: a @ b),
    Case("matmul_mat_vec", lambda a, b: a @ b, ((3, 4), (4,)), lambda a, b: a @ b),
    Case("matmul_vec_vec", lambda a, b: a @ b, ((4,), (4,)), lambda a, b: a @ b),
    Case(
        "linear",
        lambda x, w, b: F.linear(x, w, b),
        ((2, 3, 4), (5, 4), (5,)),
        lambda x, w, b: torch().nn.functional.linear(x, w, b),
    ),
    Case(
        "linear_nobias",
        lambda x, w: F.linear(x, w),
        ((3, 4), (5, 4)),
        lambda x, w: torch().nn.functional.linear(x, w),
    ),
    Case("sum_all", lambda a: a.sum(), ((3, 4),), lambda a: a.sum()),
    Case("sum_axis", lambda a: a.sum(axis=1), ((3, 4, 2),), lambda a: a.sum(dim=1)),
    Case(
        "sum_axes_keep",
        lambda a: a.sum(axis=(0, 2), keepdims=True),
        ((3, 4, 2),),
        lambda a: a.sum(dim=(0, 2), keepdim=True),
    ),
    Case("sum_neg_axis", lambda a: a.sum(axis=-1), ((3, 4),), lambda a: a.sum(dim=-1)),
    Case("mean_all", lambda a: a.mean(), ((3, 4),), lambda a: a.mean()),
    Case(
        "mean_axis_keep",
        lambda a: a.mean(axis=0, keepdims=True),
        ((3, 4),),
        lambda a: a.mean(dim=0, keepdim=True),
    ),
    Case("max_axis", lambda a: a.max(axis=1), ((3, 4),), lambda a: a.amax(dim=1)),
    Case("max_all", lambda a: a.max(), ((3, 4),), lambda a: a.amax()),
    Case("exp", lambda a: a.exp(), ((3, 4),), lambda a: a.exp()),
    Case("log", lambda a: a.log(), ((3, 4),), lambda a: a.log(), positive=True),
    Case("sqrt", lambda a: a.sqrt(), ((3, 4),), lambda a: a.sqrt(), positive=True),
    Case("tanh", lambda a: a.tanh(), ((3, 4),), lambda a: a.tanh()),
    Case("relu", lambda a: a.relu(), ((3, 4),), lambda a: a.relu()),
    Case("sigmoid", lambda a: a.sigmoid(), ((3, 4),), lambda a: a.sigmoid()),
    Case("reshape", lambda a: a.reshape(4, -1), ((2, 3, 2),), lambda a: a.reshape(4, -1)),
    Case("transpose_swap", lambda a: a.transpose(0, 2), ((2, 3, 4),), lambda a: a.transpose(0, 2)),
    Case("T", lambda a: a.T, ((2, 3),), lambda a: a.T),
    Case("permute", lambda a: a.permute(2, 0, 1), ((2, 3, 4),), lambda a: a.permute(2, 0, 1)),
    Case("index_int", lambda a: a[1], ((3, 4),), lambda a: a[1]),
    Case("index_slice", lambda a: a[:, 1:3], ((3, 4),), lambda a: a[:, 1:3]),
    Case("index_neg_step", lambda a: a[::-2], ((5,),), lambda a: a.flip(0)[::2]),
    Case("index_array_repeats", lambda a: a[IDX], ((4, 2),), lambda a: a[IDX]),
    Case("index_mixed", lambda a: a[IDX, 1:], ((4, 3),), lambda a: a[IDX, 1:]),
    Case("index_bool_mask", lambda a: a[MASK], ((4, 2),), lambda a: a[torch().from_numpy(MASK)]),
    Case("index_tensor", lambda a: a[mg.Tensor(IDX)], ((4,),), lambda a: a[IDX]),
    Case(
        "cat",
        lambda a, b: mg.cat([a, b], axis=1),
        ((2, 3), (2, 1)),
        lambda a, b: torch().cat([a, b], dim=1),
    ),
    Case(
        "stack",
        lambda a, b: mg.stack([a, b], axis=1),
        ((2, 3), (2, 3)),
        lambda a, b: torch().stack([a, b], dim=1),
    ),
    Case("softmax", lambda a: a.softmax(axis=-1), ((3, 4),), lambda a: a.softmax(dim=-1)),
    Case("softmax_axis0", lambda a: F.softmax(a, axis=0), ((3, 4),), lambda a: a.softmax(dim=0)),
    Case("log_softmax", lambda a: a.log_softmax(), ((3, 4),), lambda a: a.log_softmax(dim=-1)),
    Case(
        "cross_entropy",
        lambda a: F.cross_entropy(a, TARGETS),
        ((3, 4),),
        lambda a: torch().nn.functional.cross_entropy(a, torch().from_numpy(TARGETS)),
    ),
    Case(
        "cross_entropy_3d_sum",
        lambda a: F.cross_entropy(a, TOKENS, reduction="sum"),
        ((2, 2, 3),),
        lambda a: torch().nn.functional.cross_entropy(
            a.reshape(-1, 3), torch().from_numpy(TOKENS).reshape(-1), reduction="sum"
        ),
    ),
    Case(
        "mse_loss",
        lambda a, b: F.mse_loss(a, b),
        ((3, 4), (3, 4)),
        lambda a, b: torch().nn.functional.mse_loss(a, b),
    ),
    Case(
        "layer_norm",
        lambda x, w, b: F.layer_norm(x, w, b),
        ((2, 3, 5), (5,), (5,)),
        lambda x, w, b: torch().nn.functional.layer_norm(x, (5,), w, b),
    ),
    Case(
        "embedding",
        lambda w: F.embedding(w, TOKENS),
        ((3, 4),),
        lambda w: torch().nn.functional.embedding(torch().from_numpy(TOKENS), w),
    ),
    Case(
        "chain_reuse",
        lambda a, b: ((a * b).tanh() + a).sum(axis=0) * b[0],
        ((3, 2), (3, 2)),
        lambda a, b: ((a * b).tanh() + a).sum(dim=0) * b[0],
    ),
]


def torch() -> Any:
    import torch as _torch

    return _torch


def _inputs(case: Case, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if case.positive:
        return [rng.uniform(0.5, 2.0, s) for s in case.shapes]
    return [rng.standard_normal(s) for s in case.shapes]


def _projected(case: Case, arrays: list[np.ndarray], weights: np.ndarray | None) -> float:
    with mg.no_grad():
        out = case.fn(*[mg.Tensor(a) for a in arrays]).numpy()
    return float((out * weights).sum()) if weights is not None else float(out.sum())


def _analytic(case: Case, arrays: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    tensors = [mg.Tensor(a.copy(), requires_grad=True) for a in arrays]
    out = case.fn(*tensors)
    weights = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(weights)
    grads = []
    for t in tensors:
        assert t.grad is not None, f"{case.name}: no gradient reached an input"
        assert t.grad.shape == t.shape, f"{case.name}: grad {t.grad.shape} vs input {t.shape}"
        grads.append(t.grad.numpy())
    return weights, grads


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_matches_finite_differences(case: Case) -> None:
    arrays = _inputs(case)
    weights, grads = _analytic(case, arrays)
    eps = 1e-6
    for i, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i][j] += eps
            minus[i][j] -= eps
            numeric[j] = (_projected(case, plus, weights) - _projected(case, minus, weights)) / (
                2 * eps
            )
        np.testing.assert_allclose(grads[i], numeric, rtol=1e-5, atol=1e-6, err_msg=case.name)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_and_gradient_match_torch(case: Case) -> None:
    t = pytest.importorskip("torch")
    assert case.torch_fn is not None
    arrays = _inputs(case)
    weights, grads = _analytic(case, arrays)
    tt = [t.tensor(a, dtype=t.float64, requires_grad=True) for a in arrays]
    out = case.torch_fn(*tt)
    with mg.no_grad():
        expected = case.fn(*[mg.Tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-7, atol=1e-9)
    out.backward(t.from_numpy(np.asarray(weights, dtype=np.float64)))
    for g, ti in zip(grads, tt, strict=True):
        np.testing.assert_allclose(g, ti.grad.numpy(), rtol=1e-7, atol=1e-9, err_msg=case.name)


def test_float32_is_the_default_and_is_kept() -> None:
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2.0 + 1).exp().sum()
    y.backward()
    assert x.dtype == np.float32 and y.dtype == np.float32 and x.grad is not None
    assert x.grad.dtype == np.float32


def test_log_softmax_and_cross_entropy_are_stable_for_huge_logits() -> None:
    logits = mg.Tensor(np.array([[1000.0, 0.0, -1000.0], [0.0, 5000.0, 1.0]]), requires_grad=True)
    loss = F.cross_entropy(logits, np.array([0, 2]))
    loss.backward()
    assert np.isfinite(loss.item()) and loss.item() == pytest.approx(2499.5, rel=1e-6)
    assert logits.grad is not None and np.isfinite(logits.grad.numpy()).all()
    assert np.isfinite(logits.log_softmax().numpy()).all()


def test_cross_entropy_rejects_bad_targets() -> None:
    logits = mg.Tensor(np.zeros((2, 3)))
    with pytest.raises(IndexError, match="out of range"):
        F.cross_entropy(logits, np.array([0, 3]))
    with pytest.raises(TypeError, match="integer class indices"):
        F.cross_entropy(logits, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="2 rows of logits"):
        F.cross_entropy(logits, np.array([0, 1, 2]))


def test_unsupported_operand_is_named() -> None:
    with pytest.raises(TypeError, match="unsupported operand of type str"):
        mg.Tensor([1.0]) + "x"


def test_unbroadcast_sums_added_and_stretched_axes() -> None:
    g = np.ones((2, 3, 4))
    assert ops.unbroadcast(g, (4,)).tolist() == [6.0] * 4
    assert ops.unbroadcast(g, (3, 1)).shape == (3, 1)
    assert ops.unbroadcast(g, (3, 1))[0, 0] == 8.0
    assert ops.unbroadcast(g, ()).item() == 24.0
