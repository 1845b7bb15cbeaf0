"""Jittor: the advice strategies do what they say (autograd left on, two models, host data,
memory hygiene, variable lengths), on the smoke preset's small sizes."""

import gc

import numpy as np
import torch  # noqa: F401 - before jittor (their oneDNN builds clash the other way round)

from membench.backends import BuildSpec
from membench.backends.jittor_backend import (
    JittorBackend,
    JittorSession,
    import_into_host_process,
)
from membench.backends.phases import COLLECTOR, TRANSFER, distinct_lengths
from membench.registry import preset, strategy
from tests.alive_models import build_watched

jt = import_into_host_process("cpu")


def session(name: str, workload: str = "resnet50", batch: int = 2) -> JittorSession:
    size = preset("smoke").size(workload)
    return JittorBackend().build(BuildSpec(workload, strategy(name), size, batch))


def watched(name: str) -> JittorSession:
    """The session as the backend builds it, its models' lives watched (tests.alive_models)."""
    spec = BuildSpec("resnet50", strategy(name), preset("smoke").size("resnet50"), 2)
    return build_watched(
        JittorBackend(), JittorSession, spec, first=lambda s: s.model, units=lambda m: [m],
        nbytes=lambda m: sum(p.numel() * p.dtype.dsize() for p in m.parameters()),
    )  # fmt: skip


def test_infer_grad_outputs_equal_infer_and_keep_a_graph_alive():
    plain, grad = session("infer"), session("infer-grad")
    x = plain.batches[0][0]
    with jt.no_grad():
        expected = plain.model(x)
    assert expected.is_stop_grad()  # no_grad: nothing recorded
    grad.step()
    (out,) = grad.output
    assert not out.is_stop_grad()  # a graph back to the (differentiable) input
    assert jt.grad(out.sum(), grad.batches[0][0]).shape == x.shape
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_two_resident_models_are_independent_copies_both_alive():
    s = watched("two-models-resident")
    assert len(s.models) == 2 and s.alive_parameter_bytes() == 2 * s.one_model_bytes
    a, b = (m.parameters()[0].numpy() for m in s.models)
    assert not np.array_equal(a, b)
    s.step()


def test_two_sequential_models_hold_one_model_at_a_time():
    s = watched("two-models-sequential")
    alive = []
    s.on_phase = lambda phase: alive.append((phase, s.alive_parameter_bytes()))
    gc.collect()
    assert s.alive_parameter_bytes() == 0
    s.step()
    one = s.one_model_bytes
    assert alive == [
        ("built model 0", one),
        ("freed model 0", 0),
        ("built model 1", one),
        ("freed model 1", 0),
    ]


def test_hygiene_runs_every_k_steps_and_the_copy_is_timed_apart(monkeypatch):
    s = session("hygiene-2")
    calls = []
    monkeypatch.setattr(s, "release", lambda: calls.append(s.steps))
    phases = []
    for _ in range(4):
        s.step()
        phases.append(s.step_phases())
    assert calls == [2, 4]
    assert [COLLECTOR in p for p in phases] == [False, True] * 2
    assert all(p[TRANSFER] > 0 for p in phases)


def test_varying_lengths_follow_the_schedule_after_a_first_step_over_all():
    s = session("infer-varlen", workload="transformer")
    seen = []
    model = s.model
    s.model = lambda tokens: seen.append(tokens.shape[1]) or model(tokens)
    s.step()
    assert tuple(seen) == distinct_lengths(s.batches[0][0].shape[1])
    s.step()
    assert len(seen) == len(distinct_lengths(s.batches[0][0].shape[1])) + 1
