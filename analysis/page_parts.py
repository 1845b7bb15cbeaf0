"""What every results page is made from: the loaded results folder (Results, load_results, a
machine's part of it), a titled section, a page with its contents, anchors, the titles of the
reference pages and the decision tables' sections.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.capacity_loader import load_capacity, load_capacity_probes, load_search_walls
from analysis.claims import claims_table
from analysis.decision import decision_table, unsearched
from analysis.decision_terms import where as decision_where
from analysis.decision_text import SAME_NOTE, by_mode, formatted, notes_once
from analysis.loader import latest, load, load_selfchecks
from analysis.markdown import markdown_table
from analysis.releases import pair_verdicts
from analysis.timelines import Timeline, load_timelines


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
        results.pairs[machine] = pair_verdicts(of_machine(results.frame, machine))
    return results.pairs[machine]


def claims_of(results: Results, machine: str) -> pd.DataFrame:
    """A machine's claims table (analysis.claims.claims_table of its latest records)."""
    if machine not in results.claims:
        results.claims[machine] = claims_table(of_machine(results.view, machine))
    return results.claims[machine]


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


def of_machine(frame: pd.DataFrame, machine: str) -> pd.DataFrame:
    return frame[frame["machine"] == machine] if "machine" in frame.columns else frame


def titled_section(title: str, body: list[str], level: int = 2) -> list[str]:
    while body and not body[-1]:
        body = body[:-1]
    return ["#" * level + " " + title, "", *body, ""]


# the workload reference page's section with the full decision tables (the summary links it)
REFERENCE_DECISIONS = "Decision tables"
DECISION_HEADING = "Decision table: "
OTHER_DECISIONS = "Decision tables of the other presets"


def decision_parts(
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
    for title, body in decision_parts(view, capacity, everywhere, probes):
        lines += titled_section(title, body, level)
    return lines


# the reference pages' titles: the summary links each
REFERENCE_TITLES = {
    "support": "Support matrix: which strategies each framework refuses, and why",
    "capacity": "Capacity searches and the memory model",
    "claims": "Claims with what was measured and the evidence",
    "versions": "Version history",
}


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def with_contents(
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
        lines += titled_section(heading, body, level)
    lines += ["Contents:", "", *contents, ""]
    for level, heading, body in sections:
        lines += titled_section(heading, body, level)
    return "\n".join(lines).rstrip("\n") + "\n"
