"""The data that flows between layers: series -> verdict -> diagnosis -> report.

Everything here is plain data (numbers, strings, lists, dicts): it never refers to a
measured object, so holding a result can never keep a tensor alive, and it travels
through JSON (reports, pytest-xdist) unchanged via ``to_dict`` / ``from_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_graphleak.drawing import Drawing
from pytest_graphleak.status import Status, check_status

#: In the reason of an outlive finding judged when a wider-scope fixture was torn down:
#: the graphs were made by an earlier test (``outlive/explain``, ``report/text``).
JUDGED_AT_FIXTURE_TEARDOWN = ", still alive at the teardown of "

#: Schema version of ``CheckResult.to_dict()``; bump on any incompatible change.
SCHEMA_VERSION = 1


@dataclass
class Growth:
    """One metric that the verdict judged to grow."""

    metric: str
    start: float  # value at the first measured step
    end: float  # value at the last measured step
    per_step: float  # robust growth per measured step (objects or bytes)


@dataclass
class Verdict:
    leaked: bool
    growths: list[Growth] = field(default_factory=list)
    #: First classification from the series alone; diagnosis may refine it.
    pattern: str | None = None
    #: One line saying why (for a clean verdict: why it is clean).
    reason: str = ""
    #: The slowest leak these steps catch for sure: one more object every k steps
    #: (``verdict.max_leak_period``); 0 when nothing was measured. A clean verdict means
    #: no exact count grew that fast; a slower leak can pass.
    slowest_leak_steps: int = 0


@dataclass(frozen=True)
class Declaration:
    """A metric as the check measured and judged it: its probe's declaration
    (``metrics.Metric``) and the growth per step the verdict let pass as noise. Renderers
    read this, so none looks a metric up again in the probe registry."""

    unit: str = "objects"  # "objects" | "bytes"
    #: "tensors" | "nodes" | "cycles" | "memory"; "" when not known (a result made by
    #: hand, or read from a report written before declarations were kept)
    counts: str = ""
    #: Judged with the noise tolerance (process RSS, an allocator's cache).
    noisy: bool = False
    #: Growth per step inside the noise: the check's RSS tolerance times the metric's
    #: ``noise_share`` for a noisy metric; 0 for an exact one (any sustained rise counts).
    tolerance: float = 0.0


@dataclass
class CreationSite:
    """Where leaked tensors or nodes were made, in user code."""

    filename: str
    lineno: int
    line: str  # the source line's text, stripped
    count: int  # how many leaked objects were made there in one step (in ``every`` steps)
    function: str = ""
    #: When the object was made inside a library called from this line: the library's
    #: own line, ``package/path/module.py:LINE`` (relative to its site-packages).
    via: str = ""
    #: Steps that ``count`` is over: 1, or k when the line acted fewer times than the k
    #: steps watched (a leak every third step: 1 in 3 steps, not "1 per step").
    every: int = 1


@dataclass
class Link:
    """One link of the holder chain as a typed fact (``Diagnosis.links``): what the object
    is and how the chain leaves it. The chain's labels (``Diagnosis.chain``) are its
    rendering; the words (``words/``) read these fields, never the labels.

    The first link is the root: ``kind`` "root", ``type`` the root's kind (``fixture``,
    ``self``, ``local``, ``closure``, ``global``, or another holder's), ``name`` the
    user's name for it (``st``, ``HISTORY``; "" when it has none)."""

    kind: str  # root | tensor | node | container | tensordict | object
    type: str  # the object's type name (``list``, ``Trainer``, ``Tensor``); a root's kind
    name: str = ""  # the root's name
    #: How the chain leaves this object: attribute, key, index, closure cell, ctx
    #: attribute, hook, generator frame, member, graph, reference ("" at the chain's end).
    edge: str = ""
    #: The attribute's or cell's name, the key's repr (``'rows'``) or the index.
    key: str = ""
    #: A container's built-in base (list, deque, dict, set, tuple, frozenset; "" none).
    base: str = ""
    length: int | None = None  # a container's length (``heap.containers.length``)
    shape: list[int] | None = None  # a tensor's shape
    graph: bool = False  # a tensor that carries an autograd graph
    #: A step can grow it in place: a list, deque, dict or set, a user's object with a
    #: ``__len__``, a TensorDict-like object (``heap.containers.growable``).
    grows: bool = False
    #: How many entries (or attributes) it gained while the diagnosis watched the steps:
    #: a step check's watched step, or (a lower bound) how many of a loop's recorded
    #: steps it holds objects of; 0: it did not grow, or no steps were watched (the
    #: outlive audit, the heap as it is).
    grew: int = 0
    #: An object's attributes that hold a graph-carrying tensor (a distribution's
    #: ``loc`` and ``scale``): what a fix must detach, all of it.
    carriers: list[str] = field(default_factory=list)

    @property
    def named(self) -> bool:
        """Is the link rendered as its type and the name the chain leaves it by
        (``dict['rows']``, ``Trainer.history``), not as a description (``list(len=3)``)?"""
        return self.edge in NAMED_EDGES


#: The edges a chain label names (``Link.named``).
NAMED_EDGES = frozenset(
    {
        "key",
        "attribute",
        "closure cell",
        "generator frame",
        "context value",
        "ctx attribute",
        "hook",
    }
)


@dataclass
class Fix:
    """The fix as it was tried (``Diagnosis.fix_tried``): verified by re-running the step
    with the change, or not, and why. A change that was tried and failed is never one."""

    #: What follows the fix label: the changed line (verified), else the advice.
    text: str
    #: The step was re-run with the change in place and nothing grew.
    verified: bool = False
    #: Why it is not verified, one clause ("the step of a track() loop cannot be re-run");
    #: None when verified.
    why_not: str | None = None
    #: The verified change as a unified diff of the user's file (its path relative to
    #: the working directory); None when not verified.
    diff: str | None = None
    #: How many steps ran with the change (warmup included).
    steps: int = 0
    #: How many more runs of the whole test the change was verified by (the outlive
    #: audit's re-run: it judges a test, not a step); 0 for a step's check.
    runs: int = 0
    #: The changed file (absolute) and the content hash it had when the change was
    #: verified: ``graphleak fix --apply`` writes only a file that still has it.
    filename: str = ""
    sha256: str = ""


@dataclass
class Diagnosis:
    pattern: str
    #: Shortest reference path from a root the user knows to a leaked object,
    #: one label per link, e.g. ["fixture 'state'", "dict['losses']", "list(len=12)",
    #: "Tensor(shape=(), grad_fn=MeanBackward0)"]. Empty when no root reaches it.
    chain: list[str] = field(default_factory=list)
    #: For a cycle: the objects of the cycle with edge labels, in order.
    cycle: list[str] = field(default_factory=list)
    sites: list[CreationSite] = field(default_factory=list)
    #: Free-form lines worth showing (e.g. "held from C++ by a saved-tensor pack hook").
    notes: list[str] = field(default_factory=list)
    #: The retained graph as plain data, when drawn (None: nothing to draw). The JSON
    #: document carries it as ``drawing`` and its Graphviz DOT text as ``dot``.
    drawing: Drawing | None = None
    #: Lines that put a leaked tensor into its holder during a diagnostic step
    #: (``losses.append(loss)``, ``self.total = self.total + loss``), most frequent first;
    #: ``count`` is how often the line changed the holder in one step.
    stored_at: list[CreationSite] = field(default_factory=list)
    #: The line to change when it is neither where a leaked tensor is stored nor where it
    #: is made: a cycle's hook or closure of the user's, at its ``def`` (or ``lambda``) line.
    change_at: list[CreationSite] = field(default_factory=list)
    #: A second holder the step leaks into (a note names it): the lines that store into
    #: it and its chain's typed links, root first; empty when there is none. A fix must
    #: change both holders' lines (``diagnose.fix_verify`` tries them together).
    second_stored_at: list[CreationSite] = field(default_factory=list)
    second_links: list[Link] = field(default_factory=list)
    #: What the numbers say the pattern means here, when it differs from the pattern's
    #: usual meaning (e.g. the kept tensors carry no graph); "" for the usual one.
    story: str = ""
    #: The fix that applies here, the one every surface shows: chosen once from the facts
    #: (``words.fix.choose_fix``); the pattern's usual one (``patterns.FIXES``) when
    #: nothing better is known, never "".
    fix: str = ""
    #: Tensors were kept and none carries an autograd graph (no graph node grew or was
    #: kept): set where the diagnosis is made, from its counts; the fix is then never
    #: ``.detach()`` (``stored_fix.reword_fix``).
    kept_without_graph: bool = False
    #: The holder chain as typed links, root first, one per object (``Link``): what
    #: ``chain`` renders, before a long run of graph nodes is elided.
    links: list[Link] = field(default_factory=list)
    #: The fix as tried (``Fix``): verified by re-running the step with the change, or
    #: why not; None where no verification was asked for (a result made by hand).
    fix_tried: Fix | None = None
    #: A library's own per-call reference cycles held every tensor that only the cyclic
    #: GC freed, none of them carries a graph and no object of the user's is on those
    #: cycles (``diagnose.churn``): the note that says so; the cyclic garbage's growth is
    #: then not the user's leak (``verdict.withdraw``). "" otherwise.
    library_cycles: str = ""
    #: For a cycle: its typed links (``Link``, no root), one per object of the cycle, each
    #: with the edge the cycle leaves it by (what ``cycle`` renders); the baseline keys a
    #: cycle on them. Empty when no cycle was drawn.
    cycle_links: list[Link] = field(default_factory=list)


@dataclass(frozen=True)
class JudgedAt:
    """An outlive finding judged when a wider-scope fixture was torn down (graphs the
    tests handed it, still alive then): which fixture instance. Which test's teardown tore
    it down depends on the order and the pytest-xdist split; the instance does not, so
    the baseline keys such a finding on this (``pytest_graphleak.baseline``)."""

    fixture: str  # the fixture's name
    scope: str  # "class", "module", "package" or "session"
    #: pytest's node id of the scope the instance lived in (the class, the module, the
    #: package; "" for the session), as ``request.node`` names it.
    node: str
    #: How the reports name the fixture (``fixture 'store' (class scope)``, ``class TestX
    #: (setUpClass)``); "" in a report written before it was kept.
    label: str = ""
    #: The tests that requested this instance, in the order they ran (in the process
    #: that ran them: one pytest-xdist worker's).
    requested_by: tuple[str, ...] = ()
    #: The tests that made the graphs it kept (handed it), in the order they ran.
    made_during: tuple[str, ...] = ()
    #: The test this finding is reported on: the one in whose teardown the instance was
    #: torn down, when it requested it (the last that did); "" when that test did not
    #: request it: the finding is the session's, on no test.
    charged_to: str = ""
    #: Where the fixture is defined (its file, absolute, and 1-based line): the line an
    #: annotation goes to when no line that made or stored the graph is known.
    file: str = ""
    line: int = 0

    @property
    def row(self) -> str:
        """The name of the finding's row: ``fixture 'store' (class scope) of
        test_x.py::TestX``; a session fixture's without ``of``."""
        name = self.label or f"fixture '{self.fixture}' ({self.scope} scope)"
        return f"{name} of {self.node}" if self.node else name


@dataclass
class CheckResult:
    """Everything measured and decided for one checked step function or test."""

    name: str  # pytest node id, or the step's qualified name outside pytest
    steps: int
    warmup: int
    #: metric name ("<probe>.<metric>", as the probe declares it) -> one sample after
    #: each call (len == warmup + steps), or after every ``sample_every``-th measured step
    series: dict[str, list[float]]
    units: dict[str, str]  # metric name -> "objects" | "bytes"
    verdict: Verdict
    diagnosis: Diagnosis | None = None
    duration_s: float = 0.0
    #: Set when the step raised: "<ExcType>: message", the exception's own words (no
    #: leak verdict then); where it was raised is in ``error_step`` and ``error_site``.
    error: str | None = None
    #: The step (counted from the first warmup step) that raised; None when the error was
    #: not a step's (importing the target). ``error_measuring``: raised while the probes
    #: sampled after that step (a timeout firing there), not by the step itself.
    error_step: int | None = None
    error_measuring: bool = False
    #: The user's line the exception came from: the innermost frame of its traceback in
    #: user code (``count`` is 1); None when no frame of it is the user's.
    error_site: CreationSite | None = None
    #: Set when the check measured nothing the step uses (``coverage``), or its loop was
    #: too short to judge (``loop.LoopCheck.finish``): why. Such a check has no clean
    #: verdict: under pytest it fails (or warns) with this text.
    unmeasured: str | None = None
    #: What to change so that such a check gets a verdict, one line with the syntax to
    #: type (``add torch to the probes: probes=[...]``), worded where ``unmeasured`` is
    #: (``engine/coverage``, ``verdict.too_short_loop_fix``); "" when no change is known.
    #: The HTML card, the terminal's report section and the GitHub annotation show it.
    unmeasured_fix: str = ""
    #: What the probes could not measure exactly, e.g. a graph-node count that is a
    #: lower bound (the walk over a huge graph is bounded).
    notes: list[str] = field(default_factory=list)
    #: Steps per measured sample: 1, or k when a long run was sampled every k-th step
    #: (window mode on fast steps); rates and the slowest leak are per step either way.
    sample_every: int = 1
    #: Steps run before the measured ones when the series' first ``warmup`` samples do
    #: not stand for one warmup step each (window mode samples only the last warmup
    #: step; a later window's one baseline sample is the last of the window before: 0).
    #: None: ``warmup`` samples after ``warmup`` steps.
    warmup_steps: int | None = None
    #: The loop's step after which each sample was taken, when not 1, 2, 3, ... (window
    #: mode, a rolling check's later windows); a series that starts later (a probe started
    #: late) lines up with its end.
    sample_steps: list[int] | None = None
    #: "step": a check of repeated steps (marker, fixture, ``check()``, a callback);
    #: "outlive": the audit of a test's graphs still alive after its teardown (no series).
    kind: str = "step"
    #: The leak failed nothing: it was a warning (warn-only mode, the outlive audit's warn
    #: mode) or the test failed for another reason (an assert, a timeout, ``sys.exit``),
    #: was skipped, or caught the error. Its test's row reads ``warned`` whatever pytest's
    #: outcome (``status.read_in_test``); set when the test's report is made.
    warned: bool = False
    #: The leak is listed in the baseline file (``--graphleak-baseline``): reported as
    #: ``known``, it fails nothing; set where the result is recorded, and again by the
    #: session reporter, which matches every finding of the run (``pytest_graphleak.baseline``).
    known: bool = False
    #: For a known leak: the reason its baseline entry gives ("" when it gives none, or the
    #: leak is known only because the run updates the file); set with ``known`` by the
    #: session reporter. Every surface that shows a known finding shows it.
    known_reason: str = ""
    #: metric name -> what it is and the noise it was judged with (``Declaration``).
    declarations: dict[str, Declaration] = field(default_factory=dict)
    #: An outlive finding judged at a wider-scope fixture's teardown: that fixture
    #: instance (``JudgedAt``); None for any other result. The result is named for the
    #: fixture (``JudgedAt.row``) and reported on ``JudgedAt.charged_to`` (the session's
    #: when "").
    judged_at: JudgedAt | None = None

    def declared(self, metric: str) -> Declaration:
        """The declaration ``metric`` was measured with; for a result without one (made
        by hand, or read from an older report) its unit only, judged exact."""
        found = self.declarations.get(metric)
        if found is not None:
            return found
        unit = self.units.get(metric, "objects")
        return Declaration(unit=unit, counts="memory" if unit == "bytes" else "")

    @property
    def leaked(self) -> bool:
        return self.verdict.leaked

    @property
    def status(self) -> Status:
        """``leaked``, ``error``, ``unmeasured`` or ``clean``: the one rule, ``status.py``."""
        return check_status(leaked=self.leaked, error=self.error, unmeasured=self.unmeasured)

    @property
    def pattern(self) -> str | None:
        return self.diagnosis.pattern if self.diagnosis is not None else self.verdict.pattern

    def to_dict(self) -> dict[str, Any]:
        out = {
            **asdict(self),
            "schema": SCHEMA_VERSION,
            "leaked": self.leaked,
            "pattern": self.pattern,
        }
        if self.diagnosis is not None:
            diagnosis = out["diagnosis"]
            diagnosis.pop("fix_tried")
            if self.diagnosis.fix_tried is not None:  # else the advice, as it always was
                diagnosis["fix"] = fix_document(self.diagnosis, self.diagnosis.fix_tried)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        verdict_data = dict(data["verdict"])
        verdict_data["growths"] = [
            Growth(**{**g, **{k: _number(g.get(k)) for k in ("start", "end", "per_step")}})
            for g in verdict_data.get("growths", [])
        ]
        diagnosis = None
        if data.get("diagnosis") is not None:
            diag = dict(data["diagnosis"])
            diag["sites"] = [CreationSite(**s) for s in diag.get("sites", [])]
            diag["stored_at"] = [CreationSite(**s) for s in diag.get("stored_at", [])]
            diag["change_at"] = [CreationSite(**s) for s in diag.get("change_at", [])]
            diag["second_stored_at"] = [CreationSite(**s) for s in diag.get("second_stored_at", [])]
            diag["second_links"] = [Link(**link) for link in diag.get("second_links", [])]
            diag["links"] = [Link(**link) for link in diag.get("links", [])]
            diag["cycle_links"] = [Link(**link) for link in diag.get("cycle_links", [])]
            diag["fix"], diag["fix_tried"] = read_fix(diag.get("fix", ""), diag.get("fix_tried"))
            drawn = diag.get("drawing")
            diag["drawing"] = Drawing.from_dict(drawn) if drawn else None
            diag.pop("dot", None)  # the document's rendering of the drawing
            diagnosis = Diagnosis(**diag)
        site = data.get("error_site")
        return cls(
            name=data["name"],
            steps=data["steps"],
            warmup=data["warmup"],
            series={k: [_number(x) for x in v] for k, v in data["series"].items()},
            units=dict(data["units"]),
            verdict=Verdict(**verdict_data),
            diagnosis=diagnosis,
            duration_s=data.get("duration_s", 0.0),
            error=data.get("error"),
            error_step=data.get("error_step"),
            error_measuring=bool(data.get("error_measuring")),
            error_site=CreationSite(**site) if site else None,
            unmeasured=data.get("unmeasured"),
            unmeasured_fix=data.get("unmeasured_fix", ""),
            notes=list(data.get("notes", [])),
            sample_every=int(data.get("sample_every", 1)),
            warmup_steps=data.get("warmup_steps"),
            sample_steps=data.get("sample_steps"),
            kind=data.get("kind", "step"),
            warned=bool(data.get("warned", False)),
            known=bool(data.get("known", False)),
            known_reason=str(data.get("known_reason") or ""),
            declarations={k: Declaration(**v) for k, v in data.get("declarations", {}).items()},
            judged_at=_judged_at(judged) if (judged := data.get("judged_at")) else None,
        )


def _judged_at(data: Mapping[str, Any]) -> JudgedAt:
    """A ``JudgedAt`` read back from JSON (its tests are a list there)."""
    return JudgedAt(
        **{
            **data,
            "requested_by": tuple(data.get("requested_by", ())),
            "made_during": tuple(data.get("made_during", ())),
        }
    )


def fix_document(diagnosis: Diagnosis, tried: Fix) -> dict[str, Any]:
    """The fix as a report carries it: ``text`` is what the fix line shows (the changed
    line when verified, else the advice, which a running loop may have worded again after
    the fix was tried), ``advice`` the fix worded from the facts before it was tried."""
    shown = tried.text if tried.verified and tried.text else diagnosis.fix or tried.text
    return {**asdict(tried), "text": shown, "advice": diagnosis.fix}


def read_fix(value: Any, tried: Any) -> tuple[str, Fix | None]:
    """``Diagnosis.fix`` and ``fix_tried`` from a report: the object ``fix_document``
    writes, or (older reports) the advice as a string, with the tried fix beside it
    under ``fix_tried`` in reports written between the two."""
    if isinstance(value, Mapping):
        fields = {name: value[name] for name in _FIX_FIELDS if name in value}
        return str(value.get("advice", value.get("text", ""))), Fix(**fields)
    return str(value or ""), Fix(**tried) if tried else None


_FIX_FIELDS = ("text", "verified", "why_not", "diff", "steps", "runs", "filename", "sha256")


def _number(value: Any) -> Any:
    """A sample read back from JSON: ``null`` is how the report writes a non-finite one
    (a probe that could not read), so it becomes NaN again."""
    return float("nan") if value is None else value
