"""Repro ``fix_detach_breaks_cached_backward`` and issue 42 item 7: a ``functools`` cache
of graph-carrying results.

The cache keeps one result per distinct argument, so it is ``list-accumulation`` (a
container that grows by key), and its fix is to clear or bound the cache, never to
``.detach()`` what the step's backward runs through: applied, that fix makes the test
pass; the ``.detach()`` that the old fix asked for made the step raise.
"""

from __future__ import annotations

import pytest
from suite_helpers import FAST, failure_section, folded

from pytest_graphleak.result import Diagnosis, Link
from pytest_graphleak.words.fix import choose_fix

pytest_plugins = ["pytester"]
#: Imported before the in-process run, which must not be the first to load it.
torch = pytest.importorskip("torch")

_TEST = """
import functools

import pytest
import torch

model = torch.nn.Linear(8, 1)
step = [0]


@functools.{decorator}
def features(k):
    return model(torch.full((2, 8), float(k)))


@pytest.mark.no_graph_growth
def test_cached():
    step[0] += 1
    features(step[0]).sum().backward()
    {after}
"""


@pytest.mark.parametrize("decorator", ["lru_cache(maxsize=None)", "cache"])
def test_a_cache_of_graphs_is_list_accumulation_fixed_by_clearing_it(
    decorator: str, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_lru=_TEST.format(decorator=decorator, after="pass"))
    result = pytester.runpytest("--graphleak", *FAST)
    result.assert_outcomes(failed=1)
    text = folded(failure_section(result.stdout.str(), "test_cached"))
    assert "leaks: list-accumulation" in text, text
    assert "held by: global 'features' -> _lru_cache_wrapper -> dict[" in text, text
    # The change tried and verified: the cache cleared after the step's backward.
    assert "fix (verified: " in text, text
    assert "features(step[0]).sum().backward(); then features.cache_clear()" in text, text
    assert "store plain numbers" not in text and ".detach()" not in text, text
    # The fix applied (either of its two first ways): the test passes.
    pytester.makepyfile(test_lru=_TEST.format(decorator=decorator, after="features.cache_clear()"))
    pytester.runpytest("--graphleak", *FAST).assert_outcomes(passed=1)
    bounded = _TEST.format(decorator="lru_cache(maxsize=2)", after="pass")
    pytester.makepyfile(test_lru=bounded)
    pytester.runpytest("--graphleak", *FAST).assert_outcomes(passed=1)


def test_the_cache_fix_is_chosen_for_a_running_value_through_a_cache_too() -> None:
    """The advice (what a fix that cannot be tried says, a loop's) for a chain through
    a cache: never the running-total fix (``update it with .item() or .detach()
    values``), never ``.detach()``."""
    links = [
        Link("root", "global", name="encode"),
        Link("object", "_lru_cache_wrapper", edge="reference"),
        Link("container", "dict", edge="key", key="3", base="dict"),
        Link("tensor", "Tensor", shape=[2, 1], graph=True),
    ]
    for pattern in ("retained-grad-fn", "list-accumulation"):
        fix = choose_fix(Diagnosis(pattern, links=links))
        assert fix.startswith(
            "encode is a functools cache that keeps every result it "
            "returned, with its autograd graph, one per distinct "
            "argument: clear it once the step is done"
        ), fix
        assert "(encode.cache_clear())" in fix and ".item()" not in fix
