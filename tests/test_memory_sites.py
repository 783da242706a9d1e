"""``created at:`` for memory-growth names what makes the growing object."""

from __future__ import annotations

import pytest

import pytest_graphleak
from pytest_graphleak.report.text import render_text

torch = pytest.importorskip("torch")


def test_memory_growth_names_the_line_that_makes_what_grows() -> None:
    """Not the lines every step runs (backward, optimizer.step(), zero_grad), which also
    allocate: the torch.cat that rebuilds the kept buffer."""
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.Adam(model.parameters())
    kept = {"buf": torch.zeros(0, 8)}

    def step() -> None:
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept["buf"] = torch.cat([kept["buf"], x[:2]])

    result = pytest_graphleak.check(step, steps=10)
    d = result.diagnosis
    assert d is not None and d.pattern == "memory-growth", render_text(result)
    assert [s.line for s in d.sites] == ['kept["buf"] = torch.cat([kept["buf"], x[:2]])'], d.sites
    assert d.chain[:2] == ["local 'kept'", "dict['buf']"], d.chain
