"""The gpu-quick plan: valid cells, each part within one command, the whole within 25 minutes."""

import pytest

from membench import registry
from membench.cells import gpu_session, planning
from membench.paths import REPO_ROOT


@pytest.mark.parametrize("part", gpu_session.GPU_QUICK, ids=lambda p: p.name)
def test_every_part_names_real_cells_on_a_gpu_preset_and_fits_one_command(part):
    for sel in part.cells:
        cells = planning.cells_for([sel.workload], sel.frameworks, sel.strategies, sel.preset,
                            sel.batch_sizes)  # fmt: skip
        assert cells and registry.preset(sel.preset).gpu
    for search in part.searches:
        assert registry.preset(search.preset).gpu and search.budget_bytes > 0
    assert gpu_session.estimate_seconds(part) <= gpu_session.PART_SECONDS


def test_the_plan_with_its_set_up_is_estimated_within_25_minutes():
    total = gpu_session.SETUP_SECONDS + sum(
        gpu_session.estimate_seconds(p) for p in gpu_session.GPU_QUICK
    )
    assert 15 * 60 < total <= 25 * 60


def test_the_cost_model_charges_compile_and_bigger_batches():
    base = gpu_session.cell_seconds("resnet50", "torch", "baseline", 64, "gpu-quick")
    assert gpu_session.cell_seconds("resnet50", "torch", "baseline", 256, "gpu-quick") > base
    torch = registry.framework("torch")
    compiled = gpu_session.cell_seconds("resnet50", "torch", "compile", 64, "gpu-quick")
    assert compiled == pytest.approx(base + torch.gpu_compile_seconds)
    assert torch.gpu_compile_seconds > 0


def test_the_cost_model_charges_cudnn_autotuning_to_torch_s_convolutions_only():
    """torch's first step times cuDNN's kernels (59 s of the U-Net's first float32 step on
    the H200); JAX does it inside XLA's compile (its fixed cost); GPT-2 has no convolutions."""

    def first(workload, framework, batch):
        return gpu_session.cell_seconds(workload, framework, "baseline", batch, "gpu-quick")

    per_step = gpu_session.TRAIN_FLOPS["unet3d"] / gpu_session.RATE_FLOPS["fp32"]
    torch, jax = registry.framework("torch"), registry.framework("jax")
    assert first("unet3d", "torch", 1) - torch.gpu_cell_seconds == pytest.approx(
        (14 + gpu_session.AUTOTUNE_STEPS["unet3d"]["fp32"]) * per_step
    )
    assert first("unet3d", "jax", 1) - jax.gpu_cell_seconds == pytest.approx(14 * per_step)
    assert gpu_session.AUTOTUNE_STEPS["transformer"] == {"fp32": 0.0, "amp": 0.0}


def test_an_unknown_part_lists_the_valid_ones():
    with pytest.raises(registry.UnknownNameError, match="resnet50, unet3d-gpt2, jittor"):
        gpu_session.part("gpu-quick", "everything")


def test_a_part_is_refused_on_a_host_without_a_gpu_and_setup_is_named_as_the_scripts(
    monkeypatch, capsys
):
    """The part's cells would each end `error` by the device guard; `setup`, which the plan
    lists, is scripts/gpu_node.sh's step, not one of membench's parts."""
    from membench import environment
    from membench.cli import main

    monkeypatch.setattr(environment, "detected_device", lambda: "cpu")
    assert main(["plan", "gpu-quick", "resnet50"]) == 2
    assert "preset gpu-quick is a GPU preset and this host has no NVIDIA GPU" in (
        capsys.readouterr().err
    )
    assert main(["plan", "gpu-quick", "setup"]) == 2
    assert "bash scripts/gpu_node.sh setup" in capsys.readouterr().err


@pytest.mark.parametrize("part", gpu_session.GPU_QUICK, ids=lambda p: p.name)
def test_running_a_part_hands_its_cells_and_searches_to_bench_and_capacity(part, monkeypatch):
    """`membench plan gpu-quick PART` calls the bench and capacity functions with a selection
    (it once built argparse Namespaces that lacked bench's own flags); --skip drops a framework."""
    from membench import environment
    from membench.cli import main
    from membench.commands import bench, capacity

    monkeypatch.setattr(environment, "detected_device", lambda: "cuda")  # the GPU machine's

    benched, searched = [], []
    monkeypatch.setattr(
        bench, "bench", lambda preset, sel, cells, opts, searches: benched.append(cells) or 0
    )
    monkeypatch.setattr(
        capacity, "search", lambda preset, sel, budget, *a, **k: searched.append(sel) or 0
    )
    assert main(["plan", "gpu-quick", part.name, "--skip", "jittor"]) == 0
    kept = [s for s in part.cells if set(s.frameworks) != {"jittor"}]
    assert len(benched) == len(kept)
    for cells, sel in zip(benched, kept, strict=True):
        expected = planning.cells_for([sel.workload], sel.frameworks, sel.strategies, sel.preset,
                               sel.batch_sizes)  # fmt: skip
        assert cells == expected
    assert [s.frameworks for s in searched] == [
        [f for f in s.frameworks if f != "jittor"] for s in part.searches
    ]


def test_a_gpu_plan_spends_no_device_time_on_searches_settled_by_an_earlier_commit(
    tmp_path, monkeypatch
):
    """gpu-decision's searches (a card's whole budget): one settled (ok) on this machine by any
    commit is not searched again, and the plan says where it was settled; an error, another
    budget, another preset, another machine or the allocator limit alone settles nothing."""
    import json

    from membench import environment, paths
    from membench.cli import main
    from membench.commands import capacity

    budget = gpu_session.DECISION_BUDGET

    def settled(
        machine: str, commit: str, framework: str, status: str, gib: int = 24,
        preset: str = "gpu-quick", card: bool = True,
    ) -> None:  # fmt: skip
        run = paths.capacity_run(machine, preset, gib * 2**30, commit, tmp_path, card)
        run.mkdir(parents=True, exist_ok=True)
        file = run / paths.CAPACITY_FILE
        found = json.loads(file.read_text()) if file.exists() else []
        found.append({
            "workload": "resnet50", "framework": framework, "strategy": "baseline",
            "preset": preset, "budget_bytes": float(gib * 2**30),
            "budget_layer": "peak_device_process_bytes" if card else "peak_device_allocated_bytes",
            "budget_enforced": True, "note": "",
            "largest_fit": 289, "smallest_non_fit": 290, "status": status, "reason": "",
            "probes": [],
        })  # fmt: skip
        file.write_text(json.dumps(found))

    monkeypatch.setattr(environment, "detected_device", lambda: "cuda")  # the GPU machine's
    settled("gpu-box", "a" * 40, "torch", "ok")
    settled("gpu-box", "b" * 40, "jax", "error")
    settled("gpu-box", "c" * 40, "jax", "ok", gib=4)
    settled("other-box", "d" * 40, "jax", "ok")
    settled("gpu-box", "e" * 40, "jax", "ok", preset="gpu-quick-eval")  # its folder matches too
    settled("gpu-box", "f" * 40, "jax", "ok", card=False)  # the allocator's limit alone
    monkeypatch.setattr(paths, "RESULTS", tmp_path)
    monkeypatch.setattr(environment, "machine_name", lambda: "gpu-box")
    searched = []
    monkeypatch.setattr(
        capacity, "search", lambda preset, sel, budget, *a, **k: searched.append((sel, k)) or 0
    )
    from membench.capacity.run import settled_runs

    assert settled_runs("gpu-box", "gpu-quick", budget, "resnet50", "baseline", None, True) == {
        "torch": f"gpu-quick-24576mib-card-{'a' * 12}"
    }
    assert settled_runs("gpu-box", "gpu-quick", budget, "resnet50", "baseline") == {
        "jax": f"gpu-quick-24576mib-{'f' * 12}"
    }
    assert main(["plan", "gpu-decision", "searches"]) == 0
    first = gpu_session.part("gpu-decision", "searches").searches[0]
    assert (first.workload, first.strategy) == ("resnet50", "baseline")
    # the searches alike run as one selection, five at a time; torch's ResNet-50 baseline was
    # settled by commit aaaaaaa, so it is not searched again
    ((sel, kwargs),) = searched
    assert sel.workloads == ["resnet50", "transformer"] and sel.frameworks == ["torch", "jax"]
    assert len(sel.strategies) == 5 and kwargs["side_by_side"] == 5 and kwargs["whole_card"]
    assert kwargs["settled"] == {("resnet50", "torch", "baseline")}


def test_a_search_s_probes_are_costed_near_its_answer_and_checkpointing_recomputes():
    """gpu-decision's searches start at batch 1, but a guided search's probes lie near its
    answer (ResNet-50 within 24 GiB on the H200: 149-754), where a probe costs 20-75 s."""
    (part,) = gpu_session.GPU_DECISION
    search = next(s for s in part.searches if s.workload == "resnet50")
    assert search.first == 1 and search.probe_batch > 100
    probe = gpu_session.cell_seconds("resnet50", "torch", "baseline", search.probe_batch,
                                     search.preset)  # fmt: skip
    assert probe > 2 * gpu_session.cell_seconds("resnet50", "torch", "baseline", 1, search.preset)
    plain = gpu_session.cell_seconds("resnet50", "jax", "baseline", 600, "gpu-quick")
    saved = gpu_session.cell_seconds("resnet50", "jax", "checkpoint", 600, "gpu-quick")
    fixed = registry.framework("jax").gpu_cell_seconds
    assert saved - fixed == pytest.approx((plain - fixed) * gpu_session.CHECKPOINT_RECOMPUTE)


def test_the_next_gpu_run_tests_the_predictions_made_ahead_channels_last_first():
    """gpu-next: Jittor's go or no-go first; then every cell of the H200's committed
    predictions that no GPU record has met (torch's channels-last cells first), each batch
    once, at its own preset's sizes (the claims' seed sizes among them); then the decision
    searches, five at a time; inference last."""
    import json

    from membench import paths

    plan = gpu_session.parts("gpu-next")
    assert [p.name for p in plan] == ["jittor", "predicted", "selfcheck", "searches", "inference"]
    assert plan[0].cells[0].frameworks == ("jittor",) and plan[3].side_by_side == 5
    ahead = set()
    for path in paths.prediction_files():
        made = json.loads(path.read_text())
        if path.parent.name != "h200" or made["records"] or made["limit_bytes"] is not None:
            continue
        if made["status"] == "ok":  # a refused cell (torch.compile's) has nothing to test
            c = made["cell"]
            ahead.add((c["workload"], c["framework"], c["strategy"], c["batch_size"], c["preset"]))
    cells = plan[1].cells
    planned = {(c.workload, f, s, b, c.preset) for c in cells for f in c.frameworks
               for s in c.strategies for b in c.batches()}  # fmt: skip
    assert planned == ahead and len(ahead) >= 30
    assert {cells[0].strategies[0], cells[1].strategies[0]} == set(gpu_session.FIRST_AHEAD)


def test_the_gpu_run_script_dry_runs_its_parts_in_order_within_the_command(tmp_path):
    """scripts/gpu_run.sh --dry-run (no GPU): set-up, then the parts in the plan's order, each
    given what the command has left after the estimates before it, Jittor's at most 150 s;
    what has no time left says so and how to go on."""
    import os
    import subprocess

    env = {**os.environ, "OUT": str(tmp_path), "MEMBENCH_COMMAND_SECONDS": "570"}
    done = subprocess.run(
        ["bash", "scripts/gpu_run.sh", "--dry-run"], capture_output=True, text=True,
        cwd=REPO_ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[1:]
    names = [line.split()[4] if line.startswith("would") else line.split()[1].rstrip(":")
             for line in lines]  # fmt: skip
    assert names == ["setup", "jittor", "predicted", "selfcheck", "searches", "inference"]
    given = [int(line.split("given ")[1].split()[0]) for line in lines if "given" in line]
    assert given[1] == 150 and all(g <= 570 for g in given)
    assert "run the script again to go on" in lines[-1]
    assert (tmp_path / "gpu-run.log").read_text().splitlines()[1:] == lines


def test_the_selfcheck_part_keeps_the_suite_beside_the_plain_loops(monkeypatch):
    """gpu-next's selfcheck part: `membench selfcheck` at 224x224 and batch 256, torch with
    and without channels-last beside JAX, saved; --skip leaves a framework out."""
    from membench import environment
    from membench.cli import main
    from membench.commands import selfcheck as command

    monkeypatch.setattr(environment, "detected_device", lambda: "cuda")  # the GPU machine's
    seen = []
    monkeypatch.setattr(command, "main", lambda args: seen.append(args) or 0)
    assert main(["plan", "gpu-next", "selfcheck", "--skip", "jax"]) == 0
    (args,) = seen
    assert args.framework == ["torch"] and args.save and (args.size, args.batch) == (224, 256)
    assert {"channels-last", "amp-bf16-channels-last", "amp-bf16"} <= set(args.strategy)
