"""The bench's capacity part: which searches a preset asks for, their estimate, resuming."""

import re

import pytest

from membench import cli, registry
from membench.capacity.run import forecast_searches, plan_searches, probe_cells, run_searches
from membench.capacity.search_steps import budget_for
from membench.records import CapacityResult, load_capacity_results, save_capacity_results

MIB = 2**20


def test_the_default_cpu_preset_declares_a_budget_for_every_workload():
    quick = registry.preset("cpu-quick")
    assert set(quick.capacity_budgets) == {"resnet50", "unet3d", "transformer"} <= set(quick.sizes)
    assert all(0 < b <= 2 * 2**30 for (b,) in quick.capacity_budgets.values())


def test_searches_leave_out_what_the_preset_leaves_out(tmp_path, monkeypatch):
    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    budget = budget_for("cpu", 800 * MIB)
    frameworks, strategies = ["torch", "jittor"], ["baseline", "amp-bf16", "infer"]
    unet = plan_searches("cpu-quick", "unet3d", frameworks, strategies, budget, "m", "c0")
    assert {f for f, _ in unet.combos} == {"torch"}  # Jittor's U-Net probes take minutes
    resnet = plan_searches("cpu-quick", "resnet50", frameworks, strategies, budget, "m", "c0")
    assert ("jittor", "amp-bf16") not in resnet.combos and ("jittor", "infer") in resnet.combos
    assert resnet.folder == tmp_path / "capacity" / "m" / "cpu-quick-800mib-c0"
    assert [(f, s) for f, s, _ in unet.left_out] == [
        ("jittor", "baseline"), ("jittor", "amp-bf16"), ("jittor", "infer"),
    ]  # fmt: skip
    assert "33 s a training step" in unet.left_out[0][2]
    assert [(f, s) for f, s, _ in resnet.left_out] == [("jittor", "amp-bf16")]


def test_a_left_out_search_is_kept_with_its_reason_and_never_probed(tmp_path, monkeypatch):
    """What the preset does not measure is written as a result that says why (no probe, no
    worker), once: a rerun finds it done. It is stamped with the time it was written, which
    dates a run that has no probe (analysis.loader's run_at)."""
    from datetime import UTC, datetime

    from membench.cells.engines import LocalEngine

    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    plan = plan_searches("cpu-quick", "unet3d", ["jittor"], ["baseline", "infer"],
                         budget_for("cpu", 800 * MIB), "m", "c0")  # fmt: skip
    assert plan.combos == ()
    said: list[str] = []
    before = datetime.now(UTC).replace(microsecond=0)
    results = run_searches(plan, LocalEngine(), said.append)
    assert [(r.strategy, r.status, r.probes) for r in results] == [
        ("baseline", "left-out", []), ("infer", "left-out", []),
    ]  # fmt: skip
    written = {datetime.fromisoformat(r.written_at) for r in results}
    assert all(before <= at <= datetime.now(UTC) for at in written)
    assert results[0].reason.startswith("Jittor's 3D convolutions run generic kernels")
    assert said[0].startswith("unet3d jittor baseline: left-out: Jittor's 3D convolutions")
    assert load_capacity_results(plan.results_file) == results
    said.clear()
    assert run_searches(plan, LocalEngine(), said.append) == results and said == []


def test_expected_probes_sit_at_the_models_guess_and_one_step_above(tmp_path, monkeypatch):
    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    monkeypatch.setattr("membench.memory.calibration.load_all", lambda results=None: {})
    budget = budget_for("cpu", 800 * MIB)
    plan = plan_searches("cpu-quick", "resnet50", ["torch"], ["accumulate-4"], budget, "m", "c0",
                         max_batch=4096)  # fmt: skip
    first, second = probe_cells(plan, "m")
    assert first.batch_size % 4 == 0 and second.batch_size == first.batch_size + 4
    assert forecast_searches([plan], "m").total_seconds() > 0


def test_a_resumed_search_is_estimated_by_the_probes_it_has_still_to_take(tmp_path, monkeypatch):
    """A search that stopped after 7 of its 13.1 expected probes (3 repeats) has 6.1 left; one
    past the expected count has at least its boundary's 3 measurements left."""
    from membench import paths
    from membench.capacity.run import expected_probes, probes_left, stored_probes
    from membench.records import Cell, Record, RecordStore

    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    monkeypatch.setattr("membench.memory.calibration.load_all", lambda results=None: {})
    plan = plan_searches("cpu-capacity", "transformer", ["torch"], ["baseline", "infer"],
                         budget_for("cpu", 1024 * MIB), "m", "c0", repeats=3)  # fmt: skip
    fresh = forecast_searches([plan], "m").total_seconds()
    for batch, repeat in [(20, 1), (21, 1), (22, 1), (23, 1), (24, 1), (22, 2), (22, 3)]:
        root = paths.repeat_probes(plan.store.root, repeat)
        store = plan.store if repeat == 1 else RecordStore(root)
        cell = Cell("transformer", "torch", "baseline", batch, "cpu-capacity")
        store.put(Record(cell, "ok", wall_seconds=30.0))
    other = Cell("resnet50", "torch", "baseline", 8, "cpu-capacity")  # another workload's
    plan.store.put(Record(other, "ok", wall_seconds=30.0))
    assert stored_probes(plan) == {("torch", "baseline"): 7}
    assert expected_probes(3) == pytest.approx(13.1)
    assert probes_left(3, 7) == pytest.approx(6.1) and probes_left(3, 20) == 3
    assert probes_left(1, 0) == expected_probes(1)
    resumed = forecast_searches([plan], "m").total_seconds()
    assert 0 < resumed < fresh


def test_a_compiled_guess_is_in_the_estimate_until_it_is_kept(tmp_path, monkeypatch):
    """JAX on a host budget compiles its guess at batches 4 and 16 and at its first probe:
    three cells' worth of time; none once the guess is kept, none for a device budget."""
    from membench import paths
    from membench.capacity.run import guess_seconds
    from membench.capacity.search_steps import Budget
    from membench.cells.estimate import History
    from membench.records import Cell, Record

    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    seen = [Record(Cell("transformer", "jax", "baseline", b, "cpu-quick"), "ok",
                   wall_seconds=10.0 + b) for b in (4, 16, 24)]  # fmt: skip
    history = History(seen)
    plan = plan_searches("cpu-quick", "transformer", ["jax"], ["baseline"],
                         budget_for("cpu", 800 * MIB), "m", "c0")  # fmt: skip
    first = Cell("transformer", "jax", "baseline", 24, "cpu-quick")
    assert guess_seconds(plan, first, history) == pytest.approx(14 + 26 + 34)
    kept = paths.guess_file(plan.store.root, "transformer", "jax", "baseline")
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    assert guess_seconds(plan, first, history) == 0
    device = Budget(800 * MIB, "peak_device_allocated_bytes", enforced=True)
    on_gpu = plan_searches("cpu-quick", "transformer", ["jax"], ["baseline"], device, "m", "c1")
    assert guess_seconds(on_gpu, first, history) == 0


@pytest.mark.slow
def test_a_rerun_keeps_finished_searches_and_other_workloads_results(
    fake_framework, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "per-sample")
    monkeypatch.setenv("FAKE_MIB_PER_SAMPLE", "16")
    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    from membench.cells.engines import LocalEngine

    plan = plan_searches("smoke", "fake-work", ["fake"], ["baseline", "infer-half"],
                         budget_for("cpu", 4 * 2**30), "m", "c0", max_batch=4)  # fmt: skip
    other = CapacityResult("transformer", "torch", "baseline", "smoke", 1.0, "l", False, "", 3,
                           4, "ok", "", [])  # fmt: skip
    save_capacity_results([other], plan.results_file)
    said: list[str] = []
    results = run_searches(plan, LocalEngine(), said.append)
    assert [(r.workload, r.strategy, r.status) for r in results] == [
        ("transformer", "baseline", "ok"), ("fake-work", "baseline", "ok"),
        ("fake-work", "infer-half", "unsupported"),
    ]  # fmt: skip
    assert results[1].largest_fit == 4 and results[1].search == "bisection"  # no memory model
    # each search this run wrote says when; the kept result is as it was
    assert [bool(r.written_at) for r in results] == [False, True, True]
    assert load_capacity_results(plan.results_file) == results
    said.clear()
    assert run_searches(plan, LocalEngine(), said.append) == results
    assert said == []  # nothing searched again


def test_estimate_prints_the_plan_and_measures_nothing(fake_framework, tmp_path, capsys):
    store = tmp_path / "store"
    args = ["run", "-w", "fake-work", "-f", "fake", "-p", "smoke", "--store", str(store)]
    assert cli.main([*args, "--estimate"]) == 0
    out, err = capsys.readouterr()
    assert "cells: estimated" in err and "nothing measured (--estimate)" in out
    assert not list(store.rglob("*.json"))


def test_bench_estimate_counts_the_capacity_probes(capsys):
    assert (
        cli.main(["bench", "-p", "cpu-quick", "-f", "torch", "-w", "resnet50", "--estimate"]) == 0
    )
    out, err = capsys.readouterr()
    assert "capacity probes: estimated" in err and "nothing measured" in out


@pytest.mark.parametrize("flag", [["--no-capacity"], ["-b", "2"]])
def test_bench_searches_nothing_without_capacity_or_with_a_batch_chosen(flag, capsys):
    argv = ["bench", "-p", "cpu-quick", "-f", "torch", "-w", "resnet50", "--estimate", *flag]
    assert cli.main(argv) == 0
    assert "capacity probes" not in capsys.readouterr().err


def test_capacity_estimate_says_the_budget_it_understood_and_what_the_preset_leaves_out(capsys):
    argv = ["capacity", "-p", "cpu-quick", "-w", "unet3d", "-f", "jittor,torch", "-s", "baseline",
            "--budget", "1.5GiB", "--estimate"]  # fmt: skip
    assert cli.main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "unet3d: within 1.50 GiB" in out
    assert "jittor baseline: left out by preset cpu-quick: Jittor's 3D convolutions" in out
    assert "torch baseline: left out" not in out


def test_a_preset_without_budgets_searches_nothing(capsys):
    assert cli.main(["bench", "-p", "smoke", "-f", "torch", "-w", "resnet50", "--estimate"]) == 0
    assert "capacity probes" not in capsys.readouterr().err


def test_bench_ends_with_its_answers_on_one_screen_and_where_the_rest_is(capsys):
    """The committed cpu-capacity searches on f25m17 (three workloads, two budgets each, three
    frameworks): the answers fit one terminal screen, with the page and report that hold the
    rest; another run's folders give no table."""
    from pathlib import Path

    from membench import paths
    from membench.publish.summary import ANSWER_LINES, ANSWER_WIDTH, print_answers

    machine = "amd-epyc-f25m17-avx512bf16-2core-24gib"
    runs = [p.name for p in (paths.RESULTS / "capacity" / machine).iterdir()]
    page, report = Path("docs/results/m.md"), Path("report/index.html")
    print_answers(paths.RESULTS, machine, "cpu-capacity", runs, page, report)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= ANSWER_LINES and max(len(line) for line in lines) <= ANSWER_WIDTH
    assert "docs/results/m.md" in out and "report/index.html" in out
    start = next(i for i, line in enumerate(lines) if line.startswith("resnet50 2 GiB"))
    torch_2gib = next(line for line in lines[start : start + 3] if " torch " in line)
    # the committed answers: torch's ResNet-50 baseline fits 11 in 2 GiB, amp-bf16 is fastest
    assert re.search(r" torch +11 @ [\d.]+ +amp-bf16 24 @ ", torch_2gib), torch_2gib
    print_answers(paths.RESULTS, machine, "cpu-capacity", ["another-run"], page, report)
    assert "What fits" not in capsys.readouterr().out


@pytest.mark.parametrize("flag, expected", [([], 64), (["--max-batch", "32"], 32)])
def test_capacity_searches_up_to_the_presets_largest_batch_unless_told(
    flag, expected, monkeypatch, capsys
):
    """`membench capacity -p cpu-quick` once probed the U-Net at batch 196 (a 300-s timeout):
    the preset's capacity_max_batch (64) is the default, --max-batch overrides it."""
    import membench.capacity.run as capacity_run

    seen = []
    plan = capacity_run.plan_searches

    def recording(*args, **kwargs):
        found = plan(*args, **kwargs)
        seen.append(found.max_batch)
        return found

    monkeypatch.setattr(capacity_run, "plan_searches", recording)
    argv = ["capacity", "-p", "cpu-quick", "-f", "torch", "-w", "unet3d", "-s", "infer"]
    assert cli.main([*argv, "--budget", "1GiB", "--estimate", *flag]) == 0
    assert seen == [expected]


def test_a_preset_can_leave_a_search_out_of_the_main_job_and_still_measure_its_cells(capsys):
    """cpu-quick's main job measures JAX's U-Net cells but not its capacity (about a minute a
    probe); `membench capacity` asked for it runs it. Jittor's U-Net, whose cells the preset
    leaves out, is searched by neither."""
    quick = registry.preset("cpu-quick")
    assert quick.leaves_out("jax", "unet3d", "baseline") is None
    assert "a minute a probe" in quick.leaves_out_of_capacity("jax", "unet3d", "baseline")
    budget = budget_for("cpu", 2**30)
    frameworks = ["torch", "jax", "jittor"]
    main = plan_searches(
        "cpu-quick", "unet3d", frameworks, ["baseline"], budget, "m", "c0", main_job=True
    )
    assert main.combos == (("torch", "baseline"),)
    assert [f for f, _, _ in main.left_out] == ["jittor"]  # not JAX: searched when asked
    asked = plan_searches("cpu-quick", "unet3d", frameworks, ["baseline"], budget, "m", "c0")
    assert asked.combos == (("torch", "baseline"), ("jax", "baseline"))
    argv = ["bench", "-p", "cpu-quick", "-f", "jax", "-w", "unet3d", "-s", "baseline"]
    assert cli.main([*argv, "--estimate"]) == 0
    assert "leaves capacity searches out: JAX's U-Net" in capsys.readouterr().out


def test_membench_capacity_of_left_out_searches_only_keeps_their_reasons(tmp_path, monkeypatch):
    """Asked for searches its preset leaves out, capacity writes their results and records
    nothing with asv (there is no figure to record)."""
    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    monkeypatch.setattr("membench.environment.machine_name", lambda: "m")
    monkeypatch.setattr("membench.environment.git_commit", lambda: {"commit": "c0", "dirty": False})
    ran = []
    monkeypatch.setattr("membench.publish.asv_run.run_asv", lambda *a: ran.append(a) or 0)
    argv = ["capacity", "-p", "cpu-quick", "-w", "unet3d", "-f", "jittor", "-s", "baseline"]
    assert cli.main([*argv, "--budget", "800MiB"]) == 0
    (found,) = tmp_path.glob("capacity/m/cpu-quick-800mib-*/capacity.json")
    assert [(r.strategy, r.status) for r in load_capacity_results(found)] == [
        ("baseline", "left-out")
    ]
    assert ran == []


def test_bench_records_each_budgets_searches_with_asv_at_that_budget_only(
    tmp_path, monkeypatch, capsys
):
    """The main job's answers reach asv a budget at a time (the budget a parameter of the
    capacity class), and only at a budget its preset declares: another stays in the records."""
    from membench.commands import bench as bench_command
    from membench.commands import build_parser
    from membench.commands.run_options import RunOptions

    monkeypatch.setattr("membench.paths.RESULTS", tmp_path)
    monkeypatch.setattr("membench.capacity.run.run_searches", lambda *a, **k: None)
    monkeypatch.setattr("membench.publish.summary.print_answers", lambda *a: None)
    monkeypatch.setattr(bench_command, "write_summaries", lambda: (lambda m: m, tmp_path))
    ran = []
    monkeypatch.setattr(
        "membench.publish.asv_run.run_asv", lambda env, r: ran.append((env, r)) or 0
    )
    names = {"workloads": ["resnet50", "transformer"], "frameworks": ["torch"],
             "strategies": ["baseline"]}  # fmt: skip

    def plan(workload: str, mib: int):
        budget = budget_for("cpu", mib * MIB)
        return plan_searches("cpu-quick", workload, ["torch"], ["baseline"], budget, "m", "c0")

    opts = RunOptions.of(build_parser().parse_args(["bench"]))
    searches = [plan("resnet50", 960), plan("transformer", 650), plan("resnet50", 800)]
    assert bench_command.bench_capacity(searches, opts, names) == 0
    assert [len(r) for _, r in ran] == [1, 1]
    (env, (regex,)), (env2, (regex2,)) = ran
    assert regex.startswith(r"^suite\.Resnet50Capacity_cpu_quick") and "(960)" in regex
    assert regex2.startswith(r"^suite\.TransformerCapacity_cpu_quick") and "(650)" in regex2
    # each budget's asv run reads that budget's results
    assert env["MEMBENCH_CAPACITY_FILE"] == str(searches[0].results_file)
    assert "cpu-quick-960mib-c0" in env["MEMBENCH_CAPACITY_FILE"]
    assert env2["MEMBENCH_CAPACITY_FILE"] == str(searches[1].results_file)
    assert "asv keeps preset cpu-quick's declared budgets only" in capsys.readouterr().out
