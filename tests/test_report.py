"""The report (analysis/report.py), its plots and the notebook, on result sets written here and
on the committed results."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.text import Text

from analysis.loader import latest, load
from analysis.modes import trains
from analysis.plots import (
    PLOTS,
    compile_time,
    groups,
    left_out,
    memory_vs_batch,
    pareto_front,
    save_group,
    training_pareto,
)
from analysis.report import write_report
from analysis.report_html import CSS, _html_table
from analysis.report_tables import sections
from analysis.tables import comparison_tables

from .conftest import REPO

GIB = 2**30
MACHINE = "test-machine-2core"
UNSUPPORTED_REASON = "expandable_segments needs the CUDA caching allocator (test record)"
OOM_REASON = "host allocator failed (test record)"
COMMITTED = REPO / "results"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(
    strategy: str, batch: int, status: str = "ok", reason: str = "", framework: str = "torch",
    gpu: bool = False,
) -> dict:  # fmt: skip
    """A Record file's content in the committed format; ok cells get made-up metrics that
    grow with the batch, and shrink for the memory-saving strategies."""
    factor = {"baseline": 1.0, "checkpoint": 0.7, "amp-bf16": 0.8}.get(strategy, 1.0)
    steps = [0.1 * batch / factor] * 3 if status == "ok" else []
    metrics = {}
    if status == "ok":
        metrics = {
            "peak_host_rss_bytes": GIB * (0.5 + 0.1 * batch * factor),
            "peak_host_rss_delta_bytes": GIB * 0.1 * batch * factor,
            "throughput_samples_per_second": batch / steps[0],
            "step_seconds_median": steps[0],
            "first_step_seconds": 2 * steps[0],
            "compile_seconds": steps[0],
        }
        if gpu:
            metrics["peak_device_allocated_bytes"] = GIB * 0.2 * batch * factor
    return {
        "cell": {
            "batch_size": batch, "framework": framework, "preset": "gpu" if gpu else "smoke",
            "strategy": strategy, "workload": "resnet50",
        },
        "environment": {
            "machine": MACHINE, "device": "cuda" if gpu else "cpu", "framework": framework,
            "device_name": "Test GPU 80GB", "framework_version": "0.0+test",
            "git": {"commit": "0" * 40, "dirty": False},
        },
        "metrics": metrics, "reason": reason, "started_at": "2026-01-01T00:00:00+00:00",
        "status": status, "step_times": steps, "wall_seconds": 1.0,
    }  # fmt: skip


def write_store(store: Path, records: list[dict]) -> None:
    store.mkdir(parents=True)
    for data in records:
        cell = data["cell"]
        key = "--".join(cell[k] for k in ("workload", "framework", "strategy"))
        (store / f"{key}--bs{cell['batch_size']}.json").write_text(json.dumps(data, indent=1))


def write_results(root: Path) -> Path:
    """results/records/<machine>/<preset>-<commit>/: two strategies beside the baseline at two
    batch sizes, an unsupported and an oom cell, and one corrupt file."""
    store = root / "records" / MACHINE / "smoke-000000000000"
    cells = [record(s, b) for s in ["baseline", "checkpoint", "amp-bf16"] for b in (2, 4)]
    cells += [record("expandable-segments", b, "unsupported", UNSUPPORTED_REASON) for b in (2, 4)]
    cells.append(record("checkpoint", 8, "oom", OOM_REASON))
    write_store(store, cells)
    (store / "resnet50--torch--baseline--bs16.json").write_text('{"cell": {"batch_')
    return root


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, Path]:
    """(results dir, report's index.html) for the written result set."""
    results = write_results(tmp_path_factory.mktemp("results"))
    return results, write_report(results, tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    return write_report(COMMITTED, tmp_path_factory.mktemp("committed-report"))


def images(index: Path) -> list[str]:
    return re.findall(r'<img src="([^"]+)"', index.read_text())


def check_report(results: Path, index: Path) -> None:
    out = index.parent
    assert index.name == "index.html" and "<table" in index.read_text()
    assert "|" in (out / "tables.md").read_text()
    rows = len(load(results).frame)
    assert rows > 0
    assert len(pd.read_csv(out / "data" / "results.csv")) == rows
    assert len(pd.read_parquet(out / "data" / "results.parquet")) == rows
    pngs = sorted((out / "plots").rglob("*.png"))
    # Every plot per group, but the savings plot where a group has no baseline to save
    # against (the eval probe measures inference only) or nothing but the baseline (smoke
    # runs the ResNet-50 and U-Net baselines only), and the training front where a group
    # measured no training strategy.
    # Memory against batch size is left out where a group ran one batch size (cpu-quick).
    expected = sum(
        len(PLOTS)
        - int("baseline" not in (s := set(g["strategy"])) or s == {"baseline"})
        - int(not trains(g[g["status"] == "ok"]).any())
        - int("memory-vs-batch" in left_out(g))
        for _, g in sections(latest(load(results).frame))
    )
    assert len(pngs) == expected
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in pngs)
    # Every PNG is on the page and every image on the page exists (with the memory timelines').
    pngs += sorted((out / "timelines").glob("*.png"))
    # and the answers' pictures, a machine with capacity searches each
    pngs += sorted((out / "answers").rglob("*.png"))
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in pngs)
    assert sorted(images(index)) == sorted(p.relative_to(out).as_posix() for p in pngs)


def test_report_writes_page_tables_data_and_plots(small):
    check_report(*small)


def test_report_shows_non_ok_statuses_with_their_reasons(small):
    page = small[1].read_text()
    for status, reason in [("unsupported", UNSUPPORTED_REASON), ("oom", OOM_REASON)]:
        assert status in page
        assert html.escape(reason) in page


def test_report_names_the_files_it_skipped(small):
    page = small[1].read_text()
    assert "resnet50--torch--baseline--bs16.json" in page
    assert len(load(small[0]).problems) == 1


def test_page_is_self_contained(small):
    page = small[1].read_text()
    assert "<script" not in page.lower()
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_report_of_an_empty_results_folder(tmp_path):
    index = write_report(tmp_path / "nothing", tmp_path / "report")
    assert "No records found" in index.read_text()
    assert not images(index)


def test_plots_skip_cells_that_did_not_run(small):
    view = latest(load(small[0]).frame)
    (key, group), *_ = groups(view)
    fig = memory_vs_batch(group)
    labels = {t.get_text() for t in fig.legends[0].texts}
    assert {"baseline", "checkpoint", "amp-bf16"} <= labels
    assert "expandable-segments" not in labels
    # checkpoint's oom at batch 8 is no point: its line ends at batch 4.
    assert max(max(line.get_xdata(), default=0) for line in fig.axes[0].lines) == 4


def test_every_figure_names_workload_device_preset_machine_and_memory_layer(small):
    view = latest(load(small[0]).frame)
    (_, group), *_ = groups(view)
    for draw, _caption in PLOTS.values():
        fig = draw(group)
        assert fig._suptitle.get_text().endswith(f"resnet50 on cpu (preset smoke), on {MACHINE}")
    ylabel = memory_vs_batch(group).axes[0].get_ylabel()
    assert "GiB" in ylabel and "host layer" in ylabel


def test_gpu_figures_show_the_allocator_layer_with_a_panel_per_framework(tmp_path):
    cells = [
        record(s, b, framework=f, gpu=True)
        for f in ("torch", "jax") for s in ("baseline", "checkpoint") for b in (64, 128)
    ]  # fmt: skip
    write_store(tmp_path / "records" / MACHINE / "gpu-000000000000", cells)
    (key, group), *_ = groups(latest(load(tmp_path).frame))
    assert key == ("resnet50", "Test GPU 80GB", "gpu")
    fig = memory_vs_batch(group)
    assert [ax.get_title() for ax in fig.axes] == ["framework = jax", "framework = torch"]
    assert "device allocated peak" in fig.axes[0].get_ylabel()
    assert len(save_group(group, tmp_path)) == len(PLOTS)


def test_save_group_writes_one_png_per_plot(small, tmp_path):
    (_, group), *_ = groups(latest(load(small[0]).frame))
    paths = save_group(group, tmp_path).values()
    assert len(paths) == len(PLOTS) and all(p.is_file() for p in paths)


def test_pareto_front_keeps_cells_no_other_cell_beats():
    cells = pd.DataFrame(
        {"name": ["slow-big", "fast-big", "slow-small", "mid-mid"], "mem": [4, 3, 1, 2],
         "speed": [1, 10, 2, 5]}
    )  # fmt: skip
    front = pareto_front(cells, "mem", "speed")
    assert list(front["name"]) == ["slow-small", "mid-mid", "fast-big"]


def test_report_on_the_committed_results(committed):
    check_report(COMMITTED, committed)
    page = committed.read_text()
    unsupported = [
        json.loads(p.read_text())
        for p in sorted((COMMITTED / "records").rglob("*.json"))
        if "logs" not in p.parts and '"unsupported"' in p.read_text()
    ]
    # the page's tables show the default environment; version environments have their own view
    unsupported = [
        d for d in unsupported if "MEMBENCH_STACK" not in d["environment"].get("env", {})
    ]
    assert unsupported, "the committed CPU run has unsupported cells (expandable-segments)"
    for data in unsupported:
        assert html.escape(data["reason"]) in page
    assert "unsupported" in page
    # the searches' own tables (a guess's error, probes per search) are each one machine's
    searches = page[page.index('id="capacity-searches"') : page.index('id="claims"')]
    titles = re.findall(r"<h3>([^<]+)</h3>", searches)
    machines = {t.rsplit(", on ", 1)[1] for t in titles if ", on " in t}
    assert titles and len(machines) >= 2 and all(", on " in t for t in titles)


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch) -> str:
    """ "python3" as this interpreter's ipykernel. The venv's ipykernel ships that spec (argv
    "python", which jupyter_client runs as sys.executable); where it is missing or a spec
    elsewhere on the Jupyter path names another Python, a spec for sys.executable shadows it."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ours = {"python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"}
    try:
        argv0 = KernelSpecManager().get_kernel_spec("python3").argv[0]
        if argv0 in ours or Path(argv0).resolve() == Path(sys.executable).resolve():
            return "python3"
    except NoSuchKernel:
        pass
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "Python 3", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "python3"


def test_notebook_executes_headless(python3_kernel):
    import nbclient
    import nbformat

    nb = nbformat.read(REPO / "analysis" / "membench.ipynb", as_version=4)
    assert not any(cell.get("outputs") for cell in nb.cells), "commit the notebook without outputs"
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name=python3_kernel, resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    outputs = [out for cell in nb.cells for out in cell.get("outputs", [])]
    assert not [out for out in outputs if out["output_type"] == "error"]
    assert sum("image/png" in out.get("data", {}) for out in outputs) >= 2


def test_each_machine_has_sections_of_its_own(tmp_path):
    """Two host kinds ran the same preset and workload: each has its heading, tables and
    plots, and neither's figures stand in the other's section."""
    root = write_results(tmp_path / "results")
    other = "other-machine-2core"
    cells = []
    for batch in (2, 4):
        data = record("baseline", batch)
        data["environment"]["machine"] = other
        data["metrics"]["throughput_samples_per_second"] = 1234.5 * batch
        cells.append(data)
    write_store(root / "records" / other / "smoke-000000000000", cells)
    index = write_report(root, tmp_path / "report")
    page = index.read_text()
    headings = re.findall(r'<h2 id="[^"]+">[^<]+ on (?:test|other)-machine-2core</h2>', page)
    assert [re.sub("<[^>]+>", "", h) for h in headings] == [
        f"resnet50 on cpu (preset smoke), on {m}" for m in (other, MACHINE)
    ]
    start = [page.index(h) for h in headings]
    theirs = page[start[0] : start[1]]
    mine = page[start[1] : page.index("<h2", start[1] + 1)]
    assert "2469.00" in theirs and "4938.00" in theirs  # the other machine's samples/s
    assert "2469.00" not in mine and "4938.00" not in mine
    assert "checkpoint" in mine and "checkpoint" not in theirs
    for machine, section in ((other, theirs), (MACHINE, mine)):  # plots of its own machine
        assert set(re.findall(r'<img src="plots/([^/"]+)/', section)) == {machine}
    # the tables above the sections: one machine's each, named
    for anchor in ("measured", "time", "support"):
        part = page[page.index(f'id="{anchor}"') :]
        part = part[: part.index("<h2", 1)]
        assert MACHINE in part and other in part
    markdown = (tmp_path / "report" / "tables.md").read_text()
    assert f"## resnet50 on cpu (preset smoke), on {other}" in markdown
    check_report(root, index)
    view = latest(load(root).frame)
    # the decision tables' machine first, whatever the alphabet says
    assert [s[0] for s, _ in sections(view, first=[MACHINE])] == [MACHINE, other]
    with pytest.raises(ValueError, match="2 machines"):  # nothing pools two machines' rows
        comparison_tables(view)
    with pytest.raises(ValueError, match="2 machines"):
        memory_vs_batch(view)


def test_report_shows_each_benchmark_under_every_framework_version(tmp_path):
    """Records of two versions in two environments: a version-history table, one column per
    version (oldest first), and the default-env tables unaffected by the version runs."""
    root = write_results(tmp_path / "results")
    versions = root / "records" / MACHINE / "versions-smoke-000000000000"
    for version, rss_gib in [("0.10.2", 2.0), ("0.7.1", 1.5)]:
        data = record("baseline", 2, framework="jax")
        data["environment"]["framework_version"] = version
        data["environment"]["env"] = {"MEMBENCH_STACK": f"jax=={version} numpy==2.2.6"}
        data["metrics"]["peak_host_rss_bytes"] = GIB * rss_gib
        write_store(versions / f"jax-{version}", [data])
    index = write_report(root, tmp_path / "report")
    page = index.read_text()
    assert 'id="versions"' in page and "jax on " in page
    history = page[page.index('id="versions"') :]
    assert history.index("0.7.1") < history.index("0.10.2")
    assert "1,536" in history and "2,048" in history  # MiB per version
    markdown = (tmp_path / "report" / "tables.md").read_text()
    assert "## Version history: jax on" in markdown
    # the version environments stay out of the default tables
    assert "jax" not in markdown.split("## Version history")[0]


def test_report_shows_capacity_fits_and_the_memory_model(tmp_path):
    from membench.records import CapacityResult, save_capacity_results

    root = write_results(tmp_path / "results")
    result = CapacityResult(
        "resnet50", "torch", "baseline", "smoke", 2 * GIB, "peak_host_rss_bytes", False,
        "CPU: no memory limit was imposed", 12, 13, "ok", "", [{"batch_size": 12}], 9.5,
        600 * 2**20, 110 * 2**20, 0.999,
    )  # fmt: skip
    save_capacity_results(
        [result], root / "capacity" / MACHINE / "smoke-2048mib-0" / "capacity.json"
    )
    page = write_report(root, tmp_path / "report").read_text()
    memory = page[page.index('id="memory"') :]
    assert "largest batch within the budget" in memory and ">12<" in memory
    # the search's own line is shown under the rule that decides where it is blanked, stated
    # between the table's title and the table, and in tables.md, as the capacity page states it
    from analysis.decision_terms import SEARCH_LINE_RULE

    table = memory[memory.index("largest batch within the budget</h3>") :]
    assert table.index(html.escape(SEARCH_LINE_RULE)) < table.index("<table")
    assert SEARCH_LINE_RULE in (tmp_path / "report" / "tables.md").read_text()
    # the made-up records grow by 0.1 GiB per sample at factor 1 (baseline)
    assert "Peak memory against batch size" in memory and ">102.4<" in memory


def test_run_time_sums_each_cells_wall_time_whatever_its_status(tmp_path):
    from analysis.report_tables import run_time

    view = latest(load(write_results(tmp_path / "results")).frame)
    table = run_time(view).set_index(["workload", "framework"])
    # 9 readable records of 1.0 s each (ok, unsupported and oom alike); the corrupt one is not
    assert table.loc[("resnet50", "torch"), "cells"] == 9
    assert table.loc[("all", "all"), "cells"] == 9
    assert table.loc[("all", "all"), "minutes"] == pytest.approx(9 / 60, abs=0.06)  # one decimal


def test_what_was_measured_names_each_host_cpu(tmp_path):
    """One machine name can stand for hosts of different CPUs: the overview says which."""
    from analysis.report_tables import overview

    cpus = {"baseline": {"cpu": "CPU A"}, "checkpoint": {"cpu": "CPU B"}, "amp-bf16": {}}
    assert overview(view_with(tmp_path, cpus)).loc[0, "host CPU"] == "CPU A, CPU B"


def view_with(tmp_path: Path, environments: dict[str, dict]) -> pd.DataFrame:
    """The latest view of one store of resnet50 torch records at batch 2, a strategy each,
    with these fields added to each record's environment."""
    root = tmp_path / "results" / "records" / MACHINE / "smoke-0"
    root.mkdir(parents=True)
    for strategy, extra in environments.items():
        content = record(strategy, 2)
        content["environment"].update(extra)
        (root / f"resnet50--torch--{strategy}--bs2.json").write_text(json.dumps(content))
    return latest(load(tmp_path / "results").frame)


def test_what_was_measured_names_the_inputs_the_records_ran(tmp_path):
    """The records' workload_inputs in words, in one order whatever the file's key order (a
    record without them says nothing): a reader sees 224x224 images, or GPT-2 small's sizes
    beside a 4-layer model's, without opening the methodology."""
    from analysis.labels import inputs_label
    from analysis.report_tables import overview

    inputs = {"workload_inputs": {"num_classes": 1000, "image_size": 224}}
    view = view_with(tmp_path, {"baseline": inputs, "checkpoint": {}})
    assert overview(view).loc[0, "inputs"] == "224x224 images, 1000 classes"
    gpt2 = {"vocab_size": 50257, "n_positions": 1024, "n_layer": 12, "n_head": 12,
            "d_model": 768, "seq_len": 1024, "dropout": 0}  # fmt: skip
    assert inputs_label(gpt2) == (
        "12 layers, width 768, 12 heads, sequence 1024, vocabulary 50257, dropout=0"
    )
    assert inputs_label({"seq_len": 128, "n_positions": 256}) == "sequence 128, n_positions=256"


def test_report_opens_with_the_answers_then_the_decision_tables_and_every_summary_section(
    committed,
):
    page = committed.read_text()
    nav = page[page.index("<nav>") : page.index("</nav>")]
    sections = ["answers", "decision", "claims", "measured", "time", "fairness", "support"]
    assert all(f'href="#{s}"' in nav for s in sections)
    assert all(f'id="{s}"' in page for s in sections)
    # the time a machine's searches took, as on its results page
    time = page[page.index('id="time"') : page.index('id="fairness"')]
    assert "search probes" in time and "and the searches the decision tables show" in time
    # the results pages' order: the answers (compact tables and pictures) before the full
    # decision tables, and both before what was measured
    answers, first = page.index('<h2 id="answers">'), page.index('<h2 id="decision">')
    assert answers < page.index("<table") < first < page.index('id="measured"')
    assert answers < page.index('<img src="answers/') < first
    assert "8 of 9 searches by af9ac14 on 2026-11-26/27" in page[answers:first]
    # the committed capacity run (ResNet-50 baselines at 1 GiB): its table, each framework's
    # best training option marked
    assert "resnet50, preset smoke, budget 1 GiB, on " in page
    # at most one best training row per framework in every training table; none where no
    # speed is published (smoke: its three answers ran on a busy host, 50-68% foreign CPU)
    tables = re.findall(r'<h3 id="([^"]+)">.*?<h4>Training</h4>(.*?)</table>', page, re.S)
    assert tables
    for anchor, table in tables:
        best = re.findall(r'<tr class="best"><td[^>]*>([^<]+)</td>', table)
        frameworks = set(re.findall(r'<tr class="[^"]*"><td[^>]*>([^<]+)</td>', table))
        assert len(best) == len(set(best)) and set(best) <= frameworks, anchor
    # several host kinds' tables: each heading names its machine, a machine's tables stand
    # together, and the standard sizes (cpu-capacity) lead
    anchors = [anchor for anchor, _ in tables]
    assert len(anchors) == len(set(anchors))
    machines = [anchor.split("--on-")[1] for anchor in anchors]
    blocks = [m for i, m in enumerate(machines) if i == 0 or machines[i - 1] != m]
    assert len(blocks) == len(set(blocks)) >= 2
    assert "--preset-cpu-capacity--" in anchors[0]
    smoke = next(t for a, t in tables if a.startswith("resnet50--preset-smoke--budget-1-gib--on-"))
    assert '<tr class="best">' not in smoke and smoke.count("host busy") == 3
    assert any('<tr class="best">' in table for _, table in tables)


def tidy(cells: list[tuple[str, str, int, float, float]]) -> pd.DataFrame:
    """The loader's latest view of training cells given as (framework, strategy, batch, GiB,
    samples/s), written as records and read back as the report reads them."""
    import tempfile

    records = []
    for framework, strategy, batch, gib, speed in cells:
        data = record(strategy, batch, framework=framework)
        data["metrics"]["peak_host_rss_bytes"] = gib * GIB
        data["metrics"]["throughput_samples_per_second"] = speed
        records.append(data)
    with tempfile.TemporaryDirectory() as folder:
        write_store(Path(folder) / "records" / MACHINE / "cpu-000000000000", records)
        return latest(load(Path(folder)).frame)


def test_pareto_panels_share_one_scale_and_labels_stand_apart_right_of_the_points():
    """JAX's five front points close together (the cpu preset's ResNet-50 had them) are named
    in a column right of every point, no two labels overlapping and each inside its panel;
    torch's fp16 cell makes its panel log, and so every panel; faint points are explained."""
    jax = [("jax", s, 4, 1.0 + 0.02 * n, 10.0 + n) for n, s in enumerate(
        ["baseline", "checkpoint", "amp-bf16", "accumulate-2", "accumulate-4"])]  # fmt: skip
    cells = [
        *jax, ("jax", "compile", 4, 1.5, 9.0),  # leaner and faster cells beat it: faint
        ("torch", "baseline", 4, 1.0, 40.0), ("torch", "amp-fp16", 4, 0.8, 0.5),
        ("jittor", "baseline", 4, 0.7, 30.0), ("jittor", "accumulate-4", 4, 0.6, 20.0),
    ]  # fmt: skip
    fig = training_pareto(tidy(cells))
    fig.canvas.draw()
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert sorted(panels) == ["jax", "jittor", "torch"]
    assert {ax.get_xscale() for ax in panels.values()} == {"log"}
    for name, ax in panels.items():
        labels = [t for t in ax.texts if ", batch " in t.get_text()]
        boxes = [Text.get_window_extent(t) for t in labels]  # the text's, not its line's
        points = ax.transData.transform(
            [p for c in ax.collections for p in c.get_offsets()]
        )  # fmt: skip
        panel = ax.get_window_extent()
        for n, box in enumerate(boxes):
            assert box.x0 > points[:, 0].max(), (name, labels[n].get_text())
            assert panel.x0 <= box.x0 and box.x1 <= panel.x1 + 1
            assert panel.y0 <= box.y0 and box.y1 <= panel.y1 + 1
            assert not any(box.overlaps(other) for other in boxes[n + 1 :]), name
    jax_labels = [t.get_text() for t in panels["jax"].texts]
    assert sorted(jax_labels) == sorted(f"{s}, batch 4" for _, s, *_ in jax)
    legend = {t.get_text() for legend in fig.legends for t in legend.texts}
    assert any(text.startswith("faint: off the front") for text in legend)


def test_memory_vs_batch_is_left_out_of_a_one_batch_preset_and_the_page_says_why(tmp_path):
    one_batch = tidy([("torch", s, 4, 1.0, 10.0) for s in ("baseline", "accumulate-4")])
    assert memory_vs_batch(one_batch) is None
    why = left_out(one_batch)["memory-vs-batch"]
    assert "every cell of this preset ran at batch 4" in why
    assert "memory-vs-batch" not in save_group(one_batch, tmp_path)
    two = tidy([("torch", "baseline", b, 1.0, 10.0) for b in (2, 4)])
    assert left_out(two) == {} and memory_vs_batch(two) is not None
    root = tmp_path / "results"
    write_store(root / "records" / MACHINE / "cpu-quick-000000000000",
                [record(s, 4) for s in ("baseline", "checkpoint")])  # fmt: skip
    page = write_report(root, tmp_path / "report").read_text()
    assert html.escape("every cell of this preset ran at batch 4") in page


def test_a_framework_row_without_bars_says_why(tmp_path):
    """Jittor refuses checkpoint and the preset does not run its amp-bf16: the compile-time
    plot's Jittor rows say so instead of standing empty."""
    cells = [record(s, 4, framework="torch") for s in ("baseline", "amp-bf16", "checkpoint")]
    cells += [record("baseline", 4, framework="jittor")]
    cells += [record("checkpoint", 4, "unsupported", UNSUPPORTED_REASON, framework="jittor")]
    write_store(tmp_path / "records" / MACHINE / "cpu-quick-000000000000", cells)
    (_, group), *_ = groups(latest(load(tmp_path).frame))
    fig = compile_time(group)
    for ax in fig.axes:
        notes = {t.get_text() for t in ax.texts}
        if ax.get_title().startswith("jittor"):
            assert notes == {"unsupported", "not measured in this preset"}
            # in the rows' order (baseline, amp-bf16, checkpoint), at each empty row's height
            where = {t.get_text(): t.get_position()[1] for t in ax.texts}
            assert where == {"not measured in this preset": 1, "unsupported": 2}
        else:
            assert notes == set()


def test_html_tables_write_whole_numbers_as_the_pages_do_and_keep_hyphenated_words_whole():
    """661.0 reads 661 as on the Markdown pages; a one-word cell does not wrap at its hyphen
    (nw), a sentence with spaces still wraps, its text untouched."""
    reason = "see /work/sweep/.venv-versions/jax-0.7.1/bin/python here"
    table = _html_table(pd.DataFrame({
        "strategy": ["accumulate-4", "baseline"], "preset": ["cpu-quick", "cpu"],
        "cell peak MiB": [661.0, None], "VmHWM - peak MiB": [0.25, 12.0],
        "reason": [reason, "-"],
    }))  # fmt: skip
    cells = re.findall(r'<td class="([^"]*)">(.*?)</td>', table)
    assert cells[:5] == [
        ("strategy nw", "accumulate-4"), ("preset nw", "cpu-quick"), ("cell peak MiB nw", "661"),
        ("VmHWM - peak MiB nw", "0.25"), ("reason", reason),
    ]  # fmt: skip
    assert [text for _, text in cells[5:9]] == ["baseline", "cpu", "", "12"]
    assert "td.nw, table.results td { white-space: nowrap; }" in CSS


def test_the_report_writes_the_timeline_tables_whole_numbers_without_a_point(committed):
    page = committed.read_text()
    section = page[page.index('<h2 id="timelines">') :]
    section = section[: section.index("<h2", 5)]
    assert "<table" in section
    assert not re.search(r"<td[^>]*>-?\d+\.0</td>", section)
    assert '<td class="strategy nw">accumulate-4</td>' in section


def test_jupyterlab_serves_the_notebook_with_the_readmes_command(tmp_path):
    """The README's command, on a free loopback port without a browser: the server comes up
    in analysis/ (the folder of the file it opens) and serves the notebook."""
    command = ".venv/bin/jupyter lab analysis/membench.ipynb"
    assert f"`{command}`" in (REPO / "README.md").read_text()
    jupyter = Path(sys.executable).with_name("jupyter")
    token = "membench-test"
    env = {
        "PATH": f"{jupyter.parent}:/usr/bin:/bin", "HOME": str(tmp_path),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }  # fmt: skip
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(jupyter), *command.split()[1:], "--no-browser", "--ip=127.0.0.1",
             "--ServerApp.port=0", f"--IdentityProvider.token={token}",
             *(["--allow-root"] if os.geteuid() == 0 else [])],  # as the README says
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline, info = time.monotonic() + 120, None
        while info is None and time.monotonic() < deadline and server.poll() is None:
            found = sorted((tmp_path / "runtime").glob("jpserver-*.json"))
            info = json.loads(found[0].read_text()) if found else None
            time.sleep(0.5)
        assert info is not None, log.read_text()
        assert Path(info["root_dir"]) == REPO / "analysis"
        base, headers = f"http://127.0.0.1:{info['port']}", {"Authorization": f"token {token}"}
        api = urllib.request.Request(f"{base}/api/contents/membench.ipynb", headers=headers)
        with urllib.request.urlopen(api, timeout=30) as answer:
            notebook = json.load(answer)
        assert notebook["type"] == "notebook" and len(notebook["content"]["cells"]) > 2
        lab = urllib.request.Request(f"{base}/lab/tree/membench.ipynb", headers=headers)
        with urllib.request.urlopen(lab, timeout=30) as answer:
            assert answer.status == 200 and "JupyterLab" in answer.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)
