"""The U-Net and the Transformer through the whole harness: registry, asv classes, workers."""

import pytest

from membench import registry
from membench.cells import supervision
from membench.publish.asv_suite import benchmark_classes
from membench.records import Cell


def test_asv_generates_a_class_per_preset_and_workload(monkeypatch):
    monkeypatch.setenv("MEMBENCH_PRESET", "smoke")
    monkeypatch.setenv("MEMBENCH_WORKLOADS", "resnet50")  # a selection changes no class
    classes = benchmark_classes()
    assert {"Resnet50_cpu", "Unet3d_cpu", "Transformer_cpu", "Transformer_smoke"} <= classes.keys()
    frameworks, strategies, batches = classes["Transformer_cpu"].params
    assert "fused-attention" in strategies and "checkpoint" in strategies
    assert batches == list(registry.preset("cpu").size("transformer").batch_sizes)
    assert classes["Unet3d_cpu"].workload == "unet3d" and classes["Unet3d_cpu"].preset == "cpu"


def test_only_the_transformer_has_attention():
    assert registry.workload("transformer").attention
    assert not registry.workload("unet3d").attention and not registry.workload("resnet50").attention
    assert registry.strategy("baseline").attention == "plain"  # the knob is measured against it
    assert registry.strategy("fused-attention").knobs()["attention"] == "fused"


def test_gpu_presets_use_the_standard_sizes():
    gpu = registry.preset("gpu")
    assert gpu.size("unet3d").inputs["volume"] == 128
    assert gpu.size("transformer").inputs == registry.GPT2_SMALL


@pytest.mark.slow
def test_cells_run_in_workers_and_name_their_configuration(tmp_path):
    from membench.records import RecordStore

    store = RecordStore(tmp_path / "store")
    cells = [
        Cell("transformer", fw, s, 2, "smoke")
        for fw in ("torch", "jax")
        for s in ("baseline", "fused-attention")
    ] + [Cell("unet3d", fw, "fused-attention", 2, "smoke") for fw in ("torch", "jax")]
    records = {(r.cell.workload, r.cell.framework, r.cell.strategy): r
               for r in supervision.run(cells, store).records}  # fmt: skip
    for fw in ("torch", "jax"):
        for s in ("baseline", "fused-attention"):
            r = records[("transformer", fw, s)]
            assert r.status == "ok", r.reason
            assert r.environment["workload_inputs"] == registry.TRANSFORMER_TINY
            assert r.metrics["peak_host_rss_bytes"] > 0 and r.metrics["step_seconds_median"] > 0
            assert r.metrics["trainable_parameters"] == 134_912
        assert (
            "attention"
            in records[("transformer", fw, "fused-attention")].environment["strategy_notes"]
        )
        unet = records[("unet3d", fw, "fused-attention")]
        assert unet.status == "unsupported" and "no attention layer" in unet.reason
