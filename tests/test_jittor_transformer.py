"""Jittor GPT-2-style Transformer: the architecture, parity with the PyTorch model from the same
weights (logits, loss, an AdamW step), and the strategies through the Jittor backend.

Jittor is installed by scripts/install.sh, so these tests require it. torch is imported first:
Jittor's oneDNN and torch's clash if torch comes second.
"""

import time

import numpy as np
import pytest
import torch

from membench.backends import BuildSpec, Unsupported
from membench.backends.jittor_backend import (
    JittorBackend,
    from_torch,
    import_into_host_process,
    load_torch_state,
    running_statistics,
    trainable,
)
from membench.registry import TRANSFORMER_TINY, preset, strategy
from tests import session_probes

# Jittor's environment set before its import (no CUDA build, torch kept out of Jittor), and
# Python's signal handlers kept (Jittor's would end the test session when a worker is killed).
jt = import_into_host_process("cpu")

from models.transformer import jittor_impl, spec, torch_impl  # noqa: E402

from .parity import (  # noqa: E402
    jittor_state,
    jittor_twin,
    relative_error,
    torch_state,
    transformer_torch_model,
)

INPUTS = TRANSFORMER_TINY  # the smoke preset's configuration
BATCH = 4


def norm(arrays: dict) -> float:
    return sum(float(np.sum(np.float64(a) ** 2)) for a in arrays.values()) ** 0.5


@pytest.fixture(scope="module")
def torch_model():
    return transformer_torch_model(INPUTS)


@pytest.fixture(scope="module")
def batch():
    return spec.synthetic_batch(BATCH, INPUTS)


def session(name: str, torch_model=None):
    """A backend session on the smoke preset's batch (this file's), optionally given torch's
    weights (loaded in place: the optimizer keeps the same Vars)."""
    size = preset("smoke").size("transformer")
    s = JittorBackend().build(BuildSpec("transformer", strategy(name), size, BATCH))
    if torch_model is not None:
        load_torch_state(s.model, torch_state(torch_model))
    return s


def test_gpt2_small_has_124_439_808_parameters_in_jittor_too():
    gpu = preset("gpu").size("transformer").inputs
    assert spec.config(gpu) == spec.GPT2_SMALL
    start = time.perf_counter()
    # Jittor is lazy: the 124M initial values are never computed here (no 500 MB allocated;
    # the host's RSS does not move), only the shapes are read.
    model = jittor_impl.build(gpu)
    weights = sum(p.numel() for p in trainable(model))
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    seconds = time.perf_counter() - start
    print(f"GPT-2 small in Jittor: built and counted in {seconds:.3f} s")
    assert seconds < 30  # measured 0.003 s
    assert weights == spec.GPT2_SMALL_PARAMETERS == 124_439_808  # tied: counted once
    assert not running_statistics(model)
    with torch.device("meta"):  # shapes only
        reference = torch_impl.build(gpu)
    assert shapes == {k: tuple(v.shape) for k, v in reference.state_dict().items()}


@pytest.mark.parametrize("name", ["smoke", "cpu"])
def test_shrunk_configurations_match_torch_and_the_spec(name, torch_model):
    inputs = preset(name).size("transformer").inputs
    expected = spec.parameter_count(spec.config(inputs))
    model = jittor_impl.build(inputs)
    assert expected == {"smoke": 134_912, "cpu": 5_289_472}[name]
    assert sum(p.numel() for p in trainable(model)) == expected
    with torch.device("meta"):
        assert sum(p.numel() for p in torch_impl.build(inputs).parameters()) == expected
    if name == "smoke":
        # The same names and shapes as torch's state_dict (no lm_head: the output projection is
        # the token embedding), so weights map name for name.
        own = model.state_dict()
        converted = from_torch(torch_state(torch_model))
        assert set(own) == set(converted) and "lm_head.weight" not in own
        assert all(tuple(own[k].shape) == v.shape for k, v in converted.items())


def test_init_follows_the_spec_scheme():
    inputs = preset("cpu").size("transformer").inputs  # 5.3M values: tight statistics
    cfg = spec.config(inputs)
    jt.set_global_seed(0)
    state = jittor_state(jittor_impl.build(inputs))
    residual = [n for n in state if n.endswith(("attn.proj.weight", "mlp.proj.weight"))]
    assert len(residual) == 2 * cfg.n_layer
    assert cfg.residual_std == pytest.approx(0.02 / np.sqrt(2 * cfg.n_layer))
    ratios = {}
    for name, value in state.items():
        if name.endswith("bias"):
            assert np.all(value == 0), name
        elif ".ln" in name or name.startswith("ln_f"):
            assert np.all(value == 1), name
        else:  # embeddings, qkv, fc: 0.02; the two residual projections: 0.02 / sqrt(2 n_layer)
            std = cfg.residual_std if name in residual else spec.INIT_STD
            ratios[name] = value.std() / std
            # 5 standard errors of a sample std (the smallest tensor, wpe's 128x256: 2.0%)
            assert abs(ratios[name] - 1) <= 5 / np.sqrt(2 * value.size), (name, ratios[name])
            assert abs(value.mean()) <= 5 * std / np.sqrt(value.size), name
    worst = max(abs(r - 1) for r in ratios.values())
    print(f"init std / scheme's std: worst {worst:.1e} over {len(ratios)} tensors")
    assert worst <= 1e-2  # measured 4.5e-3
    wte = np.abs(state["wte.weight"] / spec.INIT_STD).max()
    print(f"max |wte| / 0.02: {wte:.2f}")
    assert wte > 4.5  # untruncated normal (2.1M values; measured 5.2)


def test_checkpoint_and_fused_attention_are_refused():
    with pytest.raises(NotImplementedError, match="no activation checkpointing"):
        jittor_impl.build(INPUTS, checkpoint=True)
    with pytest.raises(NotImplementedError, match="no fused attention"):
        jittor_impl.build(INPUTS, attention="fused")


def test_eval_logits_match_torch(torch_model, batch):
    tokens, _ = batch
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(tokens)).numpy()
    model = jittor_twin(jittor_impl, INPUTS, torch_model)
    with jt.no_grad():
        got = model(jt.array(tokens)).numpy()
    assert got.shape == expected.shape == (BATCH, 32, 512)
    err = relative_error({"x": got}, {"x": expected})
    print(f"transformer eval logits relative error {err:.2e}")
    assert err <= 1e-4  # measured 1.6e-7


def test_attention_is_causal(torch_model, batch):
    tokens, _ = batch
    changed = tokens.copy()
    changed[:, -1] = (changed[:, -1] + 1) % INPUTS["vocab_size"]
    model = jittor_twin(jittor_impl, INPUTS, torch_model)
    with jt.no_grad():
        a, b = model(jt.array(tokens)).numpy(), model(jt.array(changed)).numpy()
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=0, atol=1e-6)
    assert not np.allclose(a[:, -1], b[:, -1])


def test_the_loss_matches_torch(batch):
    _, targets = batch
    logits = np.random.default_rng(2).standard_normal((BATCH, 32, 512), dtype=np.float32)
    expected = torch_impl.loss_fn(torch.from_numpy(logits), torch.from_numpy(targets)).item()
    got = float(jittor_impl.loss_fn(jt.array(logits), jt.array(targets)).item())
    err = abs(got - expected) / expected
    print(f"transformer loss on the same logits: relative error {err:.2e}")
    assert err <= 1e-5  # measured 1.4e-7


def test_the_optimizers_are_the_same_adamw(torch_model):
    model = jittor_twin(jittor_impl, INPUTS, torch_model)
    jopt = jittor_impl.make_optimizer(model.parameters())
    topt = torch_impl.make_optimizer(torch_model.parameters())
    jnames = {id(p): n for n, p in model.named_parameters()}
    tnames = {id(p): n for n, p in torch_model.named_parameters()}

    def groups(param_groups, names):
        return [
            (g["weight_decay"], sorted(names[id(p)] for p in g["params"])) for g in param_groups
        ]

    assert groups(jopt.param_groups, jnames) == groups(topt.param_groups, tnames)
    decayed = groups(jopt.param_groups, jnames)[0]
    assert decayed[0] == spec.ADAMW_WEIGHT_DECAY and "wte.weight" in decayed[1]
    assert not any(n.endswith("bias") or ".ln" in n or n.startswith("ln_f") for n in decayed[1])
    t = topt.param_groups[0]
    assert (jopt.lr, tuple(jopt.betas), jopt.eps) == (t["lr"], tuple(t["betas"]), t["eps"])


def test_one_adamw_step_matches_torch(torch_model, batch):
    tokens, targets = batch
    before = from_torch(torch_state(torch_model))
    model = torch_impl.build(INPUTS)
    model.load_state_dict(torch_model.state_dict())
    opt = torch_impl.make_optimizer(model.parameters())
    loss_t = torch_impl.loss_fn(model(torch.from_numpy(tokens)), torch.from_numpy(targets))
    loss_t.backward()
    opt.step()
    after_t = from_torch(torch_state(model))

    jmodel = jittor_twin(jittor_impl, INPUTS, torch_model)
    jopt = jittor_impl.make_optimizer(jmodel.parameters())
    loss_j = jittor_impl.loss_fn(jmodel(jt.array(tokens)), jt.array(targets))
    jopt.step(loss_j)
    jt.sync_all(True)
    after_j = jittor_state(jmodel)

    loss_err = abs(float(loss_j.item()) - loss_t.item()) / loss_t.item()
    delta_t = {n: after_t[n] - before[n] for n in before}
    delta_j = {n: after_j[n] - before[n] for n in before}
    update_err, params_err = relative_error(delta_j, delta_t), relative_error(after_j, after_t)
    # The decoupled weight decay's share of the update (lr * wd * p on the decayed group): the
    # update bound is far below it, so a decay left out or put on the wrong group would fail.
    decay = {
        n: spec.ADAMW_LR * spec.ADAMW_WEIGHT_DECAY * p for n, p in before.items() if p.ndim >= 2
    }
    share = norm(decay) / norm(delta_t)
    print(
        f"transformer AdamW step: loss {loss_err:.1e}, update {update_err:.1e}, "
        f"params {params_err:.1e} (weight decay's share of the update {share:.1e})"
    )
    assert loss_err <= 1e-5  # measured 3.0e-7
    assert update_err <= 1e-4 < share / 10  # measured 1.3e-5 (the decay's share 1.8e-3)
    assert params_err <= 1e-5  # measured 1.5e-7


# -- strategies, through the backend ---------------------------------------------------------


def test_accumulate_2_gives_the_baseline_gradients(torch_model, batch):
    base = session("baseline", torch_model)
    np.testing.assert_array_equal(base.batches[0][0].numpy(), batch[0])
    np.testing.assert_array_equal(base.batches[0][1].numpy(), batch[1])
    acc = session("accumulate-2", torch_model)
    assert [len(x) for x, _ in acc.batches] == [BATCH // 2] * 2
    err = relative_error(session_probes.gradients(acc), session_probes.gradients(base))
    print(f"jittor transformer accumulate-2 gradients relative error {err:.2e}")
    assert err <= 1e-5  # measured 1.8e-7


@pytest.mark.parametrize(
    ("name", "why"),
    [("checkpoint", "no activation checkpointing API"), ("fused-attention", "no fused attention")],
)
def test_cells_jittor_does_not_run_say_why(name, why):
    with pytest.raises(Unsupported, match=why):
        session(name)


@pytest.fixture(scope="module")
def baseline_logits():
    return session_probes.logits(session("baseline"))


class DtypeProbe:
    """The dtypes entering the first block and leaving the model (Jittor's forward hooks)."""

    def __init__(self, model):
        self.block_input, self.output = [], []
        model.blocks[0].register_pre_forward_hook(
            lambda m, args: self.block_input.append(str(args[0].dtype))
        )
        model.register_forward_hook(lambda m, args, out: self.output.append(str(out.dtype)))


@pytest.mark.parametrize(
    ("name", "dtype", "bound"),
    [
        ("amp-fp16", "float16", 1e-2),  # measured 2.0e-3
        # Measured 0.21: Jittor's CPU bfloat16 rounds by truncation and accumulates in bfloat16
        # (a 64x64 bfloat16 matmul alone is 10% off, as a truncating emulation; torch's CPU
        # autocast accumulates in float32, held to 5e-2): a bound against garbage only.
        ("amp-bf16", "bfloat16", 0.3),
    ],
)
def test_amp_enters_the_blocks_in_low_precision(name, dtype, bound, baseline_logits):
    s = session(name)
    # The backend passes compute_dtype to the model: token ids (integers) cannot carry amp's
    # precision in, so the embeddings are cast before the blocks; weights stay float32.
    assert s.model.compute_dtype == dtype and s.notes()["amp_level"] == 5
    assert {str(p.dtype) for p in s.model.parameters()} == {"float32"}
    assert all(str(x.dtype).startswith("int") for x, _ in s.batches)
    probe = DtypeProbe(s.model)
    # under the session's amp level; runs on CPU (first run compiles ~25 s)
    logits = session_probes.logits(s)
    assert probe.block_input == probe.output == [dtype]
    err = relative_error({"x": logits}, {"x": baseline_logits})
    print(f"jittor transformer {name} logits relative error {err:.2e}")
    assert 0 < err <= bound


def test_infer_half_keeps_the_token_ids_integers(baseline_logits):
    s = session("infer-half")
    assert s.optimizer is None
    assert {str(p.dtype) for p in s.model.parameters()} == {"float16"}
    assert all(str(x.dtype).startswith("int") for x, _ in s.batches)  # int32: not cast
    probe = DtypeProbe(s.model)
    err = relative_error({"x": session_probes.logits(s)}, {"x": baseline_logits})
    print(f"jittor transformer infer-half logits relative error {err:.2e}")
    assert probe.block_input == probe.output == ["float16"]
    assert 0 < err <= 1e-2  # measured 2.0e-3


# -- whole steps through the backend --------------------------------------------------------


def test_an_amp_fp16_step_keeps_finite_float32_master_weights():
    # The update runs outside the amp scope: at amp level 5 AdamW's arithmetic would turn
    # its state and the weights into float16 (v underflows to 0).
    s = session("amp-fp16")
    s.step()
    assert {str(p.dtype) for p in s.model.parameters()} == {"float32"}
    assert all(np.isfinite(p.numpy()).all() for p in s.model.parameters())


def test_an_accumulated_step_is_the_baseline_step():
    # Jittor's optimizer.backward counts a step per micro-batch and AdamW's bias correction
    # reads the count; the backend counts one step per step.
    base, acc = session("baseline"), session("accumulate-2")
    before = jittor_state(base.model)
    assert relative_error(jittor_state(acc.model), before) == 0
    base.step()
    acc.step()
    delta = {n: v - before[n] for n, v in jittor_state(base.model).items()}
    got = {n: v - before[n] for n, v in jittor_state(acc.model).items()}
    assert relative_error(got, delta) <= 1e-4
