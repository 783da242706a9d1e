"""No false alarm from pytest's own machinery (issue 13, item 2): what pytest keeps of a
step (captured log records and their args, ``extra`` fields and tracebacks, captured
warnings, ``recwarn``, ``record_property`` values) is released between steps, while the
same objects kept by the user's own handler or list are still a leak.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings

import pytest
from suite_helpers import FAST

from pytest_graphleak.plugin.pytest_held import released_property, released_record, released_warning

HELD_BY_PYTEST = '''
import logging
import warnings
import pytest
import minigrad as mg

log = logging.getLogger("train")
W = mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True)

def loss():
    return ((W * 2.0).tanh()).sum()

class Kept(logging.Handler):
    """The user's own handler: it keeps every record, args and all."""
    def __init__(self):
        super().__init__()
        self.records = []
    def emit(self, record):
        self.records.append(record)

KEPT = Kept()

class LossWarning(UserWarning):
    pass

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_log_args():
    log.warning("loss=%s", loss())

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_log_object_message_and_extra():
    value = loss()
    log.warning(value, extra={"loss": value})

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_log_exception():
    value = loss()
    try:
        raise ValueError("bad loss")
    except ValueError:
        log.exception("step failed with %s", value)

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_captured_warning():
    value = loss()
    warnings.warn(LossWarning("loss", value))
    warnings.warn("with a source", ResourceWarning, source=value)

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_recwarn(recwarn):
    warnings.simplefilter("always")  # recwarn's own filters would show it once
    warnings.warn(LossWarning("loss", loss()))

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_record_property(record_property):
    record_property("loss", loss())

def test_caplog_keeps_the_text(caplog, graphleak):
    caplog.set_level(logging.INFO)
    graphleak.check(lambda: log.info("loss=%s", loss()), steps=8, warmup=2)
    assert len(caplog.records) == 10
    assert all(r.getMessage().startswith("loss=") for r in caplog.records)
    assert caplog.text.count("loss=") == 10

@pytest.mark.no_graph_growth(steps=8, warmup=2)
def test_users_own_handler_leaks():
    log.addHandler(KEPT)
    try:
        log.warning("loss=%s", loss())
    finally:
        log.removeHandler(KEPT)

def test_users_own_warning_list_leaks(graphleak):
    with warnings.catch_warnings(record=True) as kept:
        warnings.simplefilter("always")
        graphleak.check(lambda: warnings.warn(LossWarning("loss", loss())), steps=8, warmup=2)
    assert kept
'''


def test_pytest_held_objects_are_released_and_the_users_are_not(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("minigrad")
    pytester.makepyfile(test_held=HELD_BY_PYTEST)
    result = pytester.runpytest_subprocess(
        *FAST, "--graphleak", "-W", "always", "--graphleak-report=r.json", "-rA"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    document = json.loads((pytester.path / "r.json").read_text())
    statuses = {test["nodeid"].split("::")[1]: test["status"] for test in document["tests"]}
    assert statuses == {
        "test_log_args": "clean",
        "test_log_object_message_and_extra": "clean",
        "test_log_exception": "clean",
        "test_captured_warning": "clean",
        "test_recwarn": "clean",
        "test_record_property": "clean",
        "test_caplog_keeps_the_text": "clean",
        "test_users_own_handler_leaks": "leaked",
        "test_users_own_warning_list_leaks": "leaked",
    }, result.stdout.str()
    result.assert_outcomes(passed=7, failed=2)
    # the captured log section still shows every record's text
    result.stdout.fnmatch_lines(["*WARNING*train:test_held.py*loss=*"])


def _record(*args: object, **kwargs: object) -> logging.LogRecord:
    return logging.getLogger("t").makeRecord("t", logging.WARNING, "f.py", 3, *args, **kwargs)  # type: ignore[arg-type]


class Boxed:
    def __str__(self) -> str:
        return "boxed!"


def test_a_plain_record_is_kept_as_it_is() -> None:
    record = _record("loss=%s %d", ("a", 3), None)
    assert released_record(record) is record


def test_a_record_keeps_its_text_and_drops_its_objects() -> None:
    box = Boxed()
    try:
        raise ValueError("bad")
    except ValueError:
        exc_info = sys.exc_info()
    record = _record("loss=%s", (box,), exc_info, extra={"payload": box, "step": 3})
    copy = released_record(record)
    assert copy is not record
    assert copy.getMessage() == "loss=boxed!"
    assert copy.args is None and copy.exc_info is None
    assert copy.exc_text is not None and "ValueError: bad" in copy.exc_text
    assert copy.payload == "boxed!" and copy.step == 3  # type: ignore[attr-defined]
    assert record.args == (box,)  # the original, which other handlers may keep, is intact
    assert logging.Formatter("%(message)s").format(copy).startswith("loss=boxed!\nTraceback")


def test_a_warning_keeps_category_text_and_place() -> None:
    box = Boxed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(UserWarning("loss", box), stacklevel=1)
        warnings.warn("plain text", stacklevel=1)
    held, plain = caught
    copy = released_warning(held)
    assert copy.category is UserWarning and str(copy.message) == str(held.message)
    assert (copy.filename, copy.lineno) == (held.filename, held.lineno)
    assert box not in copy.message.args
    assert released_warning(plain) is plain


def test_a_property_value_becomes_text() -> None:
    assert released_property(("loss", Boxed())) == ("loss", "boxed!")
    plain = ("loss", 0.5)
    assert released_property(plain) is plain
