"""Verdicts from findings by one stated rule, and the claims table and its how-judged
companion that the results pages and the report show."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis.claims import inference, training
from analysis.claims.claim import Claim
from analysis.claims.findings import (
    CONFIRMED,
    INCONCLUSIVE,
    NEEDS_GPU,
    NOT_MEASURABLE,
    REFERENCE,
    REFUTED,
    TABLE_COLUMNS,
    Finding,
    Source,
    fmt,
)

CLAIMS: tuple[Claim, ...] = (*training.CLAIMS, *inference.CLAIMS)


# The one rule for every claim, whatever its layers (stated once above every claims table).
RULE = (
    "rule: a statement is confirmed only when every measured layer is inside its band, "
    "refuted only when every layer is refuted, else inconclusive; a claim is refuted by any "
    "refuted statement and confirmed only when all are confirmed"
)


def combine(findings: list[Finding]) -> tuple[str, str]:
    """Verdict and reason from the judged findings, by RULE: within one statement every
    measured layer must agree; across statements a claim is refuted by any refuted
    statement, confirmed only by all."""
    judged = [f for f in findings if f.target is not None]
    parts: dict[str, list[str]] = {}
    reasons = []
    for f in judged:
        parts.setdefault(f.part, []).append(f.verdict())
        why = " (batches disagree)" if f.disagree else ""
        reasons.append(f"{f.label} {fmt(f.quantity, f.median)}: {f.verdict()}{why}")
    part_verdicts = [_part_verdict(v) for v in parts.values()]
    for part, layers in parts.items():
        if len(set(layers)) > 1:
            reasons.append(f"the layers of '{part}' disagree")
    if REFUTED in part_verdicts:
        verdict = REFUTED
    elif all(v == CONFIRMED for v in part_verdicts):
        verdict = CONFIRMED
    else:
        verdict = INCONCLUSIVE
    bands = dict.fromkeys(f"{f.target.describe()}: {f.target.band()}" for f in judged if f.target)
    tolerances = [f"tolerance: {b}" for b in bands]
    return verdict, "; ".join([*reasons, *tolerances])  # RULE: stated once above each table


def _part_verdict(layer_verdicts: list[str]) -> str:
    if len(set(layer_verdicts)) == 1:
        return layer_verdicts[0]
    return INCONCLUSIVE  # the layers disagree


def sources(frame: pd.DataFrame) -> list[Source]:
    """(machine, preset) groups, GPUs first, then full presets before smoke, then most data."""
    if "source" in frame.columns:
        frame = frame[frame["source"] == "record"]
    out = []
    for (machine, preset), rows in frame.groupby(["machine", "preset"], sort=True):
        # A non-ok record may lack the device; the ok rows of the same machine say it.
        ok = rows.loc[rows["status"] == "ok", "device"]
        devices = ok[ok != ""] if len(ok) else rows["device"]
        device = str(devices.mode().iloc[0]) if len(devices) else ""
        out.append(Source(str(machine), str(preset), device, rows))
    return sorted(out, key=lambda s: (not s.is_gpu, s.preset == "smoke", -len(s.rows), s.label))


@dataclass
class _Row:
    claim: Claim
    verdict: str = NOT_MEASURABLE
    measured: str = ""
    reasons: list[str] = field(default_factory=list)
    device: str = ""
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, str]:
        c = self.claim
        reason = "; ".join(self.reasons + list(c.notes))
        evidence = "; ".join(self.evidence)
        values = [
            c.id,
            c.text,
            c.claimed,
            self.measured,
            self.verdict,
            reason,
            self.device,
            evidence,
        ]
        return dict(zip(TABLE_COLUMNS, values, strict=True))


def _describe(src: Source, findings: list[Finding]) -> tuple[str, str]:
    suffix = "" if src.is_gpu else " (cpu)"
    measured = "; ".join(f.measured() + suffix for f in findings)
    evidence = f"{src.label}: " + "; ".join(dict.fromkeys(f.evidence() for f in findings))
    return measured, evidence


def evaluate(claim: Claim, frame: pd.DataFrame, srcs: list[Source]) -> dict[str, str]:
    """One row of the claims table."""
    row = _Row(claim)
    row.reasons = [m for n in claim.needs if (m := n.missing(frame))] + list(claim.blockers)
    if claim.prefer is not None:
        srcs = sorted(srcs, key=lambda s: (not s.is_gpu, -claim.prefer(s)))
    results = [(s, f) for s in srcs if s.device and (f := claim.evaluate(s))]
    gpu_results = [(s, f) for s, f in results if s.is_gpu]
    if claim.gpu and not gpu_results:
        lead = "no GPU results for these cells" if any(s.is_gpu for s in srcs) else NEEDS_GPU
        row.reasons.insert(0, f"{lead}; {REFERENCE}" if results else lead)
    elif claim.gpu:
        results = gpu_results
    if not results:
        row.reasons = row.reasons or ["no cells with both sides of the comparison measured ok"]
        return row.as_dict()
    src, findings = results[0]
    row.device = src.device
    row.measured, evidence = _describe(src, findings)
    row.evidence = [evidence]
    if row.reasons:  # shown for reference only: every source's figures (C5: the shard preset's)
        for other, found in results[1:]:
            measured, evidence = _describe(other, found)
            row.measured += f"; {other.label}: {measured}"
            row.evidence.append(evidence)
        return row.as_dict()
    if not any(f.target for f in findings):
        row.reasons = ["no judged comparison measured (only reference figures)"]
        return row.as_dict()
    row.verdict, reason = combine(findings)
    row.reasons = [reason]
    judged = {f.part for f in findings if f.target}
    if unjudged := [p for p in claim.parts if p not in judged]:
        # first: where it decides (a confirmed half is then inconclusive), it is the reason
        row.reasons.insert(0, f"not measured: {', '.join(unjudged)}")
        if row.verdict == CONFIRMED:
            row.verdict = INCONCLUSIVE
    if claim.judges:
        row.reasons.append(f"judged on {claim.judges}")
    # Other devices' verdicts of a device-neutral claim, for the reader (never combined).
    for other, f in results[1:]:
        if any(x.target for x in f):
            verdict = combine(f)[0]
            row.evidence.append(f"also {other.label} ({other.device}): {verdict}")
    return row.as_dict()


def claims_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The claims table from a latest() frame: one row per claim, verdicts computed."""
    srcs = sources(frame)
    return pd.DataFrame([evaluate(c, frame, srcs) for c in CLAIMS], columns=TABLE_COLUMNS)


def how_judged() -> pd.DataFrame:
    """Each claim as docs/claims.md states it: what is measured, the bands its verdict uses,
    whether only a GPU may judge it, and what the suite cannot measure of it."""
    rows = []
    for c in CLAIMS:
        bands = "; ".join(f"{t.describe()}: {t.band()}" for t in c.targets)
        device = "GPU results only" if c.gpu else "any device (named beside the verdict)"
        rows.append({
            "id": c.id, "measured as": c.measures, "bands": bands,
            "judged on": f"{device}; {c.judges}" if c.judges else device,
            "not measured": "; ".join([*c.blockers, *c.notes]) or "-",
        })  # fmt: skip
    return pd.DataFrame(rows)
