"""GPU predictions held to account: every stored prediction (results/predictions/, made on a
host without a GPU) against every GPU record of its cell, per framework and memory layer, the
spec-only model's error on the same records beside it; the capacity answers predicted within a
budget against the verified ones; and each card's predicted decision table. The page
docs/results/gpu-predicted.md is written from these (write_page)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from analysis.claims.predicted import predicted_claims
from analysis.gpu_workspace import corrected
from analysis.markdown import markdown_table
from membench import file_rules, paths
from membench.metrics import PEAK_DEVICE_PROCESS_BYTES as PROCESS
from membench.metrics import SPEC_ONLY_ERROR
from membench.records import Cell, CorruptRecordError, RecordStore, read_record

PAGE = "gpu-predicted.md"
PICTURE = "gpu-predicted-vs-measured.png"  # beside the page
METHOD = "../methodology.md#gpu-memory-predicted-without-a-gpu-membench-gpu-predict"
LAYERS_DOC = "../methodology.md#metrics-each-memory-metric-names-its-layer"
LAYERS = {  # layer -> (the record's metric, the prediction's field)
    "allocated": ("peak_device_allocated_bytes", "allocated_bytes"),
    "reserved": ("peak_device_reserved_bytes", "reserved_bytes"),
    "process": ("peak_device_process_bytes", "process_bytes"),
}
GOALS = {"allocated": (0.03, 0.10), "reserved": (0.05, None), "process": (0.05, None)}


def load_predictions(results: Path) -> pd.DataFrame:
    """One row per stored prediction and GPU record it stands for (a prediction made before
    any record of its cell: one row without a source)."""
    rows = []
    for path in paths.prediction_files(results):
        data = file_rules.load_json(path)
        cell = data["cell"]
        row = {
            **cell, "card": data["card"], "limit": data.get("limit_bytes") or -1,
            "status": data["status"], "reason": data.get("reason", ""),
            "allocated_bytes": data.get("allocated_bytes"),
            "reserved_bytes": data.get("reserved_bytes"), "seconds": data.get("seconds"),
            "analytic_floor_bytes": (data.get("details") or {}).get("analytic_floor_bytes"),
            "predicted_by": str(data.get("predicted_by", {}).get("commit", ""))[:12],
            "predicted_at": data.get("predicted_at", ""),
            "framework_version": data.get("framework_version", ""),
        }  # fmt: skip
        for source in data.get("records") or [None]:
            rows.append({**row, "source": source})
    return pd.DataFrame(rows)


def gpu_measurements(results: Path) -> pd.DataFrame:
    """Every ok torch or JAX record measured on a GPU (cells and capacity probes), one row each,
    with the allocator limit a capacity budget set (none for cells)."""
    rows = []
    for top in paths.measured_roots(results):
        for path in paths.record_files(top):
            try:
                record = read_record(path)
            except (CorruptRecordError, OSError, ValueError):
                continue
            env, m, cell = record.environment, record.metrics, record.cell
            if record.status != "ok" or env.get("device") != "cuda" or cell.world_size != 1:
                continue
            if cell.framework not in ("torch", "jax"):
                continue
            rows.append(
                {**cell.to_dict(), "device_kind": env.get("device_name", ""),
                 "source": str(path.relative_to(results)),
                 "measured_at": record.started_at, "spec_only_error": m.get(SPEC_ONLY_ERROR),
                 **{f"measured_{layer}": m.get(metric) for layer, (metric, _) in LAYERS.items()}}
            )  # fmt: skip
    return pd.DataFrame(rows)


def validation(results: Path, predicted: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU record with a prediction of its cell: predicted and measured per layer,
    the prediction with the run-time workspace its other records show (analysis.gpu_workspace)
    and as traced (error_<layer>_traced). torch's process figure is its predicted reserve plus
    the median overhead (process minus reserve) of the other records of its workload on its
    device kind: never its own. predicted: load_predictions(results), where the caller has it
    already."""
    predicted = load_predictions(results) if predicted is None else predicted
    measured = gpu_measurements(results)
    if predicted.empty or measured.empty:
        return pd.DataFrame()
    predicted = predicted[(predicted["status"] == "ok") & predicted["source"].notna()]
    keys = ["source", "workload", "framework", "strategy", "batch_size", "preset"]
    v = measured.merge(predicted, on=keys, suffixes=("", "_predicted"))
    if v.empty:
        return v
    v = corrected(v.reset_index(drop=True))
    overhead = measured["measured_process"] - measured["measured_reserved"]
    measured = measured.assign(overhead=overhead)
    added = []
    for _, row in v.iterrows():
        if row["framework"] != "torch" or pd.isna(row["reserved_bytes"]):
            added.append(float("nan"))
            continue
        others = measured[
            (measured["source"] != row["source"]) & (measured["framework"] == "torch")
            & (measured["workload"] == row["workload"])
            & (measured["device_kind"] == row["device_kind"])
        ]["overhead"].dropna()  # fmt: skip
        added.append(others.median() if len(others) else float("nan"))
    v["process_bytes"] = v["reserved_bytes"] + added
    v["process_bytes_traced"] = v["reserved_bytes_traced"] + added
    for layer, (_, field) in LAYERS.items():
        v[f"error_{layer}"] = v[field] / v[f"measured_{layer}"] - 1
        v[f"error_{layer}_traced"] = v[f"{field}_traced"] / v[f"measured_{layer}"] - 1
    return v


def summary(v: pd.DataFrame) -> pd.DataFrame:
    """Per framework and layer: records, median |error|, the worst error and its cell, the goal,
    and the spec-only model's median |error| and worst on the same records (allocated)."""
    rows = []
    for (framework, layer), part in _by_layer(v):
        errors = part[f"error_{layer}"]
        worst = part.loc[errors.abs().idxmax()]
        spec = part["spec_only_error"].dropna() if layer == "allocated" else pd.Series()
        traced = part[f"error_{layer}_traced"].dropna()
        median_goal, worst_goal = GOALS[layer]
        rows.append({
            "framework": framework, "layer": layer, "records": len(part),
            "predicted before measured": int((part["predicted_at"] < part["measured_at"]).sum()),
            "with a run-time workspace": int((part["workspace_from"] > 0).sum()),
            "cells": len(part[["workload", "strategy", "batch_size", "limit"]].drop_duplicates()),
            "median abs error": _pct(errors.abs().median()),
            "worst": f"{_pct(worst[f'error_{layer}'], signed=True)} ({_cell(worst)})",
            "goal (median / worst)": f"{_pct(median_goal)} / "
            + (_pct(worst_goal) if worst_goal else "-"),
            "as traced (no run-time workspace): median abs / worst": (
                f"{_pct(traced.abs().median())} / "
                f"{_pct(traced[traced.abs().idxmax()], signed=True)}"
            ),
            "spec-only model: median abs / worst": (
                f"{_pct(spec.abs().median())} / {_pct(spec[spec.abs().idxmax()], signed=True)}"
                if len(spec) else "-"
            ),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _by_layer(v: pd.DataFrame):
    for framework in sorted(v["framework"].unique()):
        mine = v[v["framework"] == framework]
        for layer in LAYERS:
            part = mine[mine[f"error_{layer}"].notna()]
            if len(part):
                yield (framework, layer), part


def per_cell(v: pd.DataFrame) -> pd.DataFrame:
    """Each cell's errors per layer (several records of a cell: each error, the worst first)."""
    rows = []
    for key, part in v.groupby(["workload", "framework", "strategy", "batch_size", "limit"]):
        workload, framework, strategy, batch, limit = key
        row = {
            "workload": workload, "framework": framework, "strategy": strategy,
            "batch": batch, "budget": "-" if limit < 0 else f"{limit / 2**30:.2f} GiB",
            "records": len(part),
            "predicted allocated MiB": f"{part['allocated_bytes_traced'].iloc[0] / 2**20:,.0f}",
            "run-time workspace MiB (records it rests on)": (
                f"{_mib(part['workspace_allocated'].iloc[0])} "
                f"({int(part['workspace_from'].iloc[0])})"
            ),
        }  # fmt: skip
        for layer in LAYERS:
            errors = part[f"error_{layer}"].dropna()
            row[layer] = ", ".join(_pct(e, signed=True) for e in errors) if len(errors) else "-"
        traced = part["error_allocated_traced"].dropna()
        row["allocated, as traced"] = ", ".join(_pct(e, signed=True) for e in traced) or "-"
        row["spec-only"] = _pct(part["spec_only_error"].dropna().iloc[0], signed=True) if (
            part["spec_only_error"].notna().any()) else "-"  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def awaiting(predicted: pd.DataFrame) -> pd.DataFrame:
    """The ok predictions of cells no GPU record measures yet (made ahead), one row each."""
    if predicted.empty:
        return pd.DataFrame()
    ahead = predicted[(predicted["status"] == "ok") & predicted["source"].isna()]
    ahead = ahead[ahead["limit"] < 0].sort_values(["card", "workload", "framework", "strategy",
                                                   "batch_size"])  # fmt: skip
    return pd.DataFrame({
        "card": ahead["card"], "preset": ahead["preset"], "workload": ahead["workload"],
        "framework": ahead["framework"],
        "strategy": ahead["strategy"], "batch": ahead["batch_size"],
        "allocated MiB": (ahead["allocated_bytes"] / 2**20).map("{:,.0f}".format),
        "reserved MiB": (ahead["reserved_bytes"] / 2**20).map(
            lambda x: "-" if pd.isna(x) else f"{x:,.0f}"),
        "predicted by": ahead["predicted_by"], "on": ahead["predicted_at"].str[:10],
    })  # fmt: skip


def card_tables(results: Path) -> dict[str, pd.DataFrame]:
    """Each stored card table (its file name -> rows), predicted answers only."""
    out = {}
    for path in paths.card_tables_files(results):
        rows = file_rules.load_json(path)
        frame = pd.DataFrame(rows)
        out[f"{path.parent.name}/{path.name}"] = frame
    return out


def capacity_check(results: Path, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The capacity answers verified on a GPU within a budget beside the answers predicted for
    the same card and budget: the error of each; and the whole process at the answer (NVML's
    highest of its measurements) against the budget: the searches enforced the framework's
    allocator limit, outside which the CUDA context and libraries sit."""
    rows = []
    for path in paths.capacity_files(results):
        for item in file_rules.load_json(path):
            if item.get("status") != "ok" or not str(item.get("preset", "")).startswith("gpu"):
                continue
            if item.get("budget_layer") == PROCESS:  # a card's whole budget: no table yet
                continue
            fit = item.get("largest_fit")
            mib = round(item["budget_bytes"] / 2**20)
            for name, frame in tables.items():
                if not name.endswith(f"capacity-{mib}mib.json") or frame.empty:
                    continue
                match = frame[(frame["workload"] == item["workload"])
                              & (frame["framework"] == item["framework"])
                              & (frame["strategy"] == item["strategy"])]  # fmt: skip
                if match.empty or not fit:
                    continue
                predicted = match.iloc[0]["batch"]
                process = _process_at_answer(path.parent, item)
                rows.append({
                    "workload": item["workload"], "framework": item["framework"],
                    "strategy": item["strategy"], "budget": f"{mib / 1024:.0f} GiB",
                    "verified on the GPU": fit, "predicted": predicted,
                    "error": _pct(predicted / fit - 1, signed=True) if predicted else "-",
                    "whole process at the answer (MiB)": "-" if process is None
                    else f"{process / 2**20:,.0f}",
                    "over the budget as a card (MiB)": "-" if process is None
                    else _mib(process - item["budget_bytes"]),
                    "measured by": f"{path.parent.name.rsplit('-', 1)[-1][:7]}",
                })  # fmt: skip
    return pd.DataFrame(rows)


def _process_at_answer(run: Path, item: dict) -> float | None:
    """NVML's process figure at the answer: the highest over its measurements in the run."""
    cell = Cell(item["workload"], item["framework"], item["strategy"], item["largest_fit"],
                item["preset"])  # fmt: skip
    found = []
    for store in paths.answer_stores(run):
        try:
            record = RecordStore(store).get(cell) if store.is_dir() else None
        except CorruptRecordError:
            continue
        if record is not None and PROCESS in record.metrics:
            found.append(record.metrics[PROCESS])
    return max(found, default=None)


def _mib(x: float | None) -> str:
    return "-" if x is None or pd.isna(x) else f"{x / 2**20:+,.0f}"


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None or pd.isna(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def _cell(row: pd.Series) -> str:
    limit = "" if row["limit"] < 0 else f", within {row['limit'] / 2**30:.1f} GiB"
    return f"{row['workload']} {row['strategy']} b{row['batch_size']}{limit}"


def _seconds(p: pd.DataFrame) -> str:
    secs = p["seconds"].dropna() if len(p) else pd.Series()
    if secs.empty:
        return ""
    parts = []
    for framework, s in p.dropna(subset=["seconds"]).groupby("framework")["seconds"]:
        parts.append(
            f"{framework} median {statistics.median(s):.0f} s, worst {s.max():.0f} s "
            f"({len(s)} predictions)"
        )
    return "; ".join(parts)


DECIDED_ON = {"torch": "process", "jax": "allocated"}  # the layer a card's answer stands on


def decision_table(tables: dict[str, pd.DataFrame], v: pd.DataFrame) -> pd.DataFrame:
    """The whole-card tables side by side: per workload, framework and strategy, the largest
    batch predicted on each card ("4096+": the search's largest batch fitted, so more may), and
    the validation error of the layer that decides it, on that workload's GPU records."""
    frames = []
    cards = []
    for name, frame in sorted(tables.items(), key=lambda kv: _card_memory(kv[1])):
        card, file = name.split("/")
        if not paths.is_card_table(Path(file)) or frame.empty or "card_description" not in frame:
            continue
        cards.append(f"{card} ({_card_memory(frame) / 2**30:.0f} GiB)")
        frames.append(
            frame.assign(card=cards[-1], answer=[_answer(a) for _, a in frame.iterrows()])
        )
    if not frames:
        return pd.DataFrame()
    keys = ["workload", "framework", "strategy"]
    table = pd.concat(frames).pivot_table(
        index=keys, columns="card", values="answer", aggfunc="first"
    )
    table = table[[c for c in cards if c in table.columns]].reset_index()
    table["validation error (median, worst)"] = [
        _workload_error(v, framework, workload)
        for framework, workload in zip(table["framework"], table["workload"], strict=True)
    ]
    rows = pd.concat(frames)
    reasons = rows[rows["status"] != "ok"].groupby(keys)["reason"].first()
    table["why not predicted"] = [
        _short(reasons.get(tuple(k), "")) for k in table[keys].itertuples(index=False)
    ]
    if not table["why not predicted"].astype(bool).any():
        table = table.drop(columns="why not predicted")
    return table.fillna("-")


def budget_tables(
    tables: dict[str, pd.DataFrame], check: pd.DataFrame
) -> list[tuple[str, pd.DataFrame]]:
    """Each card's tables within a capacity budget (as the GPU decision searches ran it):
    per workload and strategy, each framework's predicted largest batch, the GPU's verified
    answer beside where a search settled it ("-": none ran)."""
    out = []
    for name, frame in sorted(tables.items()):
        card, file = name.split("/")
        if paths.is_card_table(Path(file)) or frame.empty or "budget_bytes" not in frame:
            continue
        frame = frame[frame["status"] != "unsupported"]
        if frame.empty:
            continue
        budget = f"{frame['budget_bytes'].iloc[0] / 2**30:.0f} GiB"
        shown = frame.assign(answer=[_answer(a) for _, a in frame.iterrows()])
        table = shown.pivot_table(
            index=["workload", "strategy"], columns="framework", values="answer", aggfunc="first"
        )
        table.columns = [f"{f}, predicted" for f in table.columns]
        for framework in sorted(set(check.get("framework", []))):
            mine = check[(check["framework"] == framework) & (check["budget"] == budget)]
            verified = dict(zip(zip(mine["workload"], mine["strategy"], strict=True),
                                mine["verified on the GPU"], strict=True))  # fmt: skip
            table[f"{framework}, verified"] = [verified.get(k, "-") for k in table.index]
        out.append((f"{card} within {budget}", table.reset_index().fillna("-")))
    return out


def _short(text: str, limit: int = 150) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _answer(a: pd.Series) -> str:
    if a["status"] != "ok":
        return str(a["status"])
    capped = a["batch"] and not a.get("next_batch")  # no next batch: the search's largest fitted
    batch = int(a["batch"])  # an int column once the rows of refused frameworks make it float
    return f"{batch}+" if capped else str(batch)


def _workload_error(v: pd.DataFrame, framework: str, workload: str) -> str:
    layer = DECIDED_ON.get(framework, "")
    if v.empty or not layer:
        return "not validated"
    mine = v[(v["framework"] == framework) & (v["workload"] == workload)]
    part = mine[f"error_{layer}_traced"].dropna()  # the tables hold the predictions as traced
    if part.empty:
        return f"{layer}: no GPU record"
    worst = part[part.abs().idxmax()]
    return f"{layer}: {_pct(part.abs().median())}, {_pct(worst, signed=True)} ({len(part)} records)"


def _card_memory(frame: pd.DataFrame) -> float:
    return float(frame["card_memory_bytes"].iloc[0]) if "card_memory_bytes" in frame else 0.0


def page(results: Path, v: pd.DataFrame | None = None) -> str | None:
    """docs/results/gpu-predicted.md, or None where no prediction is stored (v: the
    validation, where the caller has it already)."""
    if not paths.prediction_files(results) and not paths.card_tables_files(results):
        return None
    predicted = load_predictions(results)
    v = validation(results, predicted) if v is None else v
    s = summary(v) if len(v) else pd.DataFrame()
    tables = card_tables(results)
    lines = [
        "# GPU memory predicted without a GPU",
        "",
        "Generated by `membench report --docs` from `results/predictions/` and the GPU records; "
        "do not edit. Every figure here is a **prediction** made on a CPU host by the "
        f"framework's own machinery (`membench gpu-predict`, [how]({METHOD})), never a "
        "measurement: torch's training step traced under fake tensors with CUDA's autocast "
        "policy and the CUDA caching allocator replayed; JAX's step compiled by XLA for the "
        "card. Held to a GPU record, a prediction adds the run-time workspace other cells' GPU "
        "records show and the process overhead of the other records (below). Jittor has no "
        "such path: its "
        "GPU figures wait for a GPU run. The layers: "
        "*allocated* (the framework allocator's live tensors), *reserved* (torch's caching "
        "allocator's segments), *process* (NVML's figure for the whole process: what must fit "
        f"the card) ([metrics]({LAYERS_DOC})).",
        "",
    ]
    if len(s):
        lines += [
            "## How far the predictions are from the GPU records",
            "",
            "![The predicted allocated peak against the measured one, a point per GPU record, "
            "coloured by framework (and budget), shaped by workload, with the diagonal and a "
            f"band of 10% either side]({PICTURE})",
            "",
            "Each prediction against every GPU record of its cell (cells and capacity probes; "
            "'predicted before measured' counts the records a prediction was committed before: "
            "the out-of-sample test of the traced or compiled figure (the run-time workspace "
            "added to it comes from other cells' records, which may be newer); the others were "
            "measured first, though no prediction takes a figure from the record it is held "
            "to; "
            "a probe ran under a budget's allocator limit, and was predicted under the same "
            "limit). Error: predicted / measured - 1. torch's process figure adds to its "
            "predicted reserve the median overhead (NVML's process figure minus the reserve: "
            "CUDA context, library handles, kernels) of the *other* records of its workload. "
            "Neither a trace nor a compile without the device sees what the device chooses as "
            "it runs: cuDNN's convolution algorithms, timed on the device, and their "
            "workspaces. The records show it as a gap that grows with the batch and the "
            "element's width (the U-Net's: about 1,000 MiB a sample in float32 on the H200, "
            "495 in bfloat16, with or without checkpointing), so each prediction gets the "
            "*run-time workspace* its framework's other records of the workload, device kind "
            "and compute width show, per sample of the micro-batch and byte of element (their "
            "median, never below nothing; the records of its own cell left out: "
            "analysis/gpu_workspace.py; 'with a run-time workspace' counts the records that "
            "got one). Records within a budget neither give nor get it: under an allocator "
            "limit the device fits its choices to the memory left (cuDNN skips algorithms "
            "whose workspace it cannot allocate). JAX's step is compiled for the limit it runs "
            "under: XLA's scheduler, told it as the GPU client tells it (the description's "
            "memory is the limit over the 80% XLA plans for where the compile is not told), "
            "rematerialises to fit it as it does on the card. The errors as traced, without "
            "it, are beside. The spec-only model (the suite's "
            "analytic estimate) is judged on the same records.",
            "",
            markdown_table(s),
            "",
        ]
        if secs := _seconds(predicted):
            lines += [f"Seconds per prediction on two CPU cores: {secs}.", ""]
    check = capacity_check(results, tables)
    if len(check):
        lines += [
            "## Capacity answers: predicted against verified",
            "",
            "The largest batch within the same budget, from predictions alone, beside the "
            "answer the GPU decision searches verified (each boundary measured three times). "
            "The searches enforced each framework's allocator limit (the budget's share of the "
            "card); the CUDA context, libraries and kernels sit outside it, so the whole "
            "process at the answer (NVML's figure, the highest of its measurements) is beside, "
            "and by how much it exceeds the budget: on a card of that size, those answers "
            "would not fit. The GPU decision searches now take the budget as a card's whole "
            "memory (`capacity --whole-card`: each framework's limit set below it by the "
            "process overhead its records measured, a batch fitting on NVML's figure); none "
            "has run on a GPU yet.",
            "",
            markdown_table(check),
            "",
        ]
    for title, table in budget_tables(tables, check):
        lines += [
            f"## Predicted decision table: {title}",
            "",
            "The largest training batch within the budget as the GPU decision searches run it "
            "(each framework's allocator limit the budget's share of the card), from "
            "predictions alone, each framework's beside the answer a GPU search verified "
            "where one settled it ('-': none has run; 'error': the predictor's search found "
            "no boundary).",
            "",
            markdown_table(table),
            "",
        ]
    decided = decision_table(tables, v)
    refused = []
    if "why not predicted" in decided:  # a framework refused on every row: said once
        for framework, rows in decided.groupby("framework"):
            reasons = set(rows["why not predicted"])
            if len(reasons) == 1 and "" not in reasons:
                refused.append(f"{framework}: {reasons.pop()}")
                decided = decided[decided["framework"] != framework]
        if not decided["why not predicted"].astype(bool).any():
            decided = decided.drop(columns="why not predicted")
    if len(decided):
        lines += [
            "## Predicted decision tables: the largest training batch on a card",
            "",
            "Per card, the largest batch of each training strategy at the standard sizes "
            "(ResNet-50 224x224, U-Net 128^3, GPT-2 small at 1024 tokens), on the whole card, "
            "from predictions alone: every figure is *predicted*, none verified on that card. "
            "torch fits where its predicted reserve plus the process overhead the GPU records "
            "measured stays within the card's memory; JAX where its compiled step fits XLA's "
            "allocator limit (0.95 of the card, as the suite's GPU cells run it). Beside each "
            "row, its framework's validation error on this workload's GPU records, on the layer "
            "that decides it, as traced: a card's capacity is decided near its limit, where the "
            "device fits its algorithms' workspaces to the memory left, so the tables hold no "
            "run-time workspace (torch's verified answers within a budget were predicted so "
            "within 1%; a negative error: the prediction held less than the GPU, so the batch "
            "may be too large). A "
            "'-' is not predicted yet (`membench gpu-predict --table` resumes).",
            "",
            markdown_table(decided),
            "",
        ]
        lines += [f"Not predicted, {r}.\n" for r in refused]
    if len(waiting := awaiting(predicted)):
        lines += [
            "## Predicted ahead of any GPU record: the next GPU run's out-of-sample test",
            "",
            "Cells no GPU has measured yet, predicted and committed first: once a GPU run "
            "measures one, its prediction is held to the record as it was made, never remade "
            "(`membench gpu-predict --records` attaches the records), and counts under "
            "'predicted before measured' above.",
            "",
            markdown_table(waiting),
            "",
        ]
    claims = predicted_claims(predicted)
    if len(claims):
        lines += [
            "## Claims at their own sizes, predicted",
            "",
            "Claims C4 and C5 are about sizes no GPU run here reaches (the U-Net on 128 slices "
            "of 512x512; a Transformer of about a billion parameters): the preset `gpu-seed` "
            "holds them, and their cells are predicted on the card's description. Each is "
            "judged by the claims' own rule and bands ([claims](../claims.md)) on the predicted "
            "figures of one card and preset, and its verdict is a class of its own, "
            "*predicted*, never combined with a measured one. A prediction has no speed, so a "
            "speed statement stays unjudged; what a predictor cannot trace is said "
            "('not predicted'). The standard sizes' predictions (gpu-quick) are beside where "
            "they answer the claim. Activation memory is the allocated peak less the model "
            "state (parameters, gradients, optimizer state) the prediction counted.",
            "",
            markdown_table(claims[["id", "device", "verdict", "measured", "figures", "reason",
                                   "not predicted"]].rename(columns={
                                       "device": "predicted on", "measured": "predicted"})),
            "",
        ]  # fmt: skip
    if len(v):
        lines += [
            "## Every predicted cell",
            "",
            markdown_table(per_cell(v)),
            "",
        ]
    return "\n".join(lines).rstrip("\n") + "\n"


def figure(v: pd.DataFrame):
    """Predicted against measured allocated peak, one point per GPU record, per framework and
    whether a budget's limit held it, with the diagonal and a 10% band: a point below the
    diagonal is a prediction that held less than the GPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    if v.empty:
        return None
    data = v.assign(
        measured=v["measured_allocated"] / 2**30,
        predicted=v["allocated_bytes"] / 2**30,
        who=v["framework"] + v["limit"].map(lambda x: ", within a budget" if x >= 0 else ""),
    ).dropna(subset=["measured", "predicted"])
    fig, ax = plt.subplots(figsize=(7.5, 6))
    top = 1.05 * max(data["measured"].max(), data["predicted"].max())
    ax.plot([0, top], [0, top], color="0.3", lw=1)
    ax.fill_between([0, top], [0, 0.9 * top], [0, 1.1 * top], color="0.85", alpha=0.6, lw=0)
    sns.scatterplot(data, x="measured", y="predicted", hue="who", style="workload", s=45, ax=ax)
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="measured on the GPU, allocated peak (GiB)",
           ylabel="predicted on a CPU host, with the run-time workspace (GiB)",
           title="GPU memory predicted without a GPU against the GPU records\n"
           "(grey band: within 10%; below the line: the prediction held less)")  # fmt: skip
    handles, labels = ax.get_legend_handles_labels()
    names = {"who": "framework", "workload": "workload"}
    ax.legend(handles, [names.get(t, t) for t in labels], fontsize=8, loc="upper left")
    return fig


def write(results: Path, folder: Path) -> list[Path]:
    """The page and its picture written into folder, from one validation (nothing where no
    prediction is stored)."""
    import matplotlib.pyplot as plt

    v = validation(results)
    text = page(results, v)
    if text is None:
        return []
    (folder / PAGE).write_text(text, encoding="utf-8")
    written = [folder / PAGE]
    if (fig := figure(v)) is not None:
        fig.savefig(folder / PICTURE, dpi=100, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        written.append(folder / PICTURE)
    return written
