"""The advice strategies' shared mechanics: knob validation, refusals, the step phases the
worker reports apart from compute, the hygiene cadence and the length schedule."""

import time

import pytest

from membench import registry
from membench.backends import BuildSpec, Session
from membench.backends.phases import (
    COLLECTOR,
    TRANSFER,
    PhaseClock,
    distinct_lengths,
    hygiene_due,
    length_schedule,
    lengths_for_step,
)
from membench.measure.worker import measured_steps, phase_metrics
from membench.metrics import METRICS

COPY, COMPUTE, COLLECT = 0.02, 0.03, 0.01


class CopyingSession(Session):
    """A step that copies, computes, and collects every other step (sleeps stand in)."""

    def __init__(self) -> None:
        self.phases, self.steps = PhaseClock(), 0

    def step(self) -> None:
        self.phases.start_step()
        with self.phases.timed(TRANSFER):
            time.sleep(COPY)
        time.sleep(COMPUTE)
        self.steps += 1
        if hygiene_due(self.steps, 2):
            with self.phases.timed(COLLECTOR):
                time.sleep(COLLECT)

    def step_phases(self) -> dict[str, float]:
        return dict(self.phases.last)


def test_transfer_and_collector_are_measured_apart_from_compute():
    times, phases = measured_steps(CopyingSession(), 4)
    out = phase_metrics(times, phases)
    assert set(out) <= set(METRICS)  # every figure is in the catalogue
    assert out["transfer_seconds_median"] == pytest.approx(COPY, abs=0.01)
    assert out["compute_seconds_median"] == pytest.approx(COMPUTE, abs=0.01)
    assert out["collector_seconds_per_step"] == pytest.approx(COLLECT / 2, abs=0.005)
    assert 0 < out["collector_share"] < 0.2


def test_a_session_that_times_no_phases_adds_no_metrics():
    class Plain(Session):
        def __init__(self) -> None:  # nothing built, no phase clock
            pass

        def step(self) -> None:
            pass

    assert phase_metrics(*measured_steps(Plain(), 3)) == {}


def test_hygiene_runs_on_every_kth_step_only():
    assert [s for s in range(1, 9) if hygiene_due(s, 3)] == [3, 6]
    assert not any(hygiene_due(s, 0) for s in range(1, 9))


def test_the_length_schedule_is_fixed_and_seeded():
    assert distinct_lengths(128) == (16, 32, 48, 64, 80, 96, 112, 128)
    assert length_schedule(128) == length_schedule(128)
    assert length_schedule(128, seed=1) != length_schedule(128)
    assert set(length_schedule(128)) == set(distinct_lengths(128))
    assert lengths_for_step(0, 128) == distinct_lengths(128)  # every shape in the first step
    assert lengths_for_step(1, 128) == (length_schedule(128)[0],)


@pytest.mark.parametrize(
    "knobs", [{"eval_autograd": True}, {"models": "two-resident"}, {"lengths": "varying"}]
)
def test_inference_knobs_refuse_a_training_strategy(knobs):
    with pytest.raises(ValueError, match="apply to inference"):
        registry.Strategy("bad", "", **knobs)


def test_varying_lengths_need_a_sequence_workload():
    size = registry.preset("smoke").size("resnet50")
    spec = BuildSpec("resnet50", registry.strategy("infer-varlen"), size, 2)
    for name in ("torch", "jax", "jittor"):
        assert "takes no sequence" in registry.load_backend(name).refusal(spec, "cpu")
