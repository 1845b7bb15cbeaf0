"""A built cell ready to step, and the step every framework runs.

Session is the template of the construction and the step. Construction: the framework builds
its model, optimizer and batch (build), then the advice strategies' set-up is done here once:
a second model built and held (two-resident), or the built one dropped (two-sequential). The
step: the previous host copy dropped and the batch copied (host-data), then the strategy's
branch (a training update; or inference: with autograd left on, two models one after the
other, varying lengths, or every resident model), the device synchronised, the step counted
and the hygiene strategies' collector run. The phases the worker reports apart (the copy, the
collector) are timed here, and the notes common to every framework (mode, micro-batches, the
advice strategies) and the analytic floor are written here.

A framework's Session subclass (<name>_backend/session.py) writes only primitives:
  build()                  the model (self.model, self.module), optimizer and device batch
                           (self.batches: (inputs, labels) pairs), the host copy where asked;
  train_step()             one optimizer update over the batch;
  infer(model, length)     an inference forward without autograd: the built model (None),
                           the second or one from new_model; the first length tokens, or all;
  new_model(seed)          a freshly initialised model (the two-model strategies);
and where it runs what they need:
  infer_with_autograd()    a forward with autograd left on, its output held in self.output;
  copy_batch()             the host batch copied to the device, returned as self.batches;
  sync(), release()        wait for the device; give memory back as users do;
  drop_model()             the built model dropped (two-sequential), where more than
                           self.model holds it;
  prepare_step()           before the branch (JAX: the compile its first step holds);
  explain(exc)             a step's error in the suite's words (Jittor: an unsupported kernel).

What the worker reads besides the step (memory counters, the framework's own memory view,
timeline marks, sizes, notes, ranks) is the framework's Readings (<name>_backend/readings.py,
the class named by readings_class), built beside the session: notes and the analytic floor
are written here from its framework_notes and model_sizes. Its notes quote its declared
support (how) and add only what is known at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from membench.backends.declarations import ANY, Implemented
from membench.backends.phases import (
    COLLECTOR,
    TRANSFER,
    PhaseClock,
    hygiene_due,
    lengths_for_step,
    model_seeds,
)
from membench.backends.readings import MODEL_STATE, Readings
from membench.metrics import ANALYTIC_FLOOR_BYTES

if TYPE_CHECKING:
    from membench.backends.declarations import BuildSpec, Support
    from membench.registry import Strategy

# What a framework's Session subclass writes, and nothing else (tests/test_contracts.py): its
# construction (build) and at most these ten primitives of the step.
STEP_PRIMITIVES = (
    "train_step", "infer", "new_model", "infer_with_autograd", "copy_batch", "sync", "release",
    "drop_model", "prepare_step", "explain",
)  # fmt: skip


class Session:
    """A built model, optimizer and batch, ready to step."""

    spec: BuildSpec
    strategy: Strategy
    # The framework's declared support (its backend's table): how() quotes it in the notes.
    support: ClassVar[Support] = {}
    # What the worker reads off this framework's session besides the step.
    readings_class: ClassVar[type[Readings]] = Readings
    readings: Readings
    module: Any  # the workload's model module for this framework (backends.model_module)
    model: Any  # the built model (None where two-sequential holds nothing between steps)
    batches: list[Any]  # the device batch: (inputs, labels) pairs, micro-batches where kept apart

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
        self.readings = self.readings_class(self)
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
        """An independently initialised copy of the model, ready for inference (in eval mode
        where the model has one; a Flax model's mode is an argument of apply)."""
        model = self.new_model(seed)
        if hasattr(model, "eval"):
            model.eval()
        return model

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
            self.batches = []  # the previous copy dropped, as rebinding a loop variable does
            with self.phases.timed(TRANSFER):
                self.batches = self.copy_batch()
        self.prepare_step()
        if s.mode == "train":
            self.train_step()
        elif s.eval_autograd:
            self.infer_with_autograd()
        elif s.models == "two-sequential":
            self._infer_sequential()
        elif s.lengths == "varying":
            tokens = self.batches[0][0].shape[1]
            for n in lengths_for_step(self.steps, tokens, self.spec.seed):
                self.infer(length=n)
        else:
            self.infer()
            if self.second is not None:  # two-resident: both
                self.infer(self.second)
        self.sync()
        self.steps += 1
        self.readings.after_step()
        if hygiene_due(self.steps, s.hygiene_every):
            with self.phases.timed(COLLECTOR):
                self.release()

    def _infer_sequential(self) -> None:
        """Two models in turn, nothing resident between them: build, run, free, release."""
        for seed in model_seeds(self.spec.seed):
            model = self.inference_model(seed)
            self.infer(model)
            self.sync()
            del model
            self.release()

    # -- primitives: what each framework writes --------------------------------------------
    def build(self) -> None:
        """The model (self.model, self.module), optimizer and batch on the device
        (self.batches), and the host copy of the batch where the strategy copies it every
        step (host-data)."""
        raise NotImplementedError

    def train_step(self) -> None:
        """One optimizer update over the batch (its micro-batches where it accumulates)."""
        raise NotImplementedError

    def infer(self, model: Any = None, length: int | None = None) -> None:
        """An eval-mode forward under the framework's no-autograd context: of the built model
        (model None, run as the step runs it) or of one from inference_model; over the whole
        batch, or its first length tokens (varying lengths)."""
        raise NotImplementedError

    def new_model(self, seed: int) -> Any:
        """A model initialised from seed, on the device, in the strategy's parameter dtype."""
        raise NotImplementedError

    def infer_with_autograd(self) -> None:
        """An eval-mode forward with autograd left on, its output held in self.output."""
        raise NotImplementedError

    def copy_batch(self) -> list[Any]:
        """The host batch copied to the device, synchronised (host-data): the new batches."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait for the device's pending work."""

    def release(self) -> None:
        """What users call to give memory back (the collector, the allocator's cache)."""

    def drop_model(self) -> None:
        """Two models in turn: nothing resident between steps, the built model dropped and
        its memory given back."""
        self.model = None
        self.release()

    def prepare_step(self) -> None:
        """Before the strategy's branch (JAX: the compile its first step holds)."""

    def explain(self, exc: RuntimeError) -> Exception:
        """A step's error in the suite's words (Jittor: an unsupported kernel); else exc."""
        return exc

    # -- what the worker reads (the framework's part: self.readings) ---------------------
    def step_phases(self) -> dict[str, float]:
        """Seconds of the last step spent in parts the worker reports apart from compute
        (membench.backends.phases.PHASES: the host-to-device copy, the collector)."""
        return dict(self.phases.last) if hasattr(self, "phases") else {}

    def static_metrics(self) -> dict[str, float]:
        """Figures known without running: the framework's sizes (model_sizes) and the analytic
        floor, the model state's sum (parameters, gradients, optimizer state)."""
        out = self.readings.model_sizes()
        out[ANALYTIC_FLOOR_BYTES] = float(sum(out.get(k, 0.0) for k in MODEL_STATE))
        return out

    def notes(self) -> dict[str, object]:
        """What the strategy really did here, for the record: how() for what the support
        table declares, and what is known only here (sizes, devices, flags read back). The
        framework's own notes first (framework_notes); then, where not said there already,
        the micro-batches and the advice strategies' notes."""
        s = self.strategy
        notes: dict[str, object] = {"mode": s.mode, **self.readings.framework_notes()}
        if s.accumulate > 1:
            notes.setdefault("accumulate", self.how("accumulate"))
            notes["micro_batch"] = self.spec.batch_size // s.accumulate
            if self.module.HAS_BATCHNORM:
                notes.setdefault("batchnorm", "train-mode statistics over each micro-batch")
        notes.update(self.advice_notes())
        return notes

    def how(self, knob: str, value: object = None) -> str:
        """How this framework runs a knob's value (the strategy's where value is None), quoted
        from its declared support: the text lives once, in the backend's support table."""
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
