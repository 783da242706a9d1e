"""What pytest itself keeps of a test's steps, released after each step.

During a test, pytest holds on to things a step hands it: every ``LogRecord`` (with its
``args``, ``extra`` fields and ``exc_info``) in the log-capture handlers that feed
``caplog`` and the report's "Captured log" section, every captured warning (the warnings
plugin's list, or ``recwarn``'s), and every ``record_property`` value. A step that logs
``log.warning("loss=%s", loss)`` would look like a leak, although the same loop outside
pytest is clean. So before each sample these entries are replaced by copies that keep
their text and drop the objects: a record's message is formatted (``getMessage()``), its
exception rendered to ``exc_text``; a warning keeps its category, text and location;
a property value becomes its ``str()``. Entries that hold only text and numbers are left
as they are.

Only pytest's own lists are touched, so a leak kept by the user's own logging handler or
list stays a leak: the user's handler keeps the original record, args and all.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

#: Values kept as they are: they refer to nothing a step could grow.
_PLAIN = (str, int, float, bool, bytes, type(None))

#: Attributes every LogRecord has; anything else came from ``extra=``.
_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _plain(value: object) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if type(value) in (tuple, list):
        return all(isinstance(item, _PLAIN) for item in value)  # type: ignore[attr-defined]
    if type(value) is dict:
        return all(isinstance(item, _PLAIN) for item in value.values())
    return False


def released_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` itself when it holds only text and numbers, else a copy that keeps its
    text (formatted message, rendered exception) and drops the objects."""
    extras = {k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS}
    if (
        isinstance(record.msg, str)
        and _plain(record.args)
        and not record.exc_info
        and all(_plain(value) for value in extras.values())
    ):
        return record
    copy = logging.makeLogRecord(record.__dict__)
    try:
        copy.msg = record.getMessage()
    except Exception:  # a bad format string: logging itself would have complained
        copy.msg = str(record.msg)
    copy.args = None
    if record.exc_info:
        if not copy.exc_text:
            copy.exc_text = logging.Formatter().formatException(record.exc_info)
        copy.exc_info = None
    for key, value in extras.items():
        if not _plain(value):
            setattr(copy, key, str(value))
    return copy


def released_warning(message: Any) -> Any:
    """A captured ``warnings.WarningMessage`` without references to the step's objects:
    the warning's text, category and location, no ``source``."""
    warning = message.message
    if message.source is None and (not isinstance(warning, Warning) or _plain(warning.args)):
        return message
    text = str(warning)
    category = message.category
    try:
        replacement: Warning = category(text)
    except Exception:  # a warning class with its own constructor: keep its type anyway
        replacement = category.__new__(category)
        replacement.args = (text,)
    return warnings.WarningMessage(
        replacement, category, message.filename, message.lineno, message.file, message.line
    )


def released_property(entry: Any) -> Any:
    """A ``record_property`` entry ``(name, value)`` with the value as text."""
    if not isinstance(entry, tuple) or len(entry) != 2 or _plain(entry[1]):
        return entry
    return (entry[0], str(entry[1]))


class PytestHeld:
    """The lists pytest keeps a test's objects in; ``release()`` after each step.

    Made when the test's call phase begins, when the active warnings-recording list is
    pytest's (the warnings plugin's, or ``recwarn``'s) and not one the step opens itself.
    The log-capture handlers are looked up at each release: pytest installs the call
    phase's handler after this object is made.
    """

    def __init__(self, item: Any) -> None:
        self._properties: list[Any] | None = getattr(item, "user_properties", None)
        self._warnings = _recording_list()
        #: id(list) -> entries already released, so each release is O(new entries)
        self._done: dict[int, int] = {}

    def release(self) -> None:
        for handler in _capture_handlers():
            self._release(handler.records, released_record)
        if self._warnings is not None:
            self._release(self._warnings, released_warning)
        if self._properties is not None:
            self._release(self._properties, released_property)

    def _release(self, entries: list[Any], release: Callable[[Any], Any]) -> None:
        start = self._done.get(id(entries), 0)
        if start > len(entries):  # cleared (caplog.clear()): start again
            start = 0
        for index in range(start, len(entries)):
            entries[index] = release(entries[index])
        self._done[id(entries)] = len(entries)

    def close(self) -> None:
        self._properties = None
        self._warnings = None
        self._done.clear()


def _capture_handlers() -> list[Any]:
    """pytest's log-capture handlers (``caplog`` and the report's captured log)."""
    try:
        from _pytest.logging import LogCaptureHandler
    except ImportError:  # pytest moved it: nothing to release
        return []
    return [h for h in logging.getLogger().handlers if isinstance(h, LogCaptureHandler)]


def _recording_list() -> list[Any] | None:
    """The list that ``warnings.catch_warnings(record=True)`` appends to right now (its
    ``_showwarnmsg_impl`` is that list's bound ``append``), or None."""
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    owner = getattr(impl, "__self__", None)
    return owner if type(owner) is list else None
