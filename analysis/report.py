"""The results as a static report: index.html, tables.md, data/ (CSV, Parquet), plots/<machine>/.

The page is self-contained (no JavaScript, no external URLs): it can be opened from disk,
archived beside the results, or screenshotted headless.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis.answer_plots import (
    SPEED_PNG,
    capacity_memory,
    memory_png,
    speed_at_answers,
    speed_points,
)
from analysis.answer_plots import save as save_picture
from analysis.answers import MARKS_SAID, answers, limit_sentence, provenance, shown_searches
from analysis.claims import RULE, claims_table
from analysis.decision import decision_table, lead_first, lead_searches, unsearched
from analysis.decision_terms import (
    CAPACITY_TITLE,
    CURVE_TITLE,
    DecisionKey,
    latest_searches,
    where_on,
)
from analysis.decision_text import by_mode, formatted, notes_once
from analysis.fits import memory_fits, prediction_errors, sharded_model_state
from analysis.history import version_history
from analysis.labels import for_people
from analysis.loader import (
    LoadResult,
    export,
    latest,
    load,
    load_capacity,
    load_capacity_probes,
    load_search_walls,
    load_selfchecks,
)
from analysis.plots import PLOTS, GroupKey, groups, left_out, save_group, slug, where
from analysis.releases import release_summary
from analysis.schema import FRAMEWORK_STRATEGY_BATCH
from analysis.search_digest import capacity_curve, capacity_reference, capacity_searches, table_note
from analysis.support import refusals, support_matrix
from analysis.tables import comparison_tables, comparison_tables_html
from analysis.timelines import drawn_per_workload, load_timelines, where_peaks
from analysis.timelines import figure as timeline_figure
from analysis.timelines import save as save_timeline
from analysis.timelines import table as timeline_table
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
td:first-child, td:nth-child(2), th:first-child, th:nth-child(2) { text-align: left; }
table.text td, table.text th { text-align: left; vertical-align: top; }
tr.ok td.verdict { background: #e3f4e3; } tr.fail td.verdict { background: #fbe3e3; }
tr.other td.verdict { background: #fff4d6; } tr.na td.verdict { background: #eee; }
tr.best td { background: #e3f4e3; font-weight: 600; }
table.decision td:nth-child(-n+2), table.decision th:nth-child(-n+2) {
  text-align: left; white-space: nowrap; }
table.decision td:last-child, table.decision th:last-child, table.decision td.margin,
table.decision th.margin { text-align: left; }
h4 { font-size: 0.95em; margin: 0.8em 0 0.2em; }
nav ul { columns: 3; font-size: 0.9em; }
ul.problems li, ul.reasons li { color: #8a1c1c; }
td.nw, table.results td { white-space: nowrap; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
"""


def _esc(value: object) -> str:
    return html.escape("" if pd.isna(value) else str(value))


def _text(value: object) -> str:
    """A table cell's text as the Markdown pages write it: a whole float without its ".0"
    (a column with a gap holds its integers as floats), others in short general form."""
    if isinstance(value, float) and not pd.isna(value):
        return f"{value:.0f}" if value.is_integer() and abs(value) < 1e15 else f"{value:g}"
    return "" if pd.isna(value) else str(value)


def _td(column: object, value: object) -> str:
    """A cell, its class the column's name; a one-word value ("accumulate-4", "cpu-quick")
    also "nw": browsers break lines after a hyphen, mid-word. Longer texts (reasons, with
    spaces) still wrap."""
    text = _text(value)
    word = " nw" if text and len(text) <= 32 and not any(c.isspace() for c in text) else ""
    shown = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(text))  # the best
    return f'<td class="{_esc(column)}{word}">{shown}</td>'


def _html_table(
    frame: pd.DataFrame, css: str = "text", row_class: Callable[[pd.Series], str] | None = None
) -> str:
    """A plain table, its columns named for people; row_class gives each row a class (the
    claims' verdict colours, the decision tables' best rows)."""
    shown = for_people(frame)
    named = zip(frame.columns, shown.columns, strict=True)
    head = "".join(f'<th class="{_esc(c)}">{_esc(name)}</th>' for c, name in named)
    rows = []
    for (_, row), (_, text) in zip(frame.iterrows(), shown.iterrows(), strict=True):
        cls = f' class="{row_class(row)}"' if row_class else ""
        cells = "".join(_td(c, v) for c, v in zip(frame.columns, text, strict=True))
        rows.append(f"<tr{cls}>{cells}</tr>")
    body = "".join(rows)
    return f'<div class="scroll"><table class="{css}"><tr>{head}</tr>{body}</table></div>'


# One machine's workload/device/preset group: speeds of two host kinds never share a table.
Section = tuple[str, GroupKey]


def machine_order(decisions: Iterable[DecisionKey]) -> list[str]:
    """The machines in the order the decision tables come (lead_first's)."""
    return list(dict.fromkeys(key[0] for key in decisions))


def by_machine(
    frame: pd.DataFrame, first: Iterable[str] = ()
) -> Iterator[tuple[str, pd.DataFrame]]:
    """Each machine's rows: the machines in `first` (the decision tables' order) before the
    others, sorted."""
    if frame.empty:
        return
    present = sorted(frame["machine"].unique())
    leading = [m for m in dict.fromkeys(first) if m in present]
    for machine in leading + [m for m in present if m not in leading]:
        yield machine, frame[frame["machine"] == machine]


def sections(
    view: pd.DataFrame, first: Iterable[str] = ()
) -> Iterator[tuple[Section, pd.DataFrame]]:
    """Each machine's workload/device/preset groups, the machines as by_machine orders them."""
    for machine, rows in by_machine(view, first):
        for key, group in groups(rows):
            yield (machine, key), group


def section_title(section: Section) -> str:
    """The section's heading: where (workload, device, preset), on which machine."""
    machine, key = section
    return f"{where(key)}, on {machine}"


def _anchor(section: Section) -> str:
    machine, key = section
    return "--".join(slug(part) for part in (*key, machine))


def cells(view: pd.DataFrame) -> pd.DataFrame:
    """One row per cell of the latest view (its status, reason and environment)."""
    keys = ["machine", "workload", "device", "preset", *FRAMEWORK_STRATEGY_BATCH]
    return view.drop_duplicates(keys)[
        [
            *keys,
            "framework_version",
            "host_cpu",
            "inputs",
            "commit",
            "started_at",
            "status",
            "reason",
        ]
    ]


def _versions(cells_frame: pd.DataFrame) -> str:
    """Each framework with its versions; cells refused before import record none."""
    out = []
    for framework, versions in cells_frame.groupby("framework", sort=True)["framework_version"]:
        known = sorted(v for v in versions.dropna().unique() if v)
        out.append(f"{framework} {' / '.join(known)}".strip())
    return ", ".join(out)


def overview(view: pd.DataFrame) -> pd.DataFrame:
    """Per machine and workload/device/preset: where, with what, and how many cells ended
    how."""
    rows = []
    keys = ["machine", "workload", "device", "preset"]
    for key, group in cells(view).groupby(keys, sort=True):
        statuses = group["status"].value_counts()
        rows.append({
            "workload": key[1], "device": key[2], "preset": key[3], "machine": key[0],
            "host CPU": ", ".join(
                sorted(c for c in group["host_cpu"].unique() if isinstance(c, str) and c)
            ),
            "inputs": "; ".join(sorted(i for i in group["inputs"].dropna().unique() if i)),
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


def run_time_summary(view: pd.DataFrame, searched: pd.DataFrame | None = None) -> pd.DataFrame:
    """run_time in one row per preset and workload: cells, minutes per framework, their cell
    minutes, and beside them search_time's probes and minutes where given (a preset with
    searches and no cells has a row too); each preset's total last."""
    walls = view[view["metric"] == CELL_WALL].dropna(subset=["value"])
    searching = [] if searched is None or searched.empty else list(searched.columns[2:])
    if walls.empty and not searching:
        return pd.DataFrame()
    keys = ["preset", "workload"]
    if len(walls):
        minutes = walls.pivot_table(index=keys, columns="framework", values="value", aggfunc="sum")
        minutes = minutes / 60
        minutes.columns = [f"{f} minutes" for f in minutes.columns]
        table = minutes.assign(
            cells=walls.groupby(keys).size(), **{"cell minutes": minutes.sum(axis=1, min_count=1)}
        ).reset_index()
    else:
        minutes = pd.DataFrame()
        table = pd.DataFrame({c: pd.Series(dtype=object if c in keys else float)
                              for c in [*keys, "cells", "cell minutes"]})  # fmt: skip
    if searching:
        table = table.merge(searched, on=keys, how="outer")
    parts = []
    for preset, rows in table.groupby("preset", sort=True):
        total = rows.drop(columns=keys).sum(min_count=1).to_frame().T
        parts += [rows, total.assign(preset=preset, workload="all")]
    out = pd.concat(parts, ignore_index=True)
    out = out[[*keys, "cells", *minutes.columns, "cell minutes", *searching]]
    out["cells"] = out["cells"].fillna(0)
    if searching:
        out["search probes"] = out["search probes"].astype("Int64")
    return out.astype({"cells": int}).round(1)


def search_time(
    walls: pd.DataFrame, capacity: pd.DataFrame, machine: str | None = None
) -> pd.DataFrame:
    """Per preset and workload, the probes of the searches the decision tables show
    (latest_searches: one run per search), their boundary repeats and warm-up cells counted
    (analysis.loader.load_search_walls), and the minutes they took one after another: what
    searching again costs here (an earlier run's probes of a search are not counted).
    machine: one machine's (the results page's and the report's table), else every one."""
    columns = ["preset", "workload", "search probes", "search minutes"]
    if walls is None or walls.empty or capacity.empty:
        return pd.DataFrame(columns=columns)
    if machine is not None:
        walls, capacity = (
            walls[walls["machine"] == machine],
            capacity[capacity["machine"] == machine],
        )
        if walls.empty or capacity.empty:
            return pd.DataFrame(columns=columns)
    keys = ["machine", "run", "workload", "framework", "strategy"]
    shown = latest_searches(capacity)[keys].drop_duplicates()
    walls = walls.merge(shown, on=keys, how="inner")
    table = walls.groupby(["preset", "workload"])["seconds"].agg(["size", "sum"]).reset_index()
    table.columns = columns
    table["search minutes"] = table["search minutes"] / 60
    return table


def not_run(group: pd.DataFrame) -> pd.DataFrame:
    """The cells of a group that did not end ok, with status and reason."""
    bad = cells(group)
    bad = bad[bad["status"] != "ok"].sort_values(FRAMEWORK_STRATEGY_BATCH)
    return bad[[*FRAMEWORK_STRATEGY_BATCH, "status", "reason"]].rename(
        columns={"batch_size": "batch"}
    )


def fairness_tables(selfcheck: pd.DataFrame, probe_cost: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The suite's cells against each framework's plain loop (throughput ratio, peaks) and
    the sampler thread's cost, per stored check (`membench selfcheck --save`)."""
    tables = {}
    for name, frame in (
        ("suite against the framework's own loop (ratio outside 0.9-1.1: our bug)", selfcheck),
        (
            "the samplers' cost per step: the worker's thread, then the runner's timeline "
            "(--timeline; target below 1%)",
            probe_cost,
        ),
    ):
        if len(frame):
            tables[name] = frame.drop(columns="machine").round(4)
    return tables


VERDICT_CLASSES = {"confirmed": "ok", "refuted": "fail", "inconclusive": "other"}


def _verdict_class(row: pd.Series) -> str:
    """Colour by verdict; anything else (e.g. "not measurable here") is grey."""
    return VERDICT_CLASSES.get(str(row.get("verdict", "")).lower(), "na")


def _plots_html(section: Section, plots: dict[str, Path], base: Path) -> str:
    figures = []
    for kind, path in plots.items():
        # No caption: each figure carries its own title (what, workload, device, preset) and
        # stands under its section's heading (which names the machine).
        alt = f"{PLOTS[kind][1]}: {section_title(section)}"
        src = path.relative_to(base).as_posix()
        figures.append(f'<figure><img src="{_esc(src)}" alt="{_esc(alt)}"></figure>')
    return "".join(figures)


def _group_html(section: Section, group: pd.DataFrame, plots: dict[str, Path], base: Path) -> str:
    parts = [f'<h2 id="{_esc(_anchor(section))}">{_esc(section_title(section))}</h2>']
    # where a plot would be (memory against batch size comes first): why it is not
    parts += [f'<p class="meta">{_esc(why)}</p>' for why in left_out(group).values()]
    parts.append(_plots_html(section, plots, base) or "<p>No cell ended ok: nothing to plot.</p>")
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
    return (
        f'<h2 id="claims">Claims</h2><p>Every verdict follows one {_esc(RULE)}.</p>'
        + _html_table(table, row_class=_verdict_class)
    )


def memory_sections(
    view: pd.DataFrame,
    capacity: pd.DataFrame,
    probes: pd.DataFrame | None = None,
) -> dict[str, pd.DataFrame]:
    """The capacity, linear-fit and memory-model tables, each where there is data, rounded
    for reading."""
    sections = {}
    if not capacity.empty:
        sections[CAPACITY_TITLE] = capacity_reference(capacity)
        if len(curve := capacity_curve(capacity)):
            sections[CURVE_TITLE] = curve
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
    errors = prediction_errors(view)
    if not errors.empty:
        title = "Memory model: predicted against measured peak, spec only and calibrated"
        sections[title] = errors.round(3)
    return sections


def _tables_section(anchor: str, title: str, tables: dict[str, pd.DataFrame]) -> str:
    """An h2 section of named tables, each under its note (TABLE_NOTES) where it has one;
    nothing where there are none."""
    if not tables:
        return ""
    parts = [f'<h2 id="{_esc(anchor)}">{_esc(title)}</h2>']
    for name, table in tables.items():
        told = table_note(name, table)
        note = f'<p class="meta">{_esc(told)}</p>' if told else ""
        parts.append(f"<h3>{_esc(name)}</h3>{note}" + _html_table(table))
    return "\n".join(parts)


def _code(text: str) -> str:
    """Escaped text with its Markdown `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _esc(text))


def _releases_html(frame: pd.DataFrame) -> str:
    """Each machine's release verdicts (analysis.releases.release_summary), as its summary
    page has them; nothing where no machine holds a version sweep."""
    parts = []
    for machine in sorted(frame["machine"].dropna().unique()) if len(frame) else []:
        found = release_summary(frame[frame["machine"] == machine], str(machine))
        if found is None:
            continue
        head, *items = found.lasting
        listed = "".join(f"<li>{_esc(item)}</li>" for item in items)
        parts.append(
            f"<h3>{_esc(machine)}</h3><p>{_code(found.intro)}</p>{_html_table(found.table)}"
            f"<p>{_esc(head)}</p>" + (f"<ul>{listed}</ul>" if listed else "")
        )
    if not parts:
        return ""
    return '<h2 id="releases">Framework releases</h2>' + "\n".join(parts)


def _decision_html(decisions: dict[DecisionKey, pd.DataFrame], capacity: pd.DataFrame) -> str:
    parts = ['<h2 id="decision">Decision tables</h2>']
    if not decisions:
        parts.append("<p>No capacity search in these results: <code>membench capacity</code> "
                     "answers what fits in a budget.</p>")  # fmt: skip
    for (key, table), told in zip(decisions.items(), notes_once(decisions.values()), strict=True):
        parts.append(f'<h3 id="{_esc(_slug(where_on(key)))}">{_esc(where_on(key))}'
                     f"</h3><p>{_esc(told)}</p>")  # fmt: skip
        if missing := unsearched(capacity, key):
            parts.append(f'<p class="meta">{_esc(missing)}</p>')
        for mode, part in by_mode(formatted(table)).items():
            best = lambda r: "best" if r.get("best") == "best" else ""  # noqa: E731
            parts.append(
                f"<h4>{_esc(mode.capitalize())}</h4>" + _html_table(part, "decision", best)
            )
    return "\n".join(parts)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def _nav(links: list[tuple[str, str]]) -> str:
    items = "".join(f'<li><a href="{_esc(h)}">{_esc(t)}</a></li>' for h, t in links)
    return f"<nav><ul>{items}</ul></nav>"


def answers_html(
    decisions: dict[DecisionKey, pd.DataFrame], capacity: pd.DataFrame, view: pd.DataFrame,
    out_dir: Path, base: Path,
) -> str:  # fmt: skip
    """The answers first, as the results pages give them: per machine (the decision tables'
    order) and workload, the compact table of its lead searches and the peak-against-batch
    picture, then samples/s at the answers (PNGs drawn into out_dir)."""
    parts = []
    for machine in machine_order(decisions):
        lead, _ = lead_searches(capacity[capacity["machine"] == machine])
        if lead.empty:
            continue
        mine = {k: v for k, v in decisions.items() if k[0] == machine}
        parts.append(f'<h3>On {_esc(machine)}</h3><p class="meta">{_esc(provenance(lead))}.</p>')
        for (workload, preset), table in answers(lead, mine).items():
            parts.append(f"<h4>{_esc(workload)}, preset {_esc(preset)}</h4>")
            parts.append(_html_table(table, "decision"))
            searches = lead[lead["workload"] == workload]
            if limits := limit_sentence(shown_searches(searches), view):
                parts.append(f'<p class="meta">{_esc(limits)}</p>')
            if fig := capacity_memory(searches, workload, machine):
                png = save_picture(fig, out_dir / machine / memory_png(workload))
                parts.append(_figure(png, base, f"{workload}: peak against batch, budgets and "
                                                "answers marked"))  # fmt: skip
        what = "Samples/s at the largest batch within each budget"
        if fig := speed_at_answers(speed_points(lead), machine, what):
            png = save_picture(fig, out_dir / machine / SPEED_PNG)
            parts.append(_figure(png, base, "samples/s at the answers per strategy"))
    if not parts:
        return ""
    intro = (
        f"<p>The largest batch each framework x strategy fits in each budget, and samples/s "
        f"there (bold: the framework's fastest). {_esc(MARKS_SAID)} The margins, spreads and "
        'notes are in the <a href="#decision">decision tables</a> below.</p>'
    )
    return f'<h2 id="answers">Answers</h2>{intro}{"".join(parts)}'


def _figure(png: Path, base: Path, alt: str) -> str:
    return f'<figure><img src="{_esc(png.relative_to(base))}" alt="{_esc(alt)}"></figure>'


@dataclass
class Page:
    """What the report's page is made of, each part where there is data."""

    decisions: dict[DecisionKey, pd.DataFrame] = field(default_factory=dict)
    capacity: pd.DataFrame = field(default_factory=pd.DataFrame)
    claims: pd.DataFrame | None = None
    fairness: dict[str, pd.DataFrame] = field(default_factory=dict)
    memory: dict[str, pd.DataFrame] = field(default_factory=dict)
    timelines: str = ""  # the memory-over-time section's HTML ("" where none was sampled)
    # every capacity probe's wall time, repeats and warm-ups included (load_search_walls)
    search_walls: pd.DataFrame = field(default_factory=pd.DataFrame)
    answers: str = ""  # the answers' HTML, tables and pictures (answers_html)


def timelines_html(results_dir: Path, out_dir: Path, base: Path, problems: list[str]) -> str:
    """Memory over time: per machine and workload the timeline figure (drawn into out_dir),
    where each framework peaks, and the timelines' peaks against VmHWM; the timeline files
    that could not be read are added to problems."""
    found, unread = load_timelines(results_dir)
    problems.extend(unread)
    parts = []
    for machine in sorted({t.machine for t in found}):
        for workload, drawn in drawn_per_workload(found, machine).items():
            fig = timeline_figure(drawn, workload)
            if fig is None:
                continue
            png = save_timeline(fig, out_dir / f"{machine}-{workload}-timeline.png")
            peaks = "".join(f"<li>{_esc(line[2:])}</li>" for line in where_peaks(drawn))
            parts.append(
                f"<h3>{_esc(workload)} on {_esc(machine)}</h3>"
                f'<figure><img src="{_esc(png.relative_to(base))}" alt="{_esc(workload)} '
                f'memory timelines"></figure><ul>{peaks}</ul>'
                f"{_html_table(timeline_table(drawn))}"
            )
    if not parts:
        return ""
    intro = (
        "<p>Each cell's resident memory as the runner sampled it from outside the worker "
        "(<code>membench run --timeline</code>), phases marked by the worker; the measured "
        "steps' peak against the worker's VmHWM (the record's peak).</p>"
    )
    return f'<h2 id="timelines">Memory over time</h2>{intro}{"".join(parts)}'


def per_machine(
    frame: pd.DataFrame,
    make: Callable[[pd.DataFrame], dict[str, pd.DataFrame]],
    first: Iterable[str] = (),
) -> dict[str, pd.DataFrame]:
    """make's tables of each machine's rows (by_machine's order), each title naming its
    machine, the empty ones left out: a figure pooled over host kinds is no one machine's."""
    named: dict[str, pd.DataFrame] = {}
    for machine, rows in by_machine(frame, first):
        named |= {f"{title}, on {machine}": t for title, t in make(rows).items() if len(t)}
    return named


def _run_time_tables(view: pd.DataFrame, page: Page | None = None) -> dict[str, pd.DataFrame]:
    """One machine's run_time_summary, with its searches' time where the page has them (the
    same table as its results page's)."""
    searched = None
    if page is not None and len(view):
        searched = search_time(page.search_walls, page.capacity, view["machine"].iloc[0])
    title = "minutes per preset and workload, cells"
    if searched is not None and len(searched):
        title += " and the searches the decision tables show"
    return {f"{title}, one after another": run_time_summary(view, searched)}


def _support_tables(view: pd.DataFrame) -> dict[str, pd.DataFrame]:
    matrix = support_matrix(view)
    return {"Support matrix": matrix, "Why": refusals(view)} if len(matrix) else {}


def machines_fairness(selfcheck: pd.DataFrame, probe_cost: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """fairness_tables per machine, each title naming its machine."""
    stored = [f[["machine"]] for f in (selfcheck, probe_cost) if len(f)]
    named: dict[str, pd.DataFrame] = {}
    for machine, _ in by_machine(pd.concat(stored)) if stored else ():
        of = [f[f["machine"] == machine] if len(f) else f for f in (selfcheck, probe_cost)]
        named |= {f"{t}, on {machine}": table for t, table in fairness_tables(*of).items()}
    return named


def render_page(
    results_dir: Path,
    loaded: LoadResult,
    view: pd.DataFrame,
    plots: dict[Section, dict[str, Path]],
    page: Page,
    base: Path,
) -> str:
    """The whole index.html, the summary's sections first (decision tables, capacity
    searches, claims, what was measured, time, fairness, support), then each machine's
    workload/device/preset plots and tables; plots are paths under base (the page's folder)."""
    order = machine_order(page.decisions)
    found = list(sections(view, order))
    keys = [section for section, _ in found]
    groups_html = [_group_html(k, group, plots.get(k, {}), base) for k, group in found]
    history = version_history(loaded.frame)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = (
        f'<p class="meta">From <code>{_esc(results_dir)}</code>, generated {stamp}. '
        "Latest record per cell; memory in MiB in tables, GiB in plots; every memory figure "
        'names its layer. Data: <a href="data/results.csv">results.csv</a>, '
        '<a href="data/results.parquet">results.parquet</a>, '
        '<a href="tables.md">tables.md</a>.</p>'
    )
    measured = _html_table(overview(view)) if len(view) else "<p>No records found.</p>"
    searches = per_machine(page.capacity, capacity_searches, order)
    parts = {
        "answers": ("Answers", page.answers),
        "decision": ("Decision tables", _decision_html(page.decisions, page.capacity)),
        "timelines": ("Memory over time", page.timelines),
        "capacity-searches": ("Capacity searches", _tables_section(
            "capacity-searches", "Capacity searches", searches)),
        "claims": ("Claims", _claims_html(page.claims)),
        "measured": ("What was measured",
                     f'<h2 id="measured">What was measured</h2>{measured}'),
        "time": ("How long the cells and searches took", _tables_section(
            "time", "How long the cells and searches took",
            per_machine(view, lambda rows: _run_time_tables(rows, page), order))),
        "fairness": ("Fairness check", _tables_section(
            "fairness", "Fairness check (membench selfcheck)", page.fairness)),
        "support": ("Which strategies each framework refuses", _tables_section(
            "support", "Which strategies each framework refuses",
            per_machine(view, _support_tables, order))),
    }  # fmt: skip
    links = [(f"#{a}", title) for a, (title, text) in parts.items() if text]
    links += [(f"#{_anchor(k)}", section_title(k)) for k in keys]
    links += [("#memory", "Capacity and the memory model")] if page.memory else []
    releases = _releases_html(loaded.frame)
    links += [("#releases", "Framework releases")] if releases else []
    links += [("#versions", "Version history")] if history else []
    links += [("#problems", "Files skipped")] if loaded.problems else []
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>membench results</title>", f"<style>{CSS}</style></head><body>",
        "<h1>membench results</h1>", meta, _nav(links),
        *(text for _, text in parts.values()), *groups_html,
        _tables_section("memory", "Capacity and the memory model", page.memory),
        releases, _tables_section("versions", "Version history", history),
        _problems_html(loaded.problems), "</body></html>",
    ])  # fmt: skip


def tables_markdown(
    view: pd.DataFrame,
    claims_frame: pd.DataFrame | None,
    history: dict[str, pd.DataFrame] | None = None,
    memory: dict[str, pd.DataFrame] | None = None,
    decisions: dict[DecisionKey, pd.DataFrame] | None = None,
) -> str:
    parts = ["# membench results", ""]
    decisions = decisions or {}
    for (key, table), told in zip(decisions.items(), notes_once(decisions.values()), strict=True):
        parts += [f"## Decision table: {where_on(key)}", "", told, ""]
        for mode, part in by_mode(formatted(table)).items():
            parts += [f"**{mode.capitalize()}**", "", part.to_markdown(index=False), ""]
    for section, group in sections(view, machine_order(decisions)):
        parts += [f"## {section_title(section)}", ""]
        for name, table in comparison_tables(group).items():
            parts += [f"### {name}", "", table, ""]
    for name, table in (memory or {}).items():
        told = table_note(name, table)
        note = [told, ""] if told else []
        parts += [f"## {name}", "", *note, table.to_markdown(index=False), ""]
    if claims_frame is not None and not claims_frame.empty:
        parts += ["## Claims", "", f"Every verdict follows one {RULE}.", ""]
        parts += [claims_frame.to_markdown(index=False), ""]
    for name, table in (history or {}).items():
        parts += [f"## Version history: {name}", "", table.to_markdown(index=False), ""]
    return "\n".join(parts)


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
