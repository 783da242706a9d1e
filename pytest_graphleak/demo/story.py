"""``graphleak demo``: train the tiny transformer with two classic leaks, then fixed.

Each run is one ``pytest_graphleak.check(step, ...)`` call -- the same tracker, probes,
verdict and diagnosis as ``pytest --graphleak`` -- around a step that also prints the
seed engine's per-step log. Calls that the diagnosis makes after the measured steps
are not logged.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pytest_graphleak.api import check
from pytest_graphleak.cli.colour import terminal_text
from pytest_graphleak.cli.exits import EXIT_CLEAN, EXIT_LEAK
from pytest_graphleak.cli.outputs import checked_outputs, write_output
from pytest_graphleak.demo.backends import Backend, Counter, minigrad_backend, torch_backend
from pytest_graphleak.demo.plot import Metric, PlotRun, render_plot
from pytest_graphleak.demo.progress import PHASES, Display, StepRecord, bar, format_line, rss_mb
from pytest_graphleak.demo.user_code import load_training_script
from pytest_graphleak.exceptions import GraphLeakError
from pytest_graphleak.report.text import render_result, render_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.status import BY_WORD

SEED = 0


@dataclass(frozen=True)
class Variant:
    method: str  # Trainer method in train_script.py
    label: str
    story: str
    expect_leak: bool


VARIANTS = (
    Variant(
        "step_keeps_losses",
        "leaky: losses kept",
        "losses.append(loss) keeps every step's loss with its graph",
        True,
    ),
    Variant(
        "step_retains_graph",
        "leaky: graph retained",
        "backward(retain_graph=True), and a running loss kept as a tensor chains "
        "the graphs together",
        True,
    ),
    Variant("step_fixed", "fixed", "losses.append(loss.item()); backward() frees the graph", False),
)


@dataclass
class RunOutcome:
    variant: Variant
    result: CheckResult
    records: list[StepRecord]

    @property
    def as_expected(self) -> bool:
        return not self.result.error and self.result.leaked == self.variant.expect_leak


class PhaseRecorder:
    """``record(phase)``: the script calls it at pre/fwd/bwd/opt of each step."""

    def __init__(self) -> None:
        self.rss: dict[str, float] = {}

    def record(self, phase: str) -> None:
        self.rss[phase] = rss_mb()


class LoggedStep:
    """The step handed to ``check``: runs the script's step, then logs one line."""

    def __init__(
        self,
        step: Callable[[], float],
        recorder: PhaseRecorder,
        counter: Counter,
        display: Display,
        *,
        label: str,
        warmup: int,
        total: int,
        every: int,
    ) -> None:
        # every: log every k-th step (0: only the first and the last)
        self.step, self.recorder, self.counter, self.display = step, recorder, counter, display
        self.label, self.warmup, self.total, self.every = label, warmup, total, every
        self.records: list[StepRecord] = []
        self._width = len(str(total))

    def __call__(self) -> None:
        self.recorder.rss = {}
        loss = self.step()
        if len(self.records) >= self.total:
            return  # a diagnosis call after the measured steps: not part of the log
        alive, created = self.counter.read()
        record = StepRecord(
            len(self.records) + 1,
            len(self.records) < self.warmup,
            loss,
            dict(self.recorder.rss),
            alive,
            created,
        )
        self.records.append(record)
        if (self.every and record.step % self.every == 0) or record.step in (1, self.total):
            self.display.line(format_line(record, self._width))
        counts = " ".join(f"{k}={v}" for k, v in alive.items())
        self.display.status(
            f"{self.label} {bar(record.step, self.total)} "
            f"{record.step}/{self.total}  loss {loss:.3f}  {counts}"
        )


def run_demo(args: argparse.Namespace) -> int:
    steps, warmup = args.steps, args.warmup
    (plot_path,) = checked_outputs(("--plot", args.plot, "svg"))  # never over a non-plot
    backend = torch_backend() if args.torch else minigrad_backend()
    script = load_training_script()
    display = Display()
    started = time.perf_counter()
    # Short by default: each run's first and last step; --verbose: every step.
    every = 1 if args.verbose else (args.every or 0)
    display.line(
        display.paint(
            f"graphleak demo: a tiny character transformer on {backend.name}, trained "
            f"{len(VARIANTS)} times ({warmup} warmup + {steps} measured steps each)",
            "bold",
        )
    )
    display.line(
        "Each run is checked by pytest_graphleak.check(): the tracker, verdict and "
        "diagnosis of `pytest --graphleak`."
    )
    outcomes = []
    try:
        for number, variant in enumerate(VARIANTS, 1):
            display.line()
            display.line(
                display.paint(
                    f"== Run {number}/{len(VARIANTS)}: {variant.label} -- {variant.story}", "bold"
                )
            )
            outcomes.append(
                _run_variant(
                    variant, backend, script, display, steps=steps, warmup=warmup, every=every
                )
            )
            _show_verdict(outcomes[-1], display, series=args.verbose)
    finally:
        backend.close()
    display.line()
    _show_summary(outcomes, display)
    if plot_path is not None:
        _write_plot(plot_path, outcomes, backend)
        display.line(f"plot written to {plot_path}")
    display.line(f"done in {time.perf_counter() - started:.1f} s")
    return EXIT_CLEAN if all(o.as_expected for o in outcomes) else EXIT_LEAK


def _run_variant(
    variant: Variant,
    backend: Backend,
    script: ModuleType,
    display: Display,
    *,
    steps: int,
    warmup: int,
    every: int,
) -> RunOutcome:
    parts = backend.build(SEED)
    recorder = PhaseRecorder()
    # The diagnosis names this local in its reference chain ("local 'trainer'").
    trainer = script.Trainer(
        parts.model, parts.optimizer, parts.loss_fn, parts.next_batch, recorder.record
    )
    del parts
    logged = LoggedStep(
        getattr(trainer, variant.method),
        recorder,
        backend.counter(),
        display,
        label=variant.label,
        warmup=warmup,
        total=warmup + steps,
        every=every,
    )
    try:
        # raise_on_leak: a step that raises is a bug of the demo; let its traceback show.
        result = check(
            logged, steps=steps, warmup=warmup, name=f"demo: {variant.label}", raise_on_leak=True
        )
    except GraphLeakError as leak:
        assert leak.result is not None
        result = leak.result
    finally:
        display.clear_status()
    records = logged.records
    del logged, trainer
    gc.collect()  # the next run starts from a heap without this run's model
    return RunOutcome(variant, result, records)


def _show_verdict(outcome: RunOutcome, display: Display, *, series: bool) -> None:
    result, variant = outcome.result, outcome.variant
    verdict = BY_WORD[result.status].label  # the word every other surface says
    colour = "green" if outcome.as_expected else "red"
    expected = "leak" if variant.expect_leak else "clean"
    display.line(
        display.paint(
            f"-- verdict: {verdict}"
            + (f" ({result.pattern})" if result.leaked else "")
            + (" as expected" if outcome.as_expected else f" -- expected {expected}!"),
            colour,
        )
    )
    told = render_text(result, series=series) if result.leaked else render_result(result)
    display.line(terminal_text(told, colour=False))  # at the terminal's width, as `check`'s


def _show_summary(outcomes: list[RunOutcome], display: Display) -> None:
    display.line(display.paint("Summary (first -> last measured step)", "bold"))
    rows = [("run", "alive", "RSS MiB (after opt)", "verdict")]
    for outcome in outcomes:
        measured = [r for r in outcome.records if not r.warmup] or outcome.records
        first, last = measured[0], measured[-1]
        alive = " ".join(f"{k} {first.alive[k]}->{last.alive[k]}" for k in last.alive)
        rss = f"{first.rss.get('opt', 0):.1f}->{last.rss.get('opt', 0):.1f}"
        rss += f" ({last.rss.get('opt', 0) - first.rss.get('opt', 0):+.1f})"
        result = outcome.result
        verdict = BY_WORD[result.status].label
        verdict += f" {result.pattern}" if result.leaked else ""
        rows.append((outcome.variant.label, alive, rss, verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        display.line("  " + "  ".join(cells).rstrip())


def _write_plot(path: Path, outcomes: list[RunOutcome], backend: Backend) -> None:
    keys = backend.counter.plot_keys

    def plot_run(outcome: RunOutcome) -> PlotRun:
        run = PlotRun(outcome.variant.label, outcome.result.warmup)
        for kind, metric in keys.items():
            run.series[metric] = [float(r.alive.get(kind, float("nan"))) for r in outcome.records]
        # Runs follow each other in one process, so absolute RSS is not comparable
        # between them: plot each run's growth since its own first step.
        rss = [r.rss.get(PHASES[-1], float("nan")) * 2**20 for r in outcome.records]
        run.series["rss"] = [value - rss[0] for value in rss] if rss else []
        return run

    leaky = [plot_run(o) for o in outcomes if o.variant.expect_leak]
    fixed = next(plot_run(o) for o in outcomes if not o.variant.expect_leak)
    names = {v: k for k, v in keys.items()}
    metrics = [
        Metric("tensors", f"alive {names['tensors']}", "objects"),
        Metric("nodes", f"alive {names['nodes']}", "objects"),
        Metric("rss", "RSS growth since step 1", "bytes"),
    ]
    title = f"graphleak demo on {backend.name}: alive objects and RSS per step, leaky vs fixed"
    write_output(path, render_plot(title, leaky, fixed, metrics), "--plot")
