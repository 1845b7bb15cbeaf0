"""The harness's contracts: declared strategy support, one metric catalogue, one results
layout, one layer order, validated input, signals that end a run cleanly."""

import ast
import dataclasses
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from membench import paths, registry
from membench.backends import BuildSpec
from membench.cells import planning, supervision
from membench.cli import main
from membench.metrics import ASV_METRICS, CORE_METRICS, METRICS
from membench.publish import support_matrix
from membench.records import Cell, RecordStore
from tests.processes import workers_of

from .conftest import REPO

# The frameworks whose backends live in membench/backends/ (a test's plugin may have
# registered another): a new one is held by every contract below once registered.
BUILT_IN = tuple(
    name for name, f in registry.FRAMEWORKS.items() if f.backend.startswith("membench.backends.")
)


def backend(name: str):
    return registry.load_backend(name)


def spec(strategy: registry.Strategy, workload: str = "resnet50", batch: int = 4) -> BuildSpec:
    return BuildSpec(workload, strategy, registry.preset("smoke").size(workload), batch)


def modelled(framework: str) -> str:
    """A workload the framework has a model for (a new framework may model one only)."""
    return next(w for w, wl in registry.WORKLOADS.items() if framework in wl.model_modules)


# -- declared support ------------------------------------------------------------------------
def test_a_knob_value_no_backend_declares_is_refused_by_every_backend():
    fp8 = registry.Strategy("fp8", "a precision no backend implements", precision="fp8")
    for name in BUILT_IN:
        reason = backend(name).refusal(spec(fp8, modelled(name)), "cpu")
        assert reason == f"the {name} backend does not implement precision='fp8'"


@dataclasses.dataclass(frozen=True)
class WithNewKnob(registry.Strategy):
    storage: str = "memory"  # a knob added later: where the batch comes from


def test_a_new_knob_is_unsupported_everywhere_until_a_backend_implements_it():
    new = WithNewKnob("disk-data", "batch read from disk every step", storage="disk")
    for name in BUILT_IN:
        assert backend(name).refusal(spec(new, modelled(name)), "cpu") == (
            f"the {name} backend does not implement storage='disk'"
        )
    # the knob at its default is the baseline, which every backend runs
    baseline = WithNewKnob("b", "")
    assert all(backend(n).refusal(spec(baseline, modelled(n)), "cpu") is None for n in BUILT_IN)


def test_declarations_decide_by_device():
    segments = registry.strategy("expandable-segments")
    assert "CPU tensors use the host's malloc" in backend("torch").refusal(spec(segments), "cpu")
    assert backend("torch").refusal(spec(segments), "cuda") is None
    managed = registry.strategy("managed-allocator")
    assert backend("jittor").refusal(spec(managed), "cuda") is None
    assert "host memory" in backend("jittor").refusal(spec(managed), "cpu")


def test_workload_and_combination_refusals():
    fused = registry.strategy("fused-attention")
    assert "no attention layer" in backend("torch").refusal(spec(fused, "resnet50"), "cpu")
    assert backend("torch").refusal(spec(fused, "transformer"), "cpu") is None
    acc = registry.strategy("accumulate-4")
    assert "equal micro-batches" in backend("jax").refusal(spec(acc, batch=6), "cpu")
    amp_acc = registry.Strategy("x", "", precision="amp-fp16", accumulate=2)
    assert "loss scaling across accumulated" in backend("jax").refusal(spec(amp_acc), "cpu")


def test_a_workload_without_a_framework_s_model_is_refused_at_plan_time(store, monkeypatch):
    """model_module's refusal, declared: a workload with no models/<workload>/<stem>_impl.py
    for a framework is refused by its backend's declarations, so at plan time, without a worker
    (the build would fail on the missing module)."""
    monkeypatch.setitem(registry.WORKLOADS, "orphan", registry.Workload("orphan", "no models"))
    monkeypatch.setitem(registry.preset("smoke").sizes, "orphan", registry.WorkloadSize((1,)))
    baseline = registry.strategy("baseline")
    for name in BUILT_IN:
        reason = backend(name).refusal(spec(baseline, "orphan"), "cpu")
        assert reason == f"workload orphan has no {registry.framework(name).description} model"
    (record,) = supervision.run([Cell("orphan", "torch", "baseline", 2, "smoke")], store).records
    assert record.status == "unsupported" and "has no PyTorch model" in record.reason
    assert record.environment["refused_at"] == "plan"


def test_the_worker_refuses_before_importing_the_framework():
    """A refused cell never imports its framework: decided from the declarations alone."""
    code = (
        "import sys; from membench import registry; from membench.measure import worker\n"
        "from membench.records import Cell\n"
        "registry.STRATEGIES['fp8'] = registry.Strategy('fp8', '', precision='fp8')\n"
        "r = worker.run_cell(Cell('resnet50', 'torch', 'fp8', 2, 'smoke'))\n"
        "print(r.status, 'torch' in sys.modules, r.reason)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split(maxsplit=2)[:2] == ["unsupported", "False"], out.stderr


def test_the_runner_records_a_refusal_without_a_worker(store):
    cell = Cell("resnet50", "jax", "compile", 2, "smoke")
    (record,) = supervision.run([cell], store).records
    assert record.status == "unsupported" and "always runs the step compiled" in record.reason
    assert record.environment["refused_at"] == "plan" and record.environment["machine"]
    assert not store.log_path(cell).exists()  # no worker was started


def test_the_documented_strategy_table_is_the_declared_matrix():
    doc = (REPO / "docs" / "methodology.md").read_text()
    found = re.search(r"<!-- support-matrix:start -->\n(.*?)<!-- support-matrix:end -->", doc, re.S)
    assert found, "docs/methodology.md lacks the generated strategy table"
    assert found.group(1) == support_matrix.markdown(BUILT_IN)


def test_the_documented_claim_bands_are_the_code_s():
    from analysis.claims import how_judged
    from analysis.markdown import markdown_table

    doc = (REPO / "docs" / "claims.md").read_text()
    found = re.search(r"<!-- claims-bands:start -->\n(.*?)\n<!-- claims-bands:end -->", doc, re.S)
    assert found, "docs/claims.md lacks the generated bands table"
    assert found.group(1) == markdown_table(how_judged())


def test_the_matrix_covers_every_strategy_and_framework(capsys):
    assert main(["list", "--matrix"]) == 0
    out = capsys.readouterr().out
    for name in [*registry.STRATEGIES, *BUILT_IN]:
        assert name in out
    rows = {r["strategy"]: r for r in support_matrix.matrix(BUILT_IN)}
    assert rows["checkpoint"]["jittor"].startswith("unsupported: Jittor has no activation")
    assert "CUDA only" in rows["expandable-segments"]["torch"]
    # accumulation as each framework's users write it, the other ways refused with a reason
    assert "loop mode: optax.MultiSteps" in rows["accumulate-4"]["jax"]
    assert "scan mode instead: lax.scan" in rows["accumulate-4-scan"]["jax"]
    assert rows["accumulate-4-scan"]["torch"].startswith("unsupported: PyTorch has no in-graph")
    assert rows["accumulate-4-scan"]["jittor"].startswith("unsupported: Jittor has no loop")
    assert "jt.sync_all() per micro-batch" in rows["accumulate-2-sync"]["jittor"]
    assert rows["accumulate-2-sync"]["jax"].startswith("unsupported: each micro-step")


# -- the Session template: primitives only ---------------------------------------------------
def test_each_backend_session_writes_only_the_templates_primitives():
    """A framework's Session subclass writes build and at most the ten step primitives, each
    with the base's signature (extra parameters only with defaults); what the worker reads
    besides the step is its Readings, built from the class the session names."""
    import inspect

    from membench.backends import Readings, Session
    from membench.backends.session import STEP_PRIMITIVES

    assert len(STEP_PRIMITIVES) <= 10
    for name in BUILT_IN:
        module = importlib.import_module(f"membench.backends.{name}_backend")
        (session,) = [
            c for c in vars(module).values() if isinstance(c, type) and Session in c.__mro__[1:]
        ]
        written = {k for k, v in vars(session).items() if inspect.isfunction(v)}
        assert written <= {"build", *STEP_PRIMITIVES}, (name, written)
        for primitive in written:
            got = inspect.signature(getattr(session, primitive)).parameters
            base = inspect.signature(getattr(Session, primitive)).parameters
            assert list(got)[: len(base)] == list(base), (name, primitive)
            assert all(p.default is not p.empty for p in list(got.values())[len(base) :])
        assert Readings in session.readings_class.__mro__[1:], name


def test_the_test_probes_cover_every_backend_and_say_which_session_has_none():
    from membench.backends import Session
    from tests import session_probes

    assert set(BUILT_IN) <= set(session_probes.GRADIENTS) & set(session_probes.LOGITS)

    class Bare(Session):
        def step(self) -> None: ...

    bare = object.__new__(Bare)  # the probe's refusal needs no build
    with pytest.raises(NotImplementedError, match="Bare offers no gradients"):
        session_probes.gradients(bare)


# -- the metric catalogue --------------------------------------------------------------------
def test_asv_benchmarks_are_the_catalogues():
    from membench.publish.asv_suite import WorkloadBenchmarks

    for name, metric in ASV_METRICS.items():
        method = getattr(WorkloadBenchmarks, name)
        assert method.__doc__ == METRICS[metric].description and method.unit
    assert set(CORE_METRICS) <= set(METRICS)


def test_every_committed_metric_is_in_the_catalogue_and_reaches_the_table():
    from analysis.loader import load

    loaded = load(REPO / "results")
    assert not [p for p in loaded.problems if "metrics not in" in p]
    present = set(loaded.frame["metric"])
    # the model-state figures the worker records reach the tidy table
    model_state = ["parameter_bytes", "gradient_bytes", "optimizer_state_bytes"]
    compilers = ["xla_generated_code_bytes", "jittor_cpu_reserved_bytes", "trainable_parameters"]
    assert set(model_state + compilers) <= present


def test_a_metric_outside_the_catalogue_is_a_problem_and_keeps_its_row(tmp_path):
    from analysis.loader import load_records
    from membench.metrics import CELL_WALL
    from membench.records import Record

    store = RecordStore(tmp_path / "m" / "cpu-abc")
    store.put(Record(Cell("resnet50", "torch", "baseline", 2, "cpu"), "ok", metrics={
        "peak_host_rss_bytes": 1.0, "new_thing_bytes": 2.0}))  # fmt: skip
    loaded = load_records(tmp_path)
    assert any("new_thing_bytes" in p for p in loaded.problems)
    # (and the record's wall time, which every record has)
    assert set(loaded.frame["metric"]) == {"peak_host_rss_bytes", "new_thing_bytes", CELL_WALL}


# -- layers and the results layout -----------------------------------------------------------
# what analysis may read of membench: the catalogue, the record format, the results layout,
# the environments' labels, a least-squares fit and the rule of the files it may read; nothing
# that runs or predicts a cell
ANALYSIS_READS = {"membench", "membench.metrics", "membench.records", "membench.paths",
                  "membench.stacks", "membench.fitting", "membench.file_rules"}  # fmt: skip


def test_analysis_imports_none_of_the_harness():
    modules = sorted(
        "analysis." + ".".join(p.relative_to(REPO / "analysis").with_suffix("").parts)
        for p in (REPO / "analysis").rglob("*.py")
        if p.name != "__init__.py"
    )
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'membench'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    imported = set(ast.literal_eval(out.stdout.strip()))
    assert imported <= ANALYSIS_READS, sorted(imported - ANALYSIS_READS)
    assert {"analysis.fits", "analysis.loader", "analysis.claims.verdicts"} <= set(modules)


def test_the_results_layout_is_spelled_once():
    spelled = re.compile(
        r'/ "(records|capacity|asv|probes|calibration)"|capacity\.json|"versions-|mib-|"records-'
    )
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for folder in ("membench", "analysis", "benchmarks")
        for path in (REPO / folder).rglob("*.py")
        if path.name != "paths.py"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if spelled.search(line)
    ]
    assert found == []


# -- validated input -------------------------------------------------------------------------
BAD_INPUT = [
    (["run", "-b", "0"], "batch sizes must be positive integers, got '0'"),
    (["run", "-b", "-3"], "batch sizes must be positive integers, got '-3'"),
    (["bench", "-b", "2,x"], "batch sizes must be integers, got '2,x'"),
    (["run", "--timeout", "0"], "--timeout: must be a positive number of seconds, got '0'"),
    (["capacity", "--tolerance", "1.5"], "--tolerance: must be a fraction in [0, 1), got '1.5'"),
    (["capacity", "--budget=-1GiB"], "a size must be positive, got '-1GiB'"),
    (["capacity", "--max-batch", "0"], "--max-batch: must be a positive integer, got '0'"),
    (["capacity", "-w", "fake-work", "-f", "fake"], "give --budget on a CPU host"),
    (["compare", "a", "b", "--threshold", "0"], "--threshold: must be a fraction in (0, 1)"),
    (["compare", "a", "b", "--metric", "bogus"], "none close to it (the catalogue: membench/"),
    (["report", "--out", "/proc/membench"], "cannot write to '/proc/membench'"),
    (["report", "--out", "{file}/x"], "is not a folder"),
    (["report", "--out", "{tmp}/r", "--results", "{tmp}/none"], "no results folder at"),
    (["run", "-p", "cpu-eval", "-w", "unet3d"], "unknown workload in preset cpu-eval 'unet3d'"),
    (["run", "-p", "tpu"], "unknown preset 'tpu'; valid preset names: smoke, cpu, gpu"),
    (["run", "-s", "zero3"], "unknown strategy 'zero3'; valid strategy names: baseline"),
    # empty names, numbers out of kind or bounds, output paths checked before any work
    (["run", "-w", ""], "--workload: give at least one name, got ''"),
    (["run", "-f", ","], "--framework: give at least one name, got ','"),
    (["run", "-p", ""], "--preset: give a name, got ''"),
    (["run", "-b", "\uff14"], "batch sizes must be integers, got '\uff14'"),
    (["run", "-b", "99999999999999999999"], "batch sizes must be at most 65536"),
    (["run", "--world-size", "\uff12"], "--world-size: must be a positive integer"),
    (["run", "-s", "baseline", "--world-size", "2"], "strategy baseline does not shard"),
    (["run", "-s", "ddp", "--world-size", "1000000"], "--world-size 1000000: this machine has"),
    (["run", "--timeout", "inf"], "--timeout: must be a positive number of seconds, got 'inf'"),
    (["run", "--memory-cap", "1e6GiB"], "it would cap nothing"),
    (["run", "--memory-cap", "0"], "--memory-cap: a size must be positive, got '0'"),
    (["capacity", "--budget", "inf"], "a size must be finite, got 'inf'"),
    (["capacity", "--budget", "1e99GiB"], "above the memory cap per cell"),
    (["capacity", "--budget", "2GiB", "--memory-cap", "1GiB"], "above the memory cap per cell"),
    (["capacity", "--max-batch", "70000"], "--max-batch: must be at most 65536"),
    (["plan", "gpu-quick", "--seconds", "nan"], "--seconds: must be a positive number"),
    (["pack", "{tmp}/a.tar.gz", "--machine", "nope"], "no results for machine 'nope'"),
    (["pack", "/proc/membench/a.tar.gz"], "cannot write to '/proc/membench'"),
    (["selfcheck", "--json", "/proc/membench/x.json"], "cannot write to '/proc/membench'"),
    (["show", "{tmp}/none"], "no store folder at"),
    (["compare", "a", "a"], "base and new are both 'a': nothing to compare"),
    # a misspelt filter is named, not taken for a side without results
    (["compare", "a", "b", "-w", "resnt50"], "unknown workload 'resnt50'; valid workload"),
    (["compare", "a", "b", "-s", "basline"], "unknown strategy 'basline'; valid strategy"),
    # a catalogue's names are too many to list: the closest ones
    (
        ["compare", "a", "b", "--metric", "peak_host_rs"],
        "valid metric names, the closest: peak_host_rss_bytes",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2_before_any_work(
    argv, message, tmp_path, monkeypatch, capsys, fake_framework
):
    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    argv = [a.format(tmp=tmp_path, file=tmp_path / "file") for a in argv]
    if argv[0] in ("run", "bench"):
        argv += ["--store", str(tmp_path / "store")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err
    assert lines[0].startswith("membench")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing was written


# -- signals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_terminated_run_kills_its_worker_and_keeps_its_records(fake_framework, tmp_path, sig):
    store = tmp_path / "store"
    env = dict(os.environ, FAKE_BEHAVIOUR="count", FAKE_STEP_SECONDS="0.3")
    cmd = [sys.executable, "-m", "membench", "run", "-w", "fake-work", "-f", "fake", "-p",
           "smoke", "-s", "baseline", "--store", str(store)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    first = store / f"{Cell('fake-work', 'fake', 'baseline', 1, 'smoke').key}.json"
    deadline = time.monotonic() + 60
    while not (first.exists() and workers_of(store)):  # one cell done, the next one running
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "no second worker started"
        time.sleep(0.05)
    running = workers_of(store)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out
    psutil.wait_procs(running, timeout=10)
    assert workers_of(store) == []
    assert json.loads(first.read_text())["status"] == "ok"
    assert b"run the same command again to resume" in b" ".join(out.split())


# -- provenance --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "-w", "fake-work", "-f", "fake", "-p", "smoke"],
        ["capacity", "-w", "fake-work", "-f", "fake", "-p", "smoke", "--budget", "1GiB"],
        ["versions", "--only", "jax"],
        ["selfcheck", "-f", "torch", "--save"],
    ],
    ids=["bench", "capacity", "versions", "selfcheck"],
)
def test_results_are_written_only_from_committed_code(argv, monkeypatch, tmp_path, capsys,
                                                      fake_framework):  # fmt: skip
    results = tmp_path / "results"
    monkeypatch.setattr("membench.paths.RESULTS", results)
    monkeypatch.setattr("membench.environment.git_commit", lambda: {"commit": "c0", "dirty": True})
    monkeypatch.setenv("MEMBENCH_PRESET", "smoke")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes under membench" in err and "commit first" in err
    assert not results.exists()  # refused before anything was written


def test_a_run_into_results_needs_committed_code(monkeypatch, tmp_path, capsys, fake_framework):
    """`membench run --store results/timelines/...` (the pictures' timelines) as bench does."""
    results = tmp_path / "results"
    monkeypatch.setattr("membench.paths.RESULTS", results)
    monkeypatch.setattr("membench.environment.git_commit", lambda: {"commit": "c0", "dirty": True})
    store = results / "timelines" / "m" / "smoke-c0"
    argv = ["run", "-w", "fake-work", "-f", "fake", "-p", "smoke", "--timeline", "--store"]
    assert main([*argv, str(store)]) == 2
    assert "commit first" in capsys.readouterr().err
    assert not results.exists()
    assert main([*argv, str(tmp_path / "elsewhere"), "-s", "baseline", "-b", "1"]) == 0


def test_a_store_outside_results_may_hold_uncommitted_work(monkeypatch, tmp_path):
    from membench.commands.store_guard import dirty_results

    monkeypatch.setattr("membench.paths.RESULTS", tmp_path / "results")
    monkeypatch.setattr("membench.environment.git_commit", lambda: {"commit": "c0", "dirty": True})
    assert dirty_results(tmp_path / "elsewhere") is None
    assert "commit first" in dirty_results(tmp_path / "results" / "records" / "m" / "cpu-c0")


def test_a_saved_selfcheck_is_named_by_the_commit_its_content_names(monkeypatch, tmp_path):
    import json

    from membench.cells import selfcheck as sc
    from membench.environment import machine_name

    monkeypatch.setattr("membench.paths.RESULTS", tmp_path / "results")
    commit = "ab" * 20
    monkeypatch.setattr(
        "membench.environment.git_commit", lambda: {"commit": commit, "dirty": False}
    )
    # the measurement itself is selfcheck's own test; here only what the command writes
    monkeypatch.setattr(
        sc, "selfcheck", lambda *a, **k: ([sc.Row("torch", "baseline", 1.0, 1.0)], {})
    )
    assert main(["selfcheck", "-f", "torch", "-s", "baseline", "--save"]) == 0
    saved = paths.selfcheck_file(machine_name(), "resnet50", 64, 4, commit)
    data = json.loads(saved.read_text())
    assert data["git"]["commit"] == commit and data["machine"] == machine_name()
    assert data["rows"][0]["throughput_ratio"] == 1.0


def test_every_command_prints_its_help(capsys):
    """--help of every command renders (a bare % in a help text made argparse raise)."""
    import argparse

    from membench.commands import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        text = command.format_help()
        assert name in text and "Traceback" not in text
    assert "80% of the memory available" in commands.choices["capacity"].format_help()


def test_a_repeated_selection_flag_adds_to_the_selection():
    """`-s amp-bf16 -s checkpoint` once measured checkpoint alone (the last flag won)."""
    from membench.commands import build_parser
    from membench.commands.selection import Selection

    args = build_parser().parse_args(
        ["capacity", "-p", "cpu-quick", "-s", "amp-bf16", "-s", "checkpoint,infer", "-f", "torch",
         "-f", "jax", "-w", "unet3d", "--budget", "1GiB"]
    )  # fmt: skip
    selected = Selection.filled("cpu-quick", args.workload, args.framework, args.strategy)
    assert selected.strategies == ["amp-bf16", "checkpoint", "infer"]
    assert selected.frameworks == ["torch", "jax"] and selected.workloads == ["unet3d"]


# -- one declaration per framework ------------------------------------------------------------
def test_a_framework_is_declared_once_and_every_part_of_the_harness_reads_it(
    fake_framework, store, monkeypatch
):
    """The fake framework's one registration (tests/plugins/fake_framework.py): its cost
    priors reach the estimate and the GPU plans' model, its libraries the record's
    environment, its GPU fix the device guard's reason; a cell of it runs from plan through
    the worker to a stored record."""
    from membench.backends import _gpu_reason
    from membench.cells import gpu_session
    from membench.cells.estimate import prior_seconds
    from membench.environment import libraries

    declared = registry.framework("fake")
    assert prior_seconds("fake") == declared.cpu_cell_seconds == 3.0
    steps = 1 + registry.preset("smoke").warmup_min_steps + registry.preset("smoke").measure_steps
    assert gpu_session.cell_seconds("resnet50", "fake", "infer", 1, "smoke") == pytest.approx(
        4.0 + steps * gpu_session.TRAIN_FLOPS["resnet50"] / 3 / gpu_session.RATE_FLOPS["fp32"]
    )
    assert "psutil" in libraries()
    assert "the fake framework has no GPU build" in _gpu_reason("fake", "a GPU preset", "runs")
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    (cell,) = planning.cells_for(["fake-work"], ["fake"], ["baseline"], "smoke", [1])
    (record,) = supervision.run([cell], store).records
    assert record.status == "ok" and "psutil" in record.environment["libraries"]
    assert store.get(cell).status == "ok"


def test_a_framework_s_memory_readings_are_declared_once_in_the_catalogue():
    """Which metrics hold each framework's device peak and its allocator's reserve is written
    in membench/metrics.py alone: capacity's budget layer and analysis's lists derive from it."""
    from analysis.capacity_loader import DEVICE_LAYERS
    from analysis.decision_terms import RESERVE_METRICS
    from membench.capacity.search_steps import budget_for, framework_budget
    from membench.metrics import FRAMEWORK_READINGS, readings

    assert set(FRAMEWORK_READINGS) == {"torch", "jax", "jittor"}
    for name, declared in FRAMEWORK_READINGS.items():
        assert {*declared.device_peaks, *declared.reserves} <= set(METRICS), name
        budget = framework_budget(budget_for("cuda", 2**30), name, registry.strategy("baseline"))
        assert budget.layers == declared.device_peaks
    # each framework's first choice before any fallback: torch's reserve, JAX's allocated
    # peak, Jittor's CUDA reserve, then NVML's process figure (Jittor's fallback)
    assert DEVICE_LAYERS == (
        "peak_device_reserved_bytes", "peak_device_allocated_bytes",
        "jittor_cuda_reserved_bytes", "peak_device_process_bytes",
    )  # fmt: skip
    assert set(RESERVE_METRICS) == {
        "peak_device_reserved_bytes", "jittor_cpu_reserved_bytes", "jittor_cuda_reserved_bytes"
    }  # fmt: skip
    # a framework the catalogue does not name (a plugin's): its device peak is the allocated one
    assert readings("fake").device_peaks == ("peak_device_allocated_bytes",)


def test_model_modules_are_found_by_their_file_names():
    """models/<workload>/<stem>_impl.py: JAX's are flax_impl (its model_stem), and a workload
    without such files has none (the fake workload's models are declared empty)."""
    assert registry.workload("resnet50").model_modules == {
        "torch": "models.resnet50.torch_impl",
        "jax": "models.resnet50.flax_impl",
        "jittor": "models.resnet50.jittor_impl",
    }
    for name, wl in registry.WORKLOADS.items():
        for framework, module in wl.model_modules.items():
            stem = registry.framework(framework).stem
            assert module == f"models.{name}.{stem}_impl"
