import pytest

from membench import registry
from membench.cells import planning
from membench.cli import main


@pytest.mark.parametrize(
    ("lookup", "kind", "valid"),
    [
        (registry.workload, "workload", "resnet50"),
        (registry.strategy, "strategy", "checkpoint"),
        (registry.preset, "preset", "smoke"),
        (registry.framework, "framework", "torch"),
    ],
)
def test_unknown_name_lists_the_valid_ones(lookup, kind, valid):
    with pytest.raises(registry.UnknownNameError) as err:
        lookup("nope")
    message = str(err.value)
    assert f"unknown {kind} 'nope'" in message
    assert valid in message


def test_plan_checks_every_name():
    with pytest.raises(registry.UnknownNameError, match="valid strategy names: baseline"):
        planning.cells_for(["resnet50"], ["torch"], ["baseline", "bogus"], "smoke")


def test_plan_interleaves_the_frameworks_cell_by_cell():
    cells = planning.cells_for(["resnet50"], ["torch", "jax"], ["baseline", "infer"], "cpu", [2])
    assert [(c.strategy, c.framework) for c in cells] == [
        ("baseline", "torch"),
        ("baseline", "jax"),
        ("infer", "torch"),
        ("infer", "jax"),
    ]


def test_plan_covers_the_preset_grid():
    cells = planning.cells_for(["resnet50"], ["torch"], ["baseline", "infer"], "cpu")
    grid = registry.preset("cpu").size("resnet50").batch_sizes
    assert len(cells) == 2 * len(grid)
    assert {c.batch_size for c in cells} == set(grid)


def test_presets_change_sizes_never_the_strategy_set():
    for p in registry.PRESETS.values():
        for size in p.sizes.values():
            assert size.batch_sizes == tuple(sorted(size.batch_sizes))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "-w", "resnet5"], "unknown workload 'resnet5'; valid workload names: resnet50"),
        (["run", "-p", "tpu"], "unknown preset 'tpu'; valid preset names: smoke, cpu, gpu"),
        (["run", "-f", "mxnet"], "unknown framework 'mxnet'; valid framework names: torch, jax"),
        (["bench", "-s", "zero3"], "unknown strategy 'zero3'"),
    ],
)
def test_cli_bad_name_is_a_clear_error(argv, expected, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err


def test_cli_list_names_everything(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*registry.WORKLOADS, *registry.STRATEGIES, *registry.PRESETS, "torch"]:
        assert name in out


def test_the_eval_probe_presets_measure_inference_over_a_fine_grid():
    from membench.commands import build_parser
    from membench.commands.selection import Selection

    for name in ("cpu-eval", "gpu-eval"):
        p = registry.preset(name)
        assert p.strategies == ("infer",)
        grid = p.size("resnet50").batch_sizes
        assert len(grid) >= 8 and list(grid) == sorted(grid)
        args = build_parser().parse_args(["run", "-p", name])
        assert Selection.of(name, args).strategies == ["infer"]
    args = build_parser().parse_args(["run", "-p", "cpu"])
    assert Selection.of("cpu", args).strategies == list(registry.STRATEGIES)


def test_a_fresh_process_loads_the_plugins_before_listing(tmp_path):
    """Nothing is imported with the registry; the command line loads MEMBENCH_PLUGINS first."""
    import os
    import subprocess
    import sys

    from .conftest import PLUGIN, REPO

    env = {**os.environ, "MEMBENCH_PLUGINS": PLUGIN, "PYTHONPATH": str(REPO)}
    code = "import membench.registry as r; print('fake' in r.FRAMEWORKS)"
    imported = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert imported.stdout.strip() == "False", imported.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "membench", "list"], env=env, cwd=REPO, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "fake" in listed.stdout


def test_a_run_sized_selfcheck_preset_leaves_the_table_as_it_was(monkeypatch):
    from membench import registry

    default = registry.PRESETS["selfcheck"]
    monkeypatch.setenv(registry.SELFCHECK_IMAGE_SIZE_ENV, "96")
    assert registry.preset("selfcheck").size("resnet50").inputs["image_size"] == 96
    monkeypatch.delenv(registry.SELFCHECK_IMAGE_SIZE_ENV)
    assert registry.preset("selfcheck") is default
    assert default.size("resnet50").inputs["image_size"] == 64
