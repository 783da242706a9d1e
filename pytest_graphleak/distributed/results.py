"""What the ranks reported, per step factory, and the texts of a failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_graphleak.exceptions import RankError
from pytest_graphleak.pipeline import raise_or_warn
from pytest_graphleak.report.span import raised_text
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult


@dataclass
class RankResult:
    """What one rank reported for one step factory."""

    rank: int
    result: CheckResult | None = None
    #: The rank's traceback, or why it never reported (crash, timeout, aborted).
    error: str | None = None
    #: Order in which failures reached the caller (0 = first); None if not failed or silent.
    failed_order: int | None = None

    @property
    def leaked(self) -> bool:
        return self.result is not None and self.result.leaked

    @property
    def failed(self) -> bool:
        return self.error is not None or (self.result is not None and self.result.error is not None)

    @property
    def unmeasured(self) -> bool:
        return self.result is not None and bool(self.result.unmeasured)


@dataclass
class DistributedResult:
    """One step factory checked on every rank of a process group."""

    name: str
    world_size: int
    ranks: list[RankResult] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def leaked(self) -> bool:
        return any(r.leaked for r in self.ranks)

    @property
    def leaking_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.leaked]

    @property
    def failed_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.failed]

    @property
    def unmeasured_ranks(self) -> list[int]:
        """Ranks whose probes measured nothing the step uses: no clean verdict there."""
        return [r.rank for r in self.ranks if r.unmeasured]

    def results(self) -> list[CheckResult]:
        """The per-rank CheckResults that came back (named '<name> [rank r/N]')."""
        return [r.result for r in self.ranks if r.result is not None]

    def raise_for_failure(self) -> None:
        """RankError if a rank raised/crashed/hung, else GraphLeakError if a rank leaked,
        else UnmeasuredError if a rank measured nothing."""
        if self.failed_ranks:
            first = next((r.result for r in self.ranks if r.failed and r.result is not None), None)
            raise RankError(self.failure_text(), first)
        if self.leaked or self.unmeasured_ranks:
            text = self.leak_text() if self.leaked else self.unmeasured_text()
            raise_or_warn(text, leaked=self.leaked)

    def failure_text(self) -> str:
        """Each failed rank's traceback, the first failure first: the later ones are
        usually its consequence (a peer's connection closed, a collective timed out)."""
        failed = sorted(
            (r for r in self.ranks if r.failed),
            key=lambda r: (r.failed_order is None, r.failed_order or 0, r.rank),
        )
        first = failed[0].rank if failed else None
        lines = [
            f"distributed step {self.name!r} failed on rank(s) "
            f"{ranks_text(sorted(r.rank for r in failed))} of {self.world_size}"
            + (f"; rank {first} failed first:" if len(failed) > 1 else ":")
        ]
        for rank in failed:
            text = rank.error or (_raised(rank.result) if rank.result else "")
            after = f" (after rank {first} failed)" if rank.rank != first else ""
            lines += [f"--- rank {rank.rank}{after} ---", text.rstrip()]
        return "\n".join(lines)

    def leak_text(self, *, series: bool = True) -> str:
        return self._ranks_text("graph leak", self.leaking_ranks, series=series)

    def unmeasured_text(self) -> str:
        return self._ranks_text("not measured", self.unmeasured_ranks)

    def _ranks_text(self, what: str, ranks: list[int], *, series: bool = True) -> str:
        """``what`` on the named ranks, then each of those ranks' full report (``series``:
        with every sample's value, as ``render_text``'s)."""
        lines = [
            f"{what} on rank(s) {ranks_text(ranks)} of {self.world_size} "
            f"in distributed step {self.name!r}"
        ]
        for rank in self.ranks:
            if rank.rank in ranks and rank.result is not None:
                lines += [
                    f"--- rank {rank.rank} ---",
                    render_text(rank.result, series=series).rstrip(),
                ]
        return "\n".join(lines)


def ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks) or "none"


def _raised(result: CheckResult) -> str:
    """A rank's error (its first line the exception, then the rank's traceback) with
    the step it was raised at after the exception's words."""
    head, newline, rest = (result.error or "").partition("\n")
    where = raised_text(result)
    return f"{head}; {where}{newline}{rest}" if where else f"{head}{newline}{rest}"
