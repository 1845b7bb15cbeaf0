"""The results pages under docs/results/, generated from the committed results (`membench
report --docs`), never written by hand: per machine a summary page (<machine>.md: the answers
first, a compact table and a picture per workload, then what was measured, claims, time,
fairness; at most SUMMARY_LIMIT lines, no table cell over CELL_CHARS) and reference pages
(<machine>/<name>.md: each workload's full decision tables and every other table of it, the
support matrix, the capacity searches and the memory model, the claims' evidence, the version
history).

The same results give the same Markdown (no generation time, every table sorted), so a test
regenerates each committed page and fails when it is stale. The pictures a page shows are drawn
by write_pages beside it (PNG, small): the summary's (analysis.answer_plots) and each workload's
memory-over-time picture (<machine>/<workload>-timeline.png, from the stored timelines); the
other plots are `membench report --out DIR`'s, beside an HTML page of the same tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.across_hosts import TITLE as HOSTS_TITLE
from analysis.across_hosts import across_hosts, carried
from analysis.answer_plots import (
    SPEED_PNG,
    capacity_memory,
    cell_speed_points,
    cells_memory,
    has_memory_picture,
    memory_png,
    speed_at_answers,
    speed_points,
)
from analysis.answer_plots import save as save_picture
from analysis.answers import (
    answers,
    cpu_name,
    date_span,
    layer_word,
    limit_sentence,
    provenance,
    shown_searches,
    speed_between_hosts,
)
from analysis.claims import RULE, claims_table
from analysis.claims.findings import NEEDS_GPU, NOT_MEASURABLE, REFERENCE
from analysis.decision import decision_table, lead_searches, unsearched
from analysis.decision_terms import CAPACITY_TITLE, CURVE_TITLE, budget_label
from analysis.decision_terms import where as decision_where
from analysis.decision_text import SAME_NOTE, by_mode, formatted, notes_once, shortened
from analysis.gpu_predictions import PAGE as GPU_PAGE
from analysis.gpu_predictions import page as gpu_page
from analysis.history import release_key, version_history
from analysis.loader import (
    latest,
    load,
    load_capacity,
    load_capacity_probes,
    load_search_walls,
    load_selfchecks,
)
from analysis.markdown import markdown_table
from analysis.plots import groups, where
from analysis.releases import pair_verdicts
from analysis.releases import reference_tables as release_tables
from analysis.releases import summary_lines as release_summary
from analysis.report import (
    fairness_tables,
    memory_sections,
    not_run,
    overview,
    run_time_summary,
    search_time,
)
from analysis.search_digest import (
    CURVE_INTRO,
    capacity_curve,
    capacity_notes,
    capacity_reference,
    capacity_searches,
    formula_against_verified,
    table_note,
)
from analysis.support import refusals, support_matrix
from analysis.tables import tables
from analysis.timelines import Timeline, chosen, drawn_per_workload, load_timelines, where_peaks
from analysis.timelines import figure as timeline_figure
from analysis.timelines import save as save_timeline
from analysis.timelines import table as timeline_table
from membench import paths
from membench.records import UNSETTLED

# the claims table's columns shown: the device beside the verdict, which it qualifies
CLAIM_COLUMNS = ["id", "claim", "claimed", "measured", "verdict", "device", "reason", "evidence"]


@dataclass
class Results:
    """Everything a page is made from: the loaded results folder."""

    frame: pd.DataFrame  # every record and asv row (the version history reads all)
    view: pd.DataFrame  # the latest record per cell and metric
    capacity: pd.DataFrame
    probes: pd.DataFrame
    problems: list[str]
    selfcheck: pd.DataFrame  # suite against the frameworks' own loops
    probe_cost: pd.DataFrame  # the sampler thread's cost per framework
    timelines: list[Timeline] = field(default_factory=list)  # cells sampled with --timeline
    # every capacity probe's wall time, repeats and warm-ups included (load_search_walls)
    search_walls: pd.DataFrame = field(default_factory=pd.DataFrame)
    # each machine's claims table, made once (claims_of): the summary, the claims page, the
    # index and the CPU pages' links to GPU verdicts all read it
    claims: dict[str, pd.DataFrame] = field(default_factory=dict)
    # each machine's release verdicts (analysis.releases.pair_verdicts), made once
    # (release_pairs): the summary's section and the versions page both read them
    pairs: dict[str, pd.DataFrame] = field(default_factory=dict)


def release_pairs(results: Results, machine: str) -> pd.DataFrame:
    """A machine's release verdicts, every sweep's (pair_verdicts of its records)."""
    if machine not in results.pairs:
        results.pairs[machine] = pair_verdicts(_of(results.frame, machine))
    return results.pairs[machine]


def claims_of(results: Results, machine: str) -> pd.DataFrame:
    """A machine's claims table (analysis.claims.claims_table of its latest records)."""
    if machine not in results.claims:
        results.claims[machine] = claims_table(_of(results.view, machine))
    return results.claims[machine]


HOSTS_INTRO = (
    "Each answer here beside the same search (workload, preset, budget, framework, strategy) "
    "on another host kind: the largest batch, and the largest that fitted every run (the "
    "batches above the answer there were put down by the noise rule); difference: there "
    "against here. Memory, not speed: samples/s are compared only within one host kind."
)


def load_results(results_dir: Path) -> Results:
    loaded = load(results_dir)
    capacity = load_capacity(results_dir)
    probes = load_capacity_probes(results_dir)
    selfcheck, probe_cost, unread = load_selfchecks(results_dir)
    found, unreadable = load_timelines(results_dir)
    problems = loaded.problems + capacity.problems + probes.problems + unread
    problems += unreadable
    # a page names files relative to the checkout, whichever folder it was made from
    problems = sorted(p.replace(str(results_dir), "results") for p in problems)
    frame = loaded.frame
    return Results(
        frame, latest(frame), capacity.frame, probes.frame, problems, selfcheck,
        probe_cost, found, load_search_walls(results_dir),
    )  # fmt: skip


def machines(results: Results) -> list[str]:
    """Every machine with records (a version sweep's among them) or capacity results."""
    records = results.frame[results.frame["source"] == "record"] if len(results.frame) else None
    found = set(results.view.get("machine", [])) | set(results.capacity.get("machine", []))
    found |= set(records["machine"]) if records is not None else set()
    return sorted(str(m) for m in found if m)


def _of(frame: pd.DataFrame, machine: str) -> pd.DataFrame:
    return frame[frame["machine"] == machine] if "machine" in frame.columns else frame


def _selfcheck(results: Results, machine: str) -> dict[str, pd.DataFrame]:
    return fairness_tables(_of(results.selfcheck, machine), _of(results.probe_cost, machine))


def _section(title: str, body: list[str], level: int = 2) -> list[str]:
    while body and not body[-1]:
        body = body[:-1]
    return ["#" * level + " " + title, "", *body, ""]


def _named_tables(named: dict[str, pd.DataFrame], level: int = 3) -> list[str]:
    body = []
    for name, table in named.items():
        body += _section(name, [markdown_table(table)], level)
    return body


# -- the summary page -------------------------------------------------------------------------
SUMMARY_LIMIT = 220  # lines: a digest a reader takes in, not a dump (tests hold it to this)
# the workload reference page's section with the full decision tables (the summary links it)
REFERENCE_DECISIONS = "Decision tables"
DECISION_HEADING = "Decision table: "
OTHER_DECISIONS = "Decision tables of the other presets"
# the claims columns the summary shows; the reference page claims.md has them all
SUMMARY_CLAIM_COLUMNS = ["id", "claim", "claimed", "verdict", "device", "reason"]


RUN_TIME_TITLE = "How long the cells took"
ON_CLAIMS_PAGE = "CPU figure on the claims page, for reference"


def _gpu_pages_named(claims: pd.DataFrame, results: Results, machine: str) -> pd.DataFrame:
    """A claim that needs a GPU names the GPU machines' pages where it has a verdict (a
    reader of a CPU page saw "needs a GPU" and no way to the H200's verdicts)."""
    view = results.view
    gpus = sorted(
        str(m) for m in view.loc[~view["device"].isin(["", "cpu"]), "machine"].unique()
        if m != machine
    )  # fmt: skip
    judged: dict[str, list[str]] = {}
    for gpu in gpus:
        for row in claims_of(results, gpu).itertuples():
            if row.verdict != NOT_MEASURABLE:
                judged.setdefault(row.id, []).append(f"[{gpu}]({gpu}.md)")
    needs = claims["reason"].str.startswith(NEEDS_GPU, na=False)
    named = []
    for cid, reason, need in zip(claims["id"], claims["reason"], needs, strict=True):
        link = f"; judged on {', '.join(judged[cid])}" if need and cid in judged else ""
        named.append(shortened(str(reason), CELL_CHARS - len(link)) + link)
    return claims.assign(reason=named)


def _decision_parts(
    view: pd.DataFrame,
    capacity: pd.DataFrame,
    everywhere: pd.DataFrame,
    probes: pd.DataFrame | None = None,
) -> list[tuple[str, list[str]]]:
    """(title, body) per workload, preset and budget: its note (where the table before it
    said another), the training table, then the inference one (everywhere: every machine's
    searches, which say what a table lacks; probes: decision_table's)."""
    parts = []
    tables = decision_table(view, capacity, probes)
    for (key, table), told in zip(tables.items(), notes_once(tables.values()), strict=True):
        body = [told, ""]
        if missing := unsearched(everywhere, key):
            # after "Columns as in the table above." in its paragraph: the summary's lines
            # are counted (SUMMARY_LIMIT)
            body = [f"{told} {missing}", ""] if told == SAME_NOTE else [*body, missing, ""]
        for mode, part in by_mode(formatted(table)).items():
            body += [f"**{mode.capitalize()}**", "", markdown_table(part), ""]
        parts.append((DECISION_HEADING + decision_where(key), body))
    return parts


def decision_sections(
    view: pd.DataFrame,
    capacity: pd.DataFrame,
    everywhere: pd.DataFrame,
    level: int = 3,
    probes: pd.DataFrame | None = None,
) -> list[str]:
    lines = []
    for title, body in _decision_parts(view, capacity, everywhere, probes):
        lines += _section(title, body, level)
    return lines


def _links(machine: str, names: list[str]) -> list[str]:
    titles = {**{w: f"{w}: every table of every preset" for w in names}, **REFERENCE_TITLES}
    return [f"- [{titles.get(n, n)}]({machine}/{n}.md)" for n in names]


def _peaks(results: Results, machine: str) -> list[str]:
    """Per workload with timelines: where each framework's baseline peaks, and a link to the
    picture at the top of its reference page."""
    out = []
    for workload, drawn in drawn_per_workload(results.timelines, machine).items():
        link = f"[{workload}]({machine}/{workload}.md#{anchor('Memory over time')})"
        out += [f"{link} (`membench run --timeline`):", "", *where_peaks(drawn), ""]
    return out


GLOSSARY = "../glossary.md"  # docs/glossary.md, from a page under docs/results/
ANSWERS_TITLE = "Answers: the largest batch within each budget, and samples/s there"
SPEED_TITLE = "Samples/s at the answers"
CELL_CHARS = 160  # the longest table cell a summary shows (tests hold it)


def _head(results: Results, machine: str, intro: str) -> list[str]:
    """A summary's first lines: the title, what the machine's name says and where the terms
    are explained."""
    kind = cpu_name(machine)
    view = _of(results.view, machine)
    gpus = sorted({str(d) for d in view.get("device", []) if d and d != "cpu"})
    short = re.search(r"-(f\d+m\d+)", machine)
    said = (
        f"Host kind: {kind} (`{short.group(1) if short else machine}` in the name: the CPU's "
        "family and model numbers); compare its samples/s only with this host kind's."
        if kind
        else f"Device: {', '.join(gpus)}." if gpus
        else "A label from before host kinds were named: its hosts may differ; compare its "
        "samples/s only with its own."
    )  # fmt: skip
    return [
        f"# Results: {machine}",
        "",
        f"{said} Terms: [glossary]({GLOSSARY}). {intro}",
        "",
    ]


def _answer_sections(results: Results, machine: str) -> list[str]:
    """Per workload, its compact table of answers (analysis.answers), what it lacks, the link
    to its full decision tables, and its picture; then samples/s at the answers. A machine
    without searches: pictures of its preset's cells."""
    view, capacity = _of(results.view, machine), _of(results.capacity, machine)
    lead, rest = lead_searches(capacity)
    if lead.empty:
        return _cell_pictures(results, machine)
    tables = decision_table(view, lead, results.probes)
    layers = ", ".join(sorted({layer_word(m) for m in shown_searches(lead)["budget_layer"]}))
    intro = (
        "Per workload and budget (a column each): the largest batch `membench capacity` "
        "verified for each framework x strategy @ samples/s measured there (**bold**: the "
        "framework's fastest at that budget, or tied with it). Mark: how the batch is known "
        f"([glossary]({GLOSSARY}#marks)); layer: the memory the budget held ({layers}); "
        f"measured: the searches' commits and dates. {provenance(lead)}."
    )
    if len(rest):
        others = ", ".join(sorted(set(rest["preset"])))
        link = f"{machine}/capacity.md#{anchor(OTHER_DECISIONS)}"
        intro += f" Other presets ({others}): [capacity page]({link})."
    body = [intro, ""]
    shown = shown_searches(lead)
    for (workload, preset), table in answers(lead, tables).items():
        keys = [k for k in tables if k[1] == workload and k[2] == preset]
        missing = list(dict.fromkeys(m for k in keys if (m := unsearched(results.capacity, k))))
        link = (
            f"{machine}/{workload}.md#{anchor(REFERENCE_DECISIONS)}"
            if workload in set(view.get("workload", []))
            else f"{machine}/capacity.md#{anchor(OTHER_DECISIONS)}"
        )
        after = [
            f"Margins, spreads, fitted costs and notes: [{workload}'s decision tables]({link}).",
            *missing,
        ]  # each a bullet under the table
        searches = shown[(shown["workload"] == workload) & (shown["preset"] == preset)]
        for r in searches[searches["status"] == UNSETTLED].itertuples():
            after.append(f"{r.framework} {r.strategy} ({budget_label(r.budget_gib)}): {r.reason}.")
        if limits := limit_sentence(searches, view):
            after.append(limits)
        picture = []
        if has_memory_picture(searches):
            alt = (
                f"{workload}: peak memory against batch per framework and strategy in the "
                "capacity searches, each budget dashed, each answer a star"
            )
            picture = [f"![{alt}]({machine}/{memory_png(workload)})", ""]
        body += _section(f"{DECISION_HEADING}{workload}, preset {preset}", [
            markdown_table(table), "", *(f"- {a}" for a in after), "", *picture,
        ], 3)  # fmt: skip
    if missing := sorted(set(view.get("workload", [])) - set(capacity["workload"])):
        body += [
            f"No capacity search is committed for {', '.join(missing)} on this machine yet "
            "(`membench capacity`): its cells are on the reference pages.", "",
        ]  # fmt: skip
    if len(speed_points(lead)):
        alt = "samples/s at the largest batch, per strategy and framework, a panel per budget"
        body += _section(SPEED_TITLE, [f"![{alt}]({machine}/{SPEED_PNG})"], 3)
    return _section(ANSWERS_TITLE, body)


def _cell_groups(results: Results, machine: str) -> dict[str, pd.DataFrame]:
    """A machine without searches: per workload, the cells of its preset with the most cells
    (what its pictures draw)."""
    view = _of(results.view, machine)
    out = {}
    for workload, rows in view.groupby("workload", sort=True):
        ok = rows[rows["status"] == "ok"]
        if ok.empty:
            continue
        sizes = ok.groupby("preset")["batch_size"].nunique()
        cells = ok.groupby("preset").size()
        preset = max(sizes.index, key=lambda p: (sizes[p] > 1, cells[p], p))
        out[str(workload)] = rows[rows["preset"] == preset]
    return out


def cell_memory_png(workload: str) -> str:
    return f"{workload}-cells-memory-vs-batch.png"


def _cell_pictures(results: Results, machine: str) -> list[str]:
    """The pictures of a machine without capacity searches: peak against batch per workload
    and samples/s per strategy, from its preset's cells."""
    body = [
        "No capacity search is committed for this machine (`membench capacity` answers what "
        "fits in a budget): what its cells measured, drawn.", "",
    ]  # fmt: skip
    groups_ = _cell_groups(results, machine)
    for workload, group in groups_.items():
        if group["batch_size"].nunique() > 1:
            alt = (
                f"{workload}: peak memory against batch per framework and strategy, from the cells"
            )
            body += [f"![{alt}]({machine}/{cell_memory_png(workload)})", ""]
    points = pd.concat([cell_speed_points(g) for g in groups_.values()], ignore_index=True)
    if len(points):
        alt = "samples/s per strategy and framework at one batch per workload, from the cells"
        body += [f"![{alt}]({machine}/{SPEED_PNG})", ""]
    return _section("Pictures", body)


def summary_pictures(results: Results, machine: str, folder: Path) -> list[Path]:
    """The PNGs a machine's summary shows, drawn into its folder."""
    view, capacity = _of(results.view, machine), _of(results.capacity, machine)
    lead, _ = lead_searches(capacity)
    out = []
    if len(lead):
        for workload, searches in lead.groupby("workload", sort=True):
            if fig := capacity_memory(searches, str(workload), machine):
                out.append(save_picture(fig, folder / memory_png(str(workload))))
        what = "Samples/s at the largest batch within each budget"
        if fig := speed_at_answers(speed_points(lead), machine, what):
            out.append(save_picture(fig, folder / SPEED_PNG))
        return out
    groups_ = _cell_groups(results, machine) if len(view) else {}
    for workload, group in groups_.items():
        if group["batch_size"].nunique() > 1 and (fig := cells_memory(group)):
            out.append(save_picture(fig, folder / cell_memory_png(workload)))
    points = [cell_speed_points(g) for g in groups_.values()]
    what = "Samples/s per strategy at one batch of each workload's cells"
    drawn = pd.concat(points, ignore_index=True) if points else pd.DataFrame()
    if len(drawn) and (fig := speed_at_answers(drawn, machine, what, "samples/s")):
        out.append(save_picture(fig, folder / SPEED_PNG))
    return out


def _short_cells(table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The table with each named column's text cut to CELL_CHARS (the reference page has it
    whole)."""
    out = table.copy()
    for column in columns:
        out[column] = out[column].map(lambda v: shortened(str(v), CELL_CHARS))
    return out


def summary(results: Results, machine: str, references: list[str]) -> str:
    """The machine's summary page: the answers first (a compact table and a picture per
    workload, samples/s at the answers), then what was measured, claims, time, fairness, and
    links to the reference pages, which hold the rest."""
    view = _of(results.view, machine)
    capacity = _of(results.capacity, machine)
    intro = (
        "Generated by `membench report --docs` from the records under `results/`; do not edit. "
        "The rest is on the reference pages linked at the end."
    )
    lines = _head(results, machine, intro)
    lines += _answer_sections(results, machine)
    measured = overview(view)
    lines += _section("What was measured", [markdown_table(measured.drop(columns="machine"))])
    pairs = release_pairs(results, machine)
    if releases := release_summary(_of(results.frame, machine), machine, pairs):
        lines += _section("Framework releases", releases)
    claims = claims_of(results, machine)[SUMMARY_CLAIM_COLUMNS].copy()
    # the summary has no measured column: the figures are on the claims page
    claims["reason"] = claims["reason"].str.replace(REFERENCE, ON_CLAIMS_PAGE, regex=False)
    claims = _gpu_pages_named(claims, results, machine)
    claims = _short_cells(claims, ["claim", "claimed"])
    intro = (
        f"Each claim judged from this machine's records (analysis/claims/) by one rule (on the "
        f"[claims page]({machine}/claims.md), with what was measured and the evidence). A "
        "claim's figures are on the layer its statement names (what a step adds, the peak "
        "above the framework's runtime), so they differ from the decision tables' "
        "whole-process peak: both are right. Reasons cut here are whole there."
    )
    lines += _section("Claims", [intro, "", markdown_table(claims)])
    searched = search_time(results.search_walls, results.capacity, machine)
    if len(took := run_time_summary(view, searched)):
        searches = (
            ", and the probes of the searches the decision tables show (boundary repeats and "
            "warm-up cells included) with their minutes"
        )
        intro = (
            "Minutes the latest record of each cell took (worker start to record, one cell "
            f"after another), summed{searches if len(searched) else ''}: what measuring the "
            f"same cells{' and searches' if len(searched) else ''} again costs here."
        )
        title = "How long the cells and searches took" if len(searched) else RUN_TIME_TITLE
        lines += _section(title, [intro, "", markdown_table(took)])
    if peaks := _peaks(results, machine):
        lines += _section("Where the memory peaks", peaks)
    if fairness := _selfcheck(results, machine):
        lines += _section("Fairness check (membench selfcheck)", _named_tables(fairness))
    more = []
    if len(capacity):
        link = f"{machine}/capacity.md"
        more = [
            f"Capacity searches (the first guess's error, probes per search, the answers "
            f"against their noise, the memory model): [capacity page]({link}).",
            "",
            *_hosts_line(results, machine),
        ]
    lines += _section("Reference pages", [*more, *_links(machine, references)])
    if results.problems:
        lines += _section("Files skipped", [f"- {p}" for p in results.problems])
    return "\n".join(lines).rstrip("\n") + "\n"


def _hosts_line(results: Results, machine: str) -> list[str]:
    """One sentence on how the machine's answers compare with the same searches on other host
    kinds, linking to the capacity page's table; none where no search was made on two."""
    said = carried(across_hosts(results.capacity, machine))
    if not said:
        return []
    link = f"{machine}/capacity.md#{anchor(HOSTS_TITLE)}"
    return [f"On other host kinds ([the table]({link})): {said}", ""]


def _release_list(versions: pd.Series) -> str:
    """The releases a framework's records name, oldest first (a refused cell names none)."""
    return ", ".join(sorted({str(v) for v in versions if str(v)}, key=release_key))


def sweep_summary(results: Results, machine: str, references: list[str]) -> str:
    """The summary page of a machine whose records are the version sweep's and capacity
    searches' only: the decision tables first where there are searches."""
    frame = _of(results.frame, machine)
    sweeps = frame[frame["source"] == "record"]
    capacity = _of(results.capacity, machine)
    held = [
        *([f"the framework-release sweep ({sweeps['framework_version'].nunique()} releases; "
           "`membench versions`, [docs/versions.md](../versions.md))"] if len(sweeps) else []),
        *(["capacity searches (`membench capacity`)"] if len(capacity) else []),
    ]  # fmt: skip
    lines = _head(results, machine, (
        "Generated by `membench report --docs` from the records under `results/`; do not edit, "
        f"regenerate. This machine holds {' and '.join(held)}; the preset's own cells come "
        "from the main job (`membench bench`) on a machine of this kind."
    ))  # fmt: skip
    if len(capacity):
        lines += _answer_sections(results, machine)
        lines += _section("Reference pages for the searches", [
            "Every search, its noise and the memory model: "
            f"[capacity page]({machine}/capacity.md).",
            "", *_hosts_line(results, machine),
        ])  # fmt: skip
    if len(sweeps):
        measured = (
            sweeps.groupby("framework")
            .agg(
                releases=("framework_version", _release_list),
                workloads=("workload", "nunique"), strategies=("strategy", "nunique"),
                batches=("batch_size", lambda b: ", ".join(str(x) for x in sorted(set(b)))),
                records=("path", "nunique"),
            )
            .reset_index()
        )  # fmt: skip
        lines += _section("What was measured", [markdown_table(measured)])
        pairs = release_pairs(results, machine)
        lines += _section("Framework releases", release_summary(frame, machine, pairs))
    lines += _section("Reference pages", _links(machine, references))
    if results.problems:
        lines += _section("Files skipped", [f"- {p}" for p in results.problems])
    return "\n".join(lines).rstrip("\n") + "\n"


# -- the reference pages ----------------------------------------------------------------------
REFERENCE_TITLES = {
    "support": "Support matrix: which strategies each framework refuses, and why",
    "capacity": "Capacity searches and the memory model",
    "claims": "Claims with what was measured and the evidence",
    "versions": "Version history",
}


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _with_contents(
    title: str, intro: str, sections: list[tuple[int, str, list[str]]],
    lead: list[tuple[int, str, list[str]]] | None = None,
) -> str:  # fmt: skip
    """A page whose top lists its sections (level 2, and level 3 under them) as links; lead
    sections come before that list (a picture a reader sees first)."""
    contents = [
        f"{'  ' * (level - 2)}- [{heading}](#{anchor(heading)})"
        for level, heading, _ in [*(lead or []), *sections]
    ]
    lines = [f"# {title}", "", intro, ""]
    for level, heading, body in lead or []:
        lines += _section(heading, body, level)
    lines += ["Contents:", "", *contents, ""]
    for level, heading, body in sections:
        lines += _section(heading, body, level)
    return "\n".join(lines).rstrip("\n") + "\n"


INTRO = "Generated by `membench report --docs`; do not edit, regenerate. Summary: [{m}](../{m}.md)."


def _cells_not_run(group: pd.DataFrame, refused: set[tuple[str, str]]) -> pd.DataFrame:
    """The cells that did not end ok, less those of a framework x strategy refused at every
    cell (the support page has them)."""
    missing = not_run(group)
    keep = [(f, s) not in refused for f, s in zip(missing["framework"], missing["strategy"],
                                                  strict=True)]  # fmt: skip
    return missing[keep]


def timeline_png(workload: str) -> str:
    """The memory-over-time picture's name beside the workload's reference page."""
    return f"{workload}-timeline.png"


def timeline_section(drawn: list[Timeline], workload: str) -> list[str]:
    """The top of a workload's reference page: the picture, where each framework peaks, and
    the timelines' peaks against VmHWM."""
    stores = ", ".join(sorted({f"results/timelines/{t.machine}/{t.store}" for t in drawn}))
    every = sorted({f"{t.meta.get('interval_seconds', 0) * 1000:g} ms" for t in drawn})
    return [
        f"![{workload}: resident memory over a cell, per framework]({timeline_png(workload)})",
        "",
        f"Sampled every {', '.join(every)} by the runner from outside the worker (`membench run "
        "--timeline`), the worker's phases marked; top row the whole cell, then the first and "
        "measured steps one unit each, the baseline and a memory strategy against it. Where "
        "each framework's baseline peaks:",
        "", *where_peaks(drawn), "",
        "Over the measured steps the timeline's highest sample against the worker's VmHWM (the "
        "record's peak): `VmHWM - peak` is what sampling missed; `largest change` is the "
        "largest change between two samples there, the sampling's resolution (a spike that "
        f"rises and falls between two samples leaves none). From {stores}.",
        "", markdown_table(timeline_table(drawn).drop(columns="store")),
    ]  # fmt: skip


DECISIONS_INTRO = (
    "What fits in a memory budget and how fast it trains: the largest batch `membench "
    "capacity` verified for each framework x strategy (on a CPU the budget holds the "
    "whole-life peak of the worker's processes, compiles and forked compilers included, or "
    "the measured steps' peak host RSS for searches made before it: each search's "
    "`budget_layer` says which; on a GPU the framework's enforced limit, on the layer each "
    "row's framework is judged by: torch's reserve, JAX's allocated peak), with its margin "
    "against the runs' noise, samples/s there, memory and speed against the baseline, and "
    "why a row looks odd. The summary page shows the answers alone."
)


def workload_page(
    view: pd.DataFrame, workload: str, machine: str, drawn: list[Timeline] | None = None,
    decisions: list[tuple[str, list[str]]] | None = None,
) -> str:  # fmt: skip
    """Every table of one workload, preset by preset, with a table of contents: its full
    decision tables (decisions: _decision_parts') first, then its memory timelines, where
    there are some."""
    sections = []
    if decisions:
        sections.append((2, REFERENCE_DECISIONS, [DECISIONS_INTRO]))
        sections += [(3, title, body) for title, body in decisions]
    lead = [(2, "Memory over time", timeline_section(drawn, workload))] if drawn else []
    for key, group in groups(view[view["workload"] == workload]):
        preset = key[2]
        statuses = group.drop_duplicates(["framework", "strategy", "batch_size"])
        refused = {
            pair for pair, rows in statuses.groupby(["framework", "strategy"])
            if (rows["status"] == "unsupported").all()
        }  # fmt: skip
        sections.append((2, where(key), []))
        for title, table, _ in tables(group):
            name = f"{preset}: {title.removeprefix(where(key) + ': ')}"
            said = _layers_apart(group, title)
            sections.append((3, name, [*said, markdown_table(table.reset_index())]))
        missing = _cells_not_run(group, refused)
        if len(missing):
            body = [
                "Status and reason; a strategy a framework refuses at every cell is on the "
                "[support page](support.md), not here.", "", markdown_table(missing),
            ]  # fmt: skip
            sections.append((3, f"{preset}: cells that did not run", body))
    intro = (
        f"Every table of {workload} on {machine}, preset by preset. Memory in MiB, each figure "
        "named by its layer; a cell that did not end ok shows its status; a strategy a "
        "framework refuses everywhere is left out of the tables (see the support page). "
        + INTRO.format(m=machine)
    )
    return _with_contents(f"{workload} on {machine}: reference tables", intro, sections, lead)


PROCESS, ALLOCATED, RESERVED = (
    "peak_device_process_bytes", "peak_device_allocated_bytes", "peak_device_reserved_bytes",
)  # fmt: skip


def _layers_apart(group: pd.DataFrame, title: str) -> list[str]:
    """Above a GPU's process-peak table: each framework's process peak against its allocated
    peak over the same cells (min-max of the ratio), and why they part; [] elsewhere."""
    if "process peak" not in title:
        return []
    ok = group[group["status"] == "ok"]
    wide = ok.pivot_table(index=["framework", "strategy", "batch_size"], columns="metric",
                          values="value", aggfunc="last")  # fmt: skip
    if PROCESS not in wide.columns or ALLOCATED not in wide.columns:
        return []
    ratio = (wide[PROCESS] / wide[ALLOCATED]).dropna()
    spans = [
        f"{framework}'s is {r.min():.1f}-{r.max():.1f}x its allocated peak"
        if round(r.min(), 1) != round(r.max(), 1) else f"{framework}'s {r.min():.1f}x"
        for framework, r in ratio.groupby(level="framework")
    ]  # fmt: skip
    return [
        f"The process peak (NVML) counts all the process holds on the device: {'; '.join(spans)}. "
        "It adds the CUDA context and the libraries' workspaces to what the allocator holds, "
        "and XLA's allocator (JAX) grows its pool in regions it keeps, so JAX's process peak "
        "sits far above the buffers it has in use; the allocated peak is what the step needs.",
        "",
    ]


def support_page(view: pd.DataFrame, machine: str) -> str:
    matrix = support_matrix(view)
    reasons = refusals(view)
    sections = [
        (2, "Support matrix", [
            "Per strategy and framework over every preset's cells: runs; refused (every cell "
            "refused); partly (some cells refused, e.g. a batch that does not split into "
            "micro-batches or a preset without the ranks a sharding needs); or each of these "
            "with its workloads where the workloads differ. A refusal is no failure: the "
            "strategy has no counterpart in that framework, model or device.", "",
            markdown_table(matrix),
        ]),
        (2, "Why", ["Each refusal's reason, once.", "", markdown_table(reasons)]),
    ]  # fmt: skip
    title = f"Which strategies each framework refuses on {machine}"
    return _with_contents(title, INTRO.format(m=machine), sections)


def capacity_page(results: Results, machine: str) -> str:
    view, capacity = _of(results.view, machine), _of(results.capacity, machine)
    sections = []
    if len(capacity):
        notes = [f"- {n}" for n in capacity_notes(capacity)]
        reference = capacity_reference(capacity).drop(columns="machine")
        lead = (
            "Every search, with the commit that measured it (a search run more than once: its "
            "runs oldest first) and 'yes' where "
            "its decision table shows it (of a search repeated, the latest run's, a settled "
            "one before an unsettled one): the memory model's predicted largest batch beside "
            "the verified one, "
            "the probes the search ran and those plain doubling and bisection from batch 1 "
            "would have (empty in files written before the model-guided search)."
        )
        said = " ".join(filter(None, [lead, table_note(CAPACITY_TITLE, reference)]))
        body = [said, "", *notes, "", markdown_table(reference)]
        sections.append((2, CAPACITY_TITLE, body))
        if len(curve := capacity_curve(capacity)):
            curve = curve.drop(columns="machine")
            said = " ".join(filter(None, [CURVE_INTRO, formula_against_verified(capacity)]))
            sections.append((2, CURVE_TITLE, [said, "", markdown_table(curve)]))
        for name, table in capacity_searches(capacity).items():
            said = [table.attrs["note"], ""] if table.attrs.get("note") else []
            sections.append((2, name, [*said, markdown_table(table)]))
        if len(hosts := across_hosts(results.capacity, machine)):
            sections.append((2, HOSTS_TITLE, [HOSTS_INTRO, "", carried(hosts), "",
                                              markdown_table(hosts)]))  # fmt: skip
        # a machine without cells has no workload pages: its lead tables are here too
        others = lead_searches(capacity)[1] if len(view) else capacity
        if parts := _decision_parts(view, others, results.capacity, results.probes):
            intro = "The decision tables of the presets the summary page does not lead with."
            sections.append((2, OTHER_DECISIONS, [intro]))
            sections += [(3, title, body) for title, body in parts]
    memory = memory_sections(view, capacity.iloc[0:0], _of(results.probes, machine))
    sections += [
        (2, name, [markdown_table(table.drop(columns="machine", errors="ignore"))])
        for name, table in memory.items()
    ]
    title = f"Capacity searches and the memory model on {machine}"
    return _with_contents(title, INTRO.format(m=machine), sections)


def claims_page(results: Results, machine: str) -> str:
    table = claims_of(results, machine)[CLAIM_COLUMNS]
    intro = (
        f"Each claim judged from this machine's records (analysis/claims/); every verdict "
        f"follows one {RULE}. " + INTRO.format(m=machine)
    )
    return _with_contents(f"Claims on {machine}", intro, [(2, "Claims", [markdown_table(table)])])


def versions_page(results: Results, machine: str) -> str | None:
    frame = _of(results.frame, machine)
    history = version_history(frame)
    if not history:
        return None
    judged = [
        (2, f"Changes between releases: {k}", [markdown_table(v)])
        for k, v in release_tables(frame, machine, release_pairs(results, machine)).items()
    ]
    sections = judged + [
        (2, f"{k} (MiB or samples/s)", [markdown_table(v)]) for k, v in history.items()
    ]
    return _with_contents(f"Version history on {machine}", INTRO.format(m=machine), sections)


def machine_pages(results: Results, machine: str) -> dict[str, str]:
    """A machine's pages: "<machine>.md" (the summary) and "<machine>/<name>.md" (the
    reference pages: one per workload, support, capacity, claims, versions)."""
    view = _of(results.view, machine)
    if view.empty:  # a machine with the version sweep's records and capacity searches only
        history = versions_page(results, machine)
        reference = {"versions": history} if history else {}
        if len(_of(results.capacity, machine)):
            reference["capacity"] = capacity_page(results, machine)
        out = {f"{machine}.md": sweep_summary(results, machine, list(reference))}
        out.update({f"{machine}/{name}.md": text for name, text in reference.items()})
        return out
    lead, _ = lead_searches(_of(results.capacity, machine))
    reference = {
        w: workload_page(
            view, w, machine, chosen(results.timelines, machine, w),
            _decision_parts(view, lead[lead["workload"] == w], results.capacity, results.probes)
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
    records = _of(results.frame, machine)
    records = records[records["source"] == "record"] if len(records) else records
    devices = sorted(d for d in set(records.get("device", [])) if d)
    cpus = sorted(c for c in set(records.get("host_cpu", [])) if c)
    presets = sorted(
        {*records.get("preset", []), *_of(results.capacity, machine).get("preset", [])}
    )
    # the cells' records and the capacity searches, each search's own date
    searches = shown_searches(_of(results.capacity, machine))
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
        if _of(results.view, machine).empty:
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
        lines += _section("Claims across machines", [
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
    predicted = gpu_page(results_dir)
    (root / INDEX).write_text(index_page(results, predicted is not None), encoding="utf-8")
    written = [root / INDEX]
    if predicted is not None:
        (root / GPU_PAGE).write_text(predicted, encoding="utf-8")
        written.append(root / GPU_PAGE)
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
