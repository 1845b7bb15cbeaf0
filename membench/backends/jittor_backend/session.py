"""The Jittor session: a built model, optimizer and batch, and the step's primitives (the step
itself is membench.backends.session's template; Jittor is lazy, so its sync runs the step;
what the worker reads is readings.py)."""

from __future__ import annotations

import re
from typing import Any

from membench.backends import (
    Session,
    Unsupported,
    micro_batches,
    model_module,
    model_options,
)
from membench.backends.jittor_backend.batchnorm import running_statistics, trainable
from membench.backends.jittor_backend.readings import JittorReadings
from membench.backends.jittor_backend.runtime import AMP_LEVEL
from membench.backends.jittor_backend.support import HALF_DTYPES, SUPPORT

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class JittorSession(Session):
    support = SUPPORT
    readings_class = JittorReadings

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
            self.options["compute_dtype"] = HALF_DTYPES[s.precision]
        self.model = self.new_model(spec.seed)
        self.trainable_parameters = sum(p.numel() for p in trainable(self.model))
        self.running_statistics = sum(p.numel() for p in running_statistics(self.model))
        k = s.accumulate
        # Data resident as k micro-batches, split once: slicing each step would add ops.
        self.batches = [(jt.array(x), jt.array(y)) for x, y in micro_batches(images, labels, k)]
        if s.precision in HALF_DTYPES and float_inputs:
            # Inputs in the low precision (token ids stay integers); with amp the float32
            # parameters stay the master weights and the amp level makes the ops between them
            # compute in low precision.
            dtype = HALF_DTYPES[s.precision]
            self.batches = [(x.cast(dtype), y) for x, y in self.batches]
        self.amp_level = AMP_LEVEL if amp else 0
        if s.mode == "infer":
            self.model.eval()
            self.optimizer = None
        else:
            self.model.train()
            self.optimizer = module.make_optimizer(self.model.parameters())
        jt.sync_all(True)
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
    def copy_batch(self) -> list[Any]:
        jt = self.jt
        dtype = HALF_DTYPES.get(self.strategy.precision)
        batches = []
        for x, y in self.host_batches:
            x = jt.array(x)
            if dtype and x.dtype.is_float():
                x = x.cast(dtype)
            batches.append((x, jt.array(y)))
        jt.sync_all(True)
        return batches

    def infer(self, model: Any = None, length: int | None = None) -> None:
        """Eval under no_grad, each micro-batch run as it is built."""
        model = self.model if model is None else model
        with self.jt.no_grad(), amp(self):
            if length is not None:
                model(self.batches[0][0][:, :length]).sync()
                return
            for x, _ in self.batches:
                model(x).sync()

    def infer_with_autograd(self) -> None:
        with amp(self):  # no jt.no_grad(): Jittor records the graph back to the input
            self.output = [self.model(x) for x, _ in self.batches]
            self.jt.sync(self.output)

    def train_step(self) -> None:
        if len(self.batches) == 1:
            x, y = self.batches[0]
            with amp(self):  # forward and backward only: the update stays in float32
                self.optimizer.backward(self.module.loss_fn(self.model(x), y))
            self.optimizer.step()
            return
        with amp(self):
            backward(self)
        # optimizer.backward counts a step per micro-batch, and Adam's bias correction
        # reads that count: one optimizer step is one step, as in the baseline.
        self.optimizer.n_step -= len(self.batches) - 1
        self.optimizer.step()

    def sync(self) -> None:
        self.jt.sync_all(True)  # Jittor is lazy: nothing has run until here

    def explain(self, exc: RuntimeError) -> Exception:
        """Jittor's kernels for float16/bfloat16 arithmetic do not compile for the CPU: an
        attempt that fails so is a cell Jittor cannot run here, with the compiler's reason."""
        text = _ANSI.sub("", str(exc))
        dtype = HALF_DTYPES.get(self.strategy.precision)
        if self.device != "cuda" and dtype and "Error happend during compilation" in text:
            found = re.search(r"jit/(code__\S{0,60})", text)
            kernel = f" ({found.group(1)}...)" if found else ""
            return Unsupported(
                f"Jittor {self.jt.__version__} cannot compile its CPU kernels for {dtype} "
                f"{self.strategy.mode} steps: tried, and g++ rejected a generated {dtype} "
                f"kernel{kernel}; the compiler's message is in the cell's log"
            )
        return exc


def amp(s: JittorSession) -> Any:
    """The session's amp level around graph construction (Jittor picks each op's dtype then)."""
    return s.jt.flag_scope(auto_mixed_precision_level=s.amp_level)


def backward(s: JittorSession) -> Any:
    """Forward and backward over the micro-batches into the optimizer's gradients (train_step's,
    and the parity tests'); each micro-batch loss is divided by k, so the sum is the mean
    loss's gradient. Returns the loss."""
    k = len(s.batches)
    # Lazy: without a sync the k micro-batches' graphs run together at the step's end,
    # holding every micro-batch's activations at once (Jittor issue 602).
    sync = s.strategy.accumulate_mode == "sync"
    total = None
    for x, y in s.batches:
        loss = s.module.loss_fn(s.model(x), y)
        loss = loss / k if k > 1 else loss
        s.optimizer.backward(loss)
        if sync:
            s.jt.sync_all()
        total = loss if total is None else total + loss
    return total
