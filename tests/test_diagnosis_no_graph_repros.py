"""The three leaks that were called ``retained-grad-fn`` although no graph node grew
(a fixture fetched with ``request.getfixturevalue``, predictions kept as ``.numpy()``
arrays, tensors held by a running thread), run as a user would: ``pytest --graphleak``
in a subprocess. None of them may be named ``retained-grad-fn``; each says what holds
it, or that nothing was found and why.
"""

from __future__ import annotations

import pytest
from suite_helpers import folded

pytest.importorskip("torch")

GETFIXTUREVALUE = """
import pytest
import torch


@pytest.fixture
def data():
    return {"keep": []}


@pytest.mark.no_graph_growth
def test_getfixturevalue(request):
    d = request.getfixturevalue("data")
    d["keep"].append(torch.ones(2, requires_grad=True) * 2)
"""

PREDS_NUMPY = """
import pytest
import torch


@pytest.fixture
def st():
    return {"m": torch.nn.Linear(16, 4), "preds": []}


@pytest.mark.no_graph_growth
def test_eval_collect_preds(st):
    with torch.no_grad():
        st["preds"].append(st["m"](torch.randn(64, 16)).numpy())
"""

THREAD = """
import threading
import pytest
import torch

STOP = threading.Event()


@pytest.mark.no_graph_growth
def test_thread_not_joined():
    def work():
        x = torch.randn(100)
        STOP.wait(10)
    threading.Thread(target=work, daemon=True).start()
"""


def test_no_text_says_retained_grad_fn_when_no_graph_node_grew(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_getfixturevalue=GETFIXTUREVALUE, test_preds_numpy=PREDS_NUMPY, test_thread=THREAD
    )
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:cacheprovider", "-q")
    text = result.stdout.str()
    assert result.parseoutcomes().get("failed") == 3, text[-3000:]
    assert "retained-grad-fn" not in text, text
    # one section per failure, its wrapped lines joined (the terminal wraps at 80 columns)
    sections = {s.split(None, 1)[0]: folded(s) for s in text.split("graphleak: ")[1:]}

    fetched = sections["test_getfixturevalue.py::test_getfixturevalue"]
    assert "leaks: list-accumulation" in fetched
    assert "held by: unknown root -> dict['keep'] -> list(" in fetched
    assert 'stored at: test_getfixturevalue.py:13 in test_getfixturevalue: d["keep"]' in fetched

    arrays = sections["test_preds_numpy.py::test_eval_collect_preds"]
    assert "leaks: list-accumulation" in arrays
    assert "-> ndarray.base -> Tensor(shape=(64, 4))" in arrays
    assert "carry no autograd graph" in arrays and "already detached" in arrays

    thread = sections["test_thread.py::test_thread_not_joined"]
    assert "leaks: memory-growth" in thread
    assert "local 'x' of work() at test_thread.py:" in thread
    assert "no graph node grew" in thread
