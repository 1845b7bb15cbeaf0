"""The decision table: per workload and memory budget, what fits and how fast it trains.

One row per framework x strategy searched by `membench capacity`: the largest batch within
the budget, samples/s at that batch, and against the same framework's reference strategy
(baseline for training, infer for inference) the memory saved and the slowdown at one batch
the preset's grid measured both at. A strategy whose search did not end ok says why. The
Markdown pages, the HTML report and the notebook all show this function's tables.
"""

from __future__ import annotations

import pandas as pd

from analysis.families import family, is_training, strategy_order
from analysis.schema import PRIMARY_MEMORY, device_kind

THROUGHPUT = "throughput_samples_per_second"
# (machine, workload, preset, budget in GiB): a preset fixes the input size, so the same budget
# under two presets is two questions
DecisionKey = tuple[str, str, str, float]
TRAINING, INFERENCE = "training", "inference"
REFERENCE = {TRAINING: "baseline", INFERENCE: "infer"}  # what a row is compared against
BEST_RULE = (
    "best: each framework's training strategy with the highest samples/s at its own largest "
    "batch (a tie goes to the larger batch)"
)
LARGEST, SPEED, BEST, WHY = "largest batch", "samples/s at it", "best", "why not"


def saved_header(batch: int | None) -> str:
    return "memory saved" + (f" at batch {batch}" if batch else "")


def slowdown_header(batch: int | None) -> str:
    return "slowdown" + (f" at batch {batch}" if batch else "")


def budget_label(gib: float) -> str:
    """1 GiB, 1.5 GiB; 800 MiB where GiB would need more than two decimals."""
    return f"{gib:g} GiB" if round(gib, 2) == gib else f"{gib * 1024:.0f} MiB"


def where(key: DecisionKey) -> str:
    machine, workload, preset, gib = key
    return f"{workload}, preset {preset}, budget {budget_label(gib)}"


def _mode(strategy: str) -> str:
    return TRAINING if is_training(strategy) else INFERENCE


def _ok_values(cells: pd.DataFrame, metric: str) -> pd.Series:
    """metric value per (framework, strategy, batch) over the cells that ended ok."""
    rows = cells[(cells["metric"] == metric) & (cells["status"] == "ok")].dropna(subset=["value"])
    return rows.groupby(["framework", "strategy", "batch_size"])["value"].last()


def against_reference(cells: pd.DataFrame) -> pd.DataFrame:
    """Per framework, strategy and batch: memory saved (%, positive saves) and slowdown (x,
    above 1 is slower) against the same framework's reference strategy at the same batch, on
    the device's primary memory layer (host RSS on a CPU, the allocator's peak on a GPU)."""
    columns = ["framework", "strategy", "batch_size", "saved_pct", "slowdown"]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    memory = PRIMARY_MEMORY[device_kind(str(cells["device"].iloc[0]))]
    wide = pd.DataFrame(
        {"memory": _ok_values(cells, memory), "speed": _ok_values(cells, THROUGHPUT)}
    )
    if wide.empty:
        return pd.DataFrame(columns=columns)
    wide = wide.reset_index()
    wide["reference"] = wide["strategy"].map(lambda s: REFERENCE[_mode(s)])
    ref = wide.drop(columns="reference").rename(
        columns={"strategy": "reference", "memory": "ref_memory", "speed": "ref_speed"}
    )
    merged = wide.merge(ref, on=["framework", "reference", "batch_size"])
    merged = merged[merged["strategy"] != merged["reference"]]
    merged["saved_pct"] = (1 - merged["memory"] / merged["ref_memory"]) * 100
    merged["slowdown"] = merged["ref_speed"] / merged["speed"]
    return merged[columns].reset_index(drop=True)


def comparison_batch(pairs: pd.DataFrame) -> int | None:
    """The batch with the most strategy/reference pairs measured (a tie: the larger batch)."""
    counts = pairs.dropna(subset=["saved_pct"]).groupby("batch_size").size()
    if counts.empty:
        return None
    return int(max(counts.items(), key=lambda item: (item[1], item[0]))[0])


def _best(table: pd.DataFrame) -> pd.Series:
    """True on each framework's best training row (BEST_RULE)."""
    ok = table[(table["mode"] == TRAINING) & table[LARGEST].notna() & table[SPEED].notna()]
    best = pd.Series(False, index=table.index)
    for _, rows in ok.groupby("framework"):
        ranked = rows.sort_values([SPEED, LARGEST], ascending=False, kind="stable")
        best[ranked.index[0]] = True
    return best


def _one_table(searches: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    pairs = against_reference(cells)
    searched = pd.MultiIndex.from_frame(searches[["framework", "strategy"]])
    pairs = pairs[pd.MultiIndex.from_frame(pairs[["framework", "strategy"]]).isin(searched)]
    batch = comparison_batch(pairs)
    at = pairs[pairs["batch_size"] == batch].set_index(["framework", "strategy"])
    rows = []
    for r in searches.itertuples():
        ok = r.status == "ok" and r.largest_batch and r.largest_batch > 0
        none_fits = r.status == "ok" and not ok  # searched, and not even its first batch fits
        pair = (r.framework, r.strategy)
        rows.append({
            "mode": _mode(r.strategy), "framework": r.framework, "strategy": r.strategy,
            "family": family(r.strategy),
            LARGEST: int(r.largest_batch) if ok else (0 if none_fits else pd.NA),
            SPEED: float(r.throughput_at_capacity) if ok and pd.notna(r.throughput_at_capacity)
            else float("nan"),
            saved_header(batch): at.loc[pair, "saved_pct"] if pair in at.index else float("nan"),
            slowdown_header(batch): at.loc[pair, "slowdown"] if pair in at.index else float("nan"),
            WHY: (AT_MAXIMUM if pd.isna(r.smallest_non_fit) else "") if ok
            else _none_fits(r.smallest_non_fit) if none_fits
            else f"{r.status}: {r.reason}".rstrip(": "),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    table[LARGEST] = table[LARGEST].astype("Int64")
    order = {s: i for i, s in enumerate(strategy_order(table["strategy"]))}
    table = table.assign(
        _mode=table["mode"].map({TRAINING: 0, INFERENCE: 1}), _order=table["strategy"].map(order)
    )
    table = table.sort_values(["_mode", "framework", "_order"], kind="stable")
    table = table.drop(columns=["_mode", "_order"]).reset_index(drop=True)
    table.insert(5, BEST, _best(table).map({True: "best", False: ""}))
    return table


def decision_table(view: pd.DataFrame, capacity: pd.DataFrame) -> dict[DecisionKey, pd.DataFrame]:
    """Per (machine, workload, preset, budget): a row per framework x strategy searched, training
    rows first. `view` is analysis.loader.latest()'s; `capacity` analysis.loader.load_capacity's.
    The same search in two runs: the later run's folder (by name) wins."""
    if capacity.empty:
        return {}
    keys = ["machine", "workload", "preset", "budget_gib"]
    searches = capacity.sort_values("run", kind="stable").drop_duplicates(
        [*keys, "framework", "strategy"], keep="last"
    )
    tables = {}
    for key, group in searches.groupby(keys, sort=True):
        machine, workload, preset, _ = key
        cells = view[
            (view["machine"] == machine) & (view["workload"] == workload)
            & (view["preset"] == preset)
        ]  # fmt: skip
        tables[(str(machine), str(workload), str(preset), float(key[3]))] = _one_table(group, cells)
    return tables


def _none_fits(smallest: float) -> str:
    return f"none fits: batch {int(smallest)}, the smallest tried, is over the budget"


# an answer at the search's largest batch is a lower bound: nothing larger was tried
AT_MAXIMUM = "at least this: the search's largest batch fits, none larger was tried"
WHY_CHARS = 120  # a reason longer than this is cut; the reference pages have it whole


def _short(reason: str) -> str:
    return reason if len(reason) <= WHY_CHARS else reason[: WHY_CHARS - 1].rstrip() + "…"


def formatted(table: pd.DataFrame) -> pd.DataFrame:
    """The table as text for a page: percentages signed, slowdowns as x, blanks as "-", long
    reasons cut (the workload's reference page and the capacity page have them whole)."""
    out = table.drop(columns=["family"]).astype(object)
    for column in out.columns:
        values = table[column]
        if column.startswith("memory saved"):
            out[column] = values.map(lambda v: "-" if pd.isna(v) else f"{round(v):+d}%")
        elif column.startswith("slowdown"):
            out[column] = values.map(lambda v: "-" if pd.isna(v) else f"{v:.2f}x")
        elif column == SPEED:
            out[column] = values.map(lambda v: "-" if pd.isna(v) else f"{v:.3g}")
        elif column == LARGEST:
            out[column] = values.map(lambda v: "-" if pd.isna(v) else str(int(v)))
        elif column == WHY:
            out[column] = values.map(_short)
    return out


def by_mode(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The training rows and the inference rows, each without the mode column (and the
    inference rows without the best mark, which ranks training strategies only)."""
    parts = {}
    for mode in (TRAINING, INFERENCE):
        rows = table[table["mode"] == mode].drop(columns="mode")
        if mode == INFERENCE:
            rows = rows.drop(columns=BEST)
        if len(rows):
            parts[mode] = rows.reset_index(drop=True)
    return parts


def note(table: pd.DataFrame) -> str:
    """What the columns mean, for the text above a decision table."""
    batch = next((c.removeprefix("memory saved at batch ") for c in table.columns
                  if c.startswith("memory saved at batch ")), None)  # fmt: skip
    compared = (
        f"at batch {batch}, the batch of the preset's grid with the most pairs measured"
        if batch
        else "at a batch of the preset's grid; no pair was measured, so these are empty"
    )
    return (
        "Largest batch: the capacity search's verified answer; samples/s measured at it. "
        "Memory saved and slowdown: against the same framework's baseline (training) or "
        f"infer (inference) on the preset's own cells, {compared}. {BEST_RULE}."
    )


CAPACITY_REFERENCE = [
    "workload", "preset", "budget_gib", "framework", "strategy", "search", "prediction_basis",
    "predicted_batch", "largest_batch", "smallest_non_fit", "probes", "bisection_probes",
    "throughput_at_capacity", "fit_fixed_mib", "fit_per_sample_mib", "status", "reason",
]  # fmt: skip


def capacity_reference(capacity: pd.DataFrame) -> pd.DataFrame:
    """Every search: the model's predicted batch beside the verified one, the probes it took
    and the ones plain bisection would have, the linear fit of its probes. (Each run's
    budget note is said once, by capacity_notes.)"""
    if capacity.empty:
        return pd.DataFrame(columns=CAPACITY_REFERENCE)
    table = capacity.sort_values(["workload", "preset", "budget_gib", "framework", "strategy"])
    table = table[CAPACITY_REFERENCE].copy()
    for column in ("predicted_batch", "bisection_probes", "smallest_non_fit"):
        table[column] = table[column].astype("Float64").round().astype("Int64")
    return table.round(2).reset_index(drop=True)


def capacity_notes(capacity: pd.DataFrame) -> list[str]:
    return sorted({n for n in capacity.get("note", pd.Series(dtype=str)) if n})


def _median_worst(values: pd.Series) -> dict[str, float]:
    return {"median": values.median(), "worst": values.max()}


def capacity_error(capacity: pd.DataFrame) -> pd.DataFrame:
    """The memory model's capacity error per framework: |predicted - verified| / verified
    over the searches that ended ok with a prediction, in % (median and worst)."""
    columns = ["framework", "searches", "median error %", "worst error %"]
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    ok = capacity[(capacity["status"] == "ok") & (capacity["largest_batch"] > 0)]
    ok = ok.dropna(subset=["predicted_batch"])
    if ok.empty:
        return pd.DataFrame(columns=columns)
    error = (ok["predicted_batch"] - ok["largest_batch"]).abs() / ok["largest_batch"] * 100
    ok = ok.assign(error=error)
    rows = []
    for framework, part in [*ok.groupby("framework", sort=True), ("all", ok)]:
        stats = _median_worst(part["error"])
        rows.append([framework, len(part), stats["median"], stats["worst"]])
    return pd.DataFrame(rows, columns=columns).round(1)


def probes_per_search(capacity: pd.DataFrame) -> pd.DataFrame:
    """Probes the model-guided searches took against the ones plain doubling and bisection
    from batch 1 would have taken for the same answers (median and worst)."""
    columns = ["framework", "searches", "guided median", "guided worst", "bisection median",
               "bisection worst"]  # fmt: skip
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    guided = capacity[capacity["search"] == "guided"]
    if guided.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for framework, part in [*guided.groupby("framework", sort=True), ("all", guided)]:
        mine, plain = _median_worst(part["probes"]), _median_worst(part["bisection_probes"])
        rows.append([framework, len(part), mine["median"], mine["worst"], plain["median"],
                     plain["worst"]])  # fmt: skip
    return pd.DataFrame(rows, columns=columns).round(1)
