"""The generated results pages (docs/results/<machine>.md): current against the committed
results, deterministic, and every cell that did not run listed with its reason."""

from __future__ import annotations

import pandas as pd

from analysis.claims import CLAIMS
from analysis.results_page import markdown_table, pages, write_pages
from membench import paths
from membench.cli import main

from .conftest import REPO
from .test_report import OOM_REASON, UNSUPPORTED_REASON, write_results

COMMITTED_RESULTS = REPO / "results"
COMMITTED_PAGES = REPO / "docs" / "results"


def test_the_committed_pages_are_the_committed_results():
    expected = pages(COMMITTED_RESULTS)
    committed = {p.stem: p.read_text(encoding="utf-8") for p in COMMITTED_PAGES.glob("*.md")}
    assert sorted(committed) == sorted(expected), "one page per machine: membench report --docs"
    for machine, text in expected.items():
        assert committed[machine] == text, f"{machine}.md is stale: run membench report --docs"


def test_a_page_lists_what_did_not_run_and_every_claim(tmp_path):
    (path,) = write_pages(write_results(tmp_path / "results"), tmp_path / "docs")
    text = path.read_text()
    assert path.name == "test-machine-2core.md"
    assert UNSUPPORTED_REASON in text and OOM_REASON in text
    assert all(f"| {c.id} |" in text for c in CLAIMS)
    assert "Files skipped" in text and str(tmp_path) not in text  # paths relative: reproducible


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
    from membench.records import write_json_atomic
    from membench.selfcheck import Row, as_json

    from .test_report import MACHINE

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
    text = pages(results)[MACHINE]
    section = text.split("## Fairness check (membench selfcheck)")[1].split("\n## ")[0]
    assert "| 224 | 8 | torch | baseline | 10 | 10.5 | 0.9524 | 900 | 1000 | 0.9 |" in section
    assert "| Test CPU | abababababab | resnet50 | 224 | 8 | torch | baseline |" in section
    assert "| torch | VmRSS | 0.02 | 8 | 0.5 | 0.502 | 0.004 | -0.01 | 0.02 | 40 | 0.2 |" in section
    assert "no jax here" not in section  # a failed probe has no figures to show
    assert f"skipped results/selfcheck/{MACHINE}/{corrupt.name}: JSONDecodeError" in text
