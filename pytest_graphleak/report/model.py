"""The typed read model every renderer reads, as coverage.py's reporters read ``Analysis``
and ``Numbers``: no renderer reads a report's raw dicts or the probe registry.

- ``Report``: a report document (``json_doc.build_document``, or a file read back), its
  summary and its ``TestRow``s, in document order;
- ``TestRow``: one test with its status and its checks, each a ``CheckResult`` (plain,
  typed data already: verdict, diagnosis, declarations);
- ``MetricRow``: one metric of one check as the reports show it (declaration, first and
  last measured value, growth per step, grown or not): the document's ``metrics`` field;
- ``BaselineSection``: the baseline file's part of a run (its fixed entries, the update
  command), when one was used;
- ``metric_order``: the one order a check's metrics are listed in, on every surface;
- ``headline_growth``: the one grown metric a line that names one names (the terminal's
  short summary, the HTML index's growth column).

Made from the JSON dict (``from_dict``) or from results (``TestRow.of``); pure, no I/O.
This module and ``result.CheckResult.from_dict`` are where a report's dicts are read;
every renderer reads what they make. (``json_doc`` and ``validate`` are the schema's
boundary: they write and check the dicts themselves.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.baseline import Entry
from pytest_graphleak.baseline_keys import KEY_FIELDS, Key
from pytest_graphleak.metrics import finite, listing_key
from pytest_graphleak.patterns import BY_WORD as PATTERNS
from pytest_graphleak.report.summary import sentence
from pytest_graphleak.result import CheckResult, Declaration, Growth
from pytest_graphleak.status import Status, read_in_test, worst


@dataclass(frozen=True)
class MetricRow:
    """One metric of one check: what the reports' metric tables and sparklines show."""

    name: str
    declaration: Declaration
    #: every sample, warmup (or baseline) first
    series: Sequence[float]
    start: float | None  # first measured value
    end: float | None  # last measured value
    #: the verdict's robust estimate for a grown metric; else the plain slope over the
    #: measured samples, per step (None with fewer than two)
    per_step: float | None
    grew: bool

    @property
    def unit(self) -> str:
        return self.declaration.unit

    @property
    def tolerance(self) -> float:
        """Growth per step inside the noise (0 for an exact metric)."""
        return self.declaration.tolerance

    def to_dict(self) -> dict[str, Any]:
        """The document's ``metrics`` entry (``schema.json``)."""
        return {
            "unit": self.unit,
            "start": self.start,
            "end": self.end,
            "per_step": self.per_step,
            "grew": self.grew,
        }


def metric_order(check: CheckResult, metrics: Iterable[str]) -> list[str]:
    """``metrics`` of ``check`` in the order every surface lists them (the terminal's
    failure text, report section and ``-v`` series, the verdict's "grew:" list, the HTML
    card's table and charts, JUnit properties, GitHub annotations, ``graphleak report``):
    the grown ones first, then each part by ``metrics.listing_key`` (what the metric's
    declaration says it counts, then its name). Made from typed data a JSON report keeps
    (the verdict's growths, the declarations), never from a dict's order, so a report read
    back lists them as the run did. Grown first because the verdict is about them: a
    card's first row and first chart are what to look at, and since this only moves the
    grown ones ahead of the rest, two metrics never swap places between surfaces."""
    grown = {g.metric for g in check.verdict.growths}
    return sorted(
        metrics,
        key=lambda metric: (
            metric not in grown,
            *listing_key(metric, check.declared(metric).counts),
        ),
    )


def metric_rows(result: CheckResult) -> list[MetricRow]:
    """Every metric of a check, in ``metric_order``. ``per_step`` of a metric the verdict
    did not judge grown is ``(end - start) / (samples - 1)`` over the measured samples,
    divided by the steps per sample."""
    grown = {g.metric: g for g in result.verdict.growths}
    rows = []
    for metric in metric_order(result, result.series):
        series = result.series[metric]
        measured = [float(v) for v in series[result.warmup :] if finite(v)]
        per_step: float | None = None
        if metric in grown:
            per_step = float(grown[metric].per_step)
        elif len(measured) > 1:
            per_step = (measured[-1] - measured[0]) / (len(measured) - 1) / result.sample_every
        rows.append(
            MetricRow(
                metric,
                result.declared(metric),
                series,
                start=measured[0] if measured else None,
                end=measured[-1] if measured else None,
                per_step=per_step,
                grew=metric in grown,
            )
        )
    return rows


def headline_growth(check: CheckResult) -> Growth | None:
    """The grown metric that one line names (the terminal's short summary, the HTML
    index): the first whose declared ``counts`` tells the check's pattern
    (``patterns.TABLE``'s ``told_by``), then in the listing order (``metrics.listing_key``:
    ``COUNTS_ORDER``, then one named for what it counts, ``<probe>.tensors``, before a
    record counted like it, then by name). No dict order decides: a report read back
    from JSON (sorted keys) names the same metric as the run that wrote it. None when
    nothing grew."""
    facts = PATTERNS.get(check.pattern or "")
    told = facts.told_by if facts is not None else ()

    def key(growth: Growth) -> tuple[int, int, bool, str]:
        counts = check.declared(growth.metric).counts
        return (
            told.index(counts) if counts in told else len(told),
            *listing_key(growth.metric, counts),
        )

    return min(check.verdict.growths, key=key, default=None)


@dataclass(frozen=True)
class TestRow:
    """One test with results: pytest's outcome and its checks (a marker's, the fixture's,
    the outlive audit's)."""

    __test__ = False  # not a pytest test class, whatever its name

    nodeid: str
    #: pytest's call-phase outcome: "passed" | "failed" | "skipped" | "xfailed"
    outcome: str
    checks: tuple[CheckResult, ...] = field(default_factory=tuple)

    def status_of(self, check: CheckResult) -> Status:
        """One check's status as this test reads it (``status.read_in_test``)."""
        return read_in_test(
            check.status, warned=check.warned, known=check.known, outcome=self.outcome
        )

    @property
    def status(self) -> Status:
        """The test's status: its worst check's (``status.worst``)."""
        return worst(self.status_of(check) for check in self.checks)

    @property
    def is_fixture(self) -> bool:
        """A row of a fixture's findings, on no test (``JudgedAt.charged_to`` is ""): named
        for the fixture (``JudgedAt.row``)."""
        return bool(self.checks) and all(
            c.judged_at is not None and not c.judged_at.charged_to and c.name == self.nodeid
            for c in self.checks
        )

    @classmethod
    def of(cls, nodeid: str, outcome: str, checks: Iterable[CheckResult]) -> TestRow:
        return cls(nodeid, outcome, tuple(checks))

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> TestRow:
        """A document's test entry (or a ``CheckedTest``'s fields as a dict)."""
        checks = tuple(CheckResult.from_dict(check) for check in row.get("checks", ()))
        return cls(str(row["nodeid"]), str(row.get("outcome", "passed")), checks)


@dataclass(frozen=True)
class BaselineSection:
    """The document's ``baseline``: the entries this run checked and no longer found,
    those whose test it did not collect (stale), and the command that updates the file."""

    fixed: tuple[Key, ...] = ()
    update_command: str = ""
    file: str = ""
    entries: int = 0
    stale: tuple[Key, ...] = ()  # absent in reports written before it
    #: entries this run could not check (neither known nor fixed)
    unchecked: int = 0
    #: what an update wrote (findings, added, removed, pruned); None without one
    updated: Mapping[str, int] | None = None
    #: the person's reason of each fixed or stale entry ("" where none was given)
    reasons: Mapping[Key, str] = field(default_factory=dict)
    #: False for a report written before ``stale`` existed: written back without it
    has_stale: bool = True

    @classmethod
    def from_dict(cls, section: Mapping[str, Any]) -> BaselineSection:
        reasons: dict[Key, str] = {}

        def keys(name: str) -> tuple[Key, ...]:
            found = []
            for entry in section.get(name) or ():
                key = Key(**{field: str(entry.get(field) or "") for field in KEY_FIELDS})
                reasons[key] = str(entry.get("reason") or "")
                found.append(key)
            return tuple(found)

        updated = section.get("updated")
        return cls(
            keys("fixed"),
            str(section.get("update_command") or ""),
            file=str(section.get("file") or ""),
            entries=int(section.get("entries") or 0),
            stale=keys("stale"),
            unchecked=int(section.get("unchecked") or 0),
            updated={str(k): int(v) for k, v in updated.items()}
            if isinstance(updated, Mapping)
            else None,
            reasons=reasons,
            has_stale="stale" in section,
        )

    def to_dict(self) -> dict[str, Any]:
        """The document's ``baseline`` object (``schema.json``)."""

        def entries(keys: tuple[Key, ...]) -> list[dict[str, str]]:
            return [Entry(key, self.reasons.get(key, "")).to_dict() for key in keys]

        out: dict[str, Any] = {
            "file": self.file,
            "entries": self.entries,
            "fixed": entries(self.fixed),
            "unchecked": self.unchecked,
            "update_command": self.update_command,
            "updated": dict(self.updated) if self.updated is not None else None,
        }
        if self.has_stale:
            out["stale"] = entries(self.stale)
        return out


@dataclass(frozen=True)
class Report:
    """A whole report document, typed."""

    generated_by: str = "unknown"
    warn_only: bool = False
    #: the document's ``summary`` (``summary.counts``)
    summary: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    tests: tuple[TestRow, ...] = ()
    #: the baseline file's section; None without ``--graphleak-baseline``
    baseline: BaselineSection | None = None
    #: the run's root directory (``graphleak fix --apply`` writes under it only); None in
    #: a report written without one
    rootdir: str | None = None

    @property
    def sentence(self) -> str:
        """The session's count line (``summary.sentence``)."""
        return sentence(self.summary)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Report:
        """A document as ``json_doc.build_document`` writes it (raises KeyError, TypeError
        or ValueError on one that is not; ``validate`` names the wrong field first)."""
        summary = document.get("summary") or {}
        section = document.get("baseline")
        return cls(
            generated_by=str(document.get("generated_by", "unknown")),
            warn_only=bool(document.get("warn_only", False)),
            summary={str(k): v for k, v in summary.items() if isinstance(v, int)},
            notes=tuple(str(note) for note in document.get("notes", ())),
            tests=tuple(TestRow.from_dict(test) for test in document.get("tests", ())),
            baseline=BaselineSection.from_dict(section) if section is not None else None,
            rootdir=str(document["rootdir"]) if document.get("rootdir") is not None else None,
        )


def results_of(data: object) -> list[CheckResult]:
    """A pytest report's ``graphleak`` data (a list of ``CheckResult.to_dict()``, as it
    crossed pytest-xdist) read into results; what is not one is left out (the session
    reporter notes it when it keeps the test's row)."""
    results = (result_of(check) for check in (data if isinstance(data, list) else ()))
    return [result for result in results if result is not None]


def result_of(check: object) -> CheckResult | None:
    """One check of a report's ``graphleak`` data as a result; None when it is not one."""
    try:
        return CheckResult.from_dict(check)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def check_label(test: TestRow, index: int) -> str:
    """``nodeid``, or ``nodeid [check name]`` (``[check 2]``) when the test ran several
    checks: how each surface names one check of a test."""
    name = test.checks[index].name
    if test.checks[index].judged_at is not None and name != test.nodeid:
        return f"{test.nodeid} [{name}]"  # a fixture's finding: named for the fixture
    if len(test.checks) <= 1:
        return test.nodeid
    return f"{test.nodeid} [{name if name != test.nodeid else f'check {index + 1}'}]"
