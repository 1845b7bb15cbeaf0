"""The Jittor session: a built model, optimizer and batch; the step's primitives (the step
itself is membench.backends.session's template; Jittor is lazy, so its sync runs the step),
and the counters the worker reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from membench.backends import (
    Session,
    Unsupported,
    micro_batches,
    model_module,
    model_options,
)
from membench.backends.jittor_backend.batchnorm import (
    freeze_batchnorm,
    running_statistics,
    trainable,
)
from membench.backends.jittor_backend.runtime import AMP_LEVEL, jit_cache_files, onednn_in_use
from membench.backends.jittor_backend.support import SUPPORT

if TYPE_CHECKING:
    import numpy as np

_HALF_DTYPES = {"amp-fp16": "float16", "amp-bf16": "bfloat16", "half": "float16"}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class JittorSession(Session):
    support = SUPPORT

    def build(self) -> None:
        import jittor as jt

        self.jt = jt
        spec, s = self.spec, self.strategy
        jt.flags.use_cuda = int(self.device == "cuda")
        module = model_module(spec.workload, "jittor")
        self.module = module
        images, labels = module.synthetic_batch(spec.batch_size, spec.size.inputs, spec.seed)
        amp = s.precision in ("amp-fp16", "amp-bf16")
        float_inputs = images.dtype.kind == "f"
        self.options = model_options(spec)  # the model's knobs besides checkpointing
        if amp and not float_inputs:
            # Jittor's amp computes an op in low precision only where an input is: integer
            # inputs (token ids) leave that to the model's first float activation.
            self.options["compute_dtype"] = _HALF_DTYPES[s.precision]
        self.model = self.new_model(spec.seed)
        self.trainable_parameters = sum(p.numel() for p in trainable(self.model))
        self.running_statistics = sum(p.numel() for p in running_statistics(self.model))
        k = s.accumulate
        # Data resident as k micro-batches, split once: slicing each step would add ops.
        self.batches = [(jt.array(x), jt.array(y)) for x, y in micro_batches(images, labels, k)]
        if s.precision in _HALF_DTYPES and float_inputs:
            # Inputs in the low precision (token ids stay integers); with amp the float32
            # parameters stay the master weights and the amp level makes the ops between them
            # compute in low precision.
            dtype = _HALF_DTYPES[s.precision]
            self.batches = [(x.cast(dtype), y) for x, y in self.batches]
        self.amp_level = AMP_LEVEL if amp else 0
        if s.mode == "infer":
            self.model.eval()
            self.optimizer = None
        else:
            self.model.train()
            self.optimizer = module.make_optimizer(self.model.parameters())
        jt.sync_all(True)
        self._reserved_max: dict[str, int] = {}
        self.jit_files_before = jit_cache_files()
        self.jit_kernels_first_step = 0
        # host-data: numpy micro-batches, as a data loader hands them over
        self.host_batches = micro_batches(images, labels, k) if self.host_data else None

    def new_model(self, seed: int) -> Any:
        self.jt.set_global_seed(seed)
        model = self.module.build(self.spec.size.inputs, **self.options)
        if self.strategy.precision == "half":
            model.float16()  # every parameter (and BN statistic) cast, as torch's half()
        return model

    def release(self) -> None:
        """What Jittor users call to give memory back: finish pending work, free the caches."""
        self.jt.sync_all(True)
        self.jt.gc()

    # -- the step's primitives (Session.step is the template) ----------------------------
    def drop_batch(self) -> None:
        self.batches = []

    def copy_batch(self) -> None:
        jt = self.jt
        dtype = _HALF_DTYPES.get(self.strategy.precision)
        for x, y in self.host_batches:
            x = jt.array(x)
            if dtype and x.dtype.is_float():
                x = x.cast(dtype)
            self.batches.append((x, jt.array(y)))
        jt.sync_all(True)

    def infer_with(self, model: Any) -> None:
        with self.jt.no_grad(), self._amp():
            for x, _ in self.batches:
                model(x).sync()

    def infer_with_autograd(self) -> None:
        with self._amp():  # no jt.no_grad(): Jittor records the graph back to the input
            self.output = [self.model(x) for x, _ in self.batches]
            self.jt.sync(self.output)

    def sequence_length(self) -> int:
        return self.batches[0][0].shape[1]

    def infer_length(self, length: int) -> None:
        with self.jt.no_grad(), self._amp():
            self.model(self.batches[0][0][:, :length]).sync()

    def infer(self) -> None:
        """Eval under no_grad over every resident model."""
        for model in self.models:
            self.infer_with(model)

    def train_step(self) -> None:
        if len(self.batches) == 1:
            x, y = self.batches[0]
            with self._amp():  # forward and backward only: the update stays in float32
                self.optimizer.backward(self.module.loss_fn(self.model(x), y))
            self.optimizer.step()
            return
        with self._amp():
            self.accumulate_gradients()
        # optimizer.backward counts a step per micro-batch, and Adam's bias correction
        # reads that count: one optimizer step is one step, as in the baseline.
        self.optimizer.n_step -= len(self.batches) - 1
        self.optimizer.step()

    def sync(self) -> None:
        self.jt.sync_all(True)  # Jittor is lazy: nothing has run until here

    def after_step(self) -> None:
        if self.steps == 1:
            self.jit_kernels_first_step = jit_cache_files() - self.jit_files_before
        self._read_reserved()

    # -- the computation -----------------------------------------------------------------
    def accumulate_gradients(self) -> Any:
        """Forward and backward over the micro-batches into the optimizer's gradients; each
        micro-batch loss is divided by k, so the sum is the mean loss's gradient."""
        k = len(self.batches)
        # Lazy: without a sync the k micro-batches' graphs run together at the step's end,
        # holding every micro-batch's activations at once (Jittor issue 602).
        sync = self.strategy.accumulate_mode == "sync"
        total = None
        for x, y in self.batches:
            loss = self.module.loss_fn(self.model(x), y)
            loss = loss / k if k > 1 else loss
            self.optimizer.backward(loss)
            if sync:
                self.jt.sync_all()
            total = loss if total is None else total + loss
        return total

    def gradients(self, train_bn: bool = True) -> dict[str, np.ndarray]:
        """Session.gradients."""
        self.optimizer.zero_grad()
        freeze_batchnorm(self.model, not train_bn)
        with self._amp():
            self.accumulate_gradients()
        freeze_batchnorm(self.model, False)
        names = {id(p): n for n, p in self.model.named_parameters()}
        out = {}
        for group in self.optimizer.param_groups:
            for p, g in zip(group["params"], group["grads"], strict=True):
                if not p.is_stop_grad():
                    out[names[id(p)]] = g.numpy().astype("float64")
        return out

    def logits(self) -> np.ndarray:
        """Session.logits (under the session's amp level)."""
        jt = self.jt
        was_training = self.model.is_training()
        self.model.eval()
        with jt.no_grad(), self._amp():
            out = jt.concat([self.model(x) for x, _ in self.batches]).float32().numpy()
        if was_training:
            self.model.train()
        return out

    def _amp(self) -> Any:
        """The amp level around graph construction (Jittor picks each op's dtype then)."""
        return self.jt.flag_scope(auto_mixed_precision_level=self.amp_level)

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """Jittor's report of its peak memory over one more step (profile_memory_enable): the
        peak and the variables alive at it. Its call sites need trace_py_var, which Jittor
        1.3.11 refuses on Python 3.11 ("python3.11 not supported yet"): not asked for."""
        jt = self.jt
        with jt.flag_scope(profile_memory_enable=1):
            self.step()
            _, text = jt.get_max_memory_treemap(do_print=False)
        path = prefix.with_name(prefix.name + ".max-memory-treemap.txt")
        path.write_text(text)
        return {"Jittor's peak memory over one step and the variables alive at it": path.name}

    def marked_step_phases(self) -> str:
        return (
            "the step as one phase: Jittor runs lazily, the whole step's graph at its sync "
            "(a mark between calls would time the graph's building)"
        )

    def explain(self, exc: RuntimeError) -> Exception:
        """Jittor's kernels for float16/bfloat16 arithmetic do not compile for the CPU: an
        attempt that fails so is a cell Jittor cannot run here, with the compiler's reason."""
        text = _ANSI.sub("", str(exc))
        dtype = _HALF_DTYPES.get(self.strategy.precision)
        if self.device != "cuda" and dtype and "Error happend during compilation" in text:
            found = re.search(r"jit/(code__\S{0,60})", text)
            kernel = f" ({found.group(1)}...)" if found else ""
            return Unsupported(
                f"Jittor {self.jt.__version__} cannot compile its CPU kernels for {dtype} "
                f"{self.strategy.mode} steps: tried, and g++ rejected a generated {dtype} "
                f"kernel{kernel}; the compiler's message is in the cell's log"
            )
        return exc

    # -- counters ------------------------------------------------------------------------
    def _read_reserved(self) -> None:
        info = self.jt.get_mem_info()
        for name, value in (("cpu", info.total_cpu_used), ("cuda", info.total_cuda_used)):
            self._reserved_max[name] = max(self._reserved_max.get(name, 0), int(value))

    def reset_peaks(self) -> None:
        self._reserved_max = {}

    def memory(self) -> dict[str, float]:
        # Jittor keeps no peak counter: the highest reading of its allocators' reserved bytes
        # (used + cached) after a measured step. Its caching allocator keeps freed blocks, so
        # the reading after a step holds what the step needed at once (up to fragmentation).
        out = {"jittor_cpu_reserved_bytes": float(self._reserved_max.get("cpu", 0))}
        if self.device == "cuda":
            out["jittor_cuda_reserved_bytes"] = float(self._reserved_max.get("cuda", 0))
        return out

    def model_sizes(self) -> dict[str, float]:
        # the current Vars (half() reassigns) of every resident model (none: two-sequential)
        params = [p for m in self.models for p in trainable(m)]
        param_bytes = sum(p.numel() * p.dtype.dsize() for p in params)
        out: dict[str, float] = {
            "trainable_parameters": float(self.trainable_parameters),
            "running_statistics": float(self.running_statistics),
            "parameter_bytes": float(param_bytes),
            "jittor_jit_kernels_compiled_first_step": float(self.jit_kernels_first_step),
        }
        if self.optimizer is not None:
            groups = self.optimizer.param_groups
            grads = sum(g.numel() * g.dtype.dsize() for pg in groups for g in pg.get("grads", []))
            state = sum(v.numel() * v.dtype.dsize() for pg in groups for v in pg["values"])
            out["gradient_bytes"] = float(grads)
            out["optimizer_state_bytes"] = float(state)
        return out

    def framework_notes(self) -> dict[str, object]:
        s = self.strategy
        jt = self.jt
        notes: dict[str, object] = {
            "device": self.device,
            "fusion": "off (no_fuse=1)" if jt.flags.no_fuse else "on (Jittor always fuses)",
            "jit": "each new fused op is compiled on first use and cached on disk; the first "
            "step holds that compilation (none where an earlier cell cached the same ops)",
            "onednn": onednn_in_use(),
            "jittor_memory": "jt.get_mem_info() reserved bytes, highest reading after a step",
        }
        if s.precision in ("amp-fp16", "amp-bf16"):
            notes["amp_level"] = self.amp_level
            notes["input_dtype"] = _HALF_DTYPES[s.precision]
            notes["param_dtype"] = "float32"
            notes["loss_scaling"] = "none: Jittor has no loss scaler"
        if s.precision == "half":
            notes["model_dtype"] = "float16"
        if s.accumulate > 1 and s.accumulate_mode == "sync":
            notes["accumulate"] = self.how("accumulate") + "; jt.sync_all() after each micro-batch"
        if s.allocator in ("cuda-managed", "host-swap"):
            notes["allocator"] = self.how("allocator")
        notes["matmul"] = s.matmul
        notes["use_tensorcore"] = int(jt.flags.use_tensorcore)
        return notes
