"""The results as a static report: index.html, tables.md, data/ (CSV, Parquet) and plots/.

The page is self-contained (no JavaScript, no external URLs): it can be opened from disk,
archived beside the results, or screenshotted headless.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis.claims import claims_table
from analysis.fits import memory_fits, prediction_errors, sharded_model_state
from analysis.history import version_history
from analysis.loader import (
    LoadResult,
    export,
    latest,
    load,
    load_calibrations,
    load_capacity,
    load_capacity_probes,
)
from analysis.plots import PLOTS, GroupKey, groups, save_group, where
from analysis.schema import FRAMEWORK_STRATEGY_BATCH
from analysis.tables import comparison_tables, comparison_tables_html
from membench.metrics import CELL_WALL

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ccc; margin-top: 2em; }
h3 { font-size: 1em; margin: 1.5em 0 0.4em; }
.meta { color: #555; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.3em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; }
td:first-child, td:nth-child(2), th:first-child { text-align: left; }
table.text td, table.text th { text-align: left; vertical-align: top; }
tr.ok td.verdict { background: #e3f4e3; } tr.fail td.verdict { background: #fbe3e3; }
tr.other td.verdict { background: #fff4d6; } tr.na td.verdict { background: #eee; }
ul.problems li, ul.reasons li { color: #8a1c1c; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
"""


def _esc(value: object) -> str:
    return html.escape("" if pd.isna(value) else str(value))


def _html_table(
    frame: pd.DataFrame, css: str = "text", row_class: Callable[[pd.Series], str] | None = None
) -> str:
    """A plain table; row_class gives each row a class (the claims' verdict colours)."""
    head = "".join(f"<th>{_esc(c)}</th>" for c in frame.columns)
    rows = []
    for _, row in frame.iterrows():
        cls = f' class="{row_class(row)}"' if row_class else ""
        cells = "".join(f'<td class="{_esc(c)}">{_esc(row[c])}</td>' for c in frame.columns)
        rows.append(f"<tr{cls}>{cells}</tr>")
    body = "".join(rows)
    return f'<div class="scroll"><table class="{css}"><tr>{head}</tr>{body}</table></div>'


def _anchor(key: GroupKey) -> str:
    return "-".join(key).replace(" ", "-")


def cells(view: pd.DataFrame) -> pd.DataFrame:
    """One row per cell of the latest view (its status, reason and environment)."""
    keys = ["machine", "workload", "device", "preset", *FRAMEWORK_STRATEGY_BATCH]
    return view.drop_duplicates(keys)[
        [*keys, "framework_version", "host_cpu", "commit", "started_at", "status", "reason"]
    ]


def _versions(cells_frame: pd.DataFrame) -> str:
    """Each framework with its versions; cells refused before import record none."""
    out = []
    for framework, versions in cells_frame.groupby("framework", sort=True)["framework_version"]:
        known = sorted(v for v in versions.dropna().unique() if v)
        out.append(f"{framework} {' / '.join(known)}".strip())
    return ", ".join(out)


def overview(view: pd.DataFrame) -> pd.DataFrame:
    """Per workload/device/preset: where, with what, and how many cells ended how."""
    rows = []
    for key, group in cells(view).groupby(["workload", "device", "preset"], sort=True):
        statuses = group["status"].value_counts()
        rows.append({
            "workload": key[0], "device": key[1], "preset": key[2],
            "machine": ", ".join(sorted(group["machine"].unique())),
            "host CPU": ", ".join(
                sorted(c for c in group["host_cpu"].unique() if isinstance(c, str) and c)
            ),
            "frameworks": _versions(group),
            "commit": ", ".join(sorted(c[:12] for c in group["commit"].unique() if c)),
            "measured": ", ".join(sorted(group["started_at"].str[:10].unique())),
            "cells": ", ".join(f"{n} {s}" for s, n in statuses.items()),
        })  # fmt: skip
    return pd.DataFrame(rows)


def run_time(view: pd.DataFrame) -> pd.DataFrame:
    """Minutes the latest record of each cell took, summed per preset, workload and
    framework (cells refused at plan time count their milliseconds): what measuring the
    preset again costs on that machine, one cell after another."""
    walls = view[view["metric"] == CELL_WALL].dropna(subset=["value"])
    if walls.empty:
        return pd.DataFrame()
    keys = ["preset", "workload", "framework"]
    table = walls.groupby(keys, sort=True)["value"].agg(cells="size", minutes="sum")
    table["minutes"] = table["minutes"] / 60
    parts = []
    for preset, rows in table.groupby(level="preset", sort=True):
        total = rows.sum().to_frame().T.assign(preset=preset, workload="all", framework="all")
        parts += [rows.reset_index(), total]
    return (
        pd.concat(parts, ignore_index=True)[[*keys, "cells", "minutes"]]
        .astype({"cells": int})
        .round({"minutes": 1})
    )


def not_run(group: pd.DataFrame) -> pd.DataFrame:
    """The cells of a group that did not end ok, with status and reason."""
    bad = cells(group)
    bad = bad[bad["status"] != "ok"].sort_values(FRAMEWORK_STRATEGY_BATCH)
    return bad[[*FRAMEWORK_STRATEGY_BATCH, "status", "reason"]].rename(
        columns={"batch_size": "batch"}
    )


VERDICT_CLASSES = {"confirmed": "ok", "refuted": "fail", "inconclusive": "other"}


def _verdict_class(row: pd.Series) -> str:
    """Colour by verdict; anything else (e.g. "not measurable here") is grey."""
    return VERDICT_CLASSES.get(str(row.get("verdict", "")).lower(), "na")


def _plots_html(key: GroupKey, plots: dict[str, Path], base: Path) -> str:
    figures = []
    for kind, path in plots.items():
        # No caption: each figure carries its own title (what, workload, device, preset).
        alt = f"{PLOTS[kind][1]}: {where(key)}"
        src = path.relative_to(base).as_posix()
        figures.append(f'<figure><img src="{_esc(src)}" alt="{_esc(alt)}"></figure>')
    return "".join(figures)


def _group_html(key: GroupKey, group: pd.DataFrame, plots: dict[str, Path], base: Path) -> str:
    parts = [f'<h2 id="{_esc(_anchor(key))}">{_esc(where(key))}</h2>']
    parts.append(_plots_html(key, plots, base) or "<p>No cell ended ok: nothing to plot.</p>")
    missing = not_run(group)
    if len(missing):
        parts.append("<h3>Cells that did not run (not plotted)</h3>" + _html_table(missing))
    for name, table in comparison_tables_html(group).items():
        parts.append(f'<h3>{_esc(name)}</h3><div class="scroll">{table}</div>')
    return "\n".join(parts)


def _problems_html(problems: list[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{_esc(p)}</li>" for p in problems)
    return (
        f'<h2 id="problems">Files skipped ({len(problems)})</h2><ul class="problems">{items}</ul>'
    )


def _claims_html(table: pd.DataFrame | None) -> str:
    if table is None:
        return ""
    if table.empty:
        return '<h2 id="claims">Claims</h2><p>No claim could be checked against these results.</p>'
    return '<h2 id="claims">Claims</h2>' + _html_table(table, row_class=_verdict_class)


def memory_sections(
    view: pd.DataFrame,
    capacity: pd.DataFrame,
    probes: pd.DataFrame | None = None,
    calibrations: dict | None = None,
) -> dict[str, pd.DataFrame]:
    """The capacity, linear-fit and memory-model tables, each where there is data, rounded
    for reading."""
    sections = {}
    if not capacity.empty:
        cols = [
            "machine", "workload", "framework", "strategy", "budget_gib", "largest_batch",
            "smallest_non_fit", "status", "throughput_at_capacity", "fit_fixed_mib",
            "fit_per_sample_mib", "note",
        ]  # fmt: skip
        sections["Capacity: largest batch within the budget"] = capacity[cols].round(2)
    fits = memory_fits(view)
    if not fits.empty:
        sections["Peak memory against batch size (fixed + per-sample, MiB)"] = fits.round(3)
    sharded = sharded_model_state(view)
    if not sharded.empty:
        title = "Sharding: model state of the busiest rank, measured and predicted (MiB)"
        sections[title] = sharded.round(3)
    # the memory model is judged on every measured cell: the presets' and the capacity probes'
    parts = [f for f in (view, probes) if f is not None and len(f)]
    if len(parts) == 2:  # a column empty in one part takes its dtype from the other
        joined = pd.concat([f.dropna(axis=1, how="all") for f in parts], ignore_index=True)
        view = joined.reindex(columns=view.columns)
    elif parts:
        view = parts[0]
    errors = prediction_errors(view, calibrations)
    if not errors.empty:
        title = "Memory model: predicted against measured peak, spec only and calibrated"
        sections[title] = errors.round(3)
    return sections


def _tables_section(anchor: str, title: str, tables: dict[str, pd.DataFrame]) -> str:
    """An h2 section of named tables; nothing where there are none."""
    if not tables:
        return ""
    parts = [f'<h2 id="{_esc(anchor)}">{_esc(title)}</h2>']
    for name, table in tables.items():
        parts.append(f"<h3>{_esc(name)}</h3>" + _html_table(table))
    return "\n".join(parts)


def _nav(
    keys: list[GroupKey], problems: bool, has_claims: bool, has_history: bool, has_memory: bool
) -> str:
    links = [(f"#{_anchor(k)}", where(k)) for k in keys]
    links += [("#memory", "Capacity and the memory model")] if has_memory else []
    links += [("#problems", "Files skipped")] if problems else []
    links += [("#claims", "Claims")] if has_claims else []
    links += [("#versions", "Version history")] if has_history else []
    items = "".join(f'<li><a href="{_esc(h)}">{_esc(t)}</a></li>' for h, t in links)
    return f"<nav><ul>{items}</ul></nav>"


def render_page(
    results_dir: Path,
    loaded: LoadResult,
    view: pd.DataFrame,
    plots: dict[GroupKey, dict[str, Path]],
    claims_frame: pd.DataFrame | None,
    base: Path,
    memory: dict[str, pd.DataFrame] | None = None,
) -> str:
    """The whole index.html; plots are paths under base (the page's folder)."""
    keys = [key for key, _ in groups(view)]
    sections = [_group_html(key, group, plots.get(key, {}), base) for key, group in groups(view)]
    history = version_history(loaded.frame)
    memory = memory or {}
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = (
        f'<p class="meta">From <code>{_esc(results_dir)}</code>, generated {stamp}. '
        "Latest record per cell; memory in MiB in tables, GiB in plots; every memory figure "
        'names its layer. Data: <a href="data/results.csv">results.csv</a>, '
        '<a href="data/results.parquet">results.parquet</a>, '
        '<a href="tables.md">tables.md</a>.</p>'
    )
    summary = _html_table(overview(view)) if len(view) else "<p>No records found.</p>"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>membench results</title>", f"<style>{CSS}</style></head><body>",
        "<h1>membench results</h1>", meta, summary,
        _nav(keys, bool(loaded.problems), claims_frame is not None, bool(history), bool(memory)),
        _problems_html(loaded.problems), *sections,
        _tables_section("memory", "Capacity and the memory model", memory),
        _claims_html(claims_frame), _tables_section("versions", "Version history", history),
        "</body></html>",
    ])  # fmt: skip


def tables_markdown(
    view: pd.DataFrame,
    claims_frame: pd.DataFrame | None,
    history: dict[str, pd.DataFrame] | None = None,
    memory: dict[str, pd.DataFrame] | None = None,
) -> str:
    parts = ["# membench results", ""]
    for name, table in comparison_tables(view).items():
        parts += [f"## {name}", "", table, ""]
    for name, table in (memory or {}).items():
        parts += [f"## {name}", "", table.to_markdown(index=False), ""]
    if claims_frame is not None and not claims_frame.empty:
        parts += ["## Claims", "", claims_frame.to_markdown(index=False), ""]
    for name, table in (history or {}).items():
        parts += [f"## Version history: {name}", "", table.to_markdown(index=False), ""]
    return "\n".join(parts)


def _write_plots(view: pd.DataFrame, out_dir: Path) -> dict[GroupKey, dict[str, Path]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):  # a rerun must not keep plots of cells now gone
        old.unlink()
    return {key: save_group(group, out_dir) for key, group in groups(view)}


def write_report(results_dir: Path, out_dir: Path) -> Path:
    """Load results_dir and write the report into out_dir; returns index.html's path."""
    loaded = load(results_dir)
    capacity = load_capacity(results_dir)
    probes = load_capacity_probes(results_dir)
    calibrations, skipped = load_calibrations(results_dir)
    loaded.problems.extend(capacity.problems + probes.problems + skipped)
    view = latest(loaded.frame)
    out_dir.mkdir(parents=True, exist_ok=True)
    export(loaded.frame, out_dir / "data")
    claims_frame = claims_table(view)
    history = version_history(loaded.frame)
    memory = memory_sections(view, capacity.frame, probes.frame, calibrations)
    markdown = tables_markdown(view, claims_frame, history, memory)
    (out_dir / "tables.md").write_text(markdown, encoding="utf-8")
    plots = _write_plots(view, out_dir / "plots")
    index = out_dir / "index.html"
    page = render_page(results_dir, loaded, view, plots, claims_frame, out_dir, memory)
    index.write_text(page, encoding="utf-8")
    return index
