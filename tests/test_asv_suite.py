"""asv end to end: a small selection recorded by asv from a throwaway clone."""

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from membench.publish.asv_run import asv_commands
from membench.publish.asv_suite import bench_regexes

from .conftest import REPO

pytest.importorskip("asv")


def git(cwd, *args):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def asv_run(tmp_path_factory):
    """asv run over torch ResNet-50 and the Transformer, smoke preset, four strategies at
    batch 4, selected as `membench bench` selects them (asv_suite.bench_regexes), of which the
    run measures three (checkpoint is n/a: not measured at this commit), and a parameter set
    of asv's product that no run measures (Jittor x checkpoint: a hole, never run)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("asv")
    shutil.copy(REPO / "asv.conf.json", root)
    shutil.copytree(
        REPO / "benchmarks", root / "benchmarks", ignore=shutil.ignore_patterns("__pycache__")
    )
    for package in ("membench", "models"):  # the suite imports this checkout's, not another's
        (root / package).symlink_to(REPO / package)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "suite")
    commit = git(root, "rev-parse", "HEAD")
    store = root / "store"
    env = dict(
        os.environ,
        MEMBENCH_PRESET="smoke",
        MEMBENCH_WORKLOADS="resnet50,transformer",  # the U-Net's cells take longer
        MEMBENCH_FRAMEWORKS="torch",
        MEMBENCH_BATCH_SIZES="4",
        MEMBENCH_STRATEGIES="baseline,infer,expandable-segments",
        MEMBENCH_STORE=str(store),
        MEMBENCH_MACHINE="test-machine",
        # a shared test host is often busy: these tests are about what asv records
        MEMBENCH_ALLOW_BUSY="1",
    )
    selection = {
        "workloads": ["resnet50", "transformer"], "frameworks": ["torch"],
        "strategies": ["baseline", "infer", "checkpoint", "expandable-segments"],
        "batch_sizes": [4],
    }  # fmt: skip
    describe, record = asv_commands("test-machine", commit)
    for regex in [*bench_regexes("smoke", selection), HOLE]:
        record += ["--bench", regex]
    subprocess.run(describe, cwd=root, env=env, check=True, capture_output=True)
    out = subprocess.run(record, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (result_file,) = (root / "results" / "asv" / "test-machine").glob(f"{commit[:8]}-*.json")
    return json.loads(result_file.read_text()), store, out.stdout


HOLE = r"^suite\.Transformer_smoke\.\w+\('jittor', 'checkpoint', 4\)$"


def values(results, name, workload="Resnet50_smoke"):
    """{(framework, strategy, batch): value} of one benchmark in an asv result file."""
    data = dict(
        zip(results["result_columns"], results["results"][f"suite.{workload}.{name}"], strict=False)
    )
    keys = [
        (f.strip("'"), s.strip("'"), int(b))
        for f in data["params"][0]
        for s in data["params"][1]
        for b in data["params"][2]
    ]
    return dict(zip(keys, data["result"], strict=True))


def test_memory_and_speed_are_recorded_for_cells_that_ran(asv_run):
    results, store, _ = asv_run
    peak = values(results, "track_peak_host_rss")
    assert peak[("torch", "baseline", 4)] > 100 * 2**20
    # smoke runs each strategy once: infer on the Transformer, not a parameter of ResNet-50's
    assert values(results, "track_throughput", "Transformer_smoke")[("torch", "infer", 4)] > 0
    assert ("torch", "infer", 4) not in values(results, "track_throughput")
    assert not (store / "resnet50--torch--infer--bs4.json").exists()


def test_every_selected_workload_is_a_benchmark_class(asv_run):
    results, _, _ = asv_run
    peak = dict(
        zip(
            results["result_columns"],
            results["results"]["suite.Transformer_smoke.track_peak_host_rss"],
            strict=False,
        )
    )
    assert any(v is not None and v > 0 for v in peak["result"])


def test_one_worker_run_serves_every_metric(asv_run):
    results, store, _ = asv_run
    record = json.loads((store / "resnet50--torch--baseline--bs4.json").read_text())
    assert (
        values(results, "track_peak_host_rss")[("torch", "baseline", 4)]
        == record["metrics"]["peak_host_rss_bytes"]
    )
    assert values(results, "track_throughput")[("torch", "baseline", 4)] == pytest.approx(
        record["metrics"]["throughput_samples_per_second"]
    )
    # one worker per cell that runs; asv never asks for a cell no run of the preset measures
    logs = {p.stem for p in (store / "logs").glob("*.log")}
    assert logs == {
        "resnet50--torch--baseline--bs4", "transformer--torch--baseline--bs4",
        "transformer--torch--infer--bs4",
    }  # fmt: skip
    assert {p.stem for p in store.glob("*.json")} == logs


def test_what_no_run_measures_never_reaches_asv(asv_run):
    results, store, stdout = asv_run
    for name in ["track_peak_host_rss", "track_throughput"]:
        for workload in ("Resnet50_smoke", "Transformer_smoke"):
            # CUDA's allocator on a CPU preset: no parameter of asv's, no record, no line
            assert ("torch", "expandable-segments", 4) not in values(results, name, workload)
        # a hole of asv's product (Jittor has no checkpointing): skipped, setup never called
        assert math.isnan(values(results, name, "Transformer_smoke")[("jittor", "checkpoint", 4)])
    assert not (store / "transformer--jittor--checkpoint--bs4.json").exists()
    assert "expandable-segments" not in stdout and "CUDA caching allocator" not in stdout
    skipped = [line for line in stdout.splitlines() if "asv: skipped" in line]
    assert skipped and not [line for line in skipped if "jittor" in line.lower()]
    assert "checkpointing API" not in stdout  # Jittor's refusal: no worker, no reason
    assert "runs each strategy once per framework" not in stdout
    # device memory is a GPU preset's benchmark, never a CPU preset's n/a
    assert "suite.Resnet50_smoke.track_peak_device_allocated" not in results["results"]
    assert "failed" not in stdout.lower()


def test_a_selected_cell_the_store_lacks_is_na_with_its_reason(asv_run):
    results, store, stdout = asv_run
    value = values(results, "track_peak_host_rss", "Transformer_smoke")[("torch", "checkpoint", 4)]
    assert math.isnan(value)
    assert not (store / "transformer--torch--checkpoint--bs4.json").exists()
    assert "not measured at this commit" in stdout


def test_bench_passes_asv_output_through_but_counts_the_na_reasons(asv_run, tmp_path, capsys):
    from membench.publish.asv_run import NA_REASON, run_quietly

    _, _, stdout = asv_run
    reasons = [line for line in stdout.splitlines() if line.lstrip().startswith(NA_REASON)]
    assert reasons  # asv's real output prints a line per skipped parameter set and metric
    captured = tmp_path / "asv.out"
    captured.write_text(stdout + "an error line\n")
    replay = [
        sys.executable,
        "-c",
        f"import sys; print(open({str(captured)!r}).read(), end=''); sys.exit(3)",
    ]
    assert run_quietly(replay, tmp_path, os.environ) == 3
    out, err = capsys.readouterr()
    assert NA_REASON not in out
    assert "track_peak_host_rss" in out and out.endswith("an error line\n")
    assert f"asv: {len(reasons)} results n/a" in err


def test_step_time_keeps_its_samples(asv_run):
    results, store, _ = asv_run
    data = dict(
        zip(
            results["result_columns"],
            results["results"]["suite.Resnet50_smoke.track_step_time"],
            strict=False,
        )
    )
    record = json.loads((store / "resnet50--torch--baseline--bs4.json").read_text())
    assert record["step_times"]
    stats_present = any(s for s in data.get("stats_q_25", []) if s is not None)
    samples_present = any(s for s in data.get("samples", []) if s)
    assert stats_present or samples_present


def test_a_partial_run_writes_the_whole_catalogue(asv_run):
    """asv's benchmarks.json after a run of a few cells is the committed one, byte for byte."""
    _, store, _ = asv_run
    written = store.parent / "results" / "asv" / "benchmarks.json"
    assert written.read_bytes() == (REPO / "results" / "asv" / "benchmarks.json").read_bytes()
