"""JAX/Flax: the advice strategies do what they say (two models, host data, hygiene,
variable lengths), and infer-grad is refused with its reason; smoke preset sizes."""

import gc

import pytest

jax = pytest.importorskip("jax")

from membench.backends import BuildSpec  # noqa: E402
from membench.backends.jax_backend import JaxBackend, JaxSession  # noqa: E402
from membench.backends.phases import COLLECTOR, TRANSFER, distinct_lengths  # noqa: E402
from membench.registry import preset, strategy  # noqa: E402
from tests import session_probes as probe  # noqa: E402
from tests.alive_models import build_watched  # noqa: E402


def spec(name: str, workload: str = "resnet50", batch: int = 2) -> BuildSpec:
    return BuildSpec(workload, strategy(name), preset("smoke").size(workload), batch)


def session(name: str, workload: str = "resnet50") -> JaxSession:
    return JaxBackend().build(spec(name, workload))


def _array_bytes(a) -> int:  # a donated array is deleted while still referenced
    return 0 if a.is_deleted() else int(a.size) * a.dtype.itemsize


def watched(name: str) -> JaxSession:
    """The session as the backend builds it, its parameter and statistic arrays' lives watched
    (tests.alive_models): JAX counts arrays, not models (a model is two trees)."""
    return build_watched(
        JaxBackend(), JaxSession, spec(name), first=lambda s: (s.params, s.batch_stats),
        units=jax.tree_util.tree_leaves, nbytes=_array_bytes,
    )  # fmt: skip


def test_infer_grad_is_refused_with_the_reason():
    reason = JaxBackend().refusal(spec("infer-grad"), "cpu")
    assert reason and "no tape" in reason and "jax.vjp" in reason


def test_two_resident_models_are_independent_copies_both_alive():
    s = watched("two-models-resident")
    assert s.alive_parameter_bytes() == 2 * s.one_model_bytes
    pairs = zip(*(jax.tree_util.tree_leaves(p) for p in (s.params, s.second[0])), strict=True)
    assert any(not bool((a == b).all()) for a, b in pairs)  # independently initialised
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
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(s.steps) or 0)
    phases = []
    for _ in range(4):
        s.step()
        phases.append(s.step_phases())
    assert calls == [2, 4]
    assert [COLLECTOR in p for p in phases] == [False, True] * 2
    assert all(p[TRANSFER] > 0 for p in phases)


def test_varying_lengths_compile_one_forward_per_length():
    s = session("infer-varlen", workload="transformer")
    s.step()
    assert tuple(sorted(s._by_length)) == distinct_lengths(probe.whole_batch(s)[0].shape[1])
    s.step()
    assert len(s._by_length) == len(distinct_lengths(probe.whole_batch(s)[0].shape[1]))
