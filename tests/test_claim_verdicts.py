"""Every claim's verdict pinned for fixed synthetic results, one case per outcome, under the
one rule (every measured layer must agree)."""

import pytest

from analysis.claims import CONFIRMED, INCONCLUSIVE, NOT_MEASURABLE, REFUTED, RULE, claims_table

from .test_claims import H100, HOST, MIB, claim, frame, memory, row

ALLOC = ["peak_device_allocated_bytes"]
GPU_LAYERS = ["peak_device_allocated_bytes", "peak_device_process_bytes"]


def c1(amp_mib: float, device: str = H100):
    metrics = ALLOC if device != "cpu" else HOST
    return memory({"baseline": 100, "amp-bf16": amp_mib}, metrics=metrics, device=device)


def c2(checkpoint_activation_mib: float):
    """Transformer activation = allocated peak - params, grads and optimizer state (50 MiB)."""
    rows = []
    for strategy, act in (("baseline", 100), ("checkpoint", checkpoint_activation_mib)):
        for b in (2, 4):
            kw = {"device": H100, "workload": "transformer"}
            rows.append(row(strategy, b, "peak_device_allocated_bytes", (50 + act) * MIB, **kw))
            rows.append(row(strategy, b, "analytic_floor_bytes", 50 * MIB, **kw))
    return rows


def c3(jittor_mib: float):
    kw = {"device": H100, "workload": "unet3d", "metrics": GPU_LAYERS}
    return memory({"baseline": 100}, **kw) + memory(
        {"baseline": jittor_mib}, framework="jittor", **kw
    )


def c4(speedup: float):
    """Activations 100 -> 33 (checkpoint) -> 23 (with amp): the claim's memory figures."""
    rows = []
    kw = {"device": H100, "workload": "unet3d"}
    for strategy, act, speed in (
        ("baseline", 100, 1.0), ("checkpoint", 33, 0.8), ("amp-bf16-checkpoint", 23, speedup)
    ):  # fmt: skip
        rows.append(row(strategy, 2, "peak_device_allocated_bytes", (10 + act) * MIB, **kw))
        rows.append(row(strategy, 2, "analytic_floor_bytes", 10 * MIB, **kw))
        rows.append(row(strategy, 2, "throughput_samples_per_second", speed, **kw))
    return rows


def c6(step_added_ratio: float, held_ratio: float):
    """accumulate-2 at B against baseline at B/2, on both host layers: what a step adds, and
    the peak above the runtime (here none: the peak is all the cell's)."""
    rows = memory({"baseline": 100}, batches=(2, 4, 8))
    rows += [row("baseline", b, "host_rss_after_import_bytes", 0.0) for b in (2, 4, 8)]
    for b in (4, 8):
        rows.append(
            row("accumulate-2", b, "peak_host_rss_delta_bytes", 50 * b * step_added_ratio * MIB)
        )
        rows.append(row("accumulate-2", b, "peak_host_rss_bytes", 50 * b * held_ratio * MIB))
        rows.append(row("accumulate-2", b, "host_rss_after_import_bytes", 0.0))
    return rows


CASES = [
    ("C1", c1(60), CONFIRMED),
    ("C1", c1(90), REFUTED),
    ("C1", c1(73), INCONCLUSIVE),
    ("C1", c1(60, device="cpu"), NOT_MEASURABLE),
    ("C2", c2(25), CONFIRMED),
    ("C2", c2(50), REFUTED),
    ("C2", c2(35), INCONCLUSIVE),
    ("C3", c3(85), CONFIRMED),
    ("C3", c3(100), REFUTED),
    ("C3", c3(93), INCONCLUSIVE),
    ("C4", c4(1.8 * 1.0), CONFIRMED),
    ("C4", c4(1.0), REFUTED),
    ("C4", c4(1.4), INCONCLUSIVE),
    (
        "C5",
        memory(
            {"baseline": 100, "compile": 60}, metrics=ALLOC, device=H100, workload="transformer"
        ),
        NOT_MEASURABLE,
    ),  # fmt: skip
    ("C6", c6(1.0, 1.0), CONFIRMED),
    ("C6", c6(1.5, 1.4), REFUTED),
    ("C6", c6(1.28, 1.07), INCONCLUSIVE),  # one layer in the band is not enough
    ("C9", memory({"infer": 100, "infer-half": 50}), CONFIRMED),
    ("C9", memory({"infer": 100, "infer-half": 90}), REFUTED),
    ("C9", memory({"infer": 100, "infer-half": 65}), INCONCLUSIVE),
    (
        "C12",
        memory(
            {"baseline": 100, "managed-allocator": 50},
            metrics=ALLOC,
            device=H100,
            framework="jittor",
        ),
        NOT_MEASURABLE,
    ),  # fmt: skip
]


@pytest.mark.parametrize(
    ("claim_id", "rows", "verdict"), CASES, ids=[f"{c}-{v}" for c, _, v in CASES]
)
def test_each_outcome_of_each_claim(claim_id, rows, verdict):
    result = claim(claims_table(frame(rows)), claim_id)
    assert result.verdict == verdict, result.reason
    if verdict != NOT_MEASURABLE:  # the band beside the verdict; the rule once above the table
        assert "tolerance: " in result.reason and RULE not in result.reason


def test_the_verdict_names_each_layer_it_used():
    c6_row = claim(claims_table(frame(c6(1.28, 1.07))), "C6")
    assert "host RSS added by a step, ratio 1.28x: refuted" in c6_row.reason
    assert "(peak RSS - RSS after import), ratio 1.07x: confirmed" in c6_row.reason
    assert "the layers of 'memory' disagree" in c6_row.reason
