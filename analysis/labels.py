"""Column names for people: every published table (Markdown pages, the HTML report) goes
through `for_people`, so `fit_fixed_mib` reads `fixed MiB` wherever it appears."""

from __future__ import annotations

import re

import pandas as pd

from analysis.schema import METRICS

NAMES = {
    "batch_size": "batch", "budget_gib": "budget GiB", "budget_layer": "budget layer",
    "largest_batch": "largest batch", "smallest_non_fit": "next batch (over, or put down by noise)",
    "throughput_at_capacity": "samples/s at largest batch", "fit_fixed_mib": "fixed MiB",
    "fit_per_sample_mib": "per-sample MiB", "fixed_mib": "fixed MiB",
    "per_sample_mib": "per-sample MiB", "r2": "R²", "predicted_batch": "predicted batch",
    "prediction_basis": "prediction basis", "bisection_probes": "bisection probes",
    "host_cpu": "host CPU", "image_size": "image size",
    "suite_samples_per_second": "suite samples/s",
    "reference_samples_per_second": "reference samples/s",
    "suite_foreign_cpu": "suite foreign CPU", "reference_foreign_cpu": "reference foreign CPU",
    "interval_seconds": "interval s", "step_seconds_without": "step s without sampler",
    "step_seconds_with": "step s with sampler", "overhead_rounds_min": "overhead, lowest round",
    "overhead_rounds_max": "overhead, highest round", "world_size": "ranks",
    "timeline_interval_seconds": "timeline interval s",
    "timeline_step_seconds_with": "step s with timeline sampler",
    "timeline_overhead": "timeline overhead",
    "timeline_overhead_rounds_min": "timeline overhead, lowest round",
    "timeline_overhead_rounds_max": "timeline overhead, highest round",
    "timeline_sampler_cpu_share": "timeline sampler, share of a core",
    "fit_r2": "fit R²", "margin_mib": "margin MiB",
    "over_mib": "next batch's peak over budget MiB (negative: room)",
    "spread_mib": "runs' spread MiB", "steady_peak_at_fit_mib": "steady-state peak at answer MiB",
    "foreign_cpu_share_at_fit": "foreign CPU at answer", "rms_residual_mib": "RMS residual MiB",
    "measured_by": "commit", "in_decision_table": "in the decision table",
    "verified": "verified largest batch", "formula": "formula's largest batch",
    "formula_error_pct": "formula's worst out-of-sample error %",
}  # fmt: skip
# A configuration's inputs as a reader names them (records' workload_inputs); others k=v.
INPUT_WORDS = {
    "image_size": "{}x{} images", "volume": "{}^3 volume", "num_classes": "{} classes",
    "n_layer": "{} layers", "d_model": "width {}", "n_head": "{} heads",
    "seq_len": "sequence {}", "vocab_size": "vocabulary {}",
}  # fmt: skip
INPUT_SAME = {"n_positions": "seq_len"}  # said only where it differs from this one


def inputs_label(inputs: object) -> str:
    """A workload's inputs in words ("224x224 images, 1000 classes"); "" where unknown."""
    if not isinstance(inputs, dict):
        return ""
    words = []
    known = [k for k in INPUT_WORDS if k in inputs]  # in the words' order, records sort keys
    for key, value in [(k, inputs[k]) for k in [*known, *sorted(set(inputs) - set(known))]]:
        if key in INPUT_SAME and inputs.get(INPUT_SAME[key]) == value:
            continue
        form = INPUT_WORDS.get(key, key + "={}")
        words.append(form.format(*[value] * form.count("{}")))
    return ", ".join(words)


UNITS = {"mib": "MiB", "gib": "GiB", "cpu": "CPU", "rss": "RSS", "pct": "%"}


def column_name(name: object) -> str:
    """A column's name for people: the table above, else underscores as spaces with units
    spelled (mib -> MiB)."""
    text = str(name)
    if text in NAMES:
        return NAMES[text]
    words = [UNITS.get(w, w) for w in text.split("_")]
    return re.sub(r"\s+", " ", " ".join(words)).strip()


def metric_label(name: str) -> str:
    """A metric's catalogue label (peak_host_rss_bytes -> peak host RSS); the name itself for
    one the catalogue lacks."""
    return METRICS[name].label if name in METRICS else name


def for_people(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with people's column names, and a metric column's catalogue names as their
    labels (peak_host_rss_bytes -> peak host RSS)."""
    out = frame.rename(columns=column_name)
    if "metric" in out.columns:
        out["metric"] = out["metric"].map(metric_label)
    return out


# each memory layer a budget or a peak is read on, in a word or two (docs/glossary.md)
LAYER_WORDS = {
    "life_peak_host_rss_bytes": "whole-life",
    "peak_host_rss_bytes": "steps' peak",
    "peak_device_reserved_bytes": "reserved",
    "peak_device_allocated_bytes": "allocated",
    "peak_device_process_bytes": "process peak",
}


def layer_word(metric: object) -> str:
    """A layer's word (LAYER_WORDS), else the metric's label."""
    return LAYER_WORDS.get(str(metric)) or (metric_label(str(metric)) if metric else "-")
