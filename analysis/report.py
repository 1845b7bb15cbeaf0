"""The results as a static report: index.html, tables.md, data/ (CSV, Parquet), plots/<machine>/.

The page is self-contained (no JavaScript, no external URLs): it can be opened from disk,
archived beside the results, or screenshotted headless. This module writes the report
(write_report); analysis.report_tables makes its tables, analysis.report_html its HTML.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.capacity_loader import load_capacity, load_capacity_probes, load_search_walls
from analysis.claims import claims_table
from analysis.decision import decision_table, lead_first
from analysis.history import version_history
from analysis.loader import export, latest, load, load_selfchecks
from analysis.plots import save_group
from analysis.report_html import Page, answers_html, render_page, timelines_html
from analysis.report_tables import (
    Section,
    machines_fairness,
    memory_sections,
    sections,
    tables_markdown,
)


def _write_plots(view: pd.DataFrame, out_dir: Path) -> dict[Section, dict[str, Path]]:
    """Each section's figures, in a folder per machine (named as its results folder is)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.rglob("*.png"):  # a rerun must not keep plots of cells now gone
        old.unlink()
    for folder in out_dir.iterdir():  # nor the folders of machines now gone
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    written: dict[Section, dict[str, Path]] = {}
    for section, group in sections(view):
        folder = out_dir / section[0]
        folder.mkdir(exist_ok=True)
        written[section] = save_group(group, folder)
    return written


def write_report(results_dir: Path, out_dir: Path, problems: list[str] | None = None) -> Path:
    """Load results_dir and write the report into out_dir; returns index.html's path. The
    files skipped or partly read (also on the page) are added to problems, if given."""
    loaded = load(results_dir)
    capacity = load_capacity(results_dir)
    probes = load_capacity_probes(results_dir)
    selfcheck, probe_cost, unread = load_selfchecks(results_dir)
    loaded.problems.extend(capacity.problems + probes.problems + unread)
    if problems is not None:
        problems.extend(loaded.problems)
    view = latest(loaded.frame)
    out_dir.mkdir(parents=True, exist_ok=True)
    export(loaded.frame, out_dir / "data")
    history = version_history(loaded.frame)
    memory = memory_sections(view, capacity.frame, probes.frame)
    page = Page(
        lead_first(decision_table(view, capacity.frame, probes.frame), capacity.frame),
        capacity.frame,
        claims_table(view),
        machines_fairness(selfcheck, probe_cost), memory,
    )  # fmt: skip
    markdown = tables_markdown(view, page.claims, history, memory, page.decisions)
    (out_dir / "tables.md").write_text(markdown, encoding="utf-8")
    plots = _write_plots(view, out_dir / "plots")
    page.timelines = timelines_html(results_dir, out_dir / "timelines", out_dir, loaded.problems)
    page.search_walls = load_search_walls(results_dir)
    page.answers = answers_html(page.decisions, capacity.frame, view, out_dir / "answers", out_dir)
    index = out_dir / "index.html"
    index.write_text(render_page(results_dir, loaded, view, plots, page, out_dir), encoding="utf-8")
    return index
