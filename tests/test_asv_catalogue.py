"""asv's catalogue (results/asv/benchmarks.json) is the whole suite whatever a run selects,
and a preset never shares a benchmark with another."""

import itertools
import json
import re
import shutil
import subprocess
import sys

import pytest

from membench import asv_suite, paths, registry
from membench.bench import asv_commands

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


def test_the_catalogue_does_not_depend_on_the_selection(monkeypatch):
    for name in SELECTIONS:
        monkeypatch.delenv(name, raising=False)
    everything = _catalogue()
    for name, value in SELECTIONS.items():
        monkeypatch.setenv(name, value)
    assert _catalogue() == everything
    # every preset's every workload, at its own batches and world size
    for preset in registry.PRESETS.values():
        for workload in preset.sizes:
            _, _, (frameworks, strategies, batches) = everything[
                paths.asv_class_name(workload, preset.name)
            ]
            assert frameworks == list(registry.FRAMEWORKS)
            assert batches == list(preset.size(workload).batch_sizes)
            assert len(strategies) == len(preset.strategies or registry.STRATEGIES)
    assert "fsdp@w2" in everything["Transformer_cpu_shard"][2][1]


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
    """The committed history was converted (scripts/migrate_asv_results.py): every benchmark
    names its preset, and one commit's file holds one preset's benchmarks (capacity aside)."""
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
