"""The results pages under docs/results/: one Markdown page per machine, generated from the
committed results (`membench report --docs`), never written by hand.

The same results give the same bytes (no generation time, every table sorted), so a test
regenerates each committed page and fails when it is stale. Plots are binaries and are not
committed: `membench report --out DIR` draws them beside an HTML page of the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.claims import RULE, claims_table
from analysis.history import version_history
from analysis.loader import (
    latest,
    load,
    load_calibrations,
    load_capacity,
    load_capacity_probes,
    load_selfchecks,
)
from analysis.plots import groups, where
from analysis.report import memory_sections, not_run, overview, run_time
from analysis.tables import tables
from membench import paths

# the claims table's columns shown (the device is in each row's evidence)
CLAIM_COLUMNS = ["id", "claim", "claimed", "measured", "verdict", "reason", "evidence"]


@dataclass
class Results:
    """Everything a page is made from: the loaded results folder."""

    frame: pd.DataFrame  # every record and asv row (the version history reads all)
    view: pd.DataFrame  # the latest record per cell and metric
    capacity: pd.DataFrame
    probes: pd.DataFrame
    calibrations: dict
    problems: list[str]
    selfcheck: pd.DataFrame  # suite against the frameworks' own loops
    probe_cost: pd.DataFrame  # the sampler thread's cost per framework


def load_results(results_dir: Path) -> Results:
    loaded = load(results_dir)
    capacity = load_capacity(results_dir)
    probes = load_capacity_probes(results_dir)
    calibrations, skipped = load_calibrations(results_dir)
    selfcheck, probe_cost, unread = load_selfchecks(results_dir)
    problems = loaded.problems + capacity.problems + probes.problems + skipped + unread
    # a page names files relative to the checkout, whichever folder it was made from
    problems = sorted(p.replace(str(results_dir), "results") for p in problems)
    frame = loaded.frame
    return Results(
        frame, latest(frame), capacity.frame, probes.frame, calibrations, problems, selfcheck,
        probe_cost,
    )  # fmt: skip


def machines(results: Results) -> list[str]:
    """Every machine with records or capacity results."""
    found = set(results.view.get("machine", [])) | set(results.capacity.get("machine", []))
    return sorted(str(m) for m in found if m)


def _of(frame: pd.DataFrame, machine: str) -> pd.DataFrame:
    return frame[frame["machine"] == machine] if "machine" in frame.columns else frame


def _text(value: object) -> str:
    """A table cell: no pipe or newline can break the row; floats in short general form."""
    if isinstance(value, float):
        text = "-" if pd.isna(value) else f"{value:g}"
    else:
        text = "-" if value is None or value is pd.NA else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table of a frame's columns and rows, in their order."""
    lines = [
        "| " + " | ".join(_text(c) for c in frame.columns) + " |",
        "|" + "---|" * len(frame.columns),
    ]
    lines += ["| " + " | ".join(_text(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join(lines)


def _section(title: str, body: list[str], level: int = 2) -> list[str]:
    return ["#" * level + " " + title, "", *body, ""]


def _claims(view: pd.DataFrame) -> list[str]:
    table = claims_table(view)[CLAIM_COLUMNS]
    intro = (
        "Each claim judged from this machine's records (analysis/claims.py); the reason "
        f"says why, and every verdict follows one {RULE}."
    )
    return _section("Claims", [intro, "", markdown_table(table)])


def _group(key: tuple[str, str, str], group: pd.DataFrame) -> list[str]:
    """One workload/device/preset: its comparison tables, then the cells that did not run."""
    heading = where(key)
    body = []
    for title, table, _ in tables(group):
        body += [
            f"**{title.removeprefix(heading + ': ')}**",
            "",
            markdown_table(table.reset_index()),
            "",
        ]
    missing = not_run(group)
    if len(missing):
        body += ["**Cells that did not run** (status and reason)", "", markdown_table(missing), ""]
    return _section(heading, body)


def _tables(title: str, named: dict[str, pd.DataFrame]) -> list[str]:
    body = []
    for name, table in named.items():
        body += [f"**{name}**", "", markdown_table(table), ""]
    return _section(title, body) if body else []


def _selfcheck(results: Results, machine: str) -> dict[str, pd.DataFrame]:
    """The suite's cells against each framework's plain loop (throughput ratio, peaks) and
    the sampler thread's cost, per stored check of this machine."""
    tables = {}
    for name, frame in (
        ("suite against the framework's own loop (ratio outside 0.9-1.1: our bug)",
         results.selfcheck),
        ("the sampler thread's cost per step (target below 1%)", results.probe_cost),
    ):  # fmt: skip
        mine = _of(frame, machine)
        if len(mine):
            tables[name] = mine.drop(columns="machine").round(4)
    return tables


def page(results: Results, machine: str) -> str:
    """One machine's page."""
    view = _of(results.view, machine)
    memory = memory_sections(
        view, _of(results.capacity, machine), _of(results.probes, machine),
        {k: v for k, v in results.calibrations.items() if k[0] == machine},
    )  # fmt: skip
    lines = [
        f"# Results: {machine}",
        "",
        "Generated by `membench report --docs` from the records under `results/` (the latest "
        "record per cell); do not edit, regenerate. Memory in MiB, each figure named by its "
        "layer; a cell that did not end ok shows its status. Plots: `membench report --out DIR`.",
        "",
    ]
    lines += _section("What was measured", [markdown_table(overview(view))])
    if len(took := run_time(view)):
        intro = (
            "Minutes the latest record of each cell took (worker start to record, cells one "
            "after another), summed: what measuring the same cells again costs on this machine."
        )
        lines += _section("How long the cells took", [intro, "", markdown_table(took)])
    lines += _claims(view)
    for key, group in groups(view):
        lines += _group(key, group)
    lines += _tables("Capacity and the memory model", memory)
    lines += _tables("Fairness check (membench selfcheck)", _selfcheck(results, machine))
    history = version_history(_of(results.frame, machine))
    lines += _tables("Version history", {f"{k} (MiB or samples/s)": v for k, v in history.items()})
    if results.problems:
        lines += _section("Files skipped", [f"- {p}" for p in results.problems])
    return "\n".join(lines).rstrip("\n") + "\n"


def pages(results_dir: Path) -> dict[str, str]:
    """Every machine's page: machine -> Markdown."""
    results = load_results(results_dir)
    return {machine: page(results, machine) for machine in machines(results)}


def write_pages(results_dir: Path, docs_results: Path | None = None) -> list[Path]:
    """Write every machine's page (membench.paths.results_page); returns their paths."""
    written = []
    for machine, text in pages(results_dir).items():
        path = paths.results_page(machine, docs_results)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
