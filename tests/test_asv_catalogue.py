"""asv's catalogue (results/asv/benchmarks.json) is the whole suite whatever a run selects or
the host is, a preset never shares a benchmark with another, and only the parameter sets a
preset runs reach asv."""

import itertools
import json
import math
import re
import shutil
import subprocess
import sys

import pytest

from membench import backends, environment, paths, registry
from membench.cells import planning, worker_launch
from membench.metrics import METRICS
from membench.publish import asv_suite
from membench.publish.asv_run import asv_commands
from membench.records import Cell, Record

from .conftest import REPO

pytest.importorskip("asv")

SELECTIONS = {
    "MEMBENCH_PRESET": "smoke",
    "MEMBENCH_WORKLOADS": "transformer",
    "MEMBENCH_FRAMEWORKS": "torch",
    "MEMBENCH_STRATEGIES": "baseline",
    "MEMBENCH_BATCH_SIZES": "2",
    "MEMBENCH_WORLD_SIZE": "4",
    "MEMBENCH_STACK": "jax==0.10.2 jaxlib==0.10.2 numpy==2.2.6",
}


def _catalogue():
    classes = {**asv_suite.benchmark_classes(), **asv_suite.capacity_classes()}
    return {name: (cls.preset, cls.workload, cls.params) for name, cls in classes.items()}


def test_the_catalogue_does_not_depend_on_the_selection_nor_the_host(monkeypatch):
    for name in SELECTIONS:
        monkeypatch.delenv(name, raising=False)
    everything = _catalogue()
    for name, value in SELECTIONS.items():
        monkeypatch.setenv(name, value)
    # a GPU host decides its cells' refusals on its GPU; the catalogue, on each preset's device
    for module in (environment, backends, planning, worker_launch):
        monkeypatch.setattr(module, "detected_device", lambda: "cuda")
    assert _catalogue() == everything
    # every preset's every workload, at its own batches and world size
    for preset in registry.PRESETS.values():
        for workload in preset.sizes:
            _, _, (frameworks, strategies, batches) = everything[
                paths.asv_class_name(workload, preset.name)
            ]
            assert set(frameworks) <= set(registry.FRAMEWORKS)
            assert set(batches) <= set(preset.size(workload).batch_sizes)
            names = preset.strategies or registry.STRATEGIES
            assert {s.split("@")[0] for s in strategies} <= set(names)
    assert "fsdp@w2" in everything["Transformer_cpu_shard"][2][1]
    # CUDA's caching allocator is torch's on a GPU preset, never on a CPU preset
    classes = asv_suite.benchmark_classes()
    assert ("torch", "expandable-segments", 4) in _runs(classes["Transformer_gpu"])
    assert not [c for c in _runs(classes["Transformer_cpu"]) if c[1] == "expandable-segments"]


BUILT_IN = ("torch", "jax", "jittor")  # a test's plugin may have registered another


def _runs(cls: type) -> set[tuple]:
    """The parameter sets of a class that asv runs: its product less its holes (skip_params),
    the built-in frameworks' only."""
    runs = set(itertools.product(*cls.params)) - set(cls.skip_params)
    return {c for c in runs if c[0] in BUILT_IN}


def _grid_cells(preset: registry.Preset) -> set[Cell]:
    """The cells asv's classes of a preset hold: their products less their holes."""
    cells = set()
    for workload in preset.sizes:
        g = asv_suite.grid(workload, preset)
        for f, param, b in set(itertools.product(*g.params)) - set(g.holes):
            name, ranks = param.split("@w") if "@w" in param else (param, 1)
            cells.add(Cell(workload, f, name, b, preset.name, int(ranks)))
    return cells


@pytest.mark.skipif(environment.detected_device() != "cpu", reason="a CPU host's plan")
def test_asv_holds_the_cells_a_run_of_a_cpu_preset_measures():
    """asv's grid is the runner's plan of the whole preset less what the backends refuse here
    (asv_suite.strategy_homes decides where smoke runs each strategy as the runner does)."""
    for preset in registry.PRESETS.values():
        if preset.gpu:
            continue
        strategies = list(preset.strategies or registry.STRATEGIES)
        planned = planning.cells_for(
            list(preset.sizes), list(registry.FRAMEWORKS), strategies, preset.name
        )
        runs = {c for c in planned if planning.declared_refusal(c) is None}
        assert _grid_cells(preset) == runs, preset.name


def test_only_applicable_parameter_sets_reach_asv():
    classes = asv_suite.benchmark_classes()
    # smoke runs each strategy once per framework, on the Transformer where it can: ResNet-50
    # its baseline, and torch's convolution layout (the Transformer has no convolution)
    layouts = ["channels-last", "amp-bf16-channels-last"]
    assert _runs(classes["Resnet50_smoke"]) == {(f, "baseline", 4) for f in BUILT_IN} | {
        ("torch", s, 4) for s in layouts
    }
    assert classes["Resnet50_smoke"].params[1:] == [["baseline", *layouts], [4]]
    cpu = classes["Transformer_cpu"]
    # Jittor has no activation checkpointing: a hole of the product, which asv never runs
    assert ("jittor", "checkpoint", 4) in cpu.skip_params
    assert ("torch", "checkpoint", 4) in _runs(cpu)
    # accumulating in a scan is JAX's alone
    assert {c[0] for c in _runs(cpu) if c[1] == "accumulate-2-scan"} == {"jax"}
    # a batch that does not split into micro-batches is a hole too (on a GPU preset)
    gpu = classes["Transformer_gpu"]
    assert ("torch", "accumulate-4", 2) in gpu.skip_params
    assert ("torch", "accumulate-4", 4) in _runs(gpu)
    total = sum(math.prod(len(p) for p in cls.params) for cls in classes.values())
    holes = sum(len(cls.skip_params) for cls in classes.values())
    assert holes < total / 3


def _methods(cls: type) -> set[str]:
    return {n for n in dir(cls) if n.startswith("track_") and callable(getattr(cls, n))}


def test_a_class_tracks_only_the_metrics_its_cells_produce():
    classes = asv_suite.benchmark_classes()
    cpu, gpu, shard = (
        classes["Transformer_cpu"],
        classes["Transformer_gpu"],
        classes["Transformer_cpu_shard"],
    )
    assert "track_peak_host_rss" in _methods(cpu) & _methods(gpu) & _methods(shard)
    assert "track_peak_device_allocated" in _methods(gpu) - _methods(cpu)
    assert "track_peak_host_rss_max_over_ranks" in _methods(shard) - _methods(cpu)
    # the signed errors are never asv's: their size is
    for cls in classes.values():
        assert "track_memory_prediction_error_calibrated" not in _methods(cls)
        assert "track_memory_prediction_error" not in _methods(cls)
        assert "track_memory_prediction_abs_error_calibrated" in _methods(cls)


def test_asv_publishes_the_prediction_error_as_its_size():
    cls = asv_suite.benchmark_classes()["Resnet50_cpu"]
    bench = cls()
    cell = Cell("resnet50", "torch", "accumulate-2", 2, "cpu")
    # the committed records of 45911b3d and 8030c241: -0.034 -> -0.055, a worse prediction
    for signed in (-0.033498979586604194, -0.05480973191719807, 0.12):
        bench.record = Record(cell, "ok", metrics={"memory_prediction_error_calibrated": signed})
        assert bench.track_memory_prediction_abs_error_calibrated() == abs(signed)
    assert METRICS["memory_prediction_abs_error_calibrated"].better == "lower"


def test_asv_metrics_are_lower_is_better_or_kept_out_of_its_regression_search():
    """asv reads every benchmark as lower is better: asv publish's regression search
    (asv.conf.json's regressions_first_commits, null: none) leaves out exactly the others,
    with speed and a step's added memory, whose ratios asv cannot judge."""
    conf = json.loads((REPO / "asv.conf.json").read_text())
    off = [r for r, commit in conf["regressions_first_commits"].items() if commit is None]
    catalogue = json.loads((paths.asv_results() / paths.ASV_BENCHMARKS).read_text())
    higher, kept_out = asv_suite.higher_is_better(), asv_suite.kept_out_of_regressions()
    assert {"track_throughput", "track_largest_batch", "track_throughput_at_capacity"} <= higher
    assert {"track_step_time", "track_peak_host_rss_delta"} <= kept_out - higher
    assert "track_peak_host_rss" not in kept_out
    for name, bench in catalogue.items():
        if name == "version":
            continue
        method = name.split(".")[-1]
        if method in METRICS_BY_ASV:
            assert METRICS_BY_ASV[method].better in ("lower", "higher"), name
        entry = f"{name}({', '.join(v[0] for v in bench['params'])})"  # as asv names a graph
        assert any(re.match(r, entry) for r in off) == (method in kept_out), name


METRICS_BY_ASV = {m.asv: m for m in METRICS.values() if m.asv}


def _discover(root):
    """What `asv run --bench just-discover` writes in a copy of the suite at root."""
    out = subprocess.run(
        [sys.executable, "-m", "asv", "run", "--bench", "just-discover", "--set-commit-hash",
         "HEAD", "--machine", "test-machine"],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return (root / "results" / "asv" / paths.ASV_BENCHMARKS).read_bytes()


@pytest.fixture(scope="module")
def suite_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    shutil.copy(REPO / "asv.conf.json", root)
    shutil.copytree(
        REPO / "benchmarks", root / "benchmarks", ignore=shutil.ignore_patterns("__pycache__")
    )
    for package in ("membench", "models"):
        (root / package).symlink_to(REPO / package)
    for args in (["init", "-q", "-b", "main"], ["add", "."]):
        subprocess.run(["git", *args], cwd=root, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "suite"],
        cwd=root, check=True,
    )  # fmt: skip
    describe, _ = asv_commands("test-machine", "")
    subprocess.run(describe, cwd=root, check=True, capture_output=True)
    return root


def test_the_committed_catalogue_is_what_asv_discovers(suite_copy, monkeypatch):
    """Regenerate it with `asv run --bench just-discover --set-commit-hash HEAD` after a change
    to the registry or the suite (docs/versions.md)."""
    for name, value in SELECTIONS.items():  # a selection changes nothing asv discovers
        monkeypatch.setenv(name, value)
    committed = (paths.asv_results() / paths.ASV_BENCHMARKS).read_bytes()
    assert _discover(suite_copy) == committed


def test_bench_selects_only_its_cells_of_its_preset():
    catalogue = json.loads((paths.asv_results() / paths.ASV_BENCHMARKS).read_text())
    selection = {
        "workloads": ["transformer", "resnet50"], "frameworks": ["torch"],
        "strategies": ["baseline", "fsdp"], "batch_sizes": [4],
    }  # fmt: skip
    regexes = asv_suite.bench_regexes("cpu-shard", selection)
    chosen = set()
    for name, benchmark in catalogue.items():
        if name == "version":
            continue
        for values in itertools.product(*benchmark["params"]):
            full = f"{name}({', '.join(values)})"
            if any(re.search(r, full) for r in regexes):
                chosen.add((name.split(".")[1], values))
    assert {cls for cls, _ in chosen} == {"Transformer_cpu_shard", "Resnet50_cpu_shard"}
    assert {values for _, values in chosen} == {
        ("'torch'", "'baseline'", "4"), ("'torch'", "'fsdp@w2'", "4")
    }  # fmt: skip
    # a batch or world size outside the preset's grid has nothing for asv to record
    assert asv_suite.bench_regexes("cpu-shard", {**selection, "batch_sizes": [3]}) == []
    only_ranks = {**selection, "strategies": ["fsdp"], "world_size": [4]}
    assert asv_suite.bench_regexes("cpu-shard", only_ranks) == []


def test_committed_results_name_one_preset_per_commit_and_environment():
    """The committed history was converted (scripts/migrations/migrate_asv_results.py): every
    benchmark names its preset, and one commit's file holds one preset's benchmarks (capacity
    aside)."""
    known = {
        paths.asv_class_name(w, p.name, capacity): p.name
        for p in registry.PRESETS.values()
        for w in p.sizes
        for capacity in (False, True)
    }
    files = paths.asv_result_files(paths.asv_results())
    assert files
    for path in files:
        data = json.loads(path.read_text())
        classes = {name.split(".")[1] for name in data["results"]}
        assert classes <= known.keys(), path
        assert len({known[c] for c in classes}) == 1, path
        assert "existing-py" not in data["env_name"]  # no environment named after a path


def _measured_values(data: dict) -> dict[tuple[str, tuple], float]:
    """{(benchmark, parameter set): value} of what an asv result file holds measured."""
    out = {}
    for name, row in data["results"].items():
        entry = dict(zip(data["result_columns"], row, strict=False))
        sets = itertools.product(*entry["params"])
        for values, value in zip(sets, entry["result"] or [], strict=False):
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                out[(name, values)] = value
    return out


def test_older_results_convert_to_the_catalogue_losing_nothing_measured(tmp_path):
    """scripts/migrations/migrate_asv_grid.py over the committed results: every measured value
    stays at its parameter set (the signed error as its size), idempotent, read whole by the
    loader."""
    from analysis.loader import asv_file_rows
    from scripts.migrations.migrate_asv_grid import MAGNITUDE, SIGNED, convert

    catalogue = json.loads((paths.asv_results() / paths.ASV_BENCHMARKS).read_text())
    for path in paths.asv_result_files(paths.asv_results()):
        data = json.loads(path.read_text())
        converted = convert(data, catalogue)
        assert json.dumps(convert(converted, catalogue)) == json.dumps(converted), path
        expected = {}
        for (name, values), value in _measured_values(data).items():
            if name.endswith(SIGNED):
                name, value = name[: -len(SIGNED)] + MAGNITUDE, abs(value)
            expected[(name, values)] = value
        assert _measured_values(converted) == expected, path
        for name, row in converted["results"].items():
            params = dict(zip(converted["result_columns"], row, strict=False))["params"]
            # the catalogue's parameter values first, in its order; an entry of another
            # parametrization is left as it was (a capacity entry whose budget no run names)
            if name in catalogue and len(params) == len(catalogue[name]["params"]):
                pairs = zip(params, catalogue[name]["params"], strict=True)
                assert all(p[: len(c)] == c for p, c in pairs), name
        written = tmp_path / path.name
        written.write_text(json.dumps(converted))
        rows = asv_file_rows(written, "x")
        assert len([r for r in rows if r["status"] == "ok"]) <= len(expected)


def test_the_conversion_reads_the_signed_error_as_its_size():
    """45911b3d and 8030c241 (committed): torch's calibrated error at accumulate-2, batch 2,
    went -0.033 -> -0.055, which asv listed as an improvement; converted, 0.033 -> 0.055."""
    from scripts.migrations.migrate_asv_grid import convert

    catalogue = json.loads((paths.asv_results() / paths.ASV_BENCHMARKS).read_text())
    name = "suite.Resnet50_cpu.track_memory_prediction_{}error_calibrated"
    found = {}
    for path in paths.asv_result_files(paths.asv_results()):
        data = json.loads(path.read_text())
        commit = data["commit_hash"][:8]
        if commit in ("45911b3d", "8030c241"):
            values = _measured_values(convert(data, catalogue))
            found[commit] = values[(name.format("abs_"), ("'torch'", "'accumulate-2'", "2"))]
            assert not [key for key in values if key[0] == name.format("")]
    assert found == {
        "45911b3d": pytest.approx(0.033499, abs=1e-6),
        "8030c241": pytest.approx(0.054810, abs=1e-6),
    }


def test_capacity_answers_reach_asv_one_budget_at_a_time():
    """A capacity class has the budget as a parameter, and a run records only the budget it
    searched, where its preset declares it: one commit's 2 GiB and 3 GiB answers are two
    parameter sets, never one value from whichever budget was searched last."""
    classes = asv_suite.capacity_classes()
    resnet = classes["Resnet50Capacity_cpu_capacity"]
    assert resnet.param_names[2] == "budget_mib" and resnet.params[2] == [2048, 3072]
    assert classes["Unet3dCapacity_cpu_capacity"].params[2] == [1280, 2048]
    assert classes["TransformerCapacity_gpu_quick"].params[2] == [24576]
    assert "Resnet50Capacity_smoke" not in classes  # smoke declares no budget: records only
    assert all(len(hole) == 3 for hole in resnet.skip_params)
    selection = {"workloads": ["resnet50", "transformer"], "frameworks": ["torch"],
                 "strategies": ["amp-bf16"]}  # fmt: skip

    def chosen(regexes: list[str], budget_mib: int) -> bool:
        name = "suite.Resnet50Capacity_cpu_capacity.track_largest_batch"
        name += f"('torch', 'amp-bf16', {budget_mib})"
        return any(re.search(r, name) for r in regexes)

    at_2gib = asv_suite.capacity_regexes("cpu-capacity", selection, 2 * 2**30)
    assert len(at_2gib) == 2 and chosen(at_2gib, 2048) and not chosen(at_2gib, 3072)
    at_1gib = asv_suite.capacity_regexes("cpu-capacity", selection, 2**30)  # the Transformer's
    assert [r for r in at_1gib if "Resnet50" in r] == [] and len(at_1gib) == 1
    assert asv_suite.capacity_regexes("cpu-capacity", selection, 5 * 2**30) == []
    # the cpu preset's runs are never cpu-capacity's, though one name starts the other
    assert not paths.capacity_files(preset="cpu", budget_mib=2048)
    assert paths.capacity_files(preset="cpu-capacity", budget_mib=2048)


def _capacity_rows(data: dict) -> dict[str, dict]:
    """The file's capacity entries with their budget (one whose budget no run names keeps
    the old form: test_older_results_convert_to_the_catalogue_losing_nothing_measured)."""
    classes = asv_suite.capacity_classes()
    rows = {
        name: dict(zip(data["result_columns"], row, strict=False))
        for name, row in data["results"].items()
        if name.split(".")[1] in classes
    }
    return {name: row for name, row in rows.items() if len(row["params"]) == 3}


def _answers(machine: str, commit: str, preset: str, budget_mib: str) -> dict[tuple, float]:
    """(workload, framework, strategy) -> the answer of each `ok` search of one capacity run,
    read from its capacity.json as committed (not through asv_suite)."""
    run = f"{preset}-{budget_mib}mib-{commit[:12]}"
    path = paths.RESULTS / "capacity" / machine / run / paths.CAPACITY_FILE
    if not path.exists():
        return {}
    return {
        (r["workload"], r["framework"], r["strategy"]): float(r["largest_fit"])
        for r in json.loads(path.read_text())
        if r["status"] == "ok" and r["preset"] == preset
    }


@pytest.fixture
def built_in_frameworks(monkeypatch):
    """The registry without the frameworks a test's plugin registered (a worker keeps what it
    imported): the committed history was recorded with the built-in ones."""
    for name in [n for n in registry.FRAMEWORKS if n not in BUILT_IN]:
        monkeypatch.delitem(registry.FRAMEWORKS, name)


def test_committed_capacity_history_is_each_commits_runs_at_each_budget(built_in_frameworks):
    """Every committed capacity answer in asv is its commit's run's at that budget (one
    commit's 2 GiB and 3 GiB answers side by side, never one in the other's place), and
    scripts/migrations/migrate_asv_capacity.py finds nothing to change."""
    from scripts.migrations.migrate_asv_capacity import convert

    classes = asv_suite.capacity_classes()
    checked = 0
    for path in paths.asv_result_files(paths.asv_results()):
        data = json.loads(path.read_text())
        assert convert(data, path.parent.name, paths.RESULTS)[1] == [], path
        for name, entry in _capacity_rows(data).items():
            if not name.endswith(".track_largest_batch"):
                continue
            cls = classes[name.split(".")[1]]
            sets = itertools.product(*entry["params"])
            for (framework, strategy, budget), value in zip(sets, entry["result"], strict=True):
                runs = _answers(path.parent.name, data["commit_hash"], cls.preset, budget)
                found = runs.get((cls.workload, framework.strip("'"), strategy.strip("'")))
                assert (found is None and math.isnan(value)) or found == value, (path, name)
                checked += found is not None
    assert checked >= 100


def test_the_capacity_migration_reads_the_old_form_back_and_keeps_what_runs_do_not_give(
    built_in_frameworks,
):
    """c83e7f2c on f25m17 searched torch's ResNet-50 within 2 GiB and 3 GiB; asv's old form
    held one value per framework x strategy (amp-bf16: 3 GiB's 44 where the 2 GiB answer is
    24). Converted, each budget has its own; a value no run gives is kept where it was."""
    from scripts.migrations.migrate_asv_capacity import convert
    from scripts.migrations.migrate_asv_grid import asv_row

    machine = "amd-epyc-f25m17-avx512bf16-2core-24gib"
    path = paths.asv_results() / machine / "c83e7f2c-checkout-py3.11.json"
    committed = json.loads(path.read_text())
    name = "suite.Resnet50Capacity_cpu_capacity.track_largest_batch"
    columns = committed["result_columns"]
    entry = dict(zip(columns, committed["results"][name], strict=False))
    values = dict(zip(itertools.product(*entry["params"]), entry["result"], strict=True))
    assert values[("'torch'", "'amp-bf16'", "2048")] == 24
    assert values[("'torch'", "'amp-bf16'", "3072")] == 44
    frameworks, strategies, _ = entry["params"]
    old = [  # the old form: the last budget's answer, else the other's
        values[(f, s, "2048")] if math.isnan(values[(f, s, "3072")]) else values[(f, s, "3072")]
        for f in frameworks for s in strategies
    ]  # fmt: skip
    data = json.loads(path.read_text())
    row = dict(entry, params=[frameworks, strategies], result=old)
    data["results"][name] = [row.get(k) for k in columns]
    back, changed = convert(data, machine, paths.RESULTS)
    assert changed == [name]
    assert json.dumps(back["results"][name]) == json.dumps(committed["results"][name])
    # a value the runs do not give (c83e7f2 searched no Jittor) stays where it was
    kept = dict(entry, result=[7.0 if v == ("'jittor'", "'baseline'", "2048") else r
                               for v, r in zip(values, entry["result"], strict=True)])  # fmt: skip
    data["results"][name] = asv_row(kept, columns)
    back, changed = convert(data, machine, paths.RESULTS)
    assert changed == []
    assert json.dumps(back["results"][name]) == json.dumps(data["results"][name])


def test_a_runs_capacity_file_serves_only_its_own_budget(tmp_path, monkeypatch):
    """membench capacity hands asv the file it wrote (MEMBENCH_CAPACITY_FILE); a parameter set
    of another budget reads that budget's run of the commit, or none: each file by the budget
    its searches hold, whatever its folder's name says."""
    from membench.records import CapacityResult, save_capacity_results

    def searches(budget_mib: int, workload: str) -> list[CapacityResult]:
        layer, budget = "life_peak_host_rss_bytes", budget_mib * 2**20
        return [CapacityResult(workload, "torch", "baseline", "cpu-capacity", budget, layer,
                               False, "", 4, 5, "ok", "", [])]  # fmt: skip

    run = tmp_path / "capacity" / "m" / "cpu-capacity-2048mib-c0" / paths.CAPACITY_FILE
    other = tmp_path / "capacity" / "m" / "cpu-capacity-3072mib-c0" / paths.CAPACITY_FILE
    misnamed = tmp_path / "capacity" / "m" / "cpu-capacity-1024mib-c0" / paths.CAPACITY_FILE
    save_capacity_results(searches(2048, "resnet50"), run)
    save_capacity_results(searches(3072, "unet3d"), other)
    save_capacity_results(searches(4096, "unet3d"), misnamed)
    monkeypatch.setenv("MEMBENCH_PRESET", "cpu-capacity")
    monkeypatch.setenv("MEMBENCH_CAPACITY_FILE", str(run))
    monkeypatch.setattr(asv_suite, "machine_name", lambda: "m")
    monkeypatch.setattr(asv_suite, "git_commit", lambda: {"commit": "c0"})
    assert asv_suite.capacity_file("cpu-capacity", 2048, results=tmp_path) == run
    assert asv_suite.capacity_file("cpu-capacity", 3072, results=tmp_path) == other
    assert asv_suite.capacity_file("cpu-capacity", 1024, results=tmp_path) is None
    assert asv_suite.capacity_file("cpu-capacity", 4096, results=tmp_path) == misnamed
    with pytest.raises(NotImplementedError, match="not searched"):
        asv_suite.stored_search("cpu-capacity", "resnet50", "torch", "baseline", 3072,
                                results=tmp_path)  # fmt: skip
