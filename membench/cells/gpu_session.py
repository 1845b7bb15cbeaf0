"""Named GPU plans: a short GPU session cut into parts that each end within one command.

GPU time comes rarely, in commands of about ten minutes on a machine that may start bare. A
plan lists parts; `membench plan gpu-quick PART` measures one part's cells (then records them
with asv), starts no cell past the part's deadline, and resumes from the stored records when
run again. Each part's time is estimated from the cost model below, printed by
`membench plan gpu-quick`. Framework-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from membench import registry

# One command's limit on the GPU machine is 10 minutes: parts aim below 9.
PART_SECONDS = 9 * 60
# Cost model, in seconds, fitted to the first GPU session (H200, 47bc67f, gpu-quick's 25 cells:
# 23 within 30% of their time, docs/gpu.md): a fresh worker's fixed cost, a compile
# cell's and a workload's first cell's (each framework's gpu_cell_seconds,
# gpu_compile_seconds and gpu_first_cell_seconds in the registry) ...
# ... plus its steps (first, warm-up, measured) at the rate of useful arithmetic measured in
# float32 in full (TF32 off, the suite's policy: 24-34 TFLOP/s) and in mixed precision
# (60-170 TFLOP/s) ...
RATE_FLOPS = {"fp32": 25e12, "amp": 120e12}
# training FLOPs per sample, 3x the forward: ResNet-50 at 224^2 8.2 GFLOP forward; the U-Net
# at 128^3 about 3.8 TFLOP forward (its convolutions level by level); GPT-2 small at sequence
# 1024: 6 x 124.4M parameters x 1024 tokens plus attention.
TRAIN_FLOPS = {"resnet50": 24.6e9, "unet3d": 11.4e12, "transformer": 0.82e12}
# ... plus, for a framework that times convolution kernels in its first step (torch's cuDNN
# benchmark), that step's extra, in steps: 59 s of the U-Net's first float32 step at batch 1
# against a 0.46 s step (120-130 steps at both batches, with or without checkpointing; 40 in
# bf16), 16 s of ResNet-50's at 256 against 0.24 s (50-75)
AUTOTUNE_STEPS = {
    "resnet50": {"fp32": 70.0, "amp": 50.0},
    "unet3d": {"fp32": 125.0, "amp": 40.0},
    "transformer": {"fp32": 0.0, "amp": 0.0},
}
# ... with checkpointing's second forward pass (a step's FLOPs 4/3, torch's autotuning steps
# included, which makes it high: torch's ResNet-50 checkpoint probes at 631 and 692 took 74 and
# 76 s on the H200, the model 81, without the factor 63) ...
CHECKPOINT_RECOMPUTE = 4 / 3
# ... plus asv recording the stored cells (16 s for the 12 cells of the resnet50 part).
ASV_SECONDS_PER_CELL = 1.5


@dataclass(frozen=True)
class Cells:
    """Every combination of these frameworks, strategies and batches of one workload."""

    workload: str
    frameworks: tuple[str, ...]
    strategies: tuple[str, ...]
    batch_sizes: tuple[int, ...] = ()  # empty: the preset's grid
    preset: str = "gpu-quick"

    def batches(self) -> tuple[int, ...]:
        return self.batch_sizes or registry.preset(self.preset).size(self.workload).batch_sizes


@dataclass(frozen=True)
class CapacitySearch:
    """One capacity search per framework, the budget enforced by the framework's own limit."""

    workload: str
    frameworks: tuple[str, ...]
    strategy: str
    budget_bytes: int
    first: int  # the first batch tried (a guess near the answer saves probes)
    tolerance: float
    preset: str = "gpu-quick"
    expected_probes: int = 3
    repeats: int = 1  # measurements of the answer and of the next batch (the noise rule)
    # the batch its probes are costed at (None: first): a guided search's probes cluster near
    # its answer, hundreds of samples where `first` is 1 (the H200's searches: 149-754)
    probe_batch: int | None = None
    # the budget is the process's whole figure, as a card's memory is (capacity --whole-card)
    whole_card: bool = False


@dataclass(frozen=True)
class Selfcheck:
    """The suite's ResNet-50 cells beside each framework's plain loop (membench selfcheck),
    at these sizes, kept in results/selfcheck/."""

    frameworks: tuple[str, ...]
    strategies: tuple[str, ...]
    image_size: int = 224
    batch: int = 256


@dataclass(frozen=True)
class Part:
    name: str
    description: str
    cells: tuple[Cells, ...] = ()
    searches: tuple[CapacitySearch, ...] = ()
    # searches run at once on the card, each within its own budget (the frameworks' limits
    # share the card out): their peaks count; speed comes from cells measured alone
    side_by_side: int = 1
    selfcheck: Selfcheck | None = None


def cell_seconds(workload: str, framework: str, strategy: str, batch: int, preset: str) -> float:
    p, s = registry.preset(preset), registry.strategy(strategy)
    steps = 1 + p.warmup_min_steps + p.measure_steps
    flops = TRAIN_FLOPS[workload] * batch * (1 / 3 if s.mode == "infer" else 1)
    kind = "fp32" if s.precision == "fp32" else "amp"
    rate = RATE_FLOPS[kind]
    fw = registry.framework(framework)
    extra = fw.gpu_compile_seconds if s.compile else 0.0
    steps += AUTOTUNE_STEPS[workload][kind] if fw.gpu_autotunes else 0.0
    recompute = CHECKPOINT_RECOMPUTE if s.checkpoint else 1.0
    return fw.gpu_cell_seconds + extra + steps * flops * recompute / rate


def estimate_seconds(part: Part) -> float:
    """The part's estimated GPU time by the cost model above."""
    total, cells, first_cells = 0.0, 0, set()
    for sel in part.cells:
        for f in sel.frameworks:
            for s in sel.strategies:
                for b in sel.batches():
                    total += cell_seconds(sel.workload, f, s, b, sel.preset)
                    cells += 1
            if (f, sel.workload) not in first_cells:
                first_cells.add((f, sel.workload))
                total += registry.framework(f).gpu_first_cell_seconds
    searching = 0.0
    for search in part.searches:
        for f in search.frameworks:
            batch = search.first if search.probe_batch is None else search.probe_batch
            probe = cell_seconds(search.workload, f, search.strategy, batch, search.preset)
            searching += search.expected_probes * probe
            cells += search.expected_probes
    # side by side, the searches share the card's time: assumed each probe as fast as alone
    # (one probe's steps leave most of an H200 idle), until a GPU run side by side says
    total += searching / part.side_by_side + cells * ASV_SECONDS_PER_CELL
    if check := part.selfcheck:  # each strategy's suite cell and plain loop; the probes' cost
        for f in check.frameworks:
            runs = [(s, 2) for s in check.strategies] + [("baseline", 1)]
            total += sum(n * cell_seconds("resnet50", f, s, check.batch, "gpu-quick")
                         for s, n in runs)  # fmt: skip
    return total


def recorded_cells(part: Part) -> int:
    """The results asv records after a part: its cells, and one per search and framework."""
    cells = sum(len(c.frameworks) * len(c.strategies) * len(c.batches()) for c in part.cells)
    return cells + sum(len(s.frameworks) for s in part.searches)


GiB = 2**30

GPU_QUICK: tuple[Part, ...] = (
    Part(
        "resnet50",
        "ResNet-50 at batch 64 and 256 (C1, C2): torch over the claims' strategies and "
        "channels-last (as convnets are trained on GPUs), JAX's baseline and amp beside it",
        (
            Cells("resnet50", ("torch",), ("baseline", "amp-bf16", "amp-fp16", "checkpoint")),
            Cells("resnet50", ("torch",), ("channels-last", "amp-bf16-channels-last")),
            Cells("resnet50", ("jax",), ("baseline", "amp-bf16")),
        ),
    ),
    Part(
        "unet3d-gpt2",
        "torch: the 3D U-Net at 128^3, batch 1, baseline / amp / checkpoint / "
        "amp+checkpoint (C3, C4); GPT-2 small at sequence 1024, batch 8, baseline / amp / "
        "checkpoint / compile / fused attention (C2, C5)",
        (
            # batch 1 only: at 2 the float32 cells took 132 and 158 s (cuDNN's autotuning)
            Cells(
                "unet3d",
                ("torch",),
                ("baseline", "amp-bf16", "checkpoint", "amp-bf16-checkpoint"),
                (1,),
            ),
            Cells(
                "transformer",
                ("torch",),
                ("baseline", "amp-bf16", "checkpoint", "compile", "fused-attention"),
            ),
        ),
    ),
    Part(
        "jittor",
        "Jittor: ResNet-50 baseline and amp at 64 and 256 (C1), the U-Net baseline at 1 (C3), "
        "its eval probe at batch 150, 200, 300, 500 (C7); one part: kernels compile once",
        (
            Cells("resnet50", ("jittor",), ("baseline", "amp-fp16")),
            Cells("unet3d", ("jittor",), ("baseline",), (1,)),
            Cells("resnet50", ("jittor",), ("infer",), preset="gpu-quick-eval"),
        ),
    ),
    Part(
        "capacity",
        "largest ResNet-50 training batch within 4 GiB, enforced by each framework's own limit "
        "(real out-of-memory), one search per framework, to within 50% (three probes)",
        searches=(
            CapacitySearch(
                "resnet50", ("torch", "jax", "jittor"), "baseline", 4 * GiB, 32, tolerance=0.5
            ),
        ),
    ),
)

# The GPU decision table: the largest training batch of each main memory strategy within one
# budget (a 24 GB card's worth: GPT-2 small's baseline answer lies near 8) as a card's whole
# memory (the process's NVML figure; each framework's limit set below it by its measured
# process overhead: the searches that enforced the allocator limit alone answered with the
# process 148-622 MiB over the budget), each boundary measured three times as on CPU. A fresh
# probe costs a worker's start (JAX's compile above all), so the searches outlast one command:
# the part is run again, command after command, and resumes from its stored probes. Baselines
# first. The budget is the one gpu-quick declares (Preset.capacity_budgets), the one asv keeps.
(DECISION_BUDGET,) = registry.preset("gpu-quick").capacity_budgets["resnet50"]
# where the searches' probes lie, for their cost: ResNet-50's H200 answers within 24 GiB were
# 289 (torch), 454 (JAX), 560 (torch, amp-bf16) and above 692 (torch, checkpoint); GPT-2 small's
# near 8 for the baseline, more for the memory-saving strategies
DECISION_PROBE_BATCH = {"resnet50": 400, "transformer": 16}
DECISION_STRATEGIES = (
    "baseline", "amp-bf16", "checkpoint", "amp-bf16-checkpoint", "accumulate-4"
)  # fmt: skip
# searches at once on one card: five 24 GiB budgets and their processes' CUDA contexts (about
# 0.8 GiB each on the H200) within its 139.8 GiB, one core or two each of its 16
DECISION_SIDE_BY_SIDE = 5
GPU_DECISION: tuple[Part, ...] = (
    Part(
        "searches",
        "largest training batch within 24 GiB as a card's whole memory (the process's NVML "
        "figure; each framework's limit set below it by its measured overhead), ResNet-50 at "
        "224x224 and GPT-2 small at sequence 1024, torch and JAX, baseline / amp-bf16 / "
        "checkpoint / both / accumulate-4, each boundary measured 3 times, five searches side "
        "by side on the card; resumes over several commands",
        searches=tuple(
            CapacitySearch(
                w,
                ("torch", "jax"),
                s,
                DECISION_BUDGET,
                first=1,
                tolerance=0.0,
                expected_probes=14,  # H200: torch took 11 and 12, JAX 15
                repeats=3,
                probe_batch=DECISION_PROBE_BATCH[w],
                whole_card=True,
            )  # fmt: skip
            for s in DECISION_STRATEGIES
            for w in ("resnet50", "transformer")
        ),
        side_by_side=DECISION_SIDE_BY_SIDE,
    ),
)

# What a GPU node spends before the first cell (scripts/gpu_node.sh setup): the offline
# install (two environments from local wheels), and each framework that compiles its core
# doing so (Framework.core_build_gpu_seconds).
INSTALL_SECONDS = 45.0
SETUP_SECONDS = INSTALL_SECONDS + sum(
    f.core_build_gpu_seconds for f in registry.FRAMEWORKS.values()
)

# What a card's predictions were made ahead of (committed before any GPU record of their cell,
# results/predictions/<card>/): the cells a GPU run measures to test them out of sample.
AHEAD_CARD = "h200"
# measured first: torch as its GPU experts train a convnet, which the torch-JAX gap on
# ResNet-50 (2.6x in bf16 on the H200) waits on
FIRST_AHEAD = ("channels-last", "amp-bf16-channels-last")


def predicted_ahead(card: str = AHEAD_CARD) -> tuple[Cells, ...]:
    """The cells of the card's committed predictions that no GPU record has met yet (as
    Cells: one per workload, framework, strategy and preset, its batches together)."""
    from membench import paths
    from membench.gpu_predict.run import load

    batches: dict[tuple[str, str, str, str], set[int]] = {}
    for path in paths.prediction_files():
        if path.parent.name != card:
            continue
        made = load(path)
        if made.records or made.status != "ok" or made.limit_bytes is not None:
            continue
        c = made.cell
        key = (c["workload"], c["framework"], c["strategy"], c["preset"])
        batches.setdefault(key, set()).add(int(c["batch_size"]))
    order = {w: i for i, w in enumerate(registry.WORKLOADS)}

    def worth(key: tuple[str, str, str, str]) -> tuple:  # what the run most needs, first
        return (key[2] not in FIRST_AHEAD, order[key[0]], key)

    return tuple(
        Cells(w, (f,), (s,), tuple(sorted(b)), preset)
        for (w, f, s, preset), b in sorted(batches.items(), key=lambda kv: worth(kv[0]))
    )


def _gpu_next() -> tuple[Part, ...]:
    """The next GPU run, part by part in the order of what each is worth (its script:
    scripts/gpu_run.sh): Jittor's first GPU cell or why it cannot run; the cells whose memory
    was predicted ahead (out of sample); the decision searches side by side; inference."""
    return (
        Part(
            "jittor",
            "Jittor go or no-go: its CUDA build and one ResNet-50 cell at batch 64 (C1, C3, "
            "C7, C12 need Jittor on a GPU), at most 150 s; its build log packed whatever happens",
            (Cells("resnet50", ("jittor",), ("baseline",), (64,)),),
        ),
        Part(
            "predicted",
            f"the cells whose GPU memory was predicted and committed before any GPU record of "
            f"them ({AHEAD_CARD}): each measured once, an out-of-sample test",
            predicted_ahead(),
        ),
        Part(
            "selfcheck",
            "ResNet-50 at 224x224, batch 256: torch's baseline, amp-bf16 and both in "
            "channels-last, JAX's baseline and amp-bf16, each beside its framework's plain "
            "loop (the torch-JAX gap explained from measurements)",
            selfcheck=Selfcheck(
                ("torch", "jax"),
                ("baseline", "amp-bf16", "channels-last", "amp-bf16-channels-last"),
            ),
        ),
        replace(
            GPU_DECISION[0],
            description="the GPU decision searches left unsettled, five side by side on the "
            "card, each within 24 GiB as a card's whole memory (the process's NVML figure, the "
            "framework's limit below it by the overhead measured), each boundary 3 times",
        ),
        Part(
            "inference",
            "inference on the card: ResNet-50 at 64 and 256 and GPT-2 small at 8, torch and "
            "JAX, eval (no autograd) and half precision (C8, C9)",
            (
                Cells("resnet50", ("torch", "jax"), ("infer", "infer-half")),
                Cells("transformer", ("torch", "jax"), ("infer", "infer-half")),
            ),
        ),
    )


PLANS = {"gpu-quick": lambda: GPU_QUICK, "gpu-decision": lambda: GPU_DECISION,
         "gpu-next": _gpu_next}  # fmt: skip


def parts(name: str) -> tuple[Part, ...]:
    """A GPU session's parts (planning.cells_for, by contrast, lists the cells of a selection)."""
    if name not in PLANS:
        raise registry.UnknownNameError("plan", name, list(PLANS))
    return PLANS[name]()


def part(plan_name: str, part_name: str) -> Part:
    named = {p.name: p for p in parts(plan_name)}
    if part_name not in named:
        raise registry.UnknownNameError(f"part of {plan_name}", part_name, list(named))
    return named[part_name]
