"""A built cell ready to step, and the step every framework runs.

Session is the template of both. Construction: the framework builds its model, optimizer and
batch (build), then the advice strategies' set-up is done here once: a second model built and
held (two-resident), or the built one dropped (two-sequential). The step: the host batch
copied (host-data), then the strategy's branch (a training update; or inference: with autograd
left on, two models one after the other, varying lengths, or every resident model), the device
synchronised, the step counted and the hygiene strategies' collector run. The phases the
worker reports apart (the copy, the collector) are timed here, and the notes common to every
framework (mode, micro-batches, the advice strategies) and the analytic floor are written
here.

A framework supplies the primitives: build, train_step, infer, infer_with_autograd,
infer_length and sequence_length, new_model (a freshly initialised model) and infer_with (the
two-model strategies), copy_batch and drop_batch, sync and release, model_sizes and
framework_notes; and may hook prepare_step (before the branch), after_step (after the count),
drop_model and explain (a framework's error said in the suite's words). Its notes quote its
declared support (how) and add only what is known at run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from membench.backends.phases import (
    COLLECTOR,
    TRANSFER,
    PhaseClock,
    hygiene_due,
    lengths_for_step,
    model_seeds,
)

if TYPE_CHECKING:
    import numpy as np

    from membench.backends import BuildSpec, Support
    from membench.registry import Strategy

# A model's state between steps: what no strategy but sharding can remove (the analytic floor)
MODEL_STATE = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")


class Session:
    """A built model, optimizer and batch, ready to step."""

    spec: BuildSpec
    strategy: Strategy
    # The framework's declared support (its backend's table): how() quotes it in the notes.
    support: ClassVar[Support] = {}
    module: Any  # the workload's model module for this framework (backends.model_module)
    model: Any  # the built model (None where two-sequential holds nothing between steps)

    def __init__(self, spec: BuildSpec, device: Any = None) -> None:
        """device: where the backend found the session should run (build may refine it)."""
        self.spec = spec
        self.strategy = spec.strategy
        self.device = device
        self.phases = PhaseClock()
        self.steps = 0
        self.output: Any = None  # infer-grad: the last output, held as a loop variable holds it
        self.second: Any = None  # two-resident: the second model, built and held
        self.build()
        if self.strategy.models == "two-resident":
            self.second = self.inference_model(model_seeds(spec.seed)[1])
        elif self.strategy.models == "two-sequential":
            self.drop_model()

    @property
    def host_data(self) -> bool:
        """The batch is copied from host memory every step (the strategy's data=host)."""
        return self.strategy.data == "host"

    @property
    def models(self) -> list[Any]:
        """The models resident between steps, where a model is one object holding its weights
        (torch, Jittor): the built one and the second (two-resident); none (two-sequential)."""
        return [m for m in (self.model, self.second) if m is not None]

    def inference_model(self, seed: int) -> Any:
        """An independently initialised copy of the model, ready for inference."""
        model = self.new_model(seed)
        model.eval()
        return model

    def drop_model(self) -> None:
        """Two models in turn: nothing resident between steps, the built model dropped and
        its memory given back."""
        self.model = None
        self.release()

    # -- the step ----------------------------------------------------------------------
    def step(self) -> None:
        """One full step (train or infer), returning only when the device is done."""
        try:
            self._step()
        except RuntimeError as exc:
            explained = self.explain(exc)
            if explained is exc:
                raise
            raise explained from exc

    def _step(self) -> None:
        s = self.strategy
        self.phases.start_step()
        if self.host_data:
            self.drop_batch()  # the previous copy dropped, as rebinding a loop variable does
            with self.phases.timed(TRANSFER):
                self.copy_batch()
        self.prepare_step()
        if s.mode == "train":
            self.train_step()
        elif s.eval_autograd:
            self.infer_with_autograd()
        elif s.models == "two-sequential":
            self._infer_sequential()
        elif s.lengths == "varying":
            for n in lengths_for_step(self.steps, self.sequence_length(), self.spec.seed):
                self.infer_length(n)
        else:
            self.infer()
        self.sync()
        self.steps += 1
        self.after_step()
        if hygiene_due(self.steps, s.hygiene_every):
            with self.phases.timed(COLLECTOR):
                self.release()

    def _infer_sequential(self) -> None:
        """Two models in turn, nothing resident between them: build, run, free, release."""
        for seed in model_seeds(self.spec.seed):
            model = self.inference_model(seed)
            self.infer_with(model)
            del model
            self.release()

    # -- primitives: what each framework writes --------------------------------------------
    def build(self) -> None:
        """The model (self.model, self.module), optimizer and batch on the device, and the
        host copy of the batch where the strategy copies it every step (host-data)."""
        raise NotImplementedError

    def train_step(self) -> None:
        """One optimizer update over the batch (its micro-batches where it accumulates)."""
        raise NotImplementedError

    def infer(self) -> None:
        """Eval-mode forwards under the framework's no-autograd context, every resident model."""
        raise NotImplementedError

    def infer_with_autograd(self) -> None:
        """An eval-mode forward with autograd left on, its output held in self.output."""
        raise NotImplementedError

    def infer_length(self, length: int) -> None:
        """An inference forward over the batch's first length tokens."""
        raise NotImplementedError

    def sequence_length(self) -> int:
        """The batch's sequence length (the varying lengths are fractions of it)."""
        raise NotImplementedError

    def new_model(self, seed: int) -> Any:
        """A model initialised from seed, on the device, in the strategy's parameter dtype."""
        raise NotImplementedError

    def infer_with(self, model: Any) -> None:
        """One inference forward of a model built by inference_model, synchronised."""
        raise NotImplementedError

    def copy_batch(self) -> None:
        """The host batch copied to the device, synchronised (host-data)."""
        raise NotImplementedError

    def drop_batch(self) -> None:
        """The device copy of the batch released before the next copy (host-data)."""

    def prepare_step(self) -> None:
        """Before the strategy's branch (JAX: the compile its first step holds)."""

    def sync(self) -> None:
        """Wait for the device's pending work."""

    def after_step(self) -> None:
        """After the step is counted, before the hygiene (Jittor: its counters)."""

    def release(self) -> None:
        """What users call to give memory back (the collector, the allocator's cache)."""

    def explain(self, exc: RuntimeError) -> Exception:
        """A step's error in the suite's words (Jittor: an unsupported kernel); else exc."""
        return exc

    # -- what the worker reads -----------------------------------------------------------
    def step_phases(self) -> dict[str, float]:
        """Seconds of the last step spent in parts the worker reports apart from compute
        (membench.backends.phases.PHASES: the host-to-device copy, the collector)."""
        return dict(self.phases.last) if hasattr(self, "phases") else {}

    def marked_step_phases(self) -> str:
        """Which parts of a step this session marks on the memory timeline
        (membench.instruments.marks), or why it marks the step as one phase."""
        return "the step as one phase"

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """One more step under the framework's own memory view (`--trace`), its files written
        at prefix (a path without suffix): {what the file holds: its name}. Run after the
        measured steps: a view's overhead is never in the measured figures."""
        from membench.backends import Unsupported

        raise Unsupported(f"{type(self).__name__} offers no memory view of its own")

    def reset_peaks(self) -> None:
        """Reset the framework's resettable peak counters (if any)."""

    def memory(self) -> dict[str, float]:
        """Framework memory counters read after the measured steps, named by layer."""
        return {}

    def static_metrics(self) -> dict[str, float]:
        """Figures known without running: the framework's sizes (model_sizes) and the analytic
        floor, the model state's sum (parameters, gradients, optimizer state)."""
        out = self.model_sizes()
        out["analytic_floor_bytes"] = float(sum(out.get(k, 0.0) for k in MODEL_STATE))
        return out

    def model_sizes(self) -> dict[str, float]:
        """Sizes read off the live model and optimizer (MODEL_STATE among them where the
        framework knows them: those not given count 0 in the floor), with any figure the
        framework knows without running (parameter counts, compiler estimates)."""
        return {}

    def notes(self) -> dict[str, object]:
        """What the strategy really did here, for the record: how() for what the support
        table declares, and what is known only here (sizes, devices, flags read back). The
        framework's own notes first (framework_notes); then, where not said there already,
        the micro-batches and the advice strategies' notes."""
        s = self.strategy
        notes: dict[str, object] = {"mode": s.mode, **self.framework_notes()}
        if s.accumulate > 1:
            notes.setdefault("accumulate", self.how("accumulate"))
            notes["micro_batch"] = self.spec.batch_size // s.accumulate
            if self.module.HAS_BATCHNORM:
                notes.setdefault("batchnorm", "train-mode statistics over each micro-batch")
        notes.update(self.advice_notes())
        return notes

    def framework_notes(self) -> dict[str, object]:
        """The framework's own notes (its device, dtypes, flags read back, how it runs the
        strategy's knobs); an accumulate or batchnorm note written here is kept."""
        return {}

    def how(self, knob: str, value: object = None) -> str:
        """How this framework runs a knob's value (the strategy's where value is None), quoted
        from its declared support: the text lives once, in the backend's support table."""
        from membench.backends import ANY, Implemented

        value = getattr(self.strategy, knob) if value is None else value
        values = self.support.get(knob, {})
        entry = values[value] if value in values else values.get(ANY)
        if not isinstance(entry, Implemented):
            raise LookupError(f"{type(self).__name__} declares no way to run {knob}={value!r}")
        return entry.how

    def advice_notes(self) -> dict[str, object]:
        """The advice strategies' notes (autograd left on, two models, host data, hygiene,
        lengths): each declared how, with what the run fixed (the seeds, k)."""
        s, notes = self.strategy, {}
        if s.eval_autograd:
            notes["autograd"] = self.how("eval_autograd")
        if s.models != "one":
            notes["models"] = self.how("models")
            if s.models == "two-resident":
                first, second = model_seeds(self.spec.seed)
                notes["models"] += f" (seeds {first} and {second})"
        if s.data == "host":
            notes["data"] = self.how("data")
        if s.hygiene_every:
            notes["hygiene"] = f"{self.how('hygiene_every')}; k = {s.hygiene_every}"
        if s.lengths == "varying":
            notes["lengths"] = self.how("lengths")
        return notes

    def all_ranks(self, flag: bool) -> bool:
        """Whether flag holds on every rank of the cell (the worker's warm-up must stop at the
        same step on all of them, or their collectives wait forever); one rank: flag."""
        return flag

    def rank_metrics(self) -> list[dict[str, float]]:
        """Per-device metrics of a session that drives several devices from this one process
        (JAX's sharding), in device order; [] where the process is one rank."""
        return []

    # -- test hooks: the parity tests compare frameworks and strategies through these ----------
    def gradients(self, train_bn: bool = True) -> dict[str, np.ndarray]:
        """One step's gradients by parameter name, float64, unscaled, the weights left as they
        were; train_bn=False: BatchNorm on its running averages (samples independent)."""
        raise NotImplementedError(f"{type(self).__name__} offers no gradients()")

    def logits(self) -> np.ndarray:
        """The model's eval-mode output for the whole batch, float32."""
        raise NotImplementedError(f"{type(self).__name__} offers no logits()")
