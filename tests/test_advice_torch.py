"""PyTorch: the advice strategies do what they say (autograd left on, two models, host
data, memory hygiene, variable lengths), on the smoke preset's small sizes."""

import gc

import pytest

torch = pytest.importorskip("torch")

from membench.backends import BuildSpec  # noqa: E402
from membench.backends.phases import COLLECTOR, TRANSFER, distinct_lengths  # noqa: E402
from membench.backends.torch_backend import TorchBackend, TorchSession  # noqa: E402
from membench.registry import preset, strategy  # noqa: E402
from tests.alive_models import build_watched  # noqa: E402


def session(name: str, workload: str = "resnet50", batch: int = 2) -> TorchSession:
    size = preset("smoke").size(workload)
    return TorchBackend().build(BuildSpec(workload, strategy(name), size, batch))


def watched(name: str) -> TorchSession:
    """The session as the backend builds it, its models' lives watched (tests.alive_models)."""
    spec = BuildSpec("resnet50", strategy(name), preset("smoke").size("resnet50"), 2)
    return build_watched(
        TorchBackend(), TorchSession, spec, first=lambda s: s.model, units=lambda m: [m],
        nbytes=lambda m: sum(p.numel() * p.element_size() for p in m.parameters()),
    )  # fmt: skip


def test_infer_grad_outputs_equal_infer_and_keep_a_graph_alive():
    plain, grad = session("infer"), session("infer-grad")
    with torch.inference_mode():
        expected = plain.model(plain.batches[0][0])
    grad.step()
    assert grad.output.requires_grad and grad.output.grad_fn is not None
    torch.testing.assert_close(grad.output.detach(), expected)
    held = grad.output
    grad.step()  # the next step's output replaces the held one, graph and all
    assert grad.output is not held


def test_two_resident_models_are_independent_copies_both_alive():
    s = watched("two-models-resident")
    one = s.one_model_bytes
    assert len(s.models) == 2 and s.alive_parameter_bytes() == 2 * one
    a, b = (next(m.parameters()) for m in s.models)
    assert not torch.equal(a, b)  # independently initialised
    assert s.static_metrics()["parameter_bytes"] == 2 * one
    s.step()


def test_two_sequential_models_hold_one_model_at_a_time():
    s = watched("two-models-sequential")
    alive = []
    s.on_phase = lambda phase: alive.append((phase, s.alive_parameter_bytes()))
    gc.collect()
    assert s.alive_parameter_bytes() == 0  # nothing resident between steps
    s.step()
    one = s.one_model_bytes
    assert alive == [
        ("built model 0", one),
        ("freed model 0", 0),
        ("built model 1", one),
        ("freed model 1", 0),
    ]
    assert s.static_metrics()["parameter_bytes"] == 0


def test_hygiene_runs_every_k_steps_and_is_timed_apart(monkeypatch):
    s = session("hygiene-2")
    calls = []
    monkeypatch.setattr(s, "release", lambda: calls.append(s.steps))
    phases = []
    for _ in range(6):
        s.step()
        phases.append(s.step_phases())
    assert calls == [2, 4, 6]
    assert [COLLECTOR in p for p in phases] == [False, True] * 3
    assert all(TRANSFER in p for p in phases)


def test_host_data_copies_the_batch_every_step_timed_apart_from_compute(monkeypatch):
    s = session("host-data")
    assert s.host_batch is not None and all(t.device.type == "cpu" for t in s.host_batch)
    copies = []
    real = torch.Tensor.to

    def counting_to(tensor, *args, **kwargs):
        copies.append(tensor.shape)
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", counting_to)
    s.step()
    assert copies == [t.shape for t in s.host_batch]  # inputs and targets, once each
    assert set(s.step_phases()) == {TRANSFER}
    assert s.strategy.hygiene_every == 0


def test_varying_lengths_follow_the_schedule_after_a_first_step_over_all():
    s = session("infer-varlen", workload="transformer")
    seen = []
    forward = s.forward
    s.forward = lambda tokens: seen.append(tokens.shape[1]) or forward(tokens)
    s.step()
    assert tuple(seen) == distinct_lengths(s.batches[0][0].shape[1])
    s.step()
    s.step()
    assert len(seen) == len(distinct_lengths(s.batches[0][0].shape[1])) + 2
    assert set(seen) <= set(distinct_lengths(s.batches[0][0].shape[1]))
