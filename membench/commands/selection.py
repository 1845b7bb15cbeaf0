"""The cells a command works on: the selection (-w, -f, -s, -b, --world-size, -p) with its
defaults filled from the preset, its arguments, and its cells planned, after saying what the
preset leaves out."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from membench import argtypes, registry
from membench.argtypes import positive_int
from membench.cells import planning
from membench.commands.parsing import BadInput, ExtendUnique, console
from membench.commands.run_options import add_engine, add_estimate, add_timeout_fresh, add_writer
from membench.instruments import timeline

# -w, -f, -s: comma-separated, and repeatable (`-s a -s b` is `-s a,b`, never the last one only)
NAMES_ALL = "comma-separated or repeated (default: all)"


NAMES_INSTALLED = "comma-separated or repeated (default: installed)"


def installed_frameworks() -> list[str]:
    return [f for f in registry.FRAMEWORKS if registry.framework_installed(f)]


@dataclass(frozen=True)
class Selection:
    """The cells a command works on: empty lists mean the preset's (or every installed)."""

    workloads: list[str]
    frameworks: list[str]
    strategies: list[str]
    batch_sizes: list[int] = field(default_factory=list)
    world_size: int | None = None  # ranks of the sharding strategies' cells

    @classmethod
    def of(cls, preset: str, args: argparse.Namespace) -> Selection:
        """The command line's selection, its defaults filled from the preset."""
        return cls.filled(
            preset, args.workload, args.framework, args.strategy, getattr(args, "batch", None),
            getattr(args, "world_size", None),
        )  # fmt: skip

    @classmethod
    def filled(
        cls,
        preset: str,
        workloads: Sequence[str] | None = None,
        frameworks: Sequence[str] | None = None,
        strategies: Sequence[str] | None = None,
        batch_sizes: Sequence[int] | None = None,
        world_size: int | None = None,
    ) -> Selection:
        p = registry.preset(preset)
        return cls(
            list(workloads or p.sizes), list(frameworks or installed_frameworks()),
            list(strategies or p.strategies or registry.STRATEGIES), list(batch_sizes or []),
            world_size,
        )  # fmt: skip

    def names(self) -> dict[str, list]:
        """Workloads, frameworks and strategies as the asv helpers take them."""
        return {"workloads": self.workloads, "frameworks": self.frameworks,
                "strategies": self.strategies}  # fmt: skip

    def for_asv(self) -> dict[str, list]:
        """The whole selection as asv_suite's helpers take it (world_size: [] or [ranks])."""
        ranks = [self.world_size] if self.world_size else []
        return {**self.names(), "batch_sizes": self.batch_sizes, "world_size": ranks}


def world_size_option_refusal(ranks: int | None, named: Sequence[str]) -> str | None:
    """Why --world-size cannot be taken (None: it can): a strategy named on the command line
    that does not shard, or more ranks than this machine has cores (CPU) or devices (GPU)."""
    if not ranks:
        return None
    for name in named:
        if registry.strategy(name).sharding == "none":
            return f"--world-size: strategy {name} does not shard (it runs on one rank)"
    from membench.environment import detected_device, gpu_info

    if detected_device() == "cuda":
        bound, what = int((gpu_info() or {}).get("gpu_count", 1)), "GPUs"
    else:
        bound, what = os.cpu_count() or 1, "CPU cores"
    if ranks > bound:
        return f"--world-size {ranks}: this machine has {bound} {what} (one rank each at most)"
    return None


def plan_cells(sel: Selection, preset: str, named: Sequence[str] = ()) -> list:
    """The selection's cells (names checked), after saying what the preset leaves out;
    named: the strategies the command line named (those --world-size must shard)."""
    if why := world_size_option_refusal(sel.world_size, named):
        raise BadInput(why)
    cells = planning.cells_for(
        sel.workloads, sel.frameworks, sel.strategies, preset, sel.batch_sizes, sel.world_size
    )
    skipped = planning.left_out(sel.workloads, sel.frameworks, sel.strategies, preset)
    for reason, n in skipped.items():
        cells_word = "cell" if n == 1 else "cells"
        console.print(f"preset {preset} leaves {n} {cells_word} to another preset: {reason}")
    return cells


def add_names(p: argparse.ArgumentParser, *which: str) -> None:
    """-w, -f, -s (each comma-separated or repeated), as many of them as the command takes."""
    helps = {"workload": NAMES_ALL, "framework": NAMES_INSTALLED, "strategy": NAMES_ALL}
    for name in which:
        p.add_argument(
            f"-{name[0]}", f"--{name}", type=argtypes.names, action=ExtendUnique, help=helps[name]
        )


def add_batch(p: argparse.ArgumentParser, default: str = "the preset's grid") -> None:
    p.add_argument(
        "-b", "--batch", type=argtypes.batch_sizes, action=ExtendUnique,
        help=f"batch sizes, comma-separated or repeated (default: {default})",
    )  # fmt: skip


def preset_names() -> str:
    """The registry's presets, for help texts (written from the table, so none is missing)."""
    return ", ".join(registry.PRESETS)


def add_selection(p: argparse.ArgumentParser) -> None:
    """The arguments of run and bench: which cells, where, and how they are measured."""
    add_names(p, "workload", "framework", "strategy")
    add_batch(p)
    p.add_argument(
        "-p", "--preset", type=argtypes.name,
        help=f"one of {preset_names()} (default: $MEMBENCH_PRESET, else from the device: gpu "
        "where NVML sees an NVIDIA GPU, cpu-quick elsewhere)",
    )  # fmt: skip
    p.add_argument(
        "--world-size", type=positive_int,
        help="ranks of each sharding strategy's cell (default: the preset's; others run on one)",
    )  # fmt: skip
    p.add_argument("--store", type=argtypes.writable_dir, help="record directory")
    add_timeout_fresh(p)
    p.add_argument(
        "--timeline", action="store_true",
        help="sample each cell's memory every "
        f"{timeline.INTERVAL_SECONDS * 1000:.0f} ms from outside its worker, phases marked, into "
        "the store's timelines/ (the sampler takes 1-4%% of one core here: off by default)",
    )  # fmt: skip
    p.add_argument(
        "--trace", action="store_true",
        help="after each measured cell, a worker of its own runs a step under the framework's "
        "own memory view (torch's profiler memory timeline on CPU, its CUDA snapshot on GPU; "
        "JAX's device memory profile; Jittor's peak memory report), into the store's traces/ "
        "(local engine)",
    )  # fmt: skip
    p.add_argument(
        "--keep-failed", action="store_true", help="do not retry stored timeout/error cells"
    )
    add_estimate(p, "print the plan's time estimate and exit")
    add_writer(p)
    add_engine(p)


def preset_of(args: argparse.Namespace) -> str:
    """The preset the command line names, else the device's default; a GPU preset is refused
    where its cells would run on this host without a GPU (a Ray cluster's nodes, --address,
    may have GPUs: refuse_gpu_preset_here)."""
    from membench.environment import default_preset

    preset = registry.preset(args.preset or default_preset()).name
    remote = getattr(args, "engine", "local") == "ray" and getattr(args, "address", None)
    if not remote:
        refuse_gpu_preset_here(preset, "" if args.preset else " (from $MEMBENCH_PRESET)")
    return preset


def refuse_gpu_preset_here(preset: str, source: str = "") -> None:
    """BadInput for a GPU preset where NVML sees no NVIDIA GPU on this host: every cell would
    start a worker and end `error` by the device guard. source: where the name came from."""
    from membench.environment import detected_device

    if registry.preset(preset).gpu and detected_device() != "cuda":
        raise BadInput(
            f"preset {preset}{source} is a GPU preset and this host has no NVIDIA GPU that "
            "NVML sees: its cells would all end `error`; on a CPU host use cpu-quick, cpu or "
            "smoke (`membench plan gpu-quick` estimates a GPU session)"
        )
