"""Window mode's cost on a realistic step: the transformers Trainer training a small BERT.

A long run checked with ``GraphLeakCallback(window=100, on_leak="warn")`` is judged every
100 steps and sampled every k-th step, k chosen by the check from the CPU time the steps
and its samples took (``pytest_graphleak.engine.stride``). Measured side by side in one
process, runs alternating (plain, checked) ``REPEATS`` times:

- **plain**: ``Trainer.train()`` for ``STEPS`` optimizer steps with a timing callback
  only (a ``perf_counter`` stamp at each ``on_step_end``: step time = the gap between
  two stamps);
- **checked**: the same run with the graphleak callback after the timing one. Every hook
  of the graphleak callback is timed from inside (``after_step`` samples, the window
  judgements), so its own cost per step is measured exactly, apart from the noise of a
  shared machine; the step-time medians of both runs give the A/B comparison.

The model is a BERT built from a config (nothing downloaded): 2 layers, hidden 128,
sequences of 64 tokens, batches of 8: tens of ms per step on one CPU thread.

Before them, one short unmeasured run of each kind (``QUICK_STEPS`` steps, windows of
``QUICK_WINDOW``) warms the process: the imports a first run makes (transformers' own, and
the diagnosis modules the callback imports when it first records creation sites) are a
cost per process, not per step; the checked warm-up's callback time is reported apart.

Also recorded: the gc state the training code sees (``gc.isenabled()``, frozen objects)
inside a step, during a window and after the run.

After them, ``SHORT_REPEATS`` checked runs of ``SHORT_STEPS`` steps: what a run pays once
(the start walk, the warmup sample) weighs more per step in a shorter run. Last, one
checked run of ``SHORT_STEPS`` steps in a fresh process (``FRESH_ENV``: nothing of the
check warmed up, as in a test that trains once), where the first check of a process also
pays for learning which modules are the user's.

Targets (issue 28): the callback's own CPU time per step (everything it does, averaged
over the run) <= 0.3% of a 20 ms step, i.e. <= 0.060 ms, in the 600-step runs and in the
short ones; and <= 0.3% of this run's plain step (median CPU time). CPU time
(``time.thread_time()``, read innermost around each hook, and ``time.process_time()``
beside it) is used because on a shared machine the wall time of a 0.5 ms hook is often a
10 ms wait for the core. Every hook the callback defines is timed (``on_train_begin``,
``on_step_end``, ``on_train_end``); the others are ``TrainerCallback``'s empty methods.
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Stats, fmt_num, markdown_table, parse_args, pin_threads, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")

STEPS, WINDOW, REPEATS = 600, 100, 2
#: Set to a step count: this process runs one checked run of that many steps and prints
#: the callback's CPU time per step (the fresh-process row).
FRESH_ENV = "GRAPHLEAK_BENCH_FRESH_STEPS"
SHORT_STEPS, SHORT_REPEATS = 200, 2
QUICK_STEPS, QUICK_WINDOW, QUICK_REPEATS = 40, 10, 1
TARGET_SHARE = 0.003
#: The step the issue states the target against: 0.3% of 20 ms = 0.060 ms per step.
TARGET_STEP_MS = 20.0
#: Step times the docs state the cost against (the cost per step is this run's).
SHARE_OF_MS = (20.0, 100.0)
_BYTECODE = ", compiled from source: this Python writes no bytecode cache"


def build_trainer(steps: int, callbacks: list[Any], out_dir: str) -> Any:
    import torch
    import transformers

    class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __len__(self) -> int:
            return 512

        def __getitem__(self, i: int) -> dict[str, Any]:
            gen = torch.Generator().manual_seed(i)
            return {
                "input_ids": torch.randint(0, 1000, (64,), generator=gen),
                "labels": torch.tensor(i % 2),
            }

    class Trainer(transformers.Trainer):
        gc_seen: list[tuple[bool, int]] = []  # noqa: RUF012 - one list per run, see below
        gc_steps: list[bool] = []  # noqa: RUF012 - gc.isenabled() inside every step

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            self.gc_steps.append(gc.isenabled())
            # gc.get_freeze_count() walks the frozen list (80 ms for 355k objects): read it
            # in a few steps only, or it would be what this benchmark measures.
            if self.state.global_step % 50 == 25:
                self.gc_seen.append((gc.isenabled(), gc.get_freeze_count()))
            return super().compute_loss(model, inputs, *args, **kwargs)

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    args = transformers.TrainingArguments(
        output_dir=out_dir,
        max_steps=steps,
        per_device_train_batch_size=8,
        logging_steps=50,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        lr_scheduler_type="linear",
        warmup_steps=10,
    )
    trainer = Trainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=Tokens(),
        callbacks=callbacks,
    )
    trainer.gc_seen = []
    trainer.gc_steps = []
    return trainer


def make_callbacks(window: int) -> tuple[type, type]:
    import transformers

    from pytest_graphleak.integrations.transformers import GraphLeakCallback

    class StepClock(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.stamps: list[float] = []
            self.cpu_stamps: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.stamps.append(time.perf_counter())
            self.cpu_stamps.append(time.thread_time())

    # The hooks the callback defines; the others are TrainerCallback's empty methods
    # (~0.1 us a call), which timing them would bury under the clocks' own cost.
    hooks = [name for name in vars(GraphLeakCallback) if name.startswith("on_")]

    class TimedGraphLeakCallback(GraphLeakCallback):
        """The real callback, every hook the Trainer calls timed from inside."""

        def __init__(self) -> None:
            super().__init__(window=window, on_leak="warn")
            self.spent = dict.fromkeys(hooks, 0.0)
            self.cpu_spent = dict.fromkeys(hooks, 0.0)
            self.process_spent = dict.fromkeys(hooks, 0.0)
            self.step_costs: list[float] = []

        def _timed(self, hook: str, *args: Any, **kwargs: Any) -> None:
            method = getattr(super(), hook)
            # Thread CPU innermost: a clock read costs ~2 us of CPU here (a system call),
            # and only the callback's own time is wanted.
            started, process_started = time.perf_counter(), time.process_time()
            cpu_started = time.thread_time()
            method(*args, **kwargs)
            cpu = time.thread_time() - cpu_started
            process = time.process_time() - process_started
            spent = time.perf_counter() - started
            self.spent[hook] += spent
            self.cpu_spent[hook] += cpu
            self.process_spent[hook] += process
            if hook == "on_step_end":
                self.step_costs.append(spent)

    for hook in hooks:
        setattr(TimedGraphLeakCallback, hook, _timing(hook))
    return StepClock, TimedGraphLeakCallback


def _timing(hook: str) -> Any:
    def timed(self: Any, *args: Any, **kwargs: Any) -> None:
        self._timed(hook, *args, **kwargs)

    timed.__name__ = hook
    return timed


def step_times(stamps: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(stamps)]


def main() -> None:
    options = parse_args(__doc__.splitlines()[0])
    steps, window, repeats = (
        (QUICK_STEPS, QUICK_WINDOW, QUICK_REPEATS) if options.quick else (STEPS, WINDOW, REPEATS)
    )
    short_steps, short_repeats = (QUICK_STEPS, 1) if options.quick else (SHORT_STEPS, SHORT_REPEATS)
    pin_threads()
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    step_clock, timed_callback = make_callbacks(window)
    _, warm_callback = make_callbacks(QUICK_WINDOW)
    wall = {"plain": [], "checked": []}  # type: dict[str, list[float]]
    cpu = {"plain": [], "checked": []}  # type: dict[str, list[float]]
    hook_costs: list[float] = []
    spent: dict[str, float] = {}
    cpu_spent: dict[str, float] = {}
    process_spent: dict[str, float] = {}
    windows: list[str] = []
    strides: list[int] = []
    short_cpu: list[float] = []  # callback CPU per step of each short run
    gc_steps: list[bool] = []
    gc_during: set[tuple[bool, int]] = set()
    gc_plain: set[tuple[bool, int]] = set()
    with tempfile.TemporaryDirectory() as out_dir:
        build_trainer(QUICK_STEPS, [step_clock()], out_dir).train()  # warm-up, unmeasured
        first = warm_callback()
        build_trainer(QUICK_STEPS, [step_clock(), first], out_dir).train()
        first_cpu = sum(first.cpu_spent.values())
        for _ in range(repeats):
            for kind in ("plain", "checked"):
                clock = step_clock()
                graphleak = timed_callback() if kind == "checked" else None
                callbacks = [clock] if graphleak is None else [clock, graphleak]
                trainer = build_trainer(steps, callbacks, out_dir)
                trainer.train()
                wall[kind].extend(step_times(clock.stamps)[10:])  # first steps warm caches
                cpu[kind].extend(step_times(clock.cpu_stamps)[10:])
                if graphleak is None:
                    gc_plain.update(trainer.gc_seen)
                else:
                    hook_costs.extend(graphleak.step_costs)
                    for hook in graphleak.spent:
                        spent[hook] = spent.get(hook, 0.0) + graphleak.spent[hook]
                        cpu_spent[hook] = cpu_spent.get(hook, 0.0) + graphleak.cpu_spent[hook]
                        process_spent[hook] = (
                            process_spent.get(hook, 0.0) + graphleak.process_spent[hook]
                        )
                    windows = [
                        f"{r.name.split(' ', 1)[1]}: {'LEAK' if r.leaked else 'clean'}, "
                        f"sampled every {r.sample_every} (catches 1 object every "
                        f"{r.verdict.slowest_leak_steps} steps)"
                        for r in graphleak.results
                    ]
                    strides.extend(r.sample_every for r in graphleak.results)
                    gc_during.update(trainer.gc_seen)
                    gc_steps.extend(trainer.gc_steps)
                del trainer
        for _ in range(short_repeats):
            graphleak = timed_callback()
            build_trainer(short_steps, [step_clock(), graphleak], out_dir).train()
            short_cpu.append(sum(graphleak.cpu_spent.values()) / short_steps)
    after = (gc.isenabled(), gc.get_freeze_count())
    fresh_cpu = _fresh_process(short_steps)

    steps_done = steps * repeats
    plain_wall, checked_wall = Stats.of(wall["plain"]), Stats.of(wall["checked"])
    plain_cpu, checked_cpu = Stats.of(cpu["plain"]), Stats.of(cpu["checked"])
    hook_cpu = sum(cpu_spent.values()) / steps_done
    hook_process = sum(process_spent.values()) / steps_done
    share = hook_cpu / plain_cpu.median

    def change(after: Stats, before: Stats) -> str:
        return f"{(after.median - before.median) / before.median * 100:+.2f}%"

    hook_wall = sum(spent.values()) / steps_done
    everything = "mean: samples, window judgements, start walk, every hook"
    by_hook = ", ".join(
        f"{hook} {_ms(cpu / steps_done)}" for hook, cpu in sorted(cpu_spent.items()) if cpu
    )
    at = "; ".join(f"{hook_cpu * 1e3 / ms * 100:.3f}% of a {ms:g} ms step" for ms in SHARE_OF_MS)
    rows = [
        ("step CPU time, plain run (median of steps)", plain_cpu.fmt("ms")),
        ("step CPU time, checked run (median, incl. the callback)", checked_cpu.fmt("ms")),
        ("A/B change of the CPU medians", change(checked_cpu, plain_cpu)),
        ("step wall time, plain run (median of steps)", plain_wall.fmt("ms")),
        ("step wall time, checked run (median, incl. the callback)", checked_wall.fmt("ms")),
        ("A/B change of the wall medians (noisy)", change(checked_wall, plain_wall)),
        ("callback wall time per step (median: one sample)", Stats.of(hook_costs).fmt("ms")),
        (f"callback wall time per step ({everything})", _ms(hook_wall)),
        (f"callback CPU time per step ({everything}; thread CPU)", _ms(hook_cpu)),
        ("callback CPU time per step, by hook (thread CPU)", by_hook),
        ("callback CPU time per step (process CPU: every thread)", _ms(hook_process)),
        ("the same cost per step as a share of other step times", at),
        (
            "callback CPU time per step, short runs (thread CPU, each run)",
            ", ".join(_ms(cost) for cost in short_cpu),
        ),
        (
            "the same, one short run in a fresh process (its first check)",
            _ms(fresh_cpu),
        ),
        ("stride (steps per sample) chosen per window", ", ".join(map(str, sorted(set(strides))))),
        (
            "first checked run in the process (warm-up, not above): callback CPU time",
            f"{_ms(first_cpu)} over {QUICK_STEPS} steps (windows of {QUICK_WINDOW}; incl. "
            f"the first use's imports{_BYTECODE if sys.dont_write_bytecode else ''})",
        ),
        ("window judgements (last run)", "; ".join(windows)),
        (
            "steps that ran with automatic gc enabled (checked runs)",
            f"{sum(gc_steps)} of {len(gc_steps)}",
        ),
    ]
    table = markdown_table(("cost", "value"), rows)
    gc_rows = [
        ("plain run, inside a step", _gc_text(gc_plain)),
        ("checked run, inside a step during a window", _gc_text(gc_during)),
        ("after the checked run", _gc_text({after})),
    ]
    gc_table = markdown_table(
        ("what the training code sees", "gc.isenabled(), frozen objects"), gc_rows
    )
    limit = TARGET_SHARE * TARGET_STEP_MS / 1e3  # 0.060 ms
    worst_short = max(short_cpu)
    target = markdown_table(
        ("target", "measured", "result"),
        [
            (
                f"callback CPU time per step <= 0.3% of a {TARGET_STEP_MS:g} ms step "
                f"({_ms(limit)}), long runs",
                f"{_ms(hook_cpu)} = {hook_cpu * 1e3 / TARGET_STEP_MS * 100:.2f}%",
                _met(hook_cpu <= limit),
            ),
            (
                "the same, short runs (the slowest)",
                f"{_ms(worst_short)} = {worst_short * 1e3 / TARGET_STEP_MS * 100:.2f}%",
                _met(worst_short <= limit),
            ),
            (
                "the same, a short run in a fresh process",
                f"{_ms(fresh_cpu)} = {fresh_cpu * 1e3 / TARGET_STEP_MS * 100:.2f}%",
                _met(fresh_cpu <= limit),
            ),
            (
                "callback CPU time per step <= 0.3% of this run's plain step (CPU median)",
                f"{share * 100:.2f}% ({_ms(hook_cpu)} of {_ms(plain_cpu.median)})",
                _met(share <= TARGET_SHARE),
            ),
        ],
    )
    body = (
        f"transformers Trainer, BERT from a config (2 layers, hidden 128, 64 tokens, batch 8), "
        f"{steps} optimizer steps per run, {repeats} runs of each kind alternating, after "
        f"one unmeasured warm-up run of each kind ({QUICK_STEPS} steps), then "
        f"{short_repeats} short checked runs of {short_steps} steps; "
        f'`GraphLeakCallback(window={window}, on_leak="warn")`. CPU times are the main '
        "thread's (`time.thread_time()`, read innermost around each hook: one read, ~2 us "
        "here, is in every hook's time; one torch thread, the data loaded in the main "
        "thread): unlike wall time they do not count the time other processes of a shared "
        "machine held the core, so they compare fairly across runs (the load average above "
        "says how busy the machine was).\n\n"
        f"{table}\n\n{target}\n\n{gc_table}\n\n"
        "Between samples automatic gc is as the training had it (here: enabled); it is off "
        "during the step that ends in a sample (every k-th, and every step of the warmup), "
        "so that the sample's collection counts what that step left to the cyclic gc, "
        "and during the few steps recorded for a diagnosis (every window after a leak, and "
        "the run's last window once a measured count rose above its baseline: none in these "
        "clean runs). Objects "
        "alive at a window's start stay frozen (`gc.freeze()`) until the run ends: a "
        "sample then costs O(objects made since), not O(heap); automatic gc does not look "
        "at frozen objects. A clean window moves the baseline forward (freezing what is "
        "alive); a leaky one is diagnosed with the heap unfrozen and a fresh window begins. "
        "At the end of the run (or when it raises and the check is closed) gc is as it was "
        "and nothing stays frozen."
    )
    write_results(
        "window",
        "Window mode on a transformers training run",
        body,
        out=options.out,
        quick=options.quick,
    )


def _fresh_process(steps: int) -> float:
    """The callback's CPU time per step of one checked run in a new Python process."""
    import subprocess

    env = {**os.environ, FRESH_ENV: str(steps)}
    done = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def fresh_run(steps: int) -> None:
    """One checked run in this (new) process; prints its callback CPU time per step."""
    pin_threads()
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    step_clock, timed_callback = make_callbacks(WINDOW if steps > WINDOW else QUICK_WINDOW)
    graphleak = timed_callback()
    with tempfile.TemporaryDirectory() as out_dir:
        build_trainer(steps, [step_clock(), graphleak], out_dir).train()
    print(sum(graphleak.cpu_spent.values()) / steps)


def _met(met: bool) -> str:
    return "**met**" if met else "**not met**"


def _ms(seconds: float) -> str:
    return f"{fmt_num(seconds * 1e3)} ms"


def _gc_text(states: set[tuple[bool, int]]) -> str:
    """``disabled, 180,000-185,000 frozen`` per gc.isenabled() value seen."""
    parts = []
    for on in sorted({enabled for enabled, _ in states}):
        frozen = sorted(count for enabled, count in states if enabled == on)
        span = f"{frozen[0]:,}" if frozen[0] == frozen[-1] else f"{frozen[0]:,}-{frozen[-1]:,}"
        parts.append(f"{'enabled' if on else 'disabled'}, {span} frozen")
    return "; ".join(parts)


if __name__ == "__main__":
    if os.environ.get(FRESH_ENV):
        fresh_run(int(os.environ[FRESH_ENV]))
    else:
        main()
