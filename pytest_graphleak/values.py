"""The value checks that every place taking a setting shares: one per type of value.

The options table (``options.py``), the tracker, the loops, the marker's ``world_size``,
``check_distributed()`` and the ``graphleak`` command all check their numbers and words
here, so that the same mistake reads the same everywhere: ``steps must be an integer >= 1,
got 0``. Bottom layer: no import of the rest of the package.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pytest_graphleak.exceptions import OptionError  # defined there, raised here


def _named(key: str, text: str) -> str:
    return f"{key} {text}" if key else text


def int_at_least(key: str, value: object, minimum: int) -> int:
    """``value`` when it is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OptionError(_named(key, f"must be an integer >= {minimum}, got {value!r}"))
    return value


def optional_int_at_least(key: str, value: object, minimum: int) -> int | None:
    """None (the configured value), or an int >= ``minimum``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OptionError(_named(key, f"must be an integer >= {minimum} (or None), got {value!r}"))
    return value


def flag(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise OptionError(_named(key, f"must be True or False, got {value!r}"))
    return value


def one_of(key: str, value: object, choices: Sequence[str]) -> str:
    if value not in choices:
        raise OptionError(_named(key, f"must be one of {', '.join(choices)}, got {value!r}"))
    return str(value)


def seconds(key: str, value: object) -> float:
    """A duration in seconds, > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise OptionError(_named(key, f"must be a number of seconds > 0, got {value!r}"))
    return float(value)


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def byte_size(key: str, value: object) -> float:
    """A number of bytes >= 0, or a text such as 512KiB or 2MiB."""
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _BYTE_UNITS:
            raise OptionError(
                f"{key} must be a size in bytes such as 1048576, 512KiB or 2MiB, got {value!r}"
            )
        return float(match.group(1)) * _BYTE_UNITS[unit]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise OptionError(f"{key} must be a number of bytes >= 0 (or '2MiB'), got {value!r}")
    return float(value)


def holder_names(key: str, value: object) -> tuple[str, ...]:
    """Dotted names of holders (``--graphleak-outlive-keep``): "a.b,c.d", a TOML list, or
    ini lines split as shell words; ``*`` and ``?`` match any text."""
    if isinstance(value, str):
        value = [value]
    if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
        raise OptionError(
            f"{key} must be dotted holder names like 'mypkg.cache.CACHE', got {value!r}"
        )
    names = tuple(part.strip() for v in value for part in v.split(",") if part.strip())
    bad = [name for name in names if not re.fullmatch(r"[\w.*?\[\]]+", name)]
    if bad:
        raise OptionError(
            f"{key}: {', '.join(map(repr, bad))} is not a dotted name "
            "(module.NAME, module.Class.NAME or a fixture's name; * and ? match any text)"
        )
    return names


def file_path(key: str, value: object) -> str:
    """A file path, not empty (stripped)."""
    if not isinstance(value, str) or not value.strip():
        raise OptionError(f"{key} must be a file path, got {value!r}")
    return value.strip()


# -- text (command line, ini file) -> Python value, by the option's type; its value check
# then names a bad text. Sizes and names are parsed by their value checks.
def _text_int(text: str) -> object:
    try:
        return int(text.strip())
    except ValueError:
        return text


_BOOL_TEXT = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}
_FROM_TEXT: dict[str, Callable[[str], object]] = {
    "int": _text_int,
    "choice": str.strip,
    "path": str.strip,
    "bool": lambda text: _BOOL_TEXT.get(text.strip().lower(), text),
}


def from_text(kind: str, text: str) -> object:
    """``text`` (from a command line or an ini file) as an option of type ``kind`` takes
    it: an int or a bool where it reads as one, a choice or a path stripped; else the
    text itself, for the option's value check to read or refuse."""
    return _FROM_TEXT.get(kind, str)(text)
