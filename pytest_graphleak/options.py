"""The option table: every setting's CLI flag, ini twin, one help text and validation.

Precedence: marker / call keyword > command line > ini file > default. Every bad
value fails with a message that names the setting, the value and where it came from
("command line option --graphleak-steps", "ini option graphleak_steps in tox.ini",
"@pytest.mark.no_graph_growth on tests/test_x.py::test_step", ...).

Flags are registered with ``default=None`` so that an absent flag never hides its ini
twin (a ``store_true`` flag defaulting to False would always win over the ini file).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.probes import PROBE_NAMES
from pytest_graphleak.tracker import START_SCANS

DEFAULT_STEPS = 16
DEFAULT_WARMUP = 3
DEFAULT_RSS_TOLERANCE = 1024 * 1024  # bytes per step; see README "How the verdict decides"


class OptionError(ValueError):
    """A setting with a bad value; the message says which, what and where from."""


# -- value checks: Python value (from a marker or a call) -> normalised value -------------
def _int_at_least(minimum: int) -> Callable[[str, object], int]:
    def check(key: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(f"{key} must be an integer >= {minimum}, got {value!r}")
        if value < minimum:
            raise OptionError(f"{key} must be an integer >= {minimum}, got {value}")
        return value

    return check


def _bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"{key} must be True or False, got {value!r}")
    return value


_BYTE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
}  # fmt: skip


def _byte_size(key: str, value: object) -> float:
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


def _probes(key: str, value: object) -> tuple[str, ...] | None:
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise OptionError(f"{key} must be probe names like 'torch,gc', got {value!r}")
    if names in (["all"], ["auto"]):
        return None
    unknown = [name for name in names if name not in PROBE_NAMES]
    if unknown or not names:
        raise OptionError(
            f"{key}: unknown probe {', '.join(map(repr, unknown)) or 'list (empty)'}; "
            f"choose from {', '.join(PROBE_NAMES)} or 'all'"
        )
    return tuple(names)


def _start_scan(key: str, value: object) -> str:
    if value not in START_SCANS:
        raise OptionError(f"{key} must be one of {', '.join(START_SCANS)}, got {value!r}")
    return str(value)


# -- text (command line, ini file) -> Python value ---------------------------------------
def _text_int(text: str) -> object:
    try:
        return int(text.strip())
    except ValueError:
        return text  # the value check then names the bad text


def _text_bool(text: str) -> object:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    return text


def _text_as_is(text: str) -> object:
    return text


@dataclass(frozen=True)
class Option:
    key: str  # the Settings field and the marker / call keyword
    flag: str  # command line
    ini: str  # ini file key
    help: str  # one text for both
    check: Callable[[str, object], Any]
    from_text: Callable[[str], object]
    default: Any
    metavar: str | None = None  # None: a flag without a value
    flag_value: Any = True  # what an argument-less flag sets
    marker_keyword: bool = True  # accepted by the marker and by check()/track()


OPTIONS: tuple[Option, ...] = (
    Option(
        "enabled", "--graphleak", "graphleak",
        "run @pytest.mark.no_graph_growth tests warmup+steps times and fail them when "
        "tensors, graph nodes, cyclic garbage or memory grow (default: off)",
        _bool, _text_bool, False, marker_keyword=False,
    ),
    Option(
        "steps", "--graphleak-steps", "graphleak_steps",
        f"measured steps per checked test, after warmup (default: {DEFAULT_STEPS}; "
        "12 or more catch a leak of one object every third step)",
        _int_at_least(1), _text_int, DEFAULT_STEPS, metavar="N",
    ),
    Option(
        "warmup", "--graphleak-warmup", "graphleak_warmup",
        f"unmeasured warmup steps before the measured ones (default: {DEFAULT_WARMUP})",
        _int_at_least(0), _text_int, DEFAULT_WARMUP, metavar="N",
    ),
    Option(
        "rss_tolerance", "--graphleak-rss-tolerance", "graphleak_rss_tolerance",
        "process RSS (and CUDA reserved) growth per step that is still allocator noise, "
        "in bytes or with a unit like 512KiB or 2MiB (default: 1MiB)",
        _byte_size, _text_as_is, float(DEFAULT_RSS_TOLERANCE), metavar="SIZE",
    ),
    Option(
        "probes", "--graphleak-probes", "graphleak_probes",
        f"comma-separated probes to sample among {', '.join(PROBE_NAMES)}, or 'all' "
        "(default: all whose library is already imported)",
        _probes, _text_as_is, None, metavar="NAMES",
    ),
    Option(
        "start_scan", "--graphleak-start-scan", "graphleak_start_scan",
        "how a check finds the tensors alive before its first step, whose graphs can grow "
        "in place (total += loss): 'roots' walks what the test reaches (fixture values, "
        "self, the step's closure and globals, the user's modules) and records the tensors "
        "the warmup steps pass to torch operations (with warmup=0: no recording, and past "
        "100k objects the walk falls back to 'heap'); 'heap' scans every object, O(heap) "
        "per check: needed only for a tensor the walk does not reach (a library's globals, "
        "past its limit) that no warmup step passes to a torch operation (default: roots)",
        _start_scan, lambda text: text.strip(), "roots", metavar="roots|heap",
    ),
    Option(
        "warn_only", "--graphleak-warn-only", "graphleak_warn_only",
        "report leaks (warning, summary, reports) without failing the tests",
        _bool, _text_bool, False, marker_keyword=False,
    ),
    Option(
        "diagnose", "--graphleak-no-diagnose", "graphleak_diagnose",
        "diagnose each leak (referrer chain, creation sites; on by default): "
        "--graphleak-no-diagnose or graphleak_diagnose = false skips it, and the failure "
        "names the pattern from the counts alone",
        _bool, _text_bool, True, flag_value=False, marker_keyword=False,
    ),
)  # fmt: skip

OPTIONS_BY_KEY: dict[str, Option] = {option.key: option for option in OPTIONS}
MARKER_KEYWORDS: tuple[str, ...] = tuple(o.key for o in OPTIONS if o.marker_keyword)


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    rss_tolerance: float = float(DEFAULT_RSS_TOLERANCE)
    probes: tuple[str, ...] | None = None
    start_scan: str = "roots"
    warn_only: bool = False
    diagnose: bool = True
    #: key -> where the value came from, for error messages ("default" when absent).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    def override(self, values: Mapping[str, object], *, where: str) -> Settings:
        """Settings with ``values`` (marker or call keywords) applied, validated.

        ``where`` names the origin in errors, e.g. "@pytest.mark.no_graph_growth on
        tests/test_x.py::test_step".
        """
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in MARKER_KEYWORDS:
                raise OptionError(
                    f"{where}: unknown keyword argument {key!r}; "
                    f"expected one of {', '.join(MARKER_KEYWORDS)}"
                )
            if value is None:
                continue  # "use the configured value"
            try:
                changes[key] = OPTIONS_BY_KEY[key].check(key, value)
            except OptionError as exc:
                raise OptionError(f"{where}: {exc}") from None
        if not changes:
            return self
        sources = {**self.sources, **dict.fromkeys(changes, where)}
        return dataclasses.replace(self, **changes, sources=sources)


def add_options(parser: Any) -> None:
    """Register every option's CLI flag and ini twin with one help text."""
    group = parser.getgroup("graphleak", "autograd graph leaks (pytest-graphleak)")
    for option in OPTIONS:
        if option.metavar is None:
            action = "store_true" if option.flag_value is True else "store_false"
            group.addoption(option.flag, action=action, dest=_dest(option), default=None,
                            help=option.help)  # fmt: skip
        else:
            group.addoption(option.flag, action="store", dest=_dest(option), default=None,
                            metavar=option.metavar, help=option.help)  # fmt: skip
        parser.addini(option.ini, option.help, type="string", default="")


def _dest(option: Option) -> str:
    # The ini key doubles as the argparse dest: config.getoption("graphleak_warn_only").
    return option.ini


def settings_from(
    cli: Mapping[str, object | None], ini: Mapping[str, str], *, ini_file: str | None = None
) -> Settings:
    """Resolve every option: command line beats ini beats default. Pure, for testing.

    ``cli`` maps option keys to parsed argparse values (None: not given), ``ini`` maps
    ini keys to their raw text ("" or missing: not set).
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    in_file = f" in {ini_file}" if ini_file else ""
    for option in OPTIONS:
        raw = cli.get(option.key)
        if raw is not None:
            where = f"command line option {option.flag}"
            value = raw if option.metavar is None else option.from_text(str(raw))
            shown = "" if option.metavar is None else f"={raw}"
        elif ini.get(option.ini, "").strip():
            raw = ini[option.ini]
            where = f"ini option {option.ini}{in_file}"
            value = option.from_text(str(raw))
            shown = f" = {raw}"
        else:
            continue
        try:
            values[option.key] = option.check(option.key, value)
        except OptionError as exc:
            name = option.flag if where.startswith("command") else option.ini
            raise OptionError(f"invalid {name}{shown} (from {where}): {exc}") from None
        sources[option.key] = where
    return Settings(**values, sources=sources)


def settings_from_config(config: Any) -> Settings:
    """Resolve the settings of a pytest run; raises OptionError on a bad value."""
    cli = {option.key: config.getoption(_dest(option), None) for option in OPTIONS}
    ini = {option.ini: str(config.getini(option.ini) or "") for option in OPTIONS}
    inipath = getattr(config, "inipath", None)
    return settings_from(cli, ini, ini_file=str(inipath) if inipath else None)
