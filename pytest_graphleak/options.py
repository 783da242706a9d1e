"""The one declaration of every graphleak option.

``OPTIONS`` is the declaration: one ``Option`` per setting with its name (``key``), its
``type`` (int, bool, size, names, choice or path), its ``default``, one ``help`` text and
``applies``, the places (``PLACES``) it can be given: ``"pytest"`` (a ``--graphleak-*``
flag and its ini twin, typed for pytest's ini reader where the running pytest supports
it), ``"marker"`` (``@pytest.mark.no_graph_growth``), ``"check"`` (``check()``,
``graphleak.check()`` and both ``check_distributed()``: ``CheckOptions``; the framework
callbacks take the same keywords but ``diagnose``: ``CallbackOptions``), ``"track"``
(``track()`` / ``graphleak.track()``: ``TrackOptions``) and ``"command"`` (a flag of
``graphleak check``, ``command_flag``). The flags and ini keys, the ``--markers`` line,
the accepted keywords, the ``graphleak check`` flags and the options reference page are
generated from this table; the TypedDicts exist for type checkers (a test holds them to
the table).

``settings.py`` resolves them into ``Settings`` (precedence, where each value came from).

Flags are registered with ``default=None`` so that an absent flag never hides its ini
twin (a ``store_true`` flag defaulting to False would always win over the ini file).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from pytest_graphleak.exceptions import OptionError as OptionError  # options.OptionError
from pytest_graphleak.probes import PROBE_NAMES
from pytest_graphleak.values import (
    byte_size,
    file_path,
    flag,
    from_text,
    holder_names,
    int_at_least,
    one_of,
)
from pytest_graphleak.verdict import FEWEST_STEPS, steps_to_catch

DEFAULT_STEPS = 16
DEFAULT_WARMUP = 3
DEFAULT_RSS_TOLERANCE = 1024 * 1024  # bytes per step; see README "How the verdict decides"
#: ``--graphleak-github``: the GitHub Actions gate (``report/github.py``)
GITHUB_MODES = ("auto", "on", "off")
#: ``--graphleak-verify-fix``: try each fix by re-running the step (``diagnose/fix_verify``).
VERIFY_FIX_MODES = ("on", "off")

#: ``--graphleak-start-scan``: how a check finds what was alive before it
#: (``engine/tracker.Sampler.begin``).
START_SCANS = ("roots", "heap")

#: Where an option can be given (see the module docstring).
PLACES = ("pytest", "marker", "check", "track", "command")


# -- value checks: Python value (from a marker, a call or a typed ini value) -> normalised
# (the shared ones in ``values``; probe names are the table's own)
def _int_at_least(minimum: int) -> Callable[[str, object], int]:
    return lambda key, value: int_at_least(key, value, minimum)


_bool = flag


def _probes(key: str, value: object) -> tuple[str, ...] | None:
    # "torch,gc", ["torch", "gc"] (a marker, a TOML list) and ["torch,gc"] (an ini line
    # split as shell words) all name the same probes.
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = [part.strip() for v in value for part in v.split(",") if part.strip()]
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


def _one_of(choices: Sequence[str]) -> Callable[[str, object], str]:
    return lambda key, value: one_of(key, value, choices)


OUTLIVE_MODES = ("warn", "fail", "off")
#: ``--graphleak-outlive-sites``: how the audit finds where a kept torch graph was made
OUTLIVE_SITES = ("off", "rerun")


@dataclass(frozen=True)
class Option:
    key: str  # the Settings field and the marker / call keyword
    type: str  # int, bool, size, names, choice or path: how text is read, the ini type
    default: Any
    help: str  # one text for the flag, the ini key and the reference page
    applies: frozenset[str]  # a subset of PLACES ("command": when command_flag is set)
    flag: str  # pytest command line
    ini: str  # ini file key, also the flag's argparse dest
    check: Callable[[str, object], Any]
    metavar: str | None = None  # None: a flag without a value
    flag_value: Any = True  # what an argument-less flag sets
    command_flag: str | None = None  # the `graphleak check` flag

    def applies_to(self, place: str) -> bool:
        return place in self.applies or (place == "command" and self.command_flag is not None)

    def parse(self, raw: object, label: str) -> Any:
        """``raw`` (text, or a typed ini value) checked; errors say ``invalid {label}``."""
        value = from_text(self.type, raw) if isinstance(raw, str) else raw
        try:
            return self.check(self.key, value)
        except OptionError as exc:
            raise OptionError(f"invalid {label}: {exc}") from None


_PER_CHECK = frozenset({"pytest", "marker", "check", "track"})

OPTIONS: tuple[Option, ...] = (
    Option(
        "enabled",
        "bool",
        False,
        "run @pytest.mark.no_graph_growth tests warmup+steps times and fail them when "
        "tensors, graph nodes, cyclic garbage or memory grow (default: off)",
        frozenset({"pytest"}),
        "--graphleak",
        "graphleak",
        _bool,
    ),
    Option(
        "steps",
        "int",
        DEFAULT_STEPS,
        f"measured steps per checked test, after warmup (default: {DEFAULT_STEPS}; "
        f"{steps_to_catch(3)} or more catch a leak of one object every third step, "
        f"{steps_to_catch(5)} or more every fifth; fewer than {FEWEST_STEPS}: no "
        "verdict, the check is unmeasured)",
        _PER_CHECK,
        "--graphleak-steps",
        "graphleak_steps",
        _int_at_least(1),
        metavar="N",
        command_flag="--steps",
    ),
    Option(
        "warmup",
        "int",
        DEFAULT_WARMUP,
        f"unmeasured warmup steps before the measured ones (default: {DEFAULT_WARMUP})",
        _PER_CHECK,
        "--graphleak-warmup",
        "graphleak_warmup",
        _int_at_least(0),
        metavar="N",
        command_flag="--warmup",
    ),
    Option(
        "rss_tolerance",
        "size",
        float(DEFAULT_RSS_TOLERANCE),
        "process RSS (and CUDA reserved) growth per step that is still allocator noise, "
        "in bytes or with a unit like 512KiB or 2MiB (default: 1MiB)",
        _PER_CHECK,
        "--graphleak-rss-tolerance",
        "graphleak_rss_tolerance",
        byte_size,
        metavar="SIZE",
        command_flag="--rss-tolerance",
    ),
    Option(
        "probes",
        "names",
        None,
        f"probes to sample among {', '.join(PROBE_NAMES)} (comma-separated, or a list in "
        "an ini/TOML file), or 'all' (default: all whose library is already imported)",
        _PER_CHECK,
        "--graphleak-probes",
        "graphleak_probes",
        _probes,
        metavar="NAMES",
        command_flag="--probes",
    ),
    Option(
        "start_scan",
        "choice",
        "roots",
        "how a check finds the tensors alive before its first step, whose graphs can grow "
        "in place (total += loss): 'roots' walks what the test reaches (fixture values, "
        "self, the step's closure and globals, the user's modules) and records the tensors "
        "the warmup steps pass to torch operations (with warmup=0: no recording, and past "
        "100k objects the walk falls back to 'heap'); 'heap' scans every object, O(heap) "
        "per check: needed only for a tensor the walk does not reach (a library's globals, "
        "past its limit) that no warmup step passes to a torch operation (default: roots)",
        _PER_CHECK,
        "--graphleak-start-scan",
        "graphleak_start_scan",
        _one_of(START_SCANS),
        metavar="roots|heap",
        command_flag="--start-scan",
    ),
    Option(
        "diagnose",
        "bool",
        True,
        "turn off the diagnosis of each leak (its referrer chain and creation sites), "
        "as the ini key set to false does: the failure then names the pattern from the "
        "counts alone (default: every leak is diagnosed)",
        _PER_CHECK,
        "--graphleak-no-diagnose",
        "graphleak_diagnose",
        _bool,
        flag_value=False,
        command_flag="--no-diagnose",
    ),
    Option(
        "verify_fix",
        "choice",
        "on",
        "try each leak's fix before printing it: the step re-run a few more times with "
        "the change applied in memory (no file is written), the first change under "
        "which nothing grows printed as verified (the outlive audit's findings with "
        "--graphleak-outlive-sites=rerun: the test run once more per change); 'off' "
        "prints the advice marked not verified (default: on)",
        frozenset({"pytest"}),
        "--graphleak-verify-fix",
        "graphleak_verify_fix",
        _one_of(VERIFY_FIX_MODES),
        metavar="on|off",
        command_flag="--verify-fix",
    ),
    Option(
        "warn_only",
        "bool",
        False,
        "report leaks (warning, summary, reports) without failing the tests",
        frozenset({"pytest"}),
        "--graphleak-warn-only",
        "graphleak_warn_only",
        _bool,
    ),
    Option(
        "outlive",
        "choice",
        "warn",
        "with --graphleak, audit every test (marked or not) after its teardown for autograd "
        "graphs it made that are still alive: 'warn' (GraphOutliveWarning), 'fail' (an "
        "error at the test's teardown) or 'off' (default: warn)",
        frozenset({"pytest"}),
        "--graphleak-outlive",
        "graphleak_outlive",
        _one_of(OUTLIVE_MODES),
        metavar="warn|fail|off",
    ),
    Option(
        "outlive_keep",
        "names",
        (),
        "holders meant to keep graphs past a test (a deliberate cache), which the outlive "
        "audit does not report: dotted names of module globals (mypkg.cache.CACHE), class "
        "attributes (tests.test_x.TestModel.cache) or fixtures (state); * and ? match any "
        "text; the object named is kept whatever alias reaches it (default: none)",
        frozenset({"pytest"}),
        "--graphleak-outlive-keep",
        "graphleak_outlive_keep",
        holder_names,
        metavar="NAMES",
    ),
    Option(
        "outlive_sites",
        "choice",
        "off",
        "how the outlive audit finds where a kept graph was made and stored: 'rerun' runs "
        "each test that left a graph alive once more (its function-scoped fixtures too), "
        "recording where torch made each tensor (created at) and which line stored it in "
        "its holder (stored at), and then once more for each change it tries as the fix "
        "(with fix verification on, docs/fixes.md); those runs are not reported and do "
        "not change the test's outcome, but what they do to module state and "
        "wider-scope fixtures happens again each time. 'off': minigrad's creation sites "
        "only, recorded while the test runs (default: off)",
        frozenset({"pytest"}),
        "--graphleak-outlive-sites",
        "graphleak_outlive_sites",
        _one_of(OUTLIVE_SITES),
        metavar="off|rerun",
    ),
    Option(
        "report",
        "path",
        None,
        "write a JSON report of every graphleak check to PATH (schema in the docs); an "
        "existing file is replaced only if it is a graphleak JSON report. Relative paths: "
        "to the current directory, or to an ini file's own directory",
        frozenset({"pytest"}),
        "--graphleak-report",
        "graphleak_report",
        file_path,
        metavar="PATH",
        command_flag="--json",
    ),
    Option(
        "html",
        "path",
        None,
        "write a self-contained HTML report (charts, culprit chains, graph drawings) of "
        "every graphleak check to PATH; existing files and relative paths as for the JSON "
        "report",
        frozenset({"pytest"}),
        "--graphleak-html",
        "graphleak_html",
        file_path,
        metavar="PATH",
        command_flag="--html",
    ),
    Option(
        "sarif",
        "path",
        None,
        "write a SARIF 2.1.0 log of every leak and outlive finding to PATH, for GitHub "
        "code scanning (github/codeql-action/upload-sarif): each on the line that stores "
        "the leaked object (else the line that created it), with its verified fix as a "
        "SARIF fix; existing files and relative paths as for the JSON report",
        frozenset({"pytest"}),
        "--graphleak-sarif",
        "graphleak_sarif",
        file_path,
        metavar="PATH",
        command_flag="--sarif",
    ),
    Option(
        "github",
        "choice",
        "auto",
        "on GitHub Actions: a workflow command (::error, or ::warning where the test "
        "passed) per leak and per unmeasured check, on the line that stores the leaked "
        "object (else the line that created it, else the test's), and a table of the "
        "checked tests appended to "
        "$GITHUB_STEP_SUMMARY; 'auto' (the default) when GITHUB_ACTIONS=true, 'on' always, "
        "'off' never",
        frozenset({"pytest"}),
        "--graphleak-github",
        "graphleak_github",
        _one_of(GITHUB_MODES),
        metavar="auto|on|off",
        command_flag="--github",
    ),
    Option(
        "baseline",
        "path",
        None,
        "a baseline file of known findings (docs: 'Adopting it on an existing suite'): "
        "a leak or outlive finding listed there is reported as known and fails nothing; "
        "a new one fails as without it; one listed and no longer found is reported as "
        "fixed since the baseline. Relative paths as for the JSON report",
        frozenset({"pytest"}),
        "--graphleak-baseline",
        "graphleak_baseline",
        file_path,
        metavar="FILE",
    ),
    Option(
        "baseline_update",
        "bool",
        False,
        "write the --graphleak-baseline file from this run's findings (each kept with its "
        "reason; entries of tests that did not run kept; fixed ones removed); the "
        "findings written read as known, so the run does not fail on them",
        frozenset({"pytest"}),
        "--graphleak-baseline-update",
        "graphleak_baseline_update",
        _bool,
    ),
)

OPTIONS_BY_KEY: dict[str, Option] = {option.key: option for option in OPTIONS}


def keywords(place: str) -> tuple[str, ...]:
    """The option keys that ``place`` (one of PLACES) accepts, in table order."""
    return tuple(option.key for option in OPTIONS if option.applies_to(place))


class _StepOptions(TypedDict, total=False):
    # None: the configured value.
    steps: int | None
    warmup: int | None
    rss_tolerance: float | str | None
    probes: str | Sequence[str] | None
    start_scan: str | None


class CheckOptions(_StepOptions, total=False):
    """Keywords of ``check()``, ``graphleak.check()``, ``check_distributed()`` and
    ``track()`` (None: the configured value)."""

    diagnose: bool | None


#: ``track()`` takes the same keywords (its ``steps`` is optional: without it the loop
#: is judged when the block exits); a name of its own so the two can part later.
TrackOptions = CheckOptions


class CallbackOptions(_StepOptions, total=False):
    """Keywords of the framework callbacks: ``check()``'s but ``diagnose``, and their own
    ``window`` (judge each window of that many steps), ``sample_every`` (in window mode,
    sample every that many steps; None: chosen from the steps' CPU time) and ``on_leak``."""

    window: int | None
    sample_every: int | None
    on_leak: Literal["raise", "warn"]


def add_flag(add: Callable[..., Any], name: str, dest: str, option: Option) -> None:
    """Add ``option``'s flag ``name`` (argparse ``dest``) with ``add`` (an argparse or
    pytest ``addoption``)."""
    if option.metavar is None:
        action = "store_true" if option.flag_value is True else "store_false"
        add(name, action=action, dest=dest, default=None, help=option.help)
    else:
        add(name, action="store", dest=dest, default=None, metavar=option.metavar, help=option.help)


# -- the graphleak check command -------------------------------------------------------
def add_command_flags(parser: Any) -> None:
    """The ``graphleak check`` flags, from the same table and help texts."""
    for option in OPTIONS:
        if option.command_flag is not None:
            add_flag(parser.add_argument, option.command_flag, option.key, option)


def marker_signature() -> str:
    """``steps=N, warmup=N, ...`` for the ``--markers`` line."""
    metavar = {"bool": "BOOL"}
    return ", ".join(
        f"{o.key}={o.metavar or metavar.get(o.type, 'VALUE')}"
        for o in OPTIONS
        if o.applies_to("marker")
    )
