"""The generated results pages (docs/results/<machine>.md, a summary, and its reference pages
docs/results/<machine>/*.md): current against the committed results, deterministic, the
summary a digest with its decision tables, every cell that did not run said once."""

from __future__ import annotations

import dataclasses
import re

import pandas as pd

from analysis.capacity_loader import load_capacity
from analysis.claims import CLAIMS
from analysis.markdown import markdown_table
from analysis.page_parts import DECISION_HEADING, REFERENCE_DECISIONS, anchor
from analysis.results_page import INDEX, pages, write_pages
from analysis.summary_page import ANSWERS_TITLE, CELL_CHARS, SUMMARY_LIMIT
from membench import paths
from membench.capacity.model_guesses import rescore
from membench.cli import main
from membench.memory.calibration import load_all
from membench.memory.predictions import refresh

from .conftest import REPO
from .test_report import MACHINE, OOM_REASON, UNSUPPORTED_REASON, write_results

COMMITTED_RESULTS = REPO / "results"
COMMITTED_PAGES = REPO / "docs" / "results"


def test_the_committed_pages_are_the_committed_results():
    expected = pages(COMMITTED_RESULTS)
    committed = {
        p.relative_to(COMMITTED_PAGES).as_posix(): p.read_text(encoding="utf-8")
        for p in COMMITTED_PAGES.rglob("*.md")
    }
    assert sorted(committed) == sorted(expected), "stale or missing pages: membench report --docs"
    for name, text in expected.items():
        assert committed[name] == text, f"{name} is stale: run membench report --docs"


def test_the_committed_records_hold_the_current_models_predictions():
    # the pages' memory-model tables read the records' terms: a changed model or calibration
    # is written into them (membench predict) before the pages are made
    done = refresh(COMMITTED_RESULTS, {}, check=True)
    assert done.records > 500 and done.skipped == []
    assert done.changed == [], "stale predictions: membench predict, then membench report --docs"
    # and the capacity searches' model guesses, which the error tables score
    guesses = rescore(COMMITTED_RESULTS, load_all(COMMITTED_RESULTS), check=True)
    assert guesses.searches > 100 and guesses.skipped == []
    assert guesses.changed == [], "stale guesses: membench predict, then membench report --docs"


def _summaries() -> list:
    """The machines' summary pages (the index and the GPU predictions' page are no machine's)."""
    from analysis.gpu_predictions import PAGE as GPU_PAGE

    return sorted(
        set(COMMITTED_PAGES.glob("*.md")) - {COMMITTED_PAGES / p for p in (INDEX, GPU_PAGE)}
    )


def test_every_committed_summary_is_a_digest_with_its_decision_tables():
    """A summary page stays a page a reader takes in (at most SUMMARY_LIMIT lines) and keeps
    the decision table of every workload a capacity search is committed for."""
    capacity = load_capacity(COMMITTED_RESULTS).frame
    summaries = _summaries()
    assert summaries
    for page in summaries:
        text = page.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= SUMMARY_LIMIT, f"{page.name} grew past {SUMMARY_LIMIT}"
        mine = capacity[capacity["machine"] == page.stem]
        for workload in sorted(set(mine["workload"])):
            assert f"### {DECISION_HEADING}{workload}, " in text, f"{page.name}: {workload}"
        # and the sections a summary always has (a machine without the presets' cells: its
        # releases in place of the claims, which are judged from those cells, where it holds
        # a sweep, and its decision tables where it has capacity searches; one with searches
        # alone says no sweep nor an empty table of what was measured)
        searched = (f"## {ANSWERS_TITLE}",) if len(mine) else ()
        if "## Claims" in text:
            kept = ("## What was measured", *searched, "## Claims")
        elif "holds the framework-release sweep" in text:
            kept = ("## What was measured", "## Framework releases", *searched)
        else:
            kept = searched
            assert kept and "## What was measured" not in text, page.name
        for heading in (*kept, "## Reference pages"):
            assert heading in text, f"{page.name}: {heading}"


def test_every_committed_summary_leads_with_short_cells_pictures_and_a_glossary():
    """What a reader meets: the answers before anything else, no table cell too long to read
    (the margins and notes are on the reference pages), at least two pictures that exist
    beside the page, each with alt text, and the glossary one link away."""
    summaries = _summaries()
    for page in summaries:
        text = page.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= SUMMARY_LIMIT == 220, page.name
        cells = [
            cell.strip()
            for line in text.splitlines() if line.startswith("|")
            for cell in re.split(r"(?<!\\)\|", line)[1:-1]
        ]  # fmt: skip
        assert cells and max(map(len, cells)) <= CELL_CHARS == 160, page.name
        pictures = re.findall(r"!\[([^\]]+)\]\(([^)]+\.png)\)", text)
        assert len(pictures) >= 2, page.name
        for alt, png in pictures:
            assert len(alt) > 20 and (COMMITTED_PAGES / png).read_bytes()[:4] == b"\x89PNG", png
        assert "](../glossary.md" in text, page.name
        assert (REPO / "docs" / "glossary.md").exists()
        # the first section is the answers (or, without searches, the pictures)
        first = next(line for line in text.splitlines() if line.startswith("## "))
        assert first in (f"## {ANSWERS_TITLE}", "## Pictures"), page.name


def test_the_workload_pages_hold_the_full_decision_tables_the_summary_links():
    """Each compact table links its workload's full tables (margins, notes), and they are
    there."""
    for page in sorted(set(COMMITTED_PAGES.glob("*.md")) - {COMMITTED_PAGES / INDEX}):
        text = page.read_text(encoding="utf-8")
        for workload in re.findall(rf"### {DECISION_HEADING}(\w+), ", text):
            link = f"{page.stem}/{workload}.md#{anchor(REFERENCE_DECISIONS)}"
            assert f"]({link})" in text, (page.name, workload)
            reference = (COMMITTED_PAGES / page.stem / f"{workload}.md").read_text()
            assert f"## {REFERENCE_DECISIONS}" in reference, (page.name, workload)
            assert f"### {DECISION_HEADING}{workload}, " in reference, (page.name, workload)
    # where the boundaries were repeated, the margins are there
    h200 = (COMMITTED_PAGES / "nvidia-h200-x1-16core" / "resnet50.md").read_text()
    assert "110 MiB to spare (runs spread 0.0 MiB)" in h200


def summary_and_references(results):
    out = pages(results)
    return out[f"{MACHINE}.md"], {k: v for k, v in out.items() if k != f"{MACHINE}.md"}


def test_a_machine_has_a_summary_and_reference_pages_linked_from_it(tmp_path):
    written = write_pages(write_results(tmp_path / "results"), tmp_path / "docs")
    names = sorted(p.relative_to(tmp_path / "docs").as_posix() for p in written)
    # a machine without capacity searches: its cells drawn, peak against batch and speed
    pictures = [f"{MACHINE}/resnet50-cells-memory-vs-batch.png", f"{MACHINE}/speed-at-answers.png"]
    assert names == sorted([
        INDEX, f"{MACHINE}.md", f"{MACHINE}/capacity.md", f"{MACHINE}/claims.md",
        f"{MACHINE}/resnet50.md", f"{MACHINE}/support.md", *pictures,
    ])  # fmt: skip
    assert f"]({MACHINE}.md)" in (tmp_path / "docs" / INDEX).read_text()
    names = [n for n in names if n.endswith(".md")][1:]
    summary = (tmp_path / "docs" / f"{MACHINE}.md").read_text()
    for name in names[1:]:
        assert f"]({name})" in summary
    workload = (tmp_path / "docs" / MACHINE / "resnet50.md").read_text()
    # a table of contents whose links are the page's headings
    contents = re.findall(r"^ *- \[.+\]\(#([^)]+)\)$", workload, re.M)
    headings = [anchor(h) for h in re.findall(r"^#{2,3} (.+)$", workload, re.M)]
    assert contents and contents == headings


def test_a_summary_lists_every_claim_and_a_refusal_is_said_once(tmp_path):
    summary, references = summary_and_references(write_results(tmp_path / "results"))
    assert all(f"| {c.id} |" in summary for c in CLAIMS)
    assert "Files skipped" in summary and str(tmp_path) not in summary  # reproducible
    # expandable-segments is refused at every batch: on the support page with its reason,
    # in no table of the workload page
    assert UNSUPPORTED_REASON in references[f"{MACHINE}/support.md"]
    workload = references[f"{MACHINE}/resnet50.md"]
    assert "expandable-segments" not in workload
    assert OOM_REASON in workload  # a cell that failed is listed with its workload
    support = references[f"{MACHINE}/support.md"]
    assert "| expandable-segments | allocator & host | refused |" in support
    assert "| checkpoint | checkpointing | runs |" in support


def test_a_claim_that_needs_a_gpu_names_the_gpu_machines_pages(tmp_path):
    """A CPU machine's summary says where a GPU claim is judged: the GPU machines' pages."""
    import json

    from .test_report import record

    results = write_results(tmp_path / "results")
    store = results / "records" / "gpu-box" / "gpu-0"
    store.mkdir(parents=True)
    for strategy in ("baseline", "amp-bf16"):  # C1's pair, judged there
        data = record(strategy, 32, gpu=True)
        data["environment"]["machine"] = "gpu-box"
        (store / f"resnet50--torch--{strategy}--bs32.json").write_text(json.dumps(data))
    summary, _ = summary_and_references(results)
    row = {line.split(" | ")[0][2:]: line for line in summary.splitlines() if line[:3] == "| C"}
    assert "needs a GPU" in row["C1"] and row["C1"].endswith("; judged on [gpu-box](gpu-box.md) |")
    assert "needs a GPU" in row["C7"] and "judged on" not in row["C7"]  # not measurable there
    assert "judged on" not in row["C8"]  # a claim judged here names no other page


def test_regenerating_removes_pages_the_results_no_longer_give(tmp_path):
    docs = tmp_path / "docs"
    stale = docs / MACHINE / "transformer.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    write_pages(write_results(tmp_path / "results"), docs)
    assert not stale.exists() and (docs / MACHINE / "resnet50.md").is_file()


def test_the_same_results_give_the_same_page(tmp_path):
    results = write_results(tmp_path / "results")
    assert pages(results) == pages(results)


def test_markdown_cells_cannot_break_a_row():
    table = markdown_table(pd.DataFrame({"a": ["x | y", "two\nlines"], "b": [0.5, float("nan")]}))
    rows = ["| a | b |", "|---|---|", "| x \\| y | 0.5 |", "| two lines | - |"]
    assert table.splitlines() == rows


def test_the_command_writes_the_pages_where_paths_says(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "DOCS_RESULTS", tmp_path / "docs" / "results")
    assert main(["report", "--docs", "--results", str(write_results(tmp_path / "results"))]) == 0
    assert paths.results_page("test-machine-2core").is_file()
    assert main(["report"]) == 2  # neither --out nor --docs


def test_a_saved_selfcheck_is_on_its_machines_page_and_a_corrupt_one_is_named(tmp_path):
    from membench.cells.selfcheck import Row, as_json
    from membench.records import write_json_atomic

    results = write_results(tmp_path / "results")
    rows = [Row("torch", "baseline", 10.0, 10.5, 900 * 2**20, None, 1000 * 2**20, 0.01, 0.02)]
    cost = {"torch": {"reader": "VmRSS", "step_seconds_without": 0.5, "step_seconds_with": 0.502,
                      "overhead": 0.004, "overhead_rounds_min": -0.01, "overhead_rounds_max": 0.02,
                      "rounds": 8, "samples": 40, "sampler_coverage": 0.2,
                      "interval_seconds": 0.02},
            "jax": {"error": "no jax here"}}  # fmt: skip
    saved = paths.selfcheck_file(MACHINE, "resnet50", 224, 8, "ab" * 20, results)
    provenance = {"machine": MACHINE, "cpu": "Test CPU", "git": {"commit": "ab" * 20}}
    write_json_atomic(saved, as_json(rows, cost, 224, 8, provenance))
    corrupt = paths.selfcheck_file(MACHINE, "resnet50", 64, 4, "cd" * 20, results)
    corrupt.write_text('{"rows": [')
    text = pages(results)[f"{MACHINE}.md"]
    section = text.split("## Fairness check (membench selfcheck)")[1].split("\n## ")[0]
    assert "| 224 | 8 | torch | baseline | 10 | 10.5 | 0.9524 | 900 | 1000 | 0.9 |" in section
    assert "| Test CPU | abababababab | resnet50 | 224 | 8 | torch | baseline |" in section
    assert "| torch | VmRSS | 0.02 | 8 | 0.5 | 0.502 | 0.004 | -0.01 | 0.02 | 40 | 0.2 |" in section
    assert "no jax here" not in section  # a failed probe has no figures to show
    assert f"skipped results/selfcheck/{MACHINE}/{corrupt.name}: JSONDecodeError" in text


def test_the_index_names_every_machine_and_each_claims_verdict_there():
    """docs/results/README.md: a row per machine with a link to its summary, and the claims
    table's verdicts of each machine side by side (the H200 judged C1, the Intel host C9)."""
    from analysis.claims import claims_table
    from analysis.page_parts import load_results, machines, of_machine
    from analysis.results_page import index_page

    results = load_results(COMMITTED_RESULTS)
    text = index_page(results)
    for machine in machines(results):
        assert f"| [{machine}]({machine}.md) |" in text
    rows = {
        line.split(" | ")[0].strip("| "): line
        for line in text.splitlines()
        if line.startswith("| C")
    }
    columns = [m for m in machines(results) if len(of_machine(results.view, m))]
    for machine in ("nvidia-h200-x1-16core", "intel-xeon-2core-24gib"):
        verdicts = claims_table(of_machine(results.view, machine)).set_index("id")["verdict"]
        at = columns.index(machine) + 2  # id and claim come first
        for cid, verdict in verdicts.items():
            shown = rows[cid].strip("|").split(" | ")[at].strip()
            assert shown == (verdict if verdict != "not measurable here" else "-"), (cid, machine)
    assert INDEX == "README.md"  # what a forge shows of the folder
    # the committed verdicts a reader finds there
    assert rows["C1"].rstrip(" |").endswith("| confirmed")  # the H200, the last column
    assert "| refuted | - |" in rows["C10"]  # the Intel host's, beside the H200's "-"
    empty = results.__class__(*(frame.iloc[0:0] if hasattr(frame, "iloc") else frame
                                for frame in dataclasses.astuple(results)))  # fmt: skip
    assert "No results yet." in index_page(empty) and "|  |" not in index_page(empty)


def test_each_search_is_dated_by_its_own_commit_and_day():
    """The H200's searches: one by the commit its cells were measured with, the rest by a
    later one over two days; the page says so, from each search's own measured_at."""
    from analysis.answers import date_span, provenance

    capacity = load_capacity(COMMITTED_RESULTS).frame
    machine = "nvidia-h200-x1-16core"
    said = provenance(capacity[capacity["machine"] == machine])
    assert said == "8 of 9 searches by af9ac14 on 2026-11-26/27, 1 by 47bc67f on 2026-11-25"
    assert said in (COMMITTED_PAGES / f"{machine}.md").read_text(encoding="utf-8")
    assert date_span(["2026-11-25T18:53:08+00:00"]) == "2026-11-25"
    assert date_span(["2026-11-02", "2026-11-30", "2026-11-04", "2026-11-03"]) == (
        "2026-11-02 to 2026-11-30"
    )


def test_a_row_names_its_layer_and_how_its_batch_is_known():
    """JAX's rows on the H200 are judged on the allocated peak, torch's on the reserve; an
    unsettled search gives no batch and says what its probes found, on its layer."""
    text = (COMMITTED_PAGES / "nvidia-h200-x1-16core.md").read_text(encoding="utf-8")
    resnet = text.split("### Decision table: resnet50")[1].split("###")[0]
    assert "| jax | baseline | 454 @ **1,070** | verified | allocated |" in resnet
    assert "| torch | baseline | 289 @ 1,050 | verified | reserved |" in resnet
    assert "| torch | checkpoint | - | unsettled | reserved |" in resnet
    assert "692 (24,414 MiB reserved)" in resnet
    # and the cell measured without a limit that reserved more than the budget, explained
    assert "256, measured without a limit, reached 25,926 MiB reserved" in resnet


def test_two_identical_error_tables_are_one_that_says_why():
    """The H200 has no calibration: the first guess and today's model are both the spec-only
    model, so its capacity page shows their error once and says so."""
    text = (COMMITTED_PAGES / "nvidia-h200-x1-16core" / "capacity.md").read_text()
    assert "## The first guess's capacity error" in text
    assert "## The memory model's capacity error" not in text
    assert "no calibration on this machine: both are the spec-only model" in text
    # a machine with calibrations keeps both
    f25 = (COMMITTED_PAGES / "amd-epyc-f25m17-avx512bf16-2core-24gib" / "capacity.md").read_text()
    assert "## The memory model's capacity error" in f25


def test_the_index_counts_the_cells_run_dates_the_searches_and_compares_host_kinds():
    """The index: a refused cell is not counted as run, a machine's dates include its
    searches' (the H200's ran after its cells), and the two AMD host kinds' speeds are set
    side by side from the same searches."""
    from analysis.answers import speed_between_hosts

    text = (COMMITTED_PAGES / INDEX).read_text(encoding="utf-8")
    h200 = next(line for line in text.splitlines() if line.startswith("| [nvidia-h200"))
    assert h200.endswith("| 25 | 9 | 2026-11-25/26/27 |")
    xeon = next(line for line in text.splitlines() if line.startswith("| [intel-xeon"))
    assert "| 557 |" not in xeon  # its 557 cells counted the refused ones
    said = speed_between_hosts(load_capacity(COMMITTED_RESULTS).frame)
    assert re.fullmatch(
        r"Host kinds differ in speed, not only in name: f26m2 runs the same searches "
        r"\d\.\dx faster than f25m17 \(median over \d+ answers' samples/s\)\. Compare samples/s "
        r"only within one host kind\.", said,
    ), said  # fmt: skip
    assert said in text
