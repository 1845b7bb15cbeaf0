"""The report's HTML page (index.html), self-contained: its style, tables and sections, the
answers with their pictures, the timelines, the claims and releases, the whole page
(render_page).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
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
from analysis.claims import RULE
from analysis.decision import lead_searches, unsearched
from analysis.decision_terms import (
    DecisionKey,
    where_on,
)
from analysis.decision_text import by_mode, formatted, notes_once
from analysis.history import version_history
from analysis.labels import for_people
from analysis.loader import LoadResult
from analysis.plots import PLOTS, left_out, slug
from analysis.releases import release_summary
from analysis.report_tables import (
    Section,
    machine_order,
    not_run,
    overview,
    per_machine,
    run_time_summary,
    search_time,
    section_title,
    sections,
)
from analysis.search_digest import capacity_searches, table_note
from analysis.support import refusals, support_matrix
from analysis.tables import comparison_tables_html
from analysis.timelines import drawn_per_workload, load_timelines, where_peaks
from analysis.timelines import figure as timeline_figure
from analysis.timelines import save as save_timeline
from analysis.timelines import table as timeline_table

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


def _anchor(section: Section) -> str:
    machine, key = section
    return "--".join(slug(part) for part in (*key, machine))


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
