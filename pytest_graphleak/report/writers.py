"""The report writers: every output format graphleak can write, in one registry.

A writer (coverage.py's ``Reporter`` shape) is a kind, the options-table key that turns
it on, and a ``render`` of the typed report (``model.Report``: ``json_doc.build_report``
in a run, ``graphleak report`` reads a file into it); no writer reads a report's dicts
(the JSON writer writes them: ``json_doc.document_of``). A *file*
writer's option is a path; its ``recognise`` tells graphleak's own file of that kind, so
that ``output_paths`` replaces no other file; the front end (the session report, the
``graphleak`` command) owns the file handling. A writer that is no file (the GitHub gate:
workflow commands on stdout, a table appended to the step summary) delivers its own
output through ``publish``. A writer that adds to another tool's file (JUnit XML
properties on pytest's ``--junitxml`` test cases) gives each test's ``properties``.

A new format is one module plus one entry in ``WRITERS``: the pytest flag and ini key
come from its option in ``options.OPTIONS``, and the session report, ``graphleak check``
and the output-path checks all read this table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_graphleak.report import github
from pytest_graphleak.report.github_rows import Row
from pytest_graphleak.report.html import is_html_report, render_html
from pytest_graphleak.report.json_doc import document_of, dumps, is_json_report
from pytest_graphleak.report.junit import junit_properties
from pytest_graphleak.report.model import Report, TestRow
from pytest_graphleak.report.sarif import is_sarif_report, render_sarif


@dataclass
class Run:
    """What a writer may need beyond the report: facts of the run that made it."""

    #: label -> text (time, versions, command, rootdir): the HTML page's environment block
    environment: Mapping[str, str] = field(default_factory=dict)
    #: node id (or check name) -> (absolute file, 1-based line) of the test or step function
    locations: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: rows other parts of the run add to the report's (an after-teardown audit, say)
    rows: Sequence[Row] = ()
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    #: writes one line of a writer that prints (the GitHub workflow commands)
    print_line: Callable[[str], None] = field(default_factory=lambda: _print_line)


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@dataclass(frozen=True)
class Writer:
    kind: str  # "json": the registry key and ``output_paths.Output.kind``
    label: str  # "JSON": how messages name it ("JSON report: graphleak.json")
    option: str  # the ``options.OPTIONS`` key that turns it on ("": another tool's)
    #: The whole output of a file writer, written to the path its option gives.
    render: Callable[[Report, Run], str] | None = None
    #: Is graphleak's own file of this kind at the path (a file writer may replace it)?
    recognise: Callable[[Path], bool] | None = None
    what: str = ""  # "a graphleak JSON report": what a refused path is not
    #: A writer that is no file: on for this option value? ...
    wanted: Callable[[Any, Mapping[str, str]], bool] | None = None
    #: ... then it delivers itself; returns problems to show (a step summary not written).
    publish: Callable[[Report, Run], list[str]] | None = None
    #: A writer that adds to another tool's file: on when that tool's option (pytest's
    #: ``dest``) is set; the name/value pairs of one test (as the test ends: the tool
    #: writes its file as it goes).
    host_option: str = ""
    properties: Callable[[TestRow], list[tuple[str, str]]] | None = None

    @property
    def to_file(self) -> bool:
        return self.render is not None


WRITERS: tuple[Writer, ...] = (
    Writer(
        "json",
        "JSON",
        "report",
        render=lambda report, run: dumps(document_of(report)),
        recognise=is_json_report,
        what="a graphleak JSON report",
    ),
    Writer(
        "html",
        "HTML",
        "html",
        render=lambda report, run: render_html(report, environment=run.environment),
        recognise=is_html_report,
        what="a graphleak HTML report",
    ),
    Writer(
        "sarif",
        "SARIF",
        "sarif",
        render=render_sarif,
        recognise=is_sarif_report,
        what="a graphleak SARIF log",
    ),
    Writer("github", "GitHub", "github", wanted=github.wanted, publish=github.publish),
    Writer("junit", "JUnit", "", host_option="xmlpath", properties=junit_properties),
)


def annotators(
    option: Callable[[str], object],
) -> list[Callable[[TestRow], list[tuple[str, str]]]]:
    """The ``properties`` of each writer that adds to another tool's file, for those
    whose tool's option is set (``option``: pytest's ``config.getoption`` of a dest)."""
    return [
        writer.properties
        for writer in WRITERS
        if writer.properties is not None and option(writer.host_option)
    ]


#: The options-table keys of every writer (what a reporter without the core plugin adds).
WRITER_OPTIONS: tuple[str, ...] = tuple(writer.option for writer in WRITERS if writer.option)
