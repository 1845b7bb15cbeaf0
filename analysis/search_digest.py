"""The capacity searches digested: the reference table of every search, the cost line per
strategy and the formula a reader applies at a budget of their own (against the verified
answers), how well the first guesses predicted the answers, probes per search, answers against
the boundary's noise, and the spread of the thresholds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.decision_terms import (
    CAPACITY_TITLE,
    CURVE_TITLE,
    INFERENCE,
    LINE_KEYS,
    REFERENCE,
    SEARCH_LINE,
    SEARCH_LINE_RULE,
    TRAINING,
    budget_label,
    busy_of,
    by_date,
    latest_searches,
    own_line,
)
from analysis.labels import metric_label
from analysis.schema import MIB
from membench.fitting import linear_fit
from membench.records import UNSETTLED

CAPACITY_REFERENCE = [
    "machine", "workload", "preset", "budget_gib", "framework", "strategy", "measured_by",
    "in_decision_table", "search",
    "prediction_basis", "predicted_batch", "largest_batch", "smallest_non_fit", "probes",
    "bisection_probes", "throughput_at_capacity", "fit_fixed_mib", "fit_per_sample_mib",
    "fit_r2", "repeats", "margin_mib", "over_mib", "spread_mib", "steady_peak_at_fit_mib",
    "foreign_cpu_share_at_fit", "status", "reason",
]  # fmt: skip
# columns of the boundary's repeats: left out where no search has them (older files)
_REPEAT_COLUMNS = ["margin_mib", "over_mib", "spread_mib", "steady_peak_at_fit_mib"]


def capacity_reference(capacity: pd.DataFrame) -> pd.DataFrame:
    """Every search (a search run more than once: its runs oldest first), with the commit that
    measured it and whether it is the one its decision table shows (latest_searches: a search
    repeated in several runs is one row there): the model's predicted batch beside the
    verified one, the probes it took and the ones plain bisection would have, the linear fit
    of its probes (SEARCH_LINE_RULE), the answer's margin against its runs' noise. No speed
    from a busy host. (Each run's budget note is said once, by capacity_notes.)"""
    if capacity.empty:
        return pd.DataFrame(columns=CAPACITY_REFERENCE)
    order = ["machine", "workload", "preset", "budget_gib", "framework", "strategy"]
    capacity = capacity.reset_index(drop=True)  # rows are told apart by their index
    shown = set(latest_searches(capacity).index)
    capacity = capacity.assign(
        measured_by=capacity["run"].str.rsplit("-", n=1).str[-1],
        in_decision_table=["yes" if i in shown else "" for i in capacity.index],
    )
    table = by_date(capacity).sort_values(order, kind="stable")
    busy = [busy_of(r) is not None for r in table.itertuples()]
    # frames without the probes' peaks (older loaders) keep the recorded line
    unsound = [not own_line(r) for r in table.itertuples()]
    table = table.reindex(columns=CAPACITY_REFERENCE).copy()
    table.loc[busy, "throughput_at_capacity"] = math.nan
    table.loc[unsound, SEARCH_LINE] = math.nan
    for column in ("largest_batch", "predicted_batch", "bisection_probes", "smallest_non_fit"):
        table[column] = table[column].astype("Float64").round().astype("Int64")
    empty = [c for c in [*_REPEAT_COLUMNS, *SEARCH_LINE, "foreign_cpu_share_at_fit"]
             if table[c].isna().all()]  # fmt: skip
    if table["repeats"].fillna(1).le(1).all():
        empty.append("repeats")
    return table.drop(columns=empty).round(2).reset_index(drop=True)


def capacity_notes(capacity: pd.DataFrame) -> list[str]:
    return sorted({n for n in capacity.get("note", pd.Series(dtype=str)) if n})


# The reader's formula keeps twice the residuals' standard error free: the line runs through
# the middle of the runs' peaks, and an answer must fit every run (without it, the formula gave
# more than the verified answer at 86 of 104 searches on amd-epyc-f25m17, and the batch it gave
# was put down by the boundary's noise or ran over). Twice the standard error, not the largest
# residual: that is one probe's (torch's ResNet-50 checkpoint: 403 MiB at 35 against an RMS of
# 109). The standard error counts the line's two parameters, sqrt(SSE / (n - 2)): a line through
# two probes says nothing of their noise, so it gives no formula.
HEADROOM_SE = 2
CURVE_FORMULA = "largest batch ~ floor((budget - fixed - headroom) / per-sample)"
CURVE_INTRO = (
    "Per workload x framework x strategy, a line fitted over every probe of its searches at "
    "every budget (peak = fixed + per-sample x batch, on the budget's layer; R² and the RMS "
    f"residual say how well it holds). For a budget of your own: {CURVE_FORMULA}, in MiB, "
    "then down to a batch the strategy accepts (accumulate-k: a multiple of k); the headroom "
    f"is {HEADROOM_SE} x the residuals' standard error (sqrt(SSE / (probes - 2)); none, and no "
    "formula, from two probes), since the line runs through the middle of the runs' peaks and "
    "a batch fits only when every run fits. Verified: the searches' answers (>= N: the "
    "search's maximum fitted); formula: what it gives at the same budgets. Its worst error is "
    "out of sample: each budget's verified answer against the formula from the other "
    "budgets' probes alone, |formula - verified| / verified, the worst over the budgets "
    "(where two or more were searched)."
)
# what a reader needs to read a capacity table: its rule, stated where the table shows
TABLE_NOTES = {CAPACITY_TITLE: SEARCH_LINE_RULE, CURVE_TITLE: CURVE_INTRO}


def table_note(name: str, table: pd.DataFrame) -> str:
    """The rule a reader needs beside the table titled `name` (TABLE_NOTES), empty where it has
    none or where the table shows nothing the rule speaks of (the capacity reference without
    any search's own line: capacity_reference drops those columns where every line is out)."""
    if name == CAPACITY_TITLE and not set(SEARCH_LINE) & set(table.columns):
        return ""
    return TABLE_NOTES.get(name, "")


CURVE_COLUMNS = [
    *LINE_KEYS, "probes", "fixed_mib", "per_sample_mib", "fit_r2", "rms_residual_mib",
    "headroom_mib", "verified", "formula", "formula_error_pct",
]  # fmt: skip


def formula_batch(
    budget_bytes: float, fixed_bytes: float, per_sample_bytes: float, step: int = 1
) -> int | None:
    """The largest batch a fixed + per-sample cost puts within a budget, down to a multiple of
    the strategy's step (accumulate-k: k); CURVE_FORMULA with the headroom in the fixed cost."""
    if not per_sample_bytes > 0:
        return None
    return max(0, math.floor((budget_bytes - fixed_bytes) / per_sample_bytes)) // step * step


def _step(search: Any) -> int:
    """The batches a search's strategy accepts are multiples of this: the answer over the
    micro-batch its record reports (accumulate-k: k), else 1."""
    micro = (search.strategy_notes or {}).get("micro_batch")
    if isinstance(micro, int | float) and micro > 0 and search.largest_batch > 0:
        return max(1, round(search.largest_batch / micro))
    return 1


# a strategy's line: (fixed, per sample, R^2, RMS residual, probes), in bytes
Line = tuple[float, float, float, float, int]


def cost_line(peaks: pd.Series) -> Line | None:
    """(fixed, per sample, R^2, RMS residual, probes) of the line over every probe in peaks,
    or None with fewer than two distinct batches."""
    points = [point for probes in peaks for point in probes]
    if len({b for b, _ in points}) < 2:
        return None
    x, y = (np.asarray(v, dtype=float) for v in zip(*points, strict=True))
    fixed, per_sample, r2 = linear_fit(x, y)
    rms = float(np.sqrt(np.mean((y - fixed - per_sample * x) ** 2)))
    return fixed, per_sample, r2, rms, len(points)


def _headroom(line: Line) -> float:
    """CURVE_FORMULA's headroom (bytes): HEADROOM_SE x the residuals' standard error, NaN from
    two probes (a line through them has no residual to tell their noise by)."""
    _, _, _, rms, probes = line
    return HEADROOM_SE * rms * math.sqrt(probes / (probes - 2)) if probes > 2 else math.nan


def _reader_batch(
    budget_bytes: float, line: Line | None, step: int, headroom: bool = True
) -> int | None:
    """CURVE_FORMULA's batch from a cost_line (None without one, or where a cost is not finite);
    headroom=False: the bare line's."""
    if line is None:
        return None
    fixed = line[0] + (_headroom(line) if headroom else 0.0)
    if not (math.isfinite(fixed) and math.isfinite(line[1])):
        return None
    return formula_batch(budget_bytes, fixed, line[1], step)


def _formula_at_budgets(capacity: pd.DataFrame) -> pd.DataFrame:
    """One row per search that ended ok (its latest run), with its strategy's line over every
    budget's probes (`line`, None under two distinct batches): the verified answer, whether a
    non-fit bracketed it, and CURVE_FORMULA's batch from that line, without its headroom and
    from the other budgets' probes alone (out of sample; None with no other budget)."""
    columns = [*LINE_KEYS, "budget_gib", "line", "verified", "bracketed", "formula",
               "bare_line", "held_out"]  # fmt: skip
    if capacity.empty or "probe_peaks" not in capacity.columns:
        return pd.DataFrame(columns=columns)
    searches = latest_searches(capacity)
    searches = searches[searches["status"] == "ok"]
    rows = []
    for key, group in searches.groupby(LINE_KEYS, sort=True):
        whole = cost_line(group["probe_peaks"])
        for s in group.sort_values("budget_gib").itertuples():
            budget, step = s.budget_gib * 2**30, _step(s)
            others = cost_line(group.loc[group.index != s.Index, "probe_peaks"])
            rows.append({
                **dict(zip(LINE_KEYS, key, strict=True)), "budget_gib": s.budget_gib,
                "line": whole, "verified": int(s.largest_batch),
                "bracketed": bool(pd.notna(s.smallest_non_fit)),
                "formula": _reader_batch(budget, whole, step),
                "bare_line": _reader_batch(budget, whole, step, headroom=False),
                "held_out": _reader_batch(budget, others, step) if len(group) >= 2 else None,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def capacity_curve(capacity: pd.DataFrame) -> pd.DataFrame:
    """A reader's own budget: per machine, workload, preset, budget layer, framework and
    strategy, the fixed and per-sample cost fitted over the probes of its searches at every
    budget (R^2 and the RMS residual in MiB, the formula's headroom), the verified answers
    beside CURVE_FORMULA's, and the formula's worst error out of sample (each budget's answer
    against the formula from the other budgets' probes, |formula - verified| / verified, %)
    where two or more budgets were searched (an answer at the search's maximum, or 0, is left
    out of it)."""
    at_budgets = _formula_at_budgets(capacity)
    at_budgets = at_budgets[at_budgets["line"].notna()]
    rows = []
    for key, group in at_budgets.groupby(LINE_KEYS, sort=True):
        fixed, per_sample, r2, rms, probes = group["line"].iloc[0]
        verified, formula, errors = [], [], []
        for s in group.itertuples():
            label, answer = budget_label(s.budget_gib), s.verified
            verified.append(f"{label}: {answer if s.bracketed else f'>= {answer}'}")
            formula.append(f"{label}: {'-' if pd.isna(s.formula) else int(s.formula)}")
            if s.bracketed and answer > 0 and pd.notna(s.held_out):
                errors.append(abs(s.held_out - answer) / answer * 100)
        rows.append({
            **dict(zip(LINE_KEYS, key, strict=True)), "probes": probes,
            "fixed_mib": fixed / MIB, "per_sample_mib": per_sample / MIB, "fit_r2": r2,
            "rms_residual_mib": rms / MIB, "headroom_mib": _headroom(group["line"].iloc[0]) / MIB,
            "verified": "; ".join(verified), "formula": "; ".join(formula),
            "formula_error_pct": max(errors) if errors else math.nan,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=CURVE_COLUMNS).round(2)


def formula_against_verified(capacity: pd.DataFrame) -> str:
    """How often CURVE_FORMULA, from every budget's probes (in sample), gives more than the
    verified answer at the budgets searched (a reader's batch that would not have held), with
    and without its headroom; empty where no answer is bracketed."""
    at_budgets = _formula_at_budgets(capacity)
    ok = at_budgets[at_budgets["bracketed"] & (at_budgets["verified"] > 0)]
    ok = ok.dropna(subset=["formula", "bare_line"])
    if ok.empty:
        return ""
    error = (ok["formula"] - ok["verified"]) / ok["verified"] * 100
    bare = int((ok["bare_line"] > ok["verified"]).sum())

    def counted(part: pd.Series) -> str:
        return f"{len(part)} (by at most {part.abs().max():.0f}%)" if len(part) else "none"

    return (
        f"In sample, the formula from every budget's probes gives more than the verified answer "
        f"at {counted(error[error > 0])} of the {len(ok)} searches with a formula and a "
        f"bounded answer above 0 (not the search's maximum), and fewer at "
        f"{counted(error[error < 0])}; the bare line, without the headroom, gives more at "
        f"{bare}."
    )


def _median_worst(values: pd.Series) -> dict[str, float]:
    return {"median": values.median(), "worst": values.max()}


def prediction_kind(basis: str) -> str:
    """What a search's first guess came from, from its stated basis: the framework's
    compiler (XLA), the memory model with this machine's calibration or another host kind's
    (and, where the strategy had no fit of its own, another strategy's constants), or the model
    from the specification alone (which also stands in where a compiled guess failed)."""
    for start, kind in (
        ("XLA", "XLA compiled"),
        ("calibrated on ", "model calibrated on another host kind"),
        ("calibrated", "calibrated model"),
    ):
        if basis.startswith(start):
            borrowed = basis.startswith("calibrated") and "'s constants" in basis
            return f"{kind}, another strategy's constants" if borrowed else kind
    return "spec-only model" if basis.startswith("spec-only") else "other"


def _scored(capacity: pd.DataFrame, batch: str, own_steps: bool) -> tuple[pd.DataFrame, pd.Series]:
    """The searches a guess (its column: the first guess's predicted_batch, or model_batch)
    is scored on (ended ok with a bracketed answer above 0 and a guess), and per row whether
    the guess's own input was measured at the answer or the next batch (own_steps: the first
    guess, whose XLA first-run extra ran steps and whose calibration cells, on this machine
    and of this strategy, measured its constants; a prediction is never scored against its
    own measurement)."""
    ok = capacity[(capacity["status"] == "ok") & (capacity["largest_batch"] > 0)]
    ok = ok.dropna(subset=[batch, "smallest_non_fit"])
    if not own_steps:
        return ok, pd.Series(False, index=ok.index, dtype=bool)
    fed = [
        bool({int(a), int(n)} & set(m))
        for a, n, m in zip(
            ok["largest_batch"], ok["smallest_non_fit"], ok["prediction_measured_batches"],
            strict=True,
        )
    ]  # fmt: skip
    return ok, pd.Series(fed, index=ok.index, dtype=bool)


# what a capacity error scores: the search's first guess (what guided it), or the memory
# model's with the calibrations of the latest `membench predict`
GUESSES = {
    "first": ("predicted_batch", "prediction_basis"),
    "model": ("model_batch", "model_basis"),
}


def capacity_error(capacity: pd.DataFrame, guess: str = "first") -> pd.DataFrame:
    """A guess's capacity error per framework, per what the guess came from
    (prediction_kind), the budget's layer and the preset (its input sizes: a one-sample answer
    at toy sizes makes a 100% error of a one-sample miss): |predicted - verified| / verified
    over the searches that ended ok with a bracketed answer (not the search's maximum) and a
    guess, in % (median and worst); a first guess whose own input was measured at the
    answer or the next batch is left out (counted; the model's guess is made again from
    today's calibrations, whose batches no committed search answers at: the calibrate
    preset's batches are chosen so, and test_calibration checks it).
    guess: "first" or "model" (GUESSES). "worst beyond noise %": the worst error against
    the answer's noise band (beyond_noise), which the verified answer's own runs set; "worst
    at": the search behind the worst error, for a reader to look up."""
    first = guess == "first"  # only the first guess ran steps of its own (XLA's)
    columns = ["framework", "prediction", "budget layer", "preset", "searches",
               "median error %", "worst error %", "worst at", "worst beyond noise %"]  # fmt: skip
    columns += ["left out (own input)"] if first else []
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    batch, basis = GUESSES[guess]
    ok, fed = _scored(capacity, batch, own_steps=first)
    if ok.empty:
        return pd.DataFrame(columns=columns)
    error = (ok[batch] - ok["largest_batch"]).abs() / ok["largest_batch"] * 100
    band = beyond_noise(ok[batch], ok["largest_batch"], ok["fitted_every_run"])
    ok = ok.assign(error=error, band=band, fed=fed, kind=ok[basis].map(prediction_kind))
    rows = []
    groups = ok.groupby(["kind", "budget_layer", "preset"], sort=True)
    for (kind, layer, preset), by_kind in groups:
        parts = [*by_kind.groupby("framework", sort=True)]
        for framework, part in [*parts, *([("all", by_kind)] if len(parts) > 1 else [])]:
            scored = part[~part["fed"]]
            stats = _median_worst(scored["error"])
            left_out = [int(part["fed"].sum())] if first else []
            rows.append([framework, kind, metric_label(layer), preset, len(scored),
                         stats["median"], stats["worst"], _worst_at(scored, batch),
                         scored["band"].max(), *left_out])  # fmt: skip
    return pd.DataFrame(rows, columns=columns).round(1)


def _worst_at(scored: pd.DataFrame, batch: str) -> str:
    """The search with the largest error (the first in workload, framework, strategy, budget
    order where several tie): "transformer torch infer 2 GiB: 262 for 418"; "" where none was
    scored."""
    if scored.empty:
        return ""
    ordered = scored.sort_values(["workload", "framework", "strategy", "budget_gib"])
    row = ordered.iloc[int(ordered["error"].to_numpy().argmax())]
    what = f"{row['workload']} {row['framework']} {row['strategy']}"
    guessed, answer = int(row[batch]), int(row["largest_batch"])
    return f"{what} {budget_label(row['budget_gib'])}: {guessed} for {answer}"


def beyond_noise(guess: pd.Series, answer: pd.Series, top: pd.Series) -> pd.Series:
    """A guess's error against the answer's noise band, in %: 0 from the answer up to the
    largest batch that fitted every run (the batches the noise rule put down for want of
    room: a guess of the peak cannot know the runs' spread), else |guess - the band's
    nearest end| / that end."""
    top = top.fillna(answer).clip(lower=answer)
    over = (guess - top).clip(lower=0) / top
    under = (answer - guess).clip(lower=0) / answer
    return (over + under) * 100


def probes_per_search(capacity: pd.DataFrame) -> pd.DataFrame:
    """Probes the model-guided searches took against the ones plain doubling and bisection
    from batch 1 would have taken for the same answers (median and worst), the boundary's
    repeats counted on both sides (bisection would measure them too)."""
    columns = ["framework", "searches", "guided median", "guided worst", "bisection median",
               "bisection worst"]  # fmt: skip
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    guided = capacity[capacity["search"] == "guided"]
    if guided.empty:
        return pd.DataFrame(columns=columns)
    guided = guided.assign(plain=guided["bisection_probes"] + guided["repeat_probes"])
    rows = []
    for framework, part in [*guided.groupby("framework", sort=True), ("all", guided)]:
        mine, plain = _median_worst(part["probes"]), _median_worst(part["plain"])
        rows.append([framework, len(part), mine["median"], mine["worst"], plain["median"],
                     plain["worst"]])  # fmt: skip
    return pd.DataFrame(rows, columns=columns).round(1)


NOISE_COLUMNS = ["run", "workloads", "rule", "answers", "margin >= spread", "within noise"]
NOISE_BY_RULE = ["preset", "rule", "runs", "workloads", "answers", "margin >= spread",
                 "within noise"]  # fmt: skip


def answers_against_noise(capacity: pd.DataFrame, by_rule: bool = False) -> pd.DataFrame:
    """Per capacity run whose boundaries were repeated: its answers (ok, above 0), how many
    leave at least the runs' spread below the budget and how many are within their noise,
    and the rule the run's searches followed (margin >= spread since noise_room, else every
    repeat within the budget). by_rule: the runs summed per preset and rule, the verdict a
    summary page has room for."""
    columns = NOISE_BY_RULE if by_rule else NOISE_COLUMNS
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    # an unsettled search holds no answer, and its rule is not known
    settled = capacity[capacity["status"] != UNSETTLED]
    repeated = settled[settled["repeats"].fillna(1) > 1]
    for (_, run), part in repeated.groupby(["machine", "run"], sort=True):
        ok = part[(part["status"] == "ok") & (part["largest_batch"] > 0)]
        known = ok.dropna(subset=["margin_mib", "spread_mib"])
        noisy = int((known["spread_mib"] > known["margin_mib"]).sum())
        rule = "margin >= spread" if part["noise_room"].eq(True).all() else "every repeat fits"
        preset = ", ".join(sorted(set(part["preset"])))
        rows.append([run, preset, set(part["workload"]), rule, len(ok), len(known) - noisy, noisy])
    per_run = pd.DataFrame(rows, columns=["run", "preset", *NOISE_COLUMNS[1:]])
    if by_rule:
        per_run = per_run.groupby(["preset", "rule"], sort=True).agg(**{
            "runs": ("run", "size"), "workloads": ("workloads", lambda w: set().union(*w)),
            **{c: (c, "sum") for c in ("answers", "margin >= spread", "within noise")},
        }).reset_index()  # fmt: skip
    per_run["workloads"] = per_run["workloads"].map(lambda w: ", ".join(sorted(w)))
    return per_run[columns]


# the strategies that fix glibc's mmap threshold, each with the strategy it is measured against
THRESHOLD_FIXED = {
    "mmap-threshold": REFERENCE[TRAINING],
    "infer-mmap-threshold": REFERENCE[INFERENCE],
}
THRESHOLD_COLUMNS = [
    "framework", "workload", "preset", "budget GiB", "reference", "reference's answer",
    "reference's spread MiB", "threshold fixed", "its answer", "its spread MiB",
]  # fmt: skip


def threshold_spread(capacity: pd.DataFrame) -> pd.DataFrame:
    """Per search of a strategy that fixes glibc's mmap threshold and its reference's at the
    same budget (both with an answer, their boundaries repeated): both answers and the runs'
    largest spread at each boundary, the noise an answer is measured against."""
    shown = latest_searches(capacity) if len(capacity) else capacity
    if shown.empty:
        return pd.DataFrame(columns=THRESHOLD_COLUMNS)
    answered = (shown["status"] == "ok") & (shown["largest_batch"] > 0)
    ok = shown[answered & (shown["repeats"].fillna(1) > 1)].dropna(subset=["spread_mib"])
    keys = ["machine", "framework", "workload", "preset", "budget_gib"]
    fixed = ok[ok["strategy"].isin(list(THRESHOLD_FIXED))]
    fixed = fixed.assign(reference=fixed["strategy"].map(THRESHOLD_FIXED))
    pairs = fixed.merge(
        ok, left_on=[*keys, "reference"], right_on=[*keys, "strategy"], suffixes=("", "_ref")
    )
    table = pd.DataFrame({
        "framework": pairs["framework"], "workload": pairs["workload"],
        "preset": pairs["preset"], "budget GiB": pairs["budget_gib"],
        "reference": pairs["reference"], "reference's answer": pairs["largest_batch_ref"],
        "reference's spread MiB": pairs["spread_mib_ref"], "threshold fixed": pairs["strategy"],
        "its answer": pairs["largest_batch"], "its spread MiB": pairs["spread_mib"],
    })  # fmt: skip
    table = table.sort_values(["framework", "workload", "preset", "budget GiB", "reference"])
    spreads = ["reference's spread MiB", "its spread MiB"]
    return table.reset_index(drop=True).round(dict.fromkeys(spreads, 1))


def capacity_searches(capacity: pd.DataFrame, digest: bool = False) -> dict[str, pd.DataFrame]:
    """The searches' own tables, titled: the first guess's error, the probes they took, the
    answers against their noise (per run, or, in a digest, per preset and rule), and (not in
    a digest) the boundaries' spread with glibc's mmap threshold fixed against its default."""
    named: dict[str, pd.DataFrame] = {}
    if len(error := capacity_error(capacity)):
        title = "The first guess's capacity error: |predicted - verified| / verified"
        named[f"{title}, by what the guess came from"] = error
    first = capacity_error(capacity)
    if len(error := capacity_error(capacity, "model")):
        title = "The memory model's capacity error with today's calibrations"
        same = first.drop(columns="left out (own input)").equals(error)
        if same:  # say so once, not in a second table a reader compares cell by cell
            spec = set(error["prediction"]) == {"spec-only model"}
            why = "no calibration on this machine: both are the spec-only model" if spec else (
                "the same guesses")  # fmt: skip
            for table in named.values():  # said above the one table (its attrs' note)
                table.attrs["note"] = (
                    f"The memory model's capacity error with today's calibrations is the same "
                    f"({why}): one table shows both."
                )
        else:
            named[f"{title} (never the search's own probes), by what its constants came from"] = (
                error)  # fmt: skip
    if len(probes := probes_per_search(capacity)):
        title = "Probes per search: model-guided against plain bisection"
        named[f"{title}, the repeats counted on both sides"] = probes
    if len(noise := answers_against_noise(capacity, by_rule=digest)):
        title = "The answers against their noise: margin against the boundary's spread"
        named[title + (", the runs summed per preset and rule" if digest else "")] = noise
    if not digest and len(spread := threshold_spread(capacity)):
        title = "glibc's mmap threshold and the boundary's noise: the runs' spread"
        named[f"{title} with its default against fixed, search for search"] = spread
    return named
