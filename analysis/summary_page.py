"""A machine's summary page (<machine>.md): the answers first, a compact table and a picture per
workload, then what was measured, claims, time, fairness; at most SUMMARY_LIMIT lines, no table
cell over CELL_CHARS. A version sweep's machine gets sweep_summary instead.
"""

from __future__ import annotations

import re
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
    layer_word,
    limit_sentence,
    provenance,
    shown_searches,
)
from analysis.claims.findings import NEEDS_GPU, NOT_MEASURABLE, REFERENCE
from analysis.decision import decision_table, lead_searches, unsearched
from analysis.decision_terms import budget_label
from analysis.decision_text import shortened
from analysis.history import release_key
from analysis.markdown import markdown_table
from analysis.page_parts import (
    DECISION_HEADING,
    OTHER_DECISIONS,
    REFERENCE_DECISIONS,
    REFERENCE_TITLES,
    Results,
    anchor,
    claims_of,
    of_machine,
    release_pairs,
    titled_section,
)
from analysis.releases import summary_lines as release_summary
from analysis.report_tables import fairness_tables, overview, run_time_summary, search_time
from analysis.timelines import drawn_per_workload, where_peaks
from membench.records import UNSETTLED


def _selfcheck(results: Results, machine: str) -> dict[str, pd.DataFrame]:
    return fairness_tables(
        of_machine(results.selfcheck, machine), of_machine(results.probe_cost, machine)
    )


def _named_tables(named: dict[str, pd.DataFrame], level: int = 3) -> list[str]:
    body = []
    for name, table in named.items():
        body += titled_section(name, [markdown_table(table)], level)
    return body


SUMMARY_LIMIT = 220  # lines: a digest a reader takes in, not a dump (tests hold it to this)
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
    view = of_machine(results.view, machine)
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
    view, capacity = of_machine(results.view, machine), of_machine(results.capacity, machine)
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
        body += titled_section(f"{DECISION_HEADING}{workload}, preset {preset}", [
            markdown_table(table), "", *(f"- {a}" for a in after), "", *picture,
        ], 3)  # fmt: skip
    if missing := sorted(set(view.get("workload", [])) - set(capacity["workload"])):
        body += [
            f"No capacity search is committed for {', '.join(missing)} on this machine yet "
            "(`membench capacity`): its cells are on the reference pages.", "",
        ]  # fmt: skip
    if len(speed_points(lead)):
        alt = "samples/s at the largest batch, per strategy and framework, a panel per budget"
        body += titled_section(SPEED_TITLE, [f"![{alt}]({machine}/{SPEED_PNG})"], 3)
    return titled_section(ANSWERS_TITLE, body)


def _cell_groups(results: Results, machine: str) -> dict[str, pd.DataFrame]:
    """A machine without searches: per workload, the cells of its preset with the most cells
    (what its pictures draw)."""
    view = of_machine(results.view, machine)
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
    return titled_section("Pictures", body)


def summary_pictures(results: Results, machine: str, folder: Path) -> list[Path]:
    """The PNGs a machine's summary shows, drawn into its folder."""
    view, capacity = of_machine(results.view, machine), of_machine(results.capacity, machine)
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
    view = of_machine(results.view, machine)
    capacity = of_machine(results.capacity, machine)
    intro = (
        "Generated by `membench report --docs` from the records under `results/`; do not edit. "
        "The rest is on the reference pages linked at the end."
    )
    lines = _head(results, machine, intro)
    lines += _answer_sections(results, machine)
    measured = overview(view)
    lines += titled_section("What was measured", [markdown_table(measured.drop(columns="machine"))])
    pairs = release_pairs(results, machine)
    if releases := release_summary(of_machine(results.frame, machine), machine, pairs):
        lines += titled_section("Framework releases", releases)
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
    lines += titled_section("Claims", [intro, "", markdown_table(claims)])
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
        lines += titled_section(title, [intro, "", markdown_table(took)])
    if peaks := _peaks(results, machine):
        lines += titled_section("Where the memory peaks", peaks)
    if fairness := _selfcheck(results, machine):
        lines += titled_section("Fairness check (membench selfcheck)", _named_tables(fairness))
    more = []
    if len(capacity):
        link = f"{machine}/capacity.md"
        more = [
            f"Capacity searches (the first guess's error, probes per search, the answers "
            f"against their noise, the memory model): [capacity page]({link}).",
            "",
            *_hosts_line(results, machine),
        ]
    lines += titled_section("Reference pages", [*more, *_links(machine, references)])
    if results.problems:
        lines += titled_section("Files skipped", [f"- {p}" for p in results.problems])
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
    frame = of_machine(results.frame, machine)
    sweeps = frame[frame["source"] == "record"]
    capacity = of_machine(results.capacity, machine)
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
        lines += titled_section("Reference pages for the searches", [
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
        lines += titled_section("What was measured", [markdown_table(measured)])
        pairs = release_pairs(results, machine)
        lines += titled_section("Framework releases", release_summary(frame, machine, pairs))
    lines += titled_section("Reference pages", _links(machine, references))
    if results.problems:
        lines += titled_section("Files skipped", [f"- {p}" for p in results.problems])
    return "\n".join(lines).rstrip("\n") + "\n"
