"""A claim: its words, what is measured, its targets, the evaluation that turns a Source into
findings, and what it needs of the results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from analysis.claims.findings import Finding, Source, Target


@dataclass(frozen=True)
class Need:
    """Cells a claim needs: any of `names` in `column` somewhere in the results."""

    column: str  # framework, workload or strategy
    names: tuple[str, ...]

    def missing(self, frame: pd.DataFrame) -> str | None:
        if frame[self.column].isin(self.names).any():
            return None
        names = " or ".join(self.names)
        return (
            f"no {names} workload results" if self.column == "workload" else f"no {names} results"
        )


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    measures: str
    targets: tuple[Target, ...]
    gpu: bool  # about GPU memory: a CPU figure is shown, never judged
    evaluate: Callable[[Source], list[Finding]]
    needs: tuple[Need, ...] = ()
    blockers: tuple[str, ...] = ()  # what the suite lacks, whatever the results
    notes: tuple[str, ...] = ()  # the parts of the claim that are not measured
    # Statements (Finding.part) that must each be judged before the claim can be confirmed:
    # a claim with a half unmeasured is at best inconclusive (refuted if a measured half is).
    parts: tuple[str, ...] = ()
    # Ranks sources (higher first, within GPU-before-CPU) where the default order (most rows)
    # is not the most telling one: C7 wants the finest batch grid, i.e. the eval probe.
    prefer: Callable[[Source], float] | None = None
    # whose cells the verdict judges where not every framework's (the advice names one
    # framework's API), said in the verdict's reason
    judges: str = ""

    @property
    def claimed(self) -> str:
        return "; ".join(t.describe() for t in self.targets)


def fw(*n: str) -> Need:
    return Need("framework", n)


def wl(*n: str) -> Need:
    return Need("workload", n)


def st(*n: str) -> Need:
    return Need("strategy", n)
