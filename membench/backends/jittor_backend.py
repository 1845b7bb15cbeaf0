"""Jittor backend. jittor is imported inside methods, after the worker has set the env.

Used the way Jittor's own examples use it: the model's parameters handed to jt.optim.SGD,
`optimizer.step(loss)` for a step, `optimizer.backward(loss / k)` per micro-batch then
`optimizer.step()` for accumulation, `jt.flags.auto_mixed_precision_level` with float16 inputs
for mixed precision, `model.eval()` under `jt.no_grad()` for inference. Jittor always fuses
operators and compiles each new fused kernel on first use (cached on disk under
~/.cache/jittor); the first step holds that compilation.

Running this module (`python -m membench.backends.jittor_backend`) compiles Jittor's core and
its oneDNN ops once on this machine: scripts/install.sh does it, so that no cell or test pays
the one-off compile (minutes). With `--save-mem` (GPU) it compiles the save-mem cells' core,
kept in a cache of its own.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from membench import registry
from membench.backends import (
    ANY,
    TF32_ELSEWHERE,
    Backend,
    BuildSpec,
    Implemented,
    Session,
    Support,
    Unsupported,
    micro_batches,
    model_options,
    tf32_override,
)
from membench.backends.phases import (
    COLLECTOR,
    TRANSFER,
    PhaseClock,
    hygiene_due,
    lengths_for_step,
    model_seeds,
)
from membench.registry import Strategy, workload

if TYPE_CHECKING:
    import numpy as np

# Jittor's amp levels: 5 = ops prefer float16 where an input is float16 (sum, exp and the like
# stay float32) and arrays created inside the graph follow; the level Jittor's own fp16 ResNet
# test trains with.
AMP_LEVEL = 5
# Device limit for JT_SAVE_MEM's host swapping (GPU only): a fixed budget, so that a cell shows
# what swapping costs and saves under the same pressure on any card.
SAVE_MEM_DEVICE_LIMIT_BYTES = 8 * 2**30
# Jittor's cache_compile turns every `#ifdef JT_*` whose variable is set into a -D flag
# (src/utils/cache_compile.cc): JT_SAVE_MEM changes the command of each core file that includes
# src/mem/swap.h, which is then recompiled in place. save-mem cells keep a core of their own,
# in a cache of its own (cache_name, a folder under Jittor's cache; JITTOR_HOME would be
# written into ~/.cache/jittor/config.json as every later process's default).
SAVE_MEM_CACHE_NAME = "membench-save-mem"
# Jittor's out-of-memory: its CUDA allocator's fatal log (src/mem/allocator/
# cuda_device_allocator.cc), CUDA's own status, and the host allocator's
OOM_MARKERS = (
    "out of memory",
    "Out of memory",
    "std::bad_alloc",
    "mem_limit",
    "Unable to alloc cuda device memory",
    "cudaErrorMemoryAllocation",
)
_HALF_DTYPES = {"amp-fp16": "float16", "amp-bf16": "bfloat16", "half": "float16"}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def model_module(workload_name: str) -> Any:
    modules = workload(workload_name).model_modules
    if "jittor" not in modules:
        raise Unsupported(f"workload {workload_name} has no Jittor model")
    return importlib.import_module(modules["jittor"])


def base_env(device: str) -> dict[str, str]:
    """Jittor's environment for this machine, whatever the strategy (see scripts/install.sh)."""
    env = {"FIX_TORCH_ERROR": "0"}  # else `import jittor` imports torch into our baseline
    if device == "cuda":
        # cutt, cutlass and oneDNN would be downloaded from Jittor's server; on a GPU cuBLAS
        # and cuDNN do the work (oneDNN serves CPU convolutions only).
        env.update(use_cutt="0", use_cutlass="0", use_mkl="0")
    else:
        env["nvcc_path"] = ""  # a CUDA toolkit without a GPU: no CUDA build attempt
    return env


def prepare_import(device: str | None = None) -> dict[str, str]:
    """Set Jittor's environment before `import jittor` in this process (tests, compile_core)."""
    from membench.environment import detected_device

    env = base_env(device or detected_device())
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return env


def import_into_host_process(device: str | None = None) -> Any:
    """Import Jittor into a process that is not a cell's worker (the test session).

    Jittor installs C signal handlers that quick-exit the whole process on SIGINT and when any
    child process dies by a signal (SIGCHLD): a test runner that kills a hung worker would die
    with it. Python's own handlers are put back; workers keep Jittor's, as Jittor runs.
    """
    import signal

    prepare_import(device)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGCHLD)}
    import jittor

    for sig, handler in saved.items():
        signal.signal(sig, handler)
    return jittor


def onednn_in_use() -> bool:
    """Whether Jittor's convolutions run on oneDNN (its mkl ops compiled and loaded)."""
    import jittor as jt

    return jt.compile_extern.mkl_ops is not None


def jit_cache_files() -> int:
    """Compiled op kernels in Jittor's on-disk cache (shared by every process of this user)."""
    import jittor as jt

    path = Path(jt.flags.cache_path) / "jit"
    return sum(1 for _ in path.iterdir()) if path.is_dir() else 0


# Jittor lists BatchNorm running statistics among a module's parameters (torch keeps them as
# buffers); they are told apart by name, because Jittor's eval() marks every parameter stop_grad.
_RUNNING = ("running_mean", "running_var")


def trainable(model: Any) -> list[Any]:
    """The weights the optimizer updates (every parameter but BatchNorm's running statistics)."""
    return [p for n, p in model.named_parameters() if not n.endswith(_RUNNING)]


def running_statistics(model: Any) -> list[Any]:
    return [p for n, p in model.named_parameters() if n.endswith(_RUNNING)]


def freeze_batchnorm(model: Any, frozen: bool = True) -> None:
    """BatchNorm on its running averages (frozen) or batch statistics, weights still trained
    (Jittor's eval() would also stop every parameter's gradient)."""
    from jittor import nn

    for m in model.modules():
        if isinstance(m, nn.BatchNorm):
            m.is_train = not frozen


def from_torch(state: dict[str, Any]) -> dict[str, Any]:
    """A torch model's state_dict (numpy arrays) as the Jittor model's: every model module keeps
    torch's names and layouts; torch's BatchNorm step counter has no Jittor counterpart."""
    import numpy as np

    return {
        name: np.ascontiguousarray(value, dtype=np.float32)
        for name, value in state.items()
        if not name.endswith("num_batches_tracked")
    }


def load_torch_state(model: Any, state: dict[str, Any]) -> None:
    """Copy a torch model's state_dict into its Jittor twin, refusing any name or shape
    mismatch (Jittor's load_state_dict would skip them)."""
    converted = from_torch(state)
    own = model.state_dict()
    if set(own) != set(converted):
        missing, extra = set(own) - set(converted), set(converted) - set(own)
        raise KeyError(f"state names differ: missing {sorted(missing)}, extra {sorted(extra)}")
    for name, value in converted.items():
        if tuple(own[name].shape) != value.shape:
            raise ValueError(f"{name}: shape {value.shape}, model has {tuple(own[name].shape)}")
    model.load_state_dict(converted)


class JittorSession(Session):
    def __init__(self, spec: BuildSpec, device: str, options: dict[str, object]):
        """options: the model's knobs besides checkpointing (backends.model_options)."""
        import jittor as jt

        self.jt = jt
        self.spec = spec
        self.strategy = s = spec.strategy
        self.device = device
        jt.flags.use_cuda = int(device == "cuda")
        module = model_module(spec.workload)
        self.module = module
        images, labels = module.synthetic_batch(spec.batch_size, spec.size.inputs, spec.seed)
        amp = s.precision in ("amp-fp16", "amp-bf16")
        float_inputs = images.dtype.kind == "f"
        if amp and not float_inputs:
            # Jittor's amp computes an op in low precision only where an input is: integer
            # inputs (token ids) leave that to the model's first float activation.
            options = {**options, "compute_dtype": _HALF_DTYPES[s.precision]}
        jt.set_global_seed(spec.seed)
        self.model = module.build(spec.size.inputs, **options)
        self.trainable_parameters = sum(p.numel() for p in trainable(self.model))
        self.running_statistics = sum(p.numel() for p in running_statistics(self.model))
        if s.precision == "half":
            self.model.float16()  # every parameter (and BN statistic) cast, as torch's half()
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
        self.steps = 0
        self.jit_kernels_first_step = 0
        self._advice_setup(images, labels, options)

    # -- the advice strategies: autograd left on, two models, host data, hygiene, lengths ------
    def _advice_setup(self, images: Any, labels: Any, options: dict[str, object]) -> None:
        s = self.strategy
        self.options = options
        self.phases = PhaseClock()
        self.output: Any = None  # infer-grad: the last output, held as a loop variable holds it
        self.on_phase: Callable[[str], None] | None = None  # tests watch the two-model phases
        self._built: weakref.WeakSet = weakref.WeakSet([self.model])  # to count those alive
        self.models = [self.model]
        self.one_model_bytes = module_bytes(self.model)
        if s.models == "two-resident":
            self.models.append(self.inference_model(model_seeds(self.spec.seed)[1]))
        elif s.models == "two-sequential":  # nothing resident between steps
            self.models, self.model = [], None
            self.jt.sync_all(True)
            self.jt.gc()
        self.host_batches = None
        if s.data == "host":  # numpy micro-batches, as a data loader hands them over
            k = s.accumulate
            self.host_batches = micro_batches(images, labels, k)

    def inference_model(self, seed: int) -> Any:
        """An independently initialised copy of the workload's model, ready for inference."""
        self.jt.set_global_seed(seed)
        model = self.module.build(self.spec.size.inputs, **self.options)
        if self.strategy.precision == "half":
            model.float16()
        model.eval()
        self._built.add(model)
        return model

    def alive_parameter_bytes(self) -> int:
        """Parameter bytes of every model this session built that is still alive."""
        return sum(module_bytes(m) for m in list(self._built))

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def release(self) -> None:
        """What Jittor users call to give memory back: finish pending work, free the caches."""
        self.jt.sync_all(True)
        self.jt.gc()

    def _transfer(self) -> None:
        jt = self.jt
        dtype = _HALF_DTYPES.get(self.strategy.precision)
        self.batches = []  # the previous copy dropped, as rebinding a loop variable does
        with self.phases.timed(TRANSFER):
            for x, y in self.host_batches:
                x = jt.array(x)
                if dtype and x.dtype.is_float():
                    x = x.cast(dtype)
                self.batches.append((x, jt.array(y)))
            jt.sync_all(True)

    def _infer_sequential(self) -> None:
        jt = self.jt
        for i, seed in enumerate(model_seeds(self.spec.seed)):
            model = self.inference_model(seed)
            self._phase(f"built model {i}")
            with jt.no_grad(), self._amp():
                for x, _ in self.batches:
                    model(x).sync()
            del model
            self.release()
            self._phase(f"freed model {i}")

    def _infer(self) -> None:
        """Inference: the advice variants, or eval under no_grad over every resident model."""
        jt, s = self.jt, self.strategy
        if s.eval_autograd:  # no jt.no_grad(): Jittor records the graph back to the input
            with self._amp():
                self.output = [self.model(x) for x, _ in self.batches]
                jt.sync(self.output)
        elif s.models == "two-sequential":
            self._infer_sequential()
        elif s.lengths == "varying":
            x = self.batches[0][0]
            for n in lengths_for_step(self.steps, x.shape[1], self.spec.seed):
                with jt.no_grad(), self._amp():
                    self.model(x[:, :n]).sync()
        else:
            with jt.no_grad(), self._amp():
                for model in self.models:
                    for x, _ in self.batches:
                        model(x).sync()

    def step_phases(self) -> dict[str, float]:
        return dict(self.phases.last)

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

    def step(self) -> None:
        try:
            self._step()
        except RuntimeError as exc:
            raise self._explain(exc) from exc

    def _explain(self, exc: RuntimeError) -> Exception:
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

    def _step(self) -> None:
        jt = self.jt
        self.phases.start_step()
        if self.host_batches is not None:
            self._transfer()
        if self.optimizer is None:
            self._infer()
        elif len(self.batches) == 1:
            x, y = self.batches[0]
            with self._amp():  # forward and backward only: the update stays in float32
                self.optimizer.backward(self.module.loss_fn(self.model(x), y))
            self.optimizer.step()
        else:
            with self._amp():
                self.accumulate_gradients()
            # optimizer.backward counts a step per micro-batch, and Adam's bias correction
            # reads that count: one optimizer step is one step, as in the baseline.
            self.optimizer.n_step -= len(self.batches) - 1
            self.optimizer.step()
        jt.sync_all(True)  # Jittor is lazy: nothing has run until here
        self.steps += 1
        if self.steps == 1:
            self.jit_kernels_first_step = jit_cache_files() - self.jit_files_before
        self._read_reserved()
        if hygiene_due(self.steps, self.strategy.hygiene_every):
            with self.phases.timed(COLLECTOR):
                self.release()

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

    def static_metrics(self) -> dict[str, float]:
        # the current Vars (half() reassigns) of every resident model (none: two-sequential)
        params = [p for m in self.models for p in trainable(m)]
        param_bytes = sum(p.numel() * p.dtype.dsize() for p in params)
        out: dict[str, float] = {
            "trainable_parameters": float(self.trainable_parameters),
            "running_statistics": float(self.running_statistics),
            "parameter_bytes": float(param_bytes),
            "jittor_jit_kernels_compiled_first_step": float(self.jit_kernels_first_step),
        }
        floor = param_bytes
        if self.optimizer is not None:
            groups = self.optimizer.param_groups
            grads = sum(g.numel() * g.dtype.dsize() for pg in groups for g in pg.get("grads", []))
            state = sum(v.numel() * v.dtype.dsize() for pg in groups for v in pg["values"])
            out["gradient_bytes"] = float(grads)
            out["optimizer_state_bytes"] = float(state)
            floor += grads + state
        out["analytic_floor_bytes"] = float(floor)
        return out

    def notes(self) -> dict[str, object]:
        s = self.strategy
        jt = self.jt
        notes: dict[str, object] = {
            "mode": s.mode,
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
        if s.accumulate > 1:
            notes["accumulate"] = "optimizer.backward(loss / k) per micro-batch, one step()" + (
                "; jt.sync_all() after each micro-batch" if s.accumulate_mode == "sync" else ""
            )
            notes["micro_batch"] = self.spec.batch_size // s.accumulate
            notes["batchnorm"] = "train-mode statistics over each micro-batch"
        if s.allocator == "cuda-managed":
            notes["allocator"] = "use_cuda_managed_allocator=1 (CUDA unified memory)"
        if s.allocator == "host-swap":
            notes["allocator"] = (
                f"JT_SAVE_MEM=1, device_mem_limit={SAVE_MEM_DEVICE_LIMIT_BYTES}: "
                f"variables swap to host memory past the limit; core cache {SAVE_MEM_CACHE_NAME}"
            )
        notes["matmul"] = s.matmul
        notes["use_tensorcore"] = int(jt.flags.use_tensorcore)
        notes.update(advice_notes(s))
        return notes


def module_bytes(model: Any) -> int:
    return sum(p.numel() * p.dtype.dsize() for p in model.parameters()) if model else 0


def advice_notes(s: Strategy) -> dict[str, object]:
    notes: dict[str, object] = {}
    if s.eval_autograd:
        notes["autograd"] = (
            "model.eval() outside jt.no_grad(): eval() stops every parameter's gradient, but a "
            "jt.array input is differentiable, so the graph back to the input is recorded; the "
            "output is held until the next step's forward has run"
        )
    if s.models == "two-resident":
        notes["models"] = "two models (seeds 0 and 101) built at setup; each step runs both"
    if s.models == "two-sequential":
        notes["models"] = (
            "each step builds model 0, runs it, deletes it, jt.sync_all(True) + jt.gc(), "
            "then the same for model 1"
        )
    if s.data == "host":
        notes["data"] = "numpy batch, jt.array(...) + jt.sync_all(True) each step, timed apart"
    if s.hygiene_every:
        notes["hygiene"] = f"jt.sync_all(True) + jt.gc() after every {s.hygiene_every} steps"
    if s.lengths == "varying":
        notes["lengths"] = (
            "x[:, :n], n from a seeded schedule; Jittor compiles each new shape's kernels, "
            "the first step runs each length once"
        )
    return notes


GPU_LEVER = (
    "use_cuda_managed_allocator and JT_SAVE_MEM relieve GPU memory (unified memory, swapping "
    "device memory to the host); on a CPU host the tensors already live in host memory"
)


# Jittor's data parallelism is MPI: it compiles its mpi ops at import when it finds mpicc, and
# runs under `mpirun -np W` (ranks from OMPI_COMM_WORLD_*), not under the runner's launch.
JITTOR_MPI = (
    "Jittor's data parallelism needs its MPI build (mpicc found at import, then `mpirun -np W`); "
    "this suite's install has no OpenMPI and its rank launch is torchrun's environment, not "
    "mpirun: not implemented"
)
JITTOR_NO_SHARDING = (
    "Jittor has no sharded optimizer or parameter sharding: its MPI data parallelism "
    "all-reduces whole gradients on every rank"
)


class JittorBackend(Backend):
    name = "jittor"
    baseline = (
        "the step as Jittor's examples write it: optimizer.step(loss), jt.sync_all(True); "
        "operators fused and JIT-compiled; on GPUs float32 in full (use_tensorcore=0, "
        "NVIDIA_TF32_OVERRIDE=0: its cuDNN convolutions keep cuDNN's default math, TF32 allowed)"
    )
    # Jittor has no allocator peak: its reserve after each step, else NVML's process figure
    device_peak_layers = ("jittor_cuda_reserved_bytes", "peak_device_process_bytes")
    support: Support = {
        "precision": {
            "amp-bf16": Implemented(
                f"auto_mixed_precision_level={AMP_LEVEL} around forward and backward, bfloat16 "
                "inputs over float32 parameters, the update in float32; no loss scaler"
            ),
            "amp-fp16": Implemented(
                f"auto_mixed_precision_level={AMP_LEVEL} with float16 inputs over float32 "
                "parameters; no loss scaling (Jittor has no loss scaler)"
            ),
            "half": Implemented("model.float16(), input float16"),
        },
        "checkpoint": {
            True: "Jittor has no activation checkpointing API (no recompute-in-backward "
            "primitive); the suite does not imitate one"
        },
        "accumulate": {
            ANY: Implemented("optimizer.backward(loss / k) per micro-batch, one optimizer.step()")
        },
        "accumulate_mode": {
            "scan": "Jittor has no loop operator inside its graph: a Python loop over the "
            "micro-batches builds one lazy graph, which is the loop mode",
            "sync": Implemented(
                "optimizer.backward(loss / k) then jt.sync_all() per micro-batch, one "
                "optimizer.step(): each micro-batch's graph runs and frees before the next"
            ),
        },
        "mode": {"infer": Implemented("model.eval() under jt.no_grad()")},
        "compile": {
            True: "Jittor always runs fused, JIT-compiled operators: the baseline is the "
            "compiled run (its compile time is in first_step_seconds); no-fuse is the "
            "uncompiled one"
        },
        "allocator": {
            "expandable-segments": "expandable_segments is a PyTorch CUDA allocator setting; "
            "Jittor's allocator levers are the managed-allocator and save-mem strategies",
            "cuda-managed": Implemented(
                "use_cuda_managed_allocator=1 (CUDA unified memory)", ("cuda",), GPU_LEVER
            ),
            "host-swap": Implemented(
                f"JT_SAVE_MEM=1 with device_mem_limit={SAVE_MEM_DEVICE_LIMIT_BYTES // 2**30} GiB: "
                "variables swap to host memory past the limit",
                ("cuda",),
                GPU_LEVER,
            ),
        },
        "fusion": {False: Implemented("no_fuse=1 (set before import): every operator a kernel")},
        "matmul": {
            "tf32": Implemented(
                "use_tensorcore=1: cuBLAS computes float32 as CUBLAS_COMPUTE_32F_FAST_TF32; cuDNN "
                "convolutions get CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which also allows "
                "float16 conversion (extern/cuda/cudnn/ops/cudnn_conv_op.cc)",
                ("cuda",),
                TF32_ELSEWHERE,
            )
        },
        "attention": {
            "fused": "Jittor has no fused attention kernel for CPU or CUDA: "
            "jittor.attention.scaled_dot_product_attention writes the product, mask and "
            "softmax out as separate ops (the plain attention); its flash attention op is "
            "for Ascend NPUs only"
        },
        "eval_autograd": {
            True: Implemented(
                "model.eval() outside jt.no_grad() (eval() stops parameter gradients; the graph "
                "back to the input is kept); the output held until the next step"
            )
        },
        "models": {
            "two-resident": Implemented("two models built, both run each step"),
            "two-sequential": Implemented(
                "build, run, del, jt.sync_all(True) + jt.gc(), for each model in turn"
            ),
        },
        "data": {"host": Implemented("numpy batch, jt.array + jt.sync_all(True), timed apart")},
        "hygiene_every": {ANY: Implemented("jt.sync_all(True) + jt.gc() every k steps")},
        "lengths": {"varying": Implemented("x[:, :n] with n from the seeded schedule")},
        "sharding": {
            "replicated": JITTOR_MPI,
            **dict.fromkeys(("zero1", "zero2", "zero3"), JITTOR_NO_SHARDING),
        },
    }

    @classmethod
    def unenforced_device_limit(cls, strategy: Strategy) -> str | None:
        if strategy.allocator == "host-swap":
            return None
        return (
            "Jittor reads device_mem_limit only in its swapping allocator (src/mem/swap.cc, "
            "JT_SAVE_MEM): without it nothing stops an allocation past the budget"
        )

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        env = base_env(device)
        if not strategy.fusion:
            env["no_fuse"] = "1"  # a Jittor flag read from the environment at import
        if device == "cuda":
            env["use_tensorcore"] = "1" if strategy.matmul == "tf32" else "0"
            env.update(tf32_override(strategy, device))
        if device == "cuda" and strategy.allocator == "cuda-managed":
            env["use_cuda_managed_allocator"] = "1"
        if device == "cuda" and strategy.allocator == "host-swap":
            env["JT_SAVE_MEM"] = "1"
            env["device_mem_limit"] = str(SAVE_MEM_DEVICE_LIMIT_BYTES)
            env["cache_name"] = SAVE_MEM_CACHE_NAME
        # No capacity budget is passed on: device_mem_limit binds only with JT_SAVE_MEM
        # (unenforced_device_limit), and capacity applies the budget to the measured peak.
        return env

    def _device(self) -> str:
        import jittor as jt

        return "cuda" if jt.has_cuda else "cpu"

    def environment(self) -> dict[str, object]:
        import jittor as jt

        env: dict[str, object] = {
            "framework": "jittor",
            "framework_version": jt.__version__,
            "device": self._device(),
            "onednn": onednn_in_use(),
            "jittor_cache_path": str(jt.flags.cache_path),
            "jittor_cc_path": str(jt.flags.cc_path),
            "no_fuse": int(jt.flags.no_fuse),
            "torch_in_process": "torch" in sys.modules,  # FIX_TORCH_ERROR=0 keeps it out
        }
        if jt.has_cuda:
            env["nvcc_path"] = str(jt.flags.nvcc_path)
            env["use_cuda_managed_allocator"] = int(jt.flags.use_cuda_managed_allocator)
        return env

    def create_session(self, spec: BuildSpec) -> JittorSession:
        return JittorSession(spec, self._device(), model_options(spec))

    def is_oom(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, MemoryError) or any(m in text for m in OOM_MARKERS)


def compile_core(save_mem: bool = False) -> None:
    """Compile Jittor's core and its oneDNN convolution ops once, and say what is in use;
    save_mem: the save-mem cells' own core (GPU only), in its own cache."""
    if save_mem:
        cells = JittorBackend().env_vars(registry.strategy("save-mem"), "cuda")
        os.environ.update({k: v for k, v in cells.items() if k != "device_mem_limit"})
    env = prepare_import()
    import jittor as jt
    import numpy as np

    conv = jt.nn.Conv2d(3, 4, 3, padding=1, bias=False)
    x = jt.array(np.ones((1, 3, 8, 8), np.float32))
    jt.grad(conv(x).sum(), conv.weight).sync()
    print(
        f"Jittor {jt.__version__} ready: oneDNN {'in use' if onednn_in_use() else 'NOT in use'}, "
        f"CUDA {'in use' if jt.has_cuda else 'off'}, cache {jt.flags.cache_path}, env {env}"
    )
    if not onednn_in_use():
        print("warning: Jittor runs convolutions without oneDNN (much slower)", file=sys.stderr)


if __name__ == "__main__":
    compile_core(save_mem="--save-mem" in sys.argv[1:])
