"""The presets: input sizes, batch grids, the measurement protocol and what each leaves to
another; the capacity searches of the main job."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from membench import argtypes
from membench.env_var import Setting
from membench.registry.frameworks import FRAMEWORKS
from membench.registry.knobs import Strategy
from membench.registry.names import lookup
from membench.registry.strategies import SHARDING_STRATEGIES
from membench.unknown_names import UnknownNameError


@dataclass(frozen=True)
class Timing:
    """How a preset's cells are measured: warm-up until two consecutive steps differ by less
    than the tolerance (at least min steps, at most max seconds), then the measured steps."""

    warmup_min_steps: int
    warmup_max_seconds: float
    warmup_tolerance: float  # relative change between consecutive steps that counts as stable
    measure_steps: int


@dataclass(frozen=True)
class WorkloadSize:
    """Input sizes and batch grid of one workload in one preset (never the architecture)."""

    batch_sizes: tuple[int, ...]
    inputs: dict[str, int] = field(default_factory=dict)
    # this workload's limit per cell where it differs from the preset's (cells that run on
    # slow reference kernels end as `timeout` instead of holding the run for many minutes)
    cell_timeout_seconds: float | None = None


@dataclass(frozen=True)
class LeftOut:
    """Cells a preset does not measure, and why (mostly: another preset measures them). An
    empty tuple matches every name."""

    frameworks: tuple[str, ...]
    workloads: tuple[str, ...]
    strategies: tuple[str, ...]
    reason: str

    def covers(self, framework: str, workload: str, strategy: str) -> bool:
        return all(
            not names or name in names
            for names, name in (
                (self.frameworks, framework), (self.workloads, workload),
                (self.strategies, strategy),
            )
        )  # fmt: skip


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    sizes: dict[str, WorkloadSize]
    timing: Timing  # the measurement protocol of its cells
    cell_timeout_seconds: float
    # The strategies measured when none are selected (empty: all of them). A probe preset
    # measures one question, e.g. eval memory over a fine batch grid.
    strategies: tuple[str, ...] = ()
    # Meant for a GPU: a framework that would run on another device ends `error` (the device
    # guard), so that a CPU figure never stands in a GPU table.
    gpu: bool = False
    # Ranks of a cell whose strategy shards (--world-size overrides); other cells run on one.
    world_size: int = 1
    # Cells this preset leaves to another (minutes each where the preset promises seconds).
    left_out: tuple[LeftOut, ...] = ()
    # Workloads in order of preference: when set, each framework runs each strategy once, on
    # the first selected workload that runs it (the baseline on every workload); the others
    # are left to a preset that runs them all. Empty: every strategy on every workload.
    once_per_strategy: tuple[str, ...] = ()
    # The memory budgets (bytes) of each workload's capacity searches, which `membench bench`
    # runs after the cells for the decision tables on a CPU preset (a GPU preset's run in
    # plans, `membench plan`), `membench capacity` without --budget, and the only budgets asv
    # keeps; a workload without one is not searched by bench.
    capacity_budgets: dict[str, tuple[float, ...]] = field(default_factory=dict)
    capacity_max_batch: int = 65_536  # the searches' largest batch
    # measurements of the answer and of the next batch (a fit only if every one fits)
    capacity_repeats: int = 1
    # Searches the preset leaves out although it measures their cells (a search probes far
    # larger batches than the cells' own)
    capacity_left_out: tuple[LeftOut, ...] = ()

    def leaves_out(self, framework: str, workload: str, strategy: str) -> str | None:
        """Why this preset does not measure a cell (None: it does)."""
        for rule in self.left_out:
            if rule.covers(framework, workload, strategy):
                return rule.reason
        return None

    def leaves_out_of_capacity(self, framework: str, workload: str, strategy: str) -> str | None:
        """Why this preset does not search a combination's capacity (None: it does)."""
        for rule in self.capacity_left_out:
            if rule.covers(framework, workload, strategy):
                return rule.reason
        return self.leaves_out(framework, workload, strategy)

    @property
    def warmup_min_steps(self) -> int:
        return self.timing.warmup_min_steps

    @property
    def warmup_max_seconds(self) -> float:
        return self.timing.warmup_max_seconds

    @property
    def warmup_tolerance(self) -> float:
        return self.timing.warmup_tolerance

    @property
    def measure_steps(self) -> int:
        return self.timing.measure_steps

    def size(self, workload: str) -> WorkloadSize:
        if workload not in self.sizes:
            raise UnknownNameError(f"workload in preset {self.name}", workload, list(self.sizes))
        return self.sizes[workload]

    def cell_timeout(self, workload: str) -> float:
        return self.size(workload).cell_timeout_seconds or self.cell_timeout_seconds


def world_size_of(strategy: Strategy, preset: Preset, override: int | None = None) -> int:
    """A cell's ranks: the preset's (or the override) where the strategy shards, else one."""
    return (override or preset.world_size) if strategy.sharding != "none" else 1


# Batch grids of the eval probes: every step small enough that a dip between neighbours shows.
EVAL_PROBE_CPU = (1, 2, 3, 4, 6, 8, 12, 16)
EVAL_PROBE_GPU = (*range(50, 500, 50), *range(500, 2001, 250))
EVAL_PROBE_QUICK = (150, 200, 300, 500)  # C7: 200 failed, 500 worked (16 GB)
# Transformer configurations: the preset's inputs name the model that ran (GPT-2 small on
# GPUs; CPU presets shrink width, depth, vocabulary and sequence to fit two cores).
GPT2_SMALL = {
    "vocab_size": 50257, "n_positions": 1024, "n_layer": 12, "n_head": 12, "d_model": 768,
    "seq_len": 1024,
}  # fmt: skip
# Claim C5's ~1B-parameter Transformer: GPT-2's shape at 20 layers of width 2048
# (1,112,193,024 parameters with GPT-2's vocabulary: models/transformer/spec.py)
GPT_1B = {
    "vocab_size": 50257, "n_positions": 1024, "n_layer": 20, "n_head": 16, "d_model": 2048,
    "seq_len": 1024,
}  # fmt: skip
# Claim C4's 512x512x128 MRI volumes: 128 slices of 512x512
UNET_SEED = {"depth": 128, "height": 512, "width": 512, "num_classes": 3}
SEED_PRESET = "gpu-seed"
TRANSFORMER_CPU = {
    "vocab_size": 8192, "n_positions": 128, "n_layer": 4, "n_head": 4, "d_model": 256,
    "seq_len": 128,
}  # fmt: skip
# Model state (16 bytes a parameter under AdamW) far above activations at a short sequence:
# 42,013,696 parameters: ~670 MB of state per replica against ~70 MB of activations at batch 4.
TRANSFORMER_SHARD = {
    "vocab_size": 32768, "n_positions": 32, "n_layer": 8, "n_head": 8, "d_model": 512,
    "seq_len": 32,
}  # fmt: skip
TRANSFORMER_TINY = {
    "vocab_size": 512, "n_positions": 32, "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32,
}  # fmt: skip

# The memory model's calibration cells (membench calibrate, membench/commands/calibrate.py):
# at the capacity searches' input sizes (ResNet-50 at 224x224: its fits at 128x128 did not carry
# to 224, where torch's checkpointing cost 35 MiB a sample against the 77 the 128x128 fit
# scaled by the spec's pixel count, and its baseline 78-94 against 112), at batches no other
# CPU preset of those inputs measures and no committed capacity search answered or put its
# next batch at (the U-Net at 8 and 24, the Transformer at 8 and 34, ResNet-50 at 6 and 18), so
# that no judged cell feeds its own prediction (the Transformer's 32 was Jittor's next batch at
# 1 GiB: test_calibration checks the committed searches). The batches lie where the
# activations decide the peak, as at the searches' answers: at small batches another part of
# the step peaks (torch's U-Net training rose 11.6 MiB a sample from 1 to 8, against 19.7
# fitted over its search's probes at 20 to 110), and at 1 and 3 the peaks differed by less
# than their noise (a slope 0.18x the spec's on amd-epyc-f26m2, 1.75x on intel-xeon). Each
# core strategy has its own fit: the spec's savings are not the measured ones (the
# Transformer's bfloat16 activations cost 0.79x the baseline's a sample where the spec says
# 0.5).
CALIBRATION_PRESET = "calibrate"


def slow_on_cpu(within: str) -> tuple[LeftOut, ...]:
    """The cells the frameworks declare too slow on two CPU cores for the list `within`
    (Framework.slow_on_cpu), as a preset leaves them out."""
    return tuple(
        LeftOut((f.name,), slow.workloads, slow.strategies, slow.reason)
        for f in FRAMEWORKS.values()
        for slow in f.slow_on_cpu
        if within in slow.within
    )


# What the smoke preset leaves to the cpu preset, from the committed cpu runs' cell times.
SMOKE_LEFT_OUT = (
    *slow_on_cpu("smoke"),
    LeftOut(
        ("torch",), ("unet3d",), ("amp-fp16", "infer-half"),
        "float16 3D convolutions run PyTorch's CPU reference kernels (past 150 s a cell)",
    ),
    LeftOut(
        ("torch",), ("resnet50", "unet3d"), ("compile",),
        "a cold Inductor compile per cell (40-50 s); smoke compiles the Transformer only",
    ),
)  # fmt: skip

# Seconds a cell on two CPU cores (smoke, cpu-quick): one warm-up step at least, three measured.
SHORT = Timing(warmup_min_steps=1, warmup_max_seconds=5.0, warmup_tolerance=0.25, measure_steps=3)

# The main job on a CPU host (membench bench with no arguments): each workload in every
# framework at small inputs, the core strategies at one batch, then their capacity searches.
QUICK_STRATEGIES = ("baseline", "amp-bf16", "checkpoint", "accumulate-4", "infer")
# the published decision tables add the host allocator's lever, a CPU's own (training and
# inference: each against its reference)
CAPACITY_STRATEGIES = (*QUICK_STRATEGIES, "mmap-threshold", "infer-mmap-threshold")
# every strategy a capacity search guesses has its own fit: torch's peaks with glibc's mmap
# threshold fixed are not its reference's (infer's constants carry the heap the threshold
# keeps resident, and guessed 264 for infer-mmap-threshold's 418 within 2 GiB)
CALIBRATION_STRATEGIES = CAPACITY_STRATEGIES
# cpu-quick's inputs, which the release sweep measures too (at two batches each)
QUICK_INPUTS = {
    "resnet50": {"image_size": 64, "num_classes": 1000},
    "unet3d": {"volume": 16, "num_classes": 3},
    "transformer": TRANSFORMER_CPU,
}
QUICK_LEFT_OUT = slow_on_cpu("quick")
QUICK_CAPACITY_LEFT_OUT = (
    LeftOut(
        ("jax",), ("unet3d",), (),
        "JAX's U-Net at 16^3 takes 0.65 s a sample a training step on two cores (42 s at batch "
        "64) and about a minute a probe near its answers: its five searches took 10 minutes "
        "(9ac2f8f), a third of the main job's 30; `membench capacity -p cpu-quick -w unet3d "
        "-f jax --budget 900MiB` runs them",
    ),
)  # fmt: skip

# The version sweep's preset (membench versions) and what it leaves out: cells that take
# minutes where the others take seconds would hold every release's sweep.
RELEASES_PRESET = "releases"
CAPACITY_PRESET = "cpu-capacity"
RELEASES_BATCHES = {"resnet50": (4, 8), "unet3d": (2, 4), "transformer": (4, 8)}
RELEASES_STRATEGIES = (
    "baseline", "amp-bf16", "checkpoint", "accumulate-4", "infer", "infer-half", "compile",
)  # fmt: skip
RELEASES_LEFT_OUT = (
    *QUICK_LEFT_OUT,
    *slow_on_cpu("releases"),
    LeftOut(
        ("torch",), ("unet3d",), ("infer-half",),
        "float16 3D convolutions run PyTorch's CPU reference kernels (past 150 s a cell)",
    ),
    LeftOut(
        ("torch",), ("resnet50", "unet3d"), ("compile",),
        "a cold Inductor compile per cell (40-50 s); the Transformer's cells compile",
    ),
)  # fmt: skip

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "smoke",
            "seconds per cell on two CPU cores: every strategy each framework runs, once (on "
            "the first of the Transformer, ResNet-50 and U-Net that runs it; the baseline on "
            "each workload it keeps), at small sizes and one batch (4: accumulation splits it "
            "in 2 and 4); cells on slow CPU reference kernels are left to the cpu preset "
            "(membench list says which)",
            {
                "resnet50": WorkloadSize((4,), {"image_size": 64, "num_classes": 1000}),
                "unet3d": WorkloadSize((4,), {"volume": 16, "num_classes": 3}),
                "transformer": WorkloadSize((4,), TRANSFORMER_TINY),
            },
            timing=SHORT,
            cell_timeout_seconds=600,
            left_out=SMOKE_LEFT_OUT,
            # the tiny Transformer's cells are the quickest, the U-Net's the slowest
            once_per_strategy=("transformer", "resnet50", "unet3d"),
        ),
        Preset(
            "cpu",
            "standard input sizes, batch grid sized for a CPU host",
            {
                "resnet50": WorkloadSize((1, 2, 4, 8), {"image_size": 224, "num_classes": 1000}),
                # The U-Net's smallest volume with a 2^3 bottom level. Jittor's generic 3D
                # convolution kernels take over 200 s a training cell on two cores (at 150 s every
                # Jittor U-Net cell ended unmeasured); torch's float16 conv3d runs on slow
                # reference kernels on CPUs: those cells end at the time limit.
                "unet3d": WorkloadSize(
                    (2,), {"volume": 16, "num_classes": 3}, cell_timeout_seconds=420
                ),
                "transformer": WorkloadSize((4,), TRANSFORMER_CPU, cell_timeout_seconds=150),
            },
            timing=Timing(2, 30.0, 0.10, 5),
            cell_timeout_seconds=900,
        ),
        Preset(
            "gpu",
            "standard input sizes, batch grid that reaches out-of-memory on an 80 GB card",
            {
                "resnet50": WorkloadSize(
                    (32, 64, 128, 256, 512, 1024, 2048), {"image_size": 224, "num_classes": 1000}
                ),
                "unet3d": WorkloadSize((1, 2, 4, 8, 16), {"volume": 128, "num_classes": 3}),
                "transformer": WorkloadSize((1, 2, 4, 8, 16, 32, 64), GPT2_SMALL),
            },
            timing=Timing(5, 60.0, 0.05, 20),
            cell_timeout_seconds=900,
            gpu=True,
        ),
        Preset(
            "cpu-quick",
            "the main job on a CPU host, under 30 minutes on two cores: every workload at small "
            "inputs (Jittor's U-Net left to cpu), the core strategies at one batch, then each "
            "one's largest batch within a memory budget per workload (the decision tables)",
            {w: WorkloadSize((4,), dict(inputs)) for w, inputs in QUICK_INPUTS.items()},
            timing=SHORT,
            cell_timeout_seconds=300,
            strategies=QUICK_STRATEGIES,
            left_out=QUICK_LEFT_OUT,
            # chosen from 6b5acae's probes so that the training answers fall between 4 and 64
            # (JAX's accumulate-4 needs 911 MiB at batch 4 on ResNet-50); inference, and
            # accumulation on the smaller runtimes, stop at the maximum (64): a lower bound
            capacity_budgets={
                "resnet50": (960 * 2**20,),
                "unet3d": (900 * 2**20,),
                "transformer": (650 * 2**20,),
            },  # fmt: skip
            capacity_max_batch=64,
            capacity_left_out=QUICK_CAPACITY_LEFT_OUT,
        ),
        # The decision tables at the workloads' standard sizes (membench capacity -p
        # cpu-capacity, in parts that resume): budgets where the batch decides (the fixed cost
        # under half the budget, the baseline's answers between 8 and 128), each answer and
        # the next batch measured three times.
        Preset(
            CAPACITY_PRESET,
            "capacity at standard sizes on a CPU host (ResNet-50 at 224x224, the cpu preset's "
            "U-Net and Transformer), two budgets per workload, each boundary measured three "
            "times: the published decision tables (hours on two cores; run in parts)",
            {
                "resnet50": WorkloadSize((8,), {"image_size": 224, "num_classes": 1000}),
                "unet3d": WorkloadSize((4,), dict(QUICK_INPUTS["unet3d"])),
                "transformer": WorkloadSize((8,), TRANSFORMER_CPU),
            },
            timing=SHORT,
            cell_timeout_seconds=900,
            strategies=CAPACITY_STRATEGIES,
            left_out=QUICK_LEFT_OUT,
            # from the cpu preset's records: ResNet-50 ~110 MiB a sample over ~0.6-0.9 GiB,
            # the U-Net ~25 over ~0.65, the Transformer 22-59 over ~0.2-0.4. ResNet-50's
            # second budget is 3 GiB, not 4: its 2 GiB searches took 86 minutes (answers 8-11
            # for the baseline), and at 3 GiB the baseline's answers lie near 15-25.
            capacity_budgets={
                "resnet50": (2 * 2**30, 3 * 2**30),
                "unet3d": (1.25 * 2**30, 2 * 2**30),
                "transformer": (2**30, 2 * 2**30),
            },  # fmt: skip
            # above every answer: at 256 the Transformer's inference and accumulation at 2 GiB
            # and torch's U-Net accumulation at 2 GiB stopped at the maximum (a lower bound)
            capacity_max_batch=512,
            capacity_repeats=3,
        ),
        # The framework-release sweep (membench versions): cpu-quick's inputs at two batches,
        # the core strategies, five measured steps (their spread is a verdict's noise).
        Preset(
            RELEASES_PRESET,
            "framework releases side by side (membench versions): every workload at "
            "cpu-quick's inputs, the core strategies at two batches, each release of a "
            "framework measured right after the one before it, cell by cell",
            {
                w: WorkloadSize(RELEASES_BATCHES[w], dict(inputs))
                for w, inputs in QUICK_INPUTS.items()
            },
            timing=Timing(1, 5.0, 0.25, 5),
            cell_timeout_seconds=300,
            strategies=RELEASES_STRATEGIES,
            left_out=RELEASES_LEFT_OUT,
        ),
        # One short GPU session's worth (membench/cells/gpu_session.py): two ResNet-50 batches,
        # the U-Net at 128^3 and GPT-2 small, fewer steps than `gpu`; each cell within 5 minutes.
        Preset(
            "gpu-quick",
            "standard input sizes, few batches and steps: the cells the GPU claims need",
            {
                "resnet50": WorkloadSize((64, 256), {"image_size": 224, "num_classes": 1000}),
                "unet3d": WorkloadSize((1, 2), {"volume": 128, "num_classes": 3}),
                "transformer": WorkloadSize((8,), GPT2_SMALL),
            },
            timing=Timing(3, 20.0, 0.05, 10),
            cell_timeout_seconds=300,
            gpu=True,
            # the GPU decision tables' budget, a 24 GB card's worth (docs/gpu.md), enforced by
            # each framework's own limit; asv keeps a preset's declared budgets only
            capacity_budgets={w: (24 * 2**30,) for w in ("resnet50", "unet3d", "transformer")},
        ),
        # The claims' own sizes (C4, C5), beyond a 24 GB card at the baseline: predicted on a
        # host without a GPU (membench gpu-predict -p gpu-seed), measured where a card holds
        # them.
        Preset(
            SEED_PRESET,
            "the claims' seed sizes: the U-Net on 128 slices of 512x512 (C4), a GPT-style "
            "Transformer of 1.1B parameters at sequence 1024 (C5); predicted without a GPU, "
            "measured on a card that holds them",
            {
                "unet3d": WorkloadSize((1,), dict(UNET_SEED)),
                "transformer": WorkloadSize((4,), GPT_1B),
            },
            timing=Timing(3, 20.0, 0.05, 10),
            cell_timeout_seconds=600,
            gpu=True,
            strategies=(
                "baseline",
                "checkpoint",
                "amp-bf16",
                "amp-bf16-checkpoint",
                "fused-attention",
                "fused-attention-bf16",
                "compile",
            ),
        ),  # fmt: skip
        # The eval-mode probe behind claim C7 (Jittor's eval failing at a batch below one that
        # works): inference only, over a batch grid fine enough to show non-monotonic memory.
        Preset(
            "cpu-eval",
            "eval-mode probe: inference over a fine batch grid, CPU host",
            {"resnet50": WorkloadSize(EVAL_PROBE_CPU, {"image_size": 224, "num_classes": 1000})},
            timing=Timing(1, 20.0, 0.15, 3),
            cell_timeout_seconds=600,
            strategies=("infer",),
        ),
        Preset(
            "gpu-eval",
            "eval-mode probe: inference over a fine batch grid up to out-of-memory, GPU",
            {"resnet50": WorkloadSize(EVAL_PROBE_GPU, {"image_size": 224, "num_classes": 1000})},
            timing=Timing(2, 30.0, 0.10, 5),
            cell_timeout_seconds=900,
            strategies=("infer",),
            gpu=True,
        ),
        Preset(
            "gpu-quick-eval",
            "eval-mode probe around claim C7's batches (150 ... 500), GPU",
            {"resnet50": WorkloadSize(EVAL_PROBE_QUICK, {"image_size": 224, "num_classes": 1000})},
            timing=Timing(2, 15.0, 0.10, 5),
            cell_timeout_seconds=300,
            strategies=("infer",),
            gpu=True,
        ),
        Preset(
            "cpu-shard",
            "sharded data parallelism on two CPU cores: a Transformer whose model state "
            "dominates, and ResNet-50; the unsharded baseline beside each sharding at W ranks",
            {
                "transformer": WorkloadSize((4,), TRANSFORMER_SHARD, cell_timeout_seconds=600),
                "resnet50": WorkloadSize((4,), {"image_size": 224, "num_classes": 1000}),
            },
            timing=Timing(2, 30.0, 0.10, 5),
            cell_timeout_seconds=900,
            strategies=("baseline", *SHARDING_STRATEGIES),
            world_size=2,
        ),
        Preset(
            CALIBRATION_PRESET,
            "the memory model's calibration cells: the searches' strategies, two batches each",
            {
                "resnet50": WorkloadSize((6, 18), {"image_size": 224, "num_classes": 1000}),
                "unet3d": WorkloadSize((8, 24), {"volume": 16, "num_classes": 3}),
                "transformer": WorkloadSize((8, 34), TRANSFORMER_CPU),
            },
            # memory needs one steady step after the first; speed is not judged here
            timing=Timing(1, 5.0, 0.5, 2),
            cell_timeout_seconds=300,
            strategies=CALIBRATION_STRATEGIES,
            # Jittor's bfloat16 and U-Net cells would outlast the time limit (and no capacity
            # search runs them: nothing to guess)
            left_out=QUICK_LEFT_OUT,
        ),
    ]
}

# membench selfcheck: ResNet-50 cells beside plain reference loops (membench/cells/selfcheck.py).
# Its image size is chosen per run: membench selfcheck sets it in the environment for its
# workers, which selfcheck_image_size() alone reads; PRESETS holds the preset at the default
# size, unchanged, and preset("selfcheck") gives it at selfcheck_image_size() (the same object
# where that is the default).
SELFCHECK_PRESET = "selfcheck"
SELFCHECK_IMAGE_SIZE_ENV = "MEMBENCH_SELFCHECK_IMAGE_SIZE"
SELFCHECK_IMAGE_SIZE = 64  # the default
SELFCHECK_IMAGE_SIZE_SETTING = Setting(
    SELFCHECK_IMAGE_SIZE_ENV, argtypes.positive_int, "positive integer",
    "the selfcheck preset's image size (set by selfcheck)", "membench/registry/presets.py",
)  # fmt: skip
SELFCHECK_STRATEGIES = ("baseline", "infer", "accumulate-4")


def selfcheck_image_size() -> int:
    """The selfcheck's image size for this run: SELFCHECK_IMAGE_SIZE_ENV, else the default."""
    return SELFCHECK_IMAGE_SIZE_SETTING.value() or SELFCHECK_IMAGE_SIZE


def selfcheck_preset(image_size: int | None = None) -> Preset:
    """The selfcheck's preset: small by default so that it ends in minutes on two cores
    (image_size None: this run's, selfcheck_image_size())."""
    image_size = image_size or selfcheck_image_size()
    return Preset(
        SELFCHECK_PRESET,
        "the suite's ResNet-50 cells beside each framework's plain loop (membench selfcheck)",
        {"resnet50": WorkloadSize((4,), {"image_size": image_size, "num_classes": 1000})},
        timing=Timing(3, 30.0, 0.10, 5),
        cell_timeout_seconds=900,
        strategies=SELFCHECK_STRATEGIES,
    )


PRESETS[SELFCHECK_PRESET] = selfcheck_preset(SELFCHECK_IMAGE_SIZE)


# Calibration batches of the strategies whose activations a step holds fewer of per sample, in
# place of the workload's: accumulate-4's micro-batches then hold about as many samples as the
# baseline's batches (ResNet-50's 7 and 19 against 6 and 18; at the baseline's own batches they
# held a quarter: torch's ResNet-50 accumulate-4 at 2 GiB was guessed 48 for 32, Jittor's 32
# for 20), and inference's per-sample cost rises above the peaks' noise (torch's Transformer
# inference at 2 GiB was guessed 260 for 418). Chosen where no committed search of the same
# inputs (cpu-quick, cpu-capacity) answered or put its next batch, and the slowest (JAX's U-Net
# accumulate-4, about 0.65 s a sample a step) within the cell's limit.
CALIBRATION_BATCHES = {
    ("resnet50", "accumulate-4"): (28, 76), ("resnet50", "infer"): (40, 120),
    ("unet3d", "accumulate-4"): (40, 72), ("unet3d", "infer"): (40, 120),
    ("transformer", "accumulate-4"): (56, 128), ("transformer", "infer"): (32, 128),
    # torch's search within 2 GiB put its next batch at 18, the baseline's calibration batch
    ("resnet50", "mmap-threshold"): (6, 20),
}  # fmt: skip
# inference with the threshold fixed calibrates where plain inference does
CALIBRATION_BATCHES |= {
    (workload, "infer-mmap-threshold"): batches
    for (workload, name), batches in CALIBRATION_BATCHES.items()
    if name == "infer"
}


def calibration_batches(workload: str, strategy: str) -> tuple[int, ...]:
    """The batches the calibrate preset measures the workload's strategy at ("": the
    workload's own, at which a calibration fitted per mode was measured)."""
    own = CALIBRATION_BATCHES.get((workload, strategy))
    return own or PRESETS[CALIBRATION_PRESET].size(workload).batch_sizes


def preset(name: str) -> Preset:
    found = lookup(PRESETS, "preset", name)
    return _at_run_size(found) if name == SELFCHECK_PRESET else found


def _at_run_size(found: Preset) -> Preset:
    """The selfcheck preset at this run's image size (selfcheck_image_size()), the sizes
    plugins added kept; the table's own where the run's size is the default."""
    wanted = selfcheck_preset()
    if found.sizes.get("resnet50") == wanted.sizes["resnet50"]:
        return found
    return replace(wanted, sizes={**found.sizes, **wanted.sizes})
