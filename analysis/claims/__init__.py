"""The published claims (docs/claims.md), each with a verdict computed from the results.

A verdict is never typed in: every claim names its claimed figure with an explicit tolerance
band, and an evaluation function turns a latest() frame into findings (ratios per batch size,
aggregated with the median). A CPU figure never stands in for a GPU verdict: a GPU claim with
only CPU data is "not measurable here" and shows the CPU figure for reference.

findings: the engine's pieces (Target, Finding, Source, compare); claim: a Claim and what it
needs; training and inference: the catalogue, each claim's figures, evaluation and words
together; verdicts: the rule, the claims table and how each claim is judged.
"""

from __future__ import annotations

from analysis.claims.claim import Claim, Need
from analysis.claims.findings import (
    CONFIRMED,
    GPU_REASON,
    INCONCLUSIVE,
    NEEDS_GPU,
    NOT_MEASURABLE,
    REFERENCE,
    REFUTED,
    TABLE_COLUMNS,
    VERDICTS,
    Finding,
    Key,
    Source,
    Target,
)
from analysis.claims.verdicts import (
    CLAIMS,
    RULE,
    claims_table,
    combine,
    evaluate,
    how_judged,
    sources,
)

__all__ = [
    "CLAIMS", "CONFIRMED", "GPU_REASON", "INCONCLUSIVE", "NEEDS_GPU", "NOT_MEASURABLE",
    "REFERENCE", "REFUTED", "RULE", "TABLE_COLUMNS", "VERDICTS", "Claim", "Finding", "Key",
    "Need", "Source", "Target", "claims_table", "combine", "evaluate", "how_judged", "sources",
]  # fmt: skip
