"""The keywords of the three framework callbacks (issue 15's fixed API): exactly
``steps``, ``warmup``, ``window``, ``rss_tolerance``, ``probes``, ``start_scan`` and
``on_leak``, and ``sample_every`` (issue 28); anything else is refused where the callback
is made, naming it."""

from __future__ import annotations

import importlib

import pytest

from pytest_graphleak.options import OPTIONS

ACCEPTED = {
    "steps": 5,
    "warmup": 2,
    "window": 10,
    "sample_every": 2,
    "rss_tolerance": "2MiB",
    "probes": "gc",
    "start_scan": "heap",
    "on_leak": "warn",
}
#: Keywords of check(), the fixture or the marker that a callback does not take.
REFUSED = {
    "diagnose": False,
    "name": "x",
    "settings": None,
    "raise_on_leak": True,
    "stepz": 3,
    "enabled": True,
    "warn_only": True,
    "report": "r.json",
    "html": "r.html",
    "github": "on",
    "outlive": "warn",
    "outlive_keep": 3,
    "outlive_sites": "rerun",
    "baseline": "b.json",
    "baseline_update": True,
    "verify_fix": "off",
    "sarif": "r.sarif",
}

CALLBACKS = [
    ("lightning", "lightning", "GraphLeakCallback"),
    ("transformers", "transformers", "GraphLeakCallback"),
    ("ignite", "ignite", "GraphLeakHandler"),
]


def _callback_class(framework: str, module: str, name: str) -> type:
    pytest.importorskip("torch")
    pytest.importorskip(framework)
    integration = importlib.import_module(f"pytest_graphleak.integrations.{module}")
    callback: type = getattr(integration, name)
    return callback


@pytest.mark.parametrize(("framework", "module", "name"), CALLBACKS, ids=[c[1] for c in CALLBACKS])
def test_each_callback_takes_exactly_its_keywords(framework: str, module: str, name: str) -> None:
    cls = _callback_class(framework, module, name)
    assert set(REFUSED).isdisjoint(ACCEPTED)
    assert {o.key for o in OPTIONS} <= set(ACCEPTED) | set(REFUSED)  # each option decided
    for key, value in ACCEPTED.items():
        callback = cls(**{key: value}, **({"window": 10} if key == "sample_every" else {}))
        assert callback.result is None and callback.results == []
    callback = cls(steps=5, warmup=2, rss_tolerance=1024, probes=["gc"], start_scan="roots")
    assert (callback.steps, callback.window, callback.on_leak) == (5, None, "raise")
    callback = cls(window=10, on_leak="warn")
    assert (callback.steps, callback.window, callback.on_leak) == (None, 10, "warn")
    for key, value in REFUSED.items():
        with pytest.raises(TypeError, match=rf"{name}\b.*'{key}'"):
            cls(**{key: value})
    with pytest.raises(TypeError):
        cls(5)  # keywords only


@pytest.mark.parametrize(("framework", "module", "name"), CALLBACKS, ids=[c[1] for c in CALLBACKS])
def test_bad_values_name_the_callback_and_the_keyword(
    framework: str, module: str, name: str
) -> None:
    cls = _callback_class(framework, module, name)
    where = rf"{name}\(\) \({module}\): "
    with pytest.raises(ValueError, match=where + "steps must be an integer >= 1, got 0"):
        cls(steps=0)
    with pytest.raises(ValueError, match=where + r"window must be an integer >= 2 \(or None\)"):
        cls(window=1)
    with pytest.raises(ValueError, match=where + "give steps= or window=, not both"):
        cls(steps=5, window=10)
    with pytest.raises(ValueError, match=where + "sample_every= applies to window mode only"):
        cls(sample_every=3)
    with pytest.raises(ValueError, match=where + "sample_every=6 leaves fewer than 2 samples"):
        cls(window=10, sample_every=6)
    with pytest.raises(ValueError, match=where + "on_leak must be 'raise' or 'warn', got 'x'"):
        cls(on_leak="x")
    with pytest.raises(ValueError, match=where + "probes: unknown probe 'nope'"):
        cls(probes="nope")
