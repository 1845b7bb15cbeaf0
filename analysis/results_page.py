"""The results pages under docs/results/, generated from the committed results (`membench
report --docs`), never written by hand: per machine a summary page (analysis.summary_page) and
reference pages (analysis.reference_pages), and the index of every machine. This module puts
them together (pages) and writes them (write_pages).

The same results give the same Markdown (no generation time, every table sorted), so a test
regenerates each committed page and fails when it is stale. The pictures a page shows are drawn
by write_pages beside it (PNG, small): the summary's (analysis.answer_plots) and each workload's
memory-over-time picture (<machine>/<workload>-timeline.png, from the stored timelines); the
other plots are `membench report --out DIR`'s, beside an HTML page of the same tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.answers import (
    date_span,
    shown_searches,
    speed_between_hosts,
)
from analysis.claims import RULE
from analysis.claims.findings import NOT_MEASURABLE
from analysis.decision import lead_searches
from analysis.gpu_predictions import PAGE as GPU_PAGE
from analysis.gpu_predictions import page as gpu_page
from analysis.gpu_predictions import write as write_gpu_page
from analysis.markdown import markdown_table
from analysis.page_parts import (
    Results,
    claims_of,
    decision_parts,
    load_results,
    machines,
    of_machine,
    titled_section,
)
from analysis.reference_pages import (
    capacity_page,
    claims_page,
    support_page,
    timeline_png,
    versions_page,
    workload_page,
)
from analysis.summary_page import GLOSSARY, summary, summary_pictures, sweep_summary
from analysis.timelines import chosen, drawn_per_workload
from analysis.timelines import figure as timeline_figure
from analysis.timelines import save as save_timeline
from membench import paths


def machine_pages(results: Results, machine: str) -> dict[str, str]:
    """A machine's pages: "<machine>.md" (the summary) and "<machine>/<name>.md" (the
    reference pages: one per workload, support, capacity, claims, versions)."""
    view = of_machine(results.view, machine)
    if view.empty:  # a machine with the version sweep's records and capacity searches only
        history = versions_page(results, machine)
        reference = {"versions": history} if history else {}
        if len(of_machine(results.capacity, machine)):
            reference["capacity"] = capacity_page(results, machine)
        out = {f"{machine}.md": sweep_summary(results, machine, list(reference))}
        out.update({f"{machine}/{name}.md": text for name, text in reference.items()})
        return out
    lead, _ = lead_searches(of_machine(results.capacity, machine))
    reference = {
        w: workload_page(
            view, w, machine, chosen(results.timelines, machine, w),
            decision_parts(view, lead[lead["workload"] == w], results.capacity, results.probes)
            if len(lead) else None,
        )
        for w in sorted(view["workload"].unique())
    }  # fmt: skip
    reference["support"] = support_page(view, machine)
    reference["capacity"] = capacity_page(results, machine)
    reference["claims"] = claims_page(results, machine)
    if history := versions_page(results, machine):
        reference["versions"] = history
    out = {f"{machine}.md": summary(results, machine, list(reference))}
    out.update({f"{machine}/{name}.md": text for name, text in reference.items()})
    return out


INDEX = "README.md"  # docs/results/'s front page: what GitHub shows of the folder
CELL_KEYS = ["workload", "framework", "strategy", "batch_size", "preset"]  # a cell, per machine


def _machine_row(results: Results, machine: str) -> dict[str, str]:
    records = of_machine(results.frame, machine)
    records = records[records["source"] == "record"] if len(records) else records
    devices = sorted(d for d in set(records.get("device", [])) if d)
    cpus = sorted(c for c in set(records.get("host_cpu", [])) if c)
    presets = sorted(
        {*records.get("preset", []), *of_machine(results.capacity, machine).get("preset", [])}
    )
    # the cells' records and the capacity searches, each search's own date
    searches = shown_searches(of_machine(results.capacity, machine))
    dates = [str(d)[:10] for d in records.get("started_at", []) if d]
    if len(searches):
        dates += [str(d)[:10] for d in searches["measured_at"].fillna(searches["run_at"]) if d]
    run = records[records["status"] != "unsupported"] if len(records) else records
    return {
        "machine": f"[{machine}]({machine}.md)",
        "device": ", ".join(devices) or "-",
        "host CPU": ", ".join(cpus) or "-",
        "presets": ", ".join(str(p) for p in presets if p) or "-",
        "cells run": str(len(run[CELL_KEYS].drop_duplicates())),
        "searches": str(len(searches)),
        "measured": date_span(dates) if dates else "-",
    }


def claims_across(results: Results) -> pd.DataFrame:
    """Each claim's verdict on every machine whose records judge it ("-": not there): the
    device is the machine's, and each verdict's reason is on that machine's page."""
    table = None
    for machine in machines(results):
        if of_machine(results.view, machine).empty:
            continue
        verdicts = claims_of(results, machine).set_index("id")
        column = verdicts["verdict"].where(verdicts["verdict"] != NOT_MEASURABLE, "-")
        if table is None:
            table = verdicts[["claim"]].copy()
        table[f"[{machine}]({machine}.md)"] = column
    return pd.DataFrame() if table is None else table.reset_index()


def index_page(results: Results, predicted: bool = False) -> str:
    """docs/results/README.md: every machine's summary page, what it holds, and each claim's
    verdicts side by side (a claim judged on one machine and not another shows both);
    predicted: the GPU predictions' page exists, and is linked."""
    rows = pd.DataFrame([_machine_row(results, m) for m in machines(results)])
    listed = markdown_table(rows) if len(rows) else "No results yet."
    lines = [
        "# Results",
        "",
        "Generated by `membench report --docs` from the records under `results/`; do not edit, "
        "regenerate. One page per machine: a host kind (a CPU's family and model, ISA level, "
        "cores and memory, or a GPU), or, for records older than those facts, a label whose "
        "hosts may differ. Cells run: the cells measured (a strategy a framework refuses is "
        "not counted); measured: the dates of the cells and of the capacity searches. "
        f"Terms: [glossary]({GLOSSARY}).",
        "",
        listed,
        "",
    ]
    if said := speed_between_hosts(results.capacity):
        lines += [said, ""]
    if predicted:
        lines += [
            f"GPU memory on cards no GPU run here has measured: [predicted without a GPU]"
            f"({GPU_PAGE}), each card's largest batches, and every prediction held against "
            "every GPU record.",
            "",
        ]
    across = claims_across(results)
    if len(across):
        lines += titled_section("Claims across machines", [
            f"Each claim's verdict on each machine, by one {RULE}. '-': not judged there (a "
            "claim about GPU memory on a CPU, or cells not measured); a CPU's claims page still "
            "shows its figures for reference, on the layers the claim names (what a step adds, "
            "the peak above the runtime), which is why they differ from its decision tables' "
            "whole-process peak. The reasons are on each machine's page ([the claims under "
            "test](../claims.md)).",
            "",
            markdown_table(across),
        ])  # fmt: skip
    return "\n".join(lines).rstrip("\n") + "\n"


def pages(results_dir: Path) -> dict[str, str]:
    """Every machine's pages, the GPU predictions' page and the index: path under
    docs/results -> Markdown."""
    results = load_results(results_dir)
    predicted = gpu_page(results_dir)
    out = {INDEX: index_page(results, predicted is not None)}
    if predicted is not None:
        out[GPU_PAGE] = predicted
    for machine in machines(results):
        out.update(machine_pages(results, machine))
    return out


def write_pages(results_dir: Path, docs_results: Path | None = None) -> list[Path]:
    """Write every machine's pages under docs/results (membench.paths.results_page) and
    remove the generated pages the results no longer give; returns the paths written."""
    root = paths.results_page("x", docs_results).parent
    results = load_results(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    predicted = write_gpu_page(results_dir, root)
    (root / INDEX).write_text(index_page(results, bool(predicted)), encoding="utf-8")
    written = [root / INDEX, *predicted]
    for machine in machines(results):
        for name, text in machine_pages(results, machine).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
        written += timeline_pictures(results, machine, root / machine)
        written += summary_pictures(results, machine, root / machine)
    for machine_dir in {p.parent for p in written if p.parent != root}:
        for stale in sorted(set(machine_dir.glob("*.md")) - set(written)):
            stale.unlink()
        for stale in sorted(set(machine_dir.glob("*.png")) - set(written)):
            stale.unlink()
    return written


def timeline_pictures(results: Results, machine: str, folder: Path) -> list[Path]:
    """Each workload's memory-over-time picture beside its reference page."""
    out = []
    for workload, drawn in drawn_per_workload(results.timelines, machine).items():
        if fig := timeline_figure(drawn, workload):
            out.append(save_timeline(fig, folder / timeline_png(workload)))
    return out
